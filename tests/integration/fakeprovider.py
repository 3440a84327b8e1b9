"""A fake model provider on 127.0.0.1 for the provider tests and tools/bench/providers.py.

A real HTTP server (stdlib ThreadingHTTPServer on a thread of this process, or on its own as
`python -m tests.integration.fakeprovider`). It admits at most `limit` requests at once: an
admitted POST is held `hold_s` and answered 200 with a small JSON body (the answer, a token
count and a cost); a POST past the limit is answered 429 at once with `Retry-After`
(`retry_after_s`, seconds). With `refuse_all` every POST gets the 429. GET /stats answers the
counters as JSON: total requests, admitted, refused, the most admitted at once, in flight.

Bounded: each connection has a socket timeout, a request body is at most 64 KiB, a hold is
at most 60 s; `stop()` shuts the server down and joins its thread, and the process form
exits on SIGTERM/SIGINT or after `--max-seconds`.

    with FakeProvider(limit=6, hold_s=0.5) as p:
        env = {"FAKE_PROVIDER_URL": p.url}
        ...
        assert p.stats()["max_at_once"] <= 6
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

BODY_MAX = 64 * 1024
HOLD_MAX_S = 60.0
SOCKET_TIMEOUT_S = 30.0


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.admitted = 0
        self.refused = 0
        self.in_flight = 0
        self.max_at_once = 0
        self.answered = 0  # admitted requests whose 200 was sent

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {"total": self.total, "admitted": self.admitted, "refused": self.refused,
                    "in_flight": self.in_flight, "max_at_once": self.max_at_once, "answered": self.answered}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # the default 5 drops SYNs when two dozen subjects connect at once

    def __init__(self, addr: tuple[str, int], provider: "FakeProvider") -> None:
        self.provider = provider
        super().__init__(addr, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read the counters
        pass

    def _send(self, code: int, body: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/stats":
            self._send(200, self.server.provider.stats())
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        p = self.server.provider
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= BODY_MAX:
            self._send(413, {"error": "body too large"})
            return
        raw = self.rfile.read(length) if length else b""
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            request = {}
        c = p.counters
        with c.lock:
            c.total += 1
            admit = not p.refuse_all and c.in_flight < p.limit
            if admit:
                c.admitted += 1
                c.in_flight += 1
                c.max_at_once = max(c.max_at_once, c.in_flight)
            else:
                c.refused += 1
        if not admit:
            self._send(429, {"error": {"type": "rate_limit_error",
                                       "message": f"{p.name}: too many requests at once (limit {p.limit})"}},
                       {"Retry-After": _seconds(p.retry_after_s)})
            return
        try:
            p.stopping.wait(p.hold_s)  # a stop() ends the hold early
            answer = str(request.get("input", "")) if isinstance(request, dict) else ""
            body = {"answer": answer, "inputTokens": 12, "outputTokens": 7, "costUsd": 0.0001}
        finally:
            # Released before the answer is written: once a client has its 200 the request
            # no longer counts against the limit, so a subject that ends and is replaced at
            # once is never refused for its own predecessor.
            with c.lock:
                c.in_flight -= 1
        self._send(200, body)
        with c.lock:
            c.answered += 1


def _seconds(s: float) -> str:
    return str(int(s)) if float(s).is_integer() else f"{s:g}"


class FakeProvider:
    """The server on a daemon thread of this process. Start with `start()` or `with`."""

    def __init__(self, *, limit: int = 6, hold_s: float = 0.5, retry_after_s: float = 1.0,
                 refuse_all: bool = False, name: str = "fake", port: int = 0) -> None:
        if limit < 0 or not 0 <= hold_s <= HOLD_MAX_S or retry_after_s < 0:
            raise ValueError("limit >= 0, 0 <= hold_s <= 60, retry_after_s >= 0")
        self.limit, self.hold_s, self.retry_after_s = limit, hold_s, retry_after_s
        self.refuse_all, self.name = refuse_all, name
        self.counters = _Counters()
        self.stopping = threading.Event()
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1/complete"

    def start(self) -> "FakeProvider":
        self._server = _Server(("127.0.0.1", self._port), self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"fakeprovider-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, "limit": self.limit, "hold_s": self.hold_s, "refuse_all": self.refuse_all,
                **self.counters.snapshot()}

    def __enter__(self) -> "FakeProvider":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.integration.fakeprovider", description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=6, help="requests admitted at once")
    ap.add_argument("--hold-s", type=float, default=0.5, help="how long an admitted request is held")
    ap.add_argument("--retry-after-s", type=float, default=1.0, help="the 429's Retry-After")
    ap.add_argument("--refuse-all", action="store_true", help="answer every request 429")
    ap.add_argument("--name", default="fake")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--url-file", type=Path, help="write the URL here once listening")
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long whatever happens")
    args = ap.parse_args(argv)
    p = FakeProvider(limit=args.limit, hold_s=args.hold_s, retry_after_s=args.retry_after_s,
                     refuse_all=args.refuse_all, name=args.name, port=args.port).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if args.url_file:
        tmp = args.url_file.with_suffix(".tmp")
        tmp.write_text(p.url + "\n")
        tmp.replace(args.url_file)
    print(p.url, flush=True)
    done.wait(args.max_seconds)
    p.stop()
    print(json.dumps(p.stats()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
