"""The console's HTTP server: aiohttp in the coordinator's own event loop (never the actor's
thread), on `--http-listen`, TLS with the gRPC port's certificate when it has one.

Order of a request: security headers on every answer; who is asking (session cookie or bearer
header, coordinator/console/auth.py): nobody known sees the login page and nothing else; a
page reads through the Admin RPCs in the process (coordinator/console/admin.py) via a cache
that five browsers share, and is rendered on a worker thread (pages.py is pure and the cached
dicts are never changed), so that a large run's page does not hold the event loop (a read is
done again at most every REFRESH_MIN_MS, and never sooner than REFRESH_COST_FACTOR times what it
cost). A run's heavy part is read as its view (runview.py, the servicer's ReadRunPage: the
actor visits the cells a part at a time, the sums are made off it), a cell's page as that cell
(ReadCell); an action must come from an admin, with
the session's CSRF token and from this origin, goes through the same Admin RPC as fleetctl,
and is logged with who did it (`console_action`), refused ones too (`console_action_refused`).
No answer is larger than RESPONSE_BYTES_MAX: a page that would be is a bug, answered 500 with
the reason, never sent.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import re
import secrets
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from common.fleetpb import admin_pb2
from common.report.names import OUTCOME_NAMES, REJECTION_NAMES
from common.report.shapes import WhereError, parse_where
from coordinator.console import limits, pages
from coordinator.console.admin import AdminCallError, LocalAdmin
from coordinator.console.auth import COOKIE_NAME, ConsoleAuth, Principal
from coordinator.console.feed import Feed
from coordinator.console.runview import RunView

log = structlog.get_logger("fleet.console")
STATIC = Path(__file__).resolve().parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
PRINCIPAL = web.AppKey("principal", object)
CSRF_MARK = "__fleet_csrf_mark__"
RENDERS_KEPT_MAX = 64


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Cache:
    """Reads shared by every page: one load at a time per key; fresh for a time that grows
    with what the load cost (module docstring). Each value comes with the feed's last event
    number when its load began: a page whose data is older than the last event it has seen
    reads itself again once the data can be fresh (console.js), so that the last events of a
    burst are never left off the page."""

    def __init__(self, seq: Callable[[], int] = lambda: 0) -> None:
        self._seq = seq
        self._entries: dict[tuple, tuple[float, Any, int, int]] = {}  # key -> (fresh until, value, ttl ms, seq)
        self._loading: dict[tuple, asyncio.Future] = {}

    async def get(self, key: tuple, load: Callable[[], Awaitable[Any]]) -> tuple[Any, int, int]:
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2], hit[3]
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            t0 = time.monotonic()
            seq = self._seq()
            value = await load()
            cost_ms = (time.monotonic() - t0) * 1000
            ttl = int(min(limits.REFRESH_MAX_MS, max(limits.REFRESH_MIN_MS, cost_ms * limits.REFRESH_COST_FACTOR)))
            self._entries[key] = (time.monotonic() + ttl / 1000, value, ttl, seq)
            if len(self._entries) > 256:  # bounded: the oldest keys go
                for k in list(self._entries)[:64]:
                    del self._entries[k]
            fut.set_result((value, ttl, seq))
            return value, ttl, seq
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
            raise
        finally:
            del self._loading[key]

    def forget(self, *prefixes: str) -> None:
        """After an action: the next read shows what it did."""
        for k in [k for k in self._entries if k[0] in prefixes]:
            del self._entries[k]


class Etas:
    """Per run, the first and latest (time, cells done) seen by this process: a rate, an ETA."""

    def __init__(self) -> None:
        self._first: dict[str, tuple[float, int]] = {}

    def eta_s(self, run_id: str, done: int, total: int) -> float | None:
        now = time.monotonic()
        first = self._first.setdefault(run_id, (now, done))
        if done >= total:
            return 0.0
        if done <= first[1] or now <= first[0]:
            return None
        return (total - done) / ((done - first[1]) / (now - first[0]))


class Console:
    def __init__(self, servicer: Any, auth: ConsoleAuth, admin_token: str, incarnation: int, *,
                 secure_cookie: bool) -> None:
        self.admin = LocalAdmin(servicer, admin_token)
        self.auth = auth
        self.feed = Feed(servicer.hub, incarnation)
        self.cache = Cache(lambda: self.feed.seq)
        self.etas = Etas()
        self.secure_cookie = secure_cookie
        self.actions: deque[dict] = deque(maxlen=limits.ACTIONS_KEPT_MAX)
        self.plans: dict[str, tuple[str, list[str], dict[str, str], str, int]] = {}
        self.runner: web.AppRunner | None = None
        self._streams: set[asyncio.Task] = set()
        self._renders: dict[tuple, tuple[str, tuple]] = {}
        self.app = self._make_app()

    def reload(self, admin_token: str, viewer_token: str) -> None:
        self.admin.reload(admin_token)
        self.auth.reload(viewer_token)

    # ---- serving ----

    async def start(self, listen: str, ssl_context: ssl.SSLContext | None) -> str:
        """Bind; the address bound (port 0 picks one)."""
        host, _, port = listen.rpartition(":")
        self.runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1.0)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host.strip("[]"), int(port), ssl_context=ssl_context)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        return f"{host}:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        for c in list(self.feed.clients):
            c.queue = asyncio.Queue(1)
            c.queue.put_nowait(None)
        for t in list(self._streams):
            t.cancel()
        if self.runner is not None:
            await self.runner.cleanup()

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=limits.REQUEST_BYTES_MAX, middlewares=[self._guard])
        r = app.router
        r.add_get("/login", self.login_form)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        r.add_get("/static/console.js", self.script)
        r.add_get("/", self.fleet)
        r.add_get("/api/status", self.api_status)
        r.add_get("/events", self.events)
        r.add_get("/runs/{run_id}", self.run)
        r.add_get("/runs/{run_id}/cells/{cell_id:.+}", self.cell)  # a cell id is TASK/rREP/SUBJECT
        r.add_get("/artifacts/{digest}", self.artifact)
        r.add_post("/runs/{run_id}/{verb:pause|recover|repair}", self.run_action)
        r.add_post("/runs/{run_id}/cells/{cell_id:.+}/retry", self.retry_cell)
        r.add_post("/runs/{run_id}/retry/plan", self.bulk_plan)
        r.add_post("/runs/{run_id}/retry/confirm", self.bulk_confirm)
        r.add_post("/workers/{worker_id}/{verb:drain|release}", self.worker_action)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        principal = self.principal(request)
        public = request.path in ("/login", "/static/console.js")
        if principal is None and not public:
            if request.path == "/events" or request.path.startswith("/api/") or request.method != "GET":
                resp: web.StreamResponse = web.Response(status=401, text="unauthenticated: log in at /login, or "
                                                        "send Authorization: Bearer TOKEN\n")
            else:
                resp = self._html(pages.login_page(next_path=request.path_qs), status=401)
        else:
            request[PRINCIPAL] = principal
            try:
                resp = await handler(request)
            except web.HTTPException as e:
                resp = e
            except AdminCallError as e:
                status = {"NOT_FOUND": 404, "INVALID_ARGUMENT": 400, "RESOURCE_EXHAUSTED": 413,
                          "FAILED_PRECONDITION": 409}.get(e.code.name, 503)
                resp = self._html(pages.message_page("The coordinator refused", e.details, principal=principal,
                                                     element_id="error", data={"code": e.code.name}), status=status)
        resp.headers.setdefault("Content-Security-Policy", CSP)
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        resp.headers.setdefault("X-Frame-Options", "DENY")
        resp.headers.setdefault("Cache-Control", "no-store")
        return resp

    def principal(self, request: web.Request) -> Principal | None:
        return (self.auth.from_bearer(request.headers.get("Authorization"))
                or self.auth.from_session(request.cookies.get(COOKIE_NAME), _now_ms()))

    def _html(self, text: str, status: int = 200) -> web.Response:
        body = text.encode()
        if len(body) > limits.RESPONSE_BYTES_MAX:
            log.error("console_page_too_large", bytes=len(body), limit=limits.RESPONSE_BYTES_MAX)
            return web.Response(status=500, text=f"page of {len(body)} bytes is over the console's limit of "
                                                 f"{limits.RESPONSE_BYTES_MAX} bytes (a bug: pages are bounded)\n")
        return web.Response(body=body, status=status, content_type="text/html", charset="utf-8")

    # ---- login ----

    async def login_form(self, request: web.Request) -> web.Response:
        return self._html(pages.login_page(next_path=request.query.get("next", "/")))

    async def login(self, request: web.Request) -> web.Response:
        form = await request.post()
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            # A login posted from another site would sign this browser into someone else's session.
            return self._html(pages.login_page("A login must come from this console's own page.", "/"), status=403)
        nxt = str(form.get("next") or "/")
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/"  # only a path on this console: never an open redirect
        got = self.auth.login(str(form.get("token") or ""), _now_ms())
        if got is None:
            log.warning("console_login_refused", remote=request.remote)
            return self._html(pages.login_page("That token is neither the viewer token nor the admin token.", nxt),
                              status=401)
        sid, principal = got
        log.info("console_login", who=principal.who, remote=request.remote)
        resp = web.HTTPSeeOther(nxt)
        resp.set_cookie(COOKIE_NAME, sid, httponly=True, samesite="Strict", secure=self.secure_cookie, path="/",
                        max_age=limits.SESSION_TTL_MS // 1000)
        return resp

    async def logout(self, request: web.Request) -> web.Response:
        principal = request[PRINCIPAL]
        form = await request.post()
        if not self.auth.csrf_ok(principal, str(form.get("csrf") or "")):
            return self._refused(request, principal, "logout", "", "the form's CSRF token is missing or wrong")
        self.auth.logout(request.cookies.get(COOKIE_NAME))
        resp = web.HTTPSeeOther("/login")
        resp.del_cookie(COOKIE_NAME, path="/")
        return resp

    async def script(self, request: web.Request) -> web.Response:
        return web.Response(body=(STATIC / "console.js").read_bytes(), content_type="application/javascript",
                            headers={"Cache-Control": "no-cache"})

    # ---- reads ----

    async def _fleet_data(self) -> tuple[dict, int, int]:
        return await self.cache.get(("fleet",), lambda: self.admin.status())

    async def _run_data(self, run_id: str, f: dict[str, str], page: int) -> tuple[dict, RunView, int, int]:
        """The run's status and its page's view (coordinator/console/runview.py: its sums and counts,
        and the rows of this filter's page), read once for every browser on that page."""
        status, t1, s1 = await self.cache.get(("status", run_id), lambda: self.admin.status(run_id))
        view, t2, s2 = await self.cache.get(("run", run_id, tuple(sorted(f.items())), page),
                                            lambda: self.admin.run_view(run_id, f, page))
        return status, view, max(t1, t2), min(s1, s2)

    def _page_number(self, request: web.Request) -> int:
        text = request.query.get("page", "0")
        if not text.isdigit():
            raise web.HTTPBadRequest(text=f"page must be a whole number, not {text!r}\n")
        return int(text)

    async def fleet(self, request: web.Request) -> web.Response:
        principal = request[PRINCIPAL]
        status, ttl, seq = await self._fleet_data()
        etas = {r["run_id"]: self.etas.eta_s(r["run_id"], r["cells_selected"] + r["cells_exhausted"], r["cells_total"])
                for r in status["runs"]}
        workers = sorted(status["workers"], key=lambda w: w["worker_id"])
        page = self._page_number(request)
        live = _seq(await self._render(("fleet", page, len(self.actions), id(status)), principal, pages.fleet_live,
                                       status, workers, page, etas, list(self.actions), ttl), seq)
        return self._html(live if request.query.get("fragment") else pages.fleet_page(live, principal))

    async def _render(self, key: tuple, principal: Principal, fn: Callable, *args: Any) -> str:
        """A live part, rendered once per data read and right for every browser of one right: on
        a worker thread (pages.py is pure; the cached dicts are never changed), with a mark for
        the CSRF token that each request's own replaces. Five browsers cost one render."""
        key = (*key, principal.role)
        hit = self._renders.get(key)
        if hit is None:
            marked = Principal(principal.role, "session", "", CSRF_MARK)
            fn_args = list(args)
            fn_args.insert(len(args) - 1, marked)  # every live renderer takes (..., principal, refresh_ms)
            html = await asyncio.to_thread(fn, *fn_args)
            if len(self._renders) >= RENDERS_KEPT_MAX:
                del self._renders[next(iter(self._renders))]
            # The inputs are kept with the page: the ids in the key cannot name other objects.
            hit = self._renders[key] = (html, args)
        return hit[0].replace(CSRF_MARK, principal.csrf)

    async def api_status(self, request: web.Request) -> web.Response:
        status, _, _ = await self._fleet_data()
        return web.json_response(status)

    def _filter(self, request: web.Request) -> dict[str, str]:
        return {k: request.query.get(k, "").strip() for k in ("state", "reason", "subject", "worker", "task")
                if request.query.get(k, "").strip()}

    async def run(self, request: web.Request) -> web.Response:
        principal = request[PRINCIPAL]
        run_id = request.match_info["run_id"]
        fragment = request.query.get("fragment")
        quick, qttl, qseq = await self.cache.get(("status", run_id), lambda: self.admin.status(run_id))
        run = (quick.get("runs") or [{}])[0]
        eta = self.etas.eta_s(run_id, run.get("cells_selected", 0) + run.get("cells_exhausted", 0),
                              run.get("cells_total", 0))
        progress = _seq(pages.run_progress(run, eta, qttl), qseq)
        if fragment == "progress":
            return self._html(progress)
        f = self._filter(request)
        page = self._page_number(request)
        status, view, ttl, seq = await self._run_data(run_id, f, page)
        live = _seq(await self._render(("run", run_id, tuple(sorted(f.items())), page, id(status), id(view)),
                                       principal, pages.run_live_view, run_id, view, status, f, eta, ttl), seq)
        return self._html(live if fragment else pages.run_page(run_id, live, run, f, principal, progress))

    async def cell(self, request: web.Request) -> web.Response:
        principal = request[PRINCIPAL]
        run_id, cell_id = request.match_info["run_id"], request.match_info["cell_id"]
        (cell, mine), ttl, seq = await self.cache.get(("cell", run_id, cell_id), lambda: self.admin.cell(run_id, cell_id))
        if cell is None:
            raise web.HTTPNotFound(text=f"run {run_id} has no cell {cell_id}\n")
        live = _seq(pages.cell_live(run_id, cell, mine, ttl), seq)
        if request.query.get("fragment"):
            return self._html(live)
        return self._html(pages.cell_page(run_id, cell_id, live, cell["state"] == "incomplete", principal))

    async def artifact(self, request: web.Request) -> web.StreamResponse:
        principal = request[PRINCIPAL]
        digest = request.match_info["digest"]
        # A file name for the browser, never a header of ours: the name's last part, in a safe alphabet.
        name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(request.query.get("name") or digest.replace(":", "-")).name) \
            or "artifact"
        req = admin_pb2.GetArtifactRequest(digest=digest)
        if request.query.get("download"):  # streamed as GetArtifact gives it (checked against its digest)
            resp: web.StreamResponse | None = None
            async for chunk in self.admin.stream("GetArtifact", req):
                if resp is None:
                    resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                                       "Content-Disposition": f'attachment; filename="{name}"',
                                                       "Content-Length": str(chunk.total_length)})
                    resp.headers["Content-Security-Policy"] = CSP
                    await resp.prepare(request)
                await resp.write(chunk.data)
            assert resp is not None  # GetArtifact yields a chunk even for an empty artifact, or aborts
            await resp.write_eof()
            return resp
        shown, total = b"", 0
        async for chunk in self.admin.stream("GetArtifact", req):  # shown inline: its first MiB only
            total = chunk.total_length
            shown += chunk.data[:limits.ARTIFACT_INLINE_BYTES_MAX - len(shown)]
            if len(shown) >= limits.ARTIFACT_INLINE_BYTES_MAX:
                break
        return self._html(pages.artifact_page(name, shown.decode("utf-8", errors="replace"), len(shown) < total,
                                              principal, request.headers.get("Referer") or "/"))

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events (feed.py): first what a reconnecting page missed, then live."""
        if len(self.feed.clients) >= limits.SSE_CLIENTS_MAX:
            raise web.HTTPServiceUnavailable(text=f"{limits.SSE_CLIENTS_MAX} event streams are open already\n")
        run_filter = request.query.get("run") or None
        last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
        client, backlog = self.feed.subscribe(run_filter, last)
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
        resp.headers["Content-Security-Policy"] = CSP
        try:
            await resp.prepare(request)
            hello = json.dumps({"incarnation": self.feed.incarnation, "last_id": f"{self.feed.incarnation}-{self.feed.seq}"})
            await resp.write(f"retry: 1000\nevent: hello\ndata: {hello}\n\n".encode() + b"".join(backlog))
            for _ in range(10 ** 9):  # bounded; ends when the client goes or is cut
                try:
                    batch = await asyncio.wait_for(client.queue.get(), limits.SSE_KEEPALIVE_S)
                except asyncio.TimeoutError:
                    await resp.write(b": keepalive\n\n")
                    continue
                if batch is None:
                    break
                # Coalesced: what arrives within SSE_FLUSH_MS goes in one write (a page needs no
                # finer grain, and a write per event per browser cost the coordinator CPU).
                await asyncio.sleep(limits.SSE_FLUSH_MS / 1000)
                chunks = [i.data for i in batch]
                cut = False
                while not client.queue.empty():
                    more = client.queue.get_nowait()
                    if more is None:
                        cut = True
                        break
                    chunks.extend(i.data for i in more)
                await resp.write(b"".join(chunks))
                if cut:
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.feed.unsubscribe(client)
            if task is not None:
                self._streams.discard(task)
        return resp

    # ---- actions ----

    async def _actor_form(self, request: web.Request, action: str, target: str) -> tuple[Principal, Any] | web.Response:
        """The form of an action, once it is allowed: an admin, this origin, the CSRF token."""
        principal: Principal = request[PRINCIPAL]
        form = await request.post()
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            return self._refused(request, principal, action, target, f"the request came from another origin ({origin})")
        if not principal.can_act:
            return self._refused(request, principal, action, target,
                                 "a viewer cannot act: log in with the admin token to do this")
        if not self.auth.csrf_ok(principal, str(form.get("csrf") or "")):
            return self._refused(request, principal, action, target, "the form's CSRF token is missing or wrong")
        return principal, form

    def _refused(self, request: web.Request, principal: Principal, action: str, target: str, why: str) -> web.Response:
        log.warning("console_action_refused", action=action, target=target, who=principal.who, remote=request.remote,
                    reason=why)
        self._record(principal, action, target, f"refused: {why}")
        return self._html(pages.message_page("Refused", why, principal=principal, element_id="refused",
                                             data={"action": action}), status=403)

    def _record(self, principal: Principal, action: str, target: str, outcome: str) -> None:
        at = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S UTC")
        self.actions.append({"at": at, "who": principal.who, "action": action, "target": target, "outcome": outcome})

    async def _admin_action(self, request: web.Request, principal: Principal, action: str, target: str,
                            rpc: str, req: Any) -> str:
        """One Admin RPC, logged with who did it; the outcome as fleetctl prints it."""
        try:
            resp = await self.admin.call(rpc, req)
        except AdminCallError as e:
            outcome = f"failed: {e.details}"
        else:
            name = OUTCOME_NAMES.get(resp.outcome, "unspecified")
            outcome = (f"refused: {REJECTION_NAMES.get(resp.rejection, resp.rejection)}: {resp.detail}"
                       if name == "rejected" else name)
        log.info("console_action", action=action, target=target, who=principal.who, remote=request.remote,
                 rpc=rpc, outcome=outcome)
        self._record(principal, action, target, outcome)
        self.cache.forget("fleet", "status", "run", "cell")
        return outcome

    def _outcome_page(self, principal: Principal, action: str, target: str, outcome: str, back: str) -> web.Response:
        ok = not outcome.startswith(("refused", "failed"))
        return self._html(pages.message_page(f"{action} {target}", outcome, principal=principal,
                                             element_id="action-result", back=back,
                                             data={"action": action, "outcome": outcome.split(":")[0]}),
                          status=200 if ok else 409)

    async def run_action(self, request: web.Request) -> web.Response:
        run_id, verb = request.match_info["run_id"], request.match_info["verb"]
        got = await self._actor_form(request, verb, run_id)
        if isinstance(got, web.Response):
            return got
        principal, form = got
        if verb == "pause":
            rpc, req = "PauseRun", admin_pb2.PauseRunRequest(run_id=run_id)
        elif verb == "recover":
            rpc, req = "RecoverRun", admin_pb2.RecoverRunRequest(run_id=run_id)
        else:
            reason = str(form.get("reason") or "").strip()
            if not reason:
                raise web.HTTPBadRequest(text="repair needs the blocked reason it repairs (field reason)\n")
            rpc, req = "RepairRun", admin_pb2.RepairRunRequest(run_id=run_id, reason=reason)
        outcome = await self._admin_action(request, principal, verb, run_id, rpc, req)
        return self._outcome_page(principal, verb, run_id, outcome, f"/runs/{run_id}")

    async def worker_action(self, request: web.Request) -> web.Response:
        worker_id, verb = request.match_info["worker_id"], request.match_info["verb"]
        got = await self._actor_form(request, verb, worker_id)
        if isinstance(got, web.Response):
            return got
        principal, _ = got
        rpc, req = (("DrainWorker", admin_pb2.DrainWorkerRequest(worker_id=worker_id)) if verb == "drain" else
                    ("ReleaseWorker", admin_pb2.ReleaseWorkerRequest(worker_id=worker_id)))
        outcome = await self._admin_action(request, principal, verb, worker_id, rpc, req)
        return self._outcome_page(principal, verb, worker_id, outcome, "/")

    async def retry_cell(self, request: web.Request) -> web.Response:
        run_id, cell_id = request.match_info["run_id"], request.match_info["cell_id"]
        got = await self._actor_form(request, "retry", f"{run_id} {cell_id}")
        if isinstance(got, web.Response):
            return got
        principal, _ = got
        outcome = await self._admin_action(request, principal, "retry", f"{run_id} {cell_id}", "RetryCell",
                                           admin_pb2.RetryCellRequest(run_id=run_id, cell_id=cell_id))
        return self._outcome_page(principal, "retry", cell_id, outcome, f"/runs/{run_id}/cells/{cell_id}")

    async def bulk_plan(self, request: web.Request) -> web.Response:
        """The dry run: exactly the cells the filter matches now, kept as a plan to confirm."""
        run_id = request.match_info["run_id"]
        got = await self._actor_form(request, "bulk retry dry run", run_id)
        if isinstance(got, web.Response):
            return got
        principal, form = got
        try:
            where = parse_where([(k, str(form.get(k) or "")) for k in ("state", "reason", "subject", "worker", "task")])
        except WhereError as e:
            raise web.HTTPBadRequest(text=f"bulk retry filter: {e}\n") from None
        results = await self.admin.results(run_id)  # fresh, not the cache: the plan is what is true now
        cells = pages.bulk_matches(results["cells"], where)
        if len(cells) > limits.BULK_RETRY_CELLS_MAX:
            raise web.HTTPRequestEntityTooLarge(
                max_size=limits.BULK_RETRY_CELLS_MAX, actual_size=len(cells),
                text=f"{len(cells)} cells match: a bulk retry grants at most {limits.BULK_RETRY_CELLS_MAX}; "
                     "narrow the filter\n")
        now = _now_ms()
        for key in [k for k, p in self.plans.items() if p[4] <= now]:
            del self.plans[key]
        while len(self.plans) >= limits.BULK_PLANS_MAX:
            del self.plans[next(iter(self.plans))]
        plan_id = secrets.token_urlsafe(12)
        self.plans[plan_id] = (run_id, cells, where, principal.who, now + limits.BULK_PLAN_TTL_MS)
        log.info("console_bulk_retry_planned", run_id=run_id, where=where, cells=len(cells), who=principal.who,
                 remote=request.remote)
        return self._html(pages.bulk_plan_page(run_id, plan_id, where, cells, principal))

    async def bulk_confirm(self, request: web.Request) -> web.Response:
        """Exactly the plan's cells, each through RetryCell; not the filter again."""
        run_id = request.match_info["run_id"]
        got = await self._actor_form(request, "bulk retry", run_id)
        if isinstance(got, web.Response):
            return got
        principal, form = got
        plan = self.plans.pop(str(form.get("plan") or ""), None)
        if plan is None or plan[0] != run_id or plan[4] <= _now_ms():
            raise web.HTTPConflict(text="no such bulk retry plan (it expired, was confirmed already, or names another "
                                        "run): make a new dry run\n")
        outcomes = []
        for cell_id in plan[1]:
            outcomes.append((cell_id, await self._admin_action(request, principal, "retry", f"{run_id} {cell_id}",
                                                               "RetryCell", admin_pb2.RetryCellRequest(
                                                                   run_id=run_id, cell_id=cell_id))))
        log.info("console_bulk_retry", run_id=run_id, where=plan[2], cells=len(plan[1]), who=principal.who,
                 granted=sum(1 for _, o in outcomes if o == "accepted"))
        return self._html(pages.bulk_done_page(run_id, outcomes, principal))


