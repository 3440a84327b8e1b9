"""The live console (issue 24): the fleet, its runs and every cell as they happen, served by the
coordinator on `--http-listen` from its own event loop, with the operator's actions behind the
same Admin RPCs as fleetctl.

- server.py: the aiohttp application (routes, security headers, the cache, actions, SSE).
- auth.py: the viewer and admin rights, login sessions, CSRF.
- admin.py: the Admin RPCs called in the process, with the admin token.
- feed.py: the `fleetctl watch` stream, numbered and kept, fanned out as server-sent events.
- pages.py: the HTML, built on the static report's sections (common/report/html.py).
- limits.py: what bounds every page and every client.
- static/console.js: the one script (no build step, nothing from the internet).
"""
