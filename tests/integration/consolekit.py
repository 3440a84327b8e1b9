"""Helpers for the console's tests: a coordinator with `--http-listen`, a tiny HTTP client that
keeps the session cookie (http.client, 127.0.0.1 only), a reader of server-sent events, and
the CSRF token read from a page. Every wait is bounded and says what it waited for."""
from __future__ import annotations

import http.client
import json
import re
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from tests.integration.harness import Cluster

CONSOLE_START_S = 30


def start_console_coordinator(cluster: Cluster, *extra: str) -> str:
    """Start the cluster's coordinator with a console on a free port; its HOST:PORT."""
    addr = cluster.data_dir / "http.addr"
    if addr.exists():
        addr.unlink()
    cluster.start_coordinator("--http-listen", "127.0.0.1:0", *extra)
    deadline = time.monotonic() + CONSOLE_START_S
    while not addr.exists():
        assert cluster.coordinator is not None and cluster.coordinator.alive(), cluster.tails()
        assert time.monotonic() < deadline, f"no console within {CONSOLE_START_S}s\n{cluster.tails()}"
        time.sleep(0.05)
    return addr.read_text().strip()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@dataclass
class Http:
    address: str
    tls: ssl.SSLContext | None = None
    cookie: str = ""
    bearer: str = ""
    set_cookies: list[str] = field(default_factory=list)

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        host, port = self.address.rsplit(":", 1)
        if self.tls is not None:
            return http.client.HTTPSConnection(host, int(port), timeout=timeout, context=self.tls)
        return http.client.HTTPConnection(host, int(port), timeout=timeout)

    def request(self, method: str, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                timeout: float = 30) -> Reply:
        h = dict(headers or {})
        if self.cookie:
            h["Cookie"] = self.cookie
        if self.bearer:
            h["Authorization"] = f"Bearer {self.bearer}"
        body = None
        if form is not None:
            body = urlencode(form).encode()
            h["Content-Type"] = "application/x-www-form-urlencoded"
        conn = self._conn(timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            data = r.read()
            cookies = r.headers.get_all("Set-Cookie") or []
            self.set_cookies.extend(cookies)
            for c in cookies:
                m = re.match(r"fleet_console=([^;]*)", c)
                if m:
                    self.cookie = f"fleet_console={m.group(1)}" if m.group(1) and m.group(1) != '""' else ""
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, data)
        finally:
            conn.close()

    def get(self, path: str, **kw) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, form: dict[str, str], **kw) -> Reply:
        return self.request("POST", path, form=form, **kw)

    def login(self, token: str) -> Reply:
        r = self.post("/login", {"token": token, "next": "/"})
        assert r.status == 303, (r.status, r.text[:500])
        return r

    def csrf(self, path: str = "/") -> str:
        page = self.get(path)
        assert page.status == 200, (page.status, page.text[:300])
        m = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert m, "the page carries no CSRF token"
        return m.group(1)


def attr(html: str, element_id: str, name: str) -> str | None:
    """The attribute `name` of the element with id `element_id` in `html` (None: absent)."""
    m = re.search(rf'<[^>]*\bid="{re.escape(element_id)}"[^>]*>', html)
    if not m:
        return None
    a = re.search(rf'\b{re.escape(name)}="([^"]*)"', m.group(0))
    return a.group(1) if a else None


class Events:
    """One SSE stream: (id, event, data) in order."""

    def __init__(self, http_: Http, path: str = "/events", last_event_id: str | None = None, timeout: float = 20) -> None:
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        if http_.cookie:
            headers["Cookie"] = http_.cookie
        if http_.bearer:
            headers["Authorization"] = f"Bearer {http_.bearer}"
        self.conn = http_._conn(timeout)
        self.conn.request("GET", path, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def read(self, until, timeout_s: float = 20) -> list[tuple[str, str, dict]]:
        """Events until `until(events)` is true; fails after timeout_s."""
        out: list[tuple[str, str, dict]] = []
        ev_id = ev = ""
        data: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                raw = self.resp.readline()
            except TimeoutError:  # nothing, not even a keepalive, for the socket's whole timeout
                break
            if not raw:
                break
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                ev_id = line[4:]
            elif line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "":
                if ev:
                    payload = json.loads("\n".join(data)) if data else {}
                    # A "fleet" message carries one commit's events of one run: one row each,
                    # every row with the message's id.
                    if isinstance(payload, list):
                        out.extend((ev_id, ev, p) for p in payload)
                    else:
                        out.append((ev_id, ev, payload))
                    if until(out):
                        return out
                ev_id = ev = ""
                data = []
        raise AssertionError(f"the event stream did not give what was waited for within {timeout_s}s: {out[-5:]}")

    def close(self) -> None:
        self.conn.close()