def _seq(live_html: str, seq: int) -> str:
    """The live part, marked with the last event its data had seen (Cache)."""
    return re.sub(r'^<div id="([a-z-]+)" ', lambda m: f'{m.group(0)}data-seq="{seq}" ', live_html, count=1)


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def load_viewer_token(cfg: Any) -> str:
    """The viewer token (cfg.viewer_token_file, else viewer.token beside the admin token,
    created mode 0600 when missing, as the other token files)."""
    from coordinator.auth import ensure_token_file, read_token_file

    if cfg.viewer_token_file is not None:
        return read_token_file(cfg.viewer_token_file)
    token, created = ensure_token_file(cfg.viewer_token_path)
    if created:
        log.info("token_created", path=str(cfg.viewer_token_path), mode="0600")
    return token


async def start_console(cfg: Any, servicer: Any, tokens: Any, admin_token: str, incarnation: int) -> Console:
    """The console of `cfg.http_listen`, bound, its address in DATA_DIR/http.addr (written whole,
    then renamed, as listen.addr). Its feed is started by the caller, in its task group."""
    import os

    auth = ConsoleAuth(tokens, load_viewer_token(cfg))
    tls = server_ssl_context(cfg.tls_cert, cfg.tls_key) if cfg.tls_cert else None
    console = Console(servicer, auth, admin_token, incarnation, secure_cookie=tls is not None)
    address = await console.start(cfg.http_listen, tls)
    partial = cfg.data_dir / "http.addr.partial"
    partial.write_text(address + "\n")
    os.replace(partial, cfg.data_dir / "http.addr")
    log.info("console_listening", address=address, tls=tls is not None, viewer_token_file=str(cfg.viewer_token_path))
    return console
