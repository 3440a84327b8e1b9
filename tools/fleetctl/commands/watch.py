"""`fleetctl watch [RUN]`: live events, one JSON line each, until Ctrl-C or the stream ends.

The first line is `watch_started`: every event after it reaches this watch. Events come
several to a message (`WatchEvents`); a coordinator older than that is watched through
`Watch`, one event to a message."""
from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import grpc

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError


def events(admin: Admin, req: admin_pb2.WatchRequest) -> Iterator[Any]:
    stream = admin.call("WatchEvents", req, timeout=None)
    try:
        for batch in stream:
            yield from batch.events
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        yield from admin.call("Watch", req, timeout=None)


def run(admin: Admin, args: argparse.Namespace) -> int:
    req = admin_pb2.WatchRequest()
    if args.run:
        req.run_id = args.run
    try:
        for ev in events(admin, req):
            print(json.dumps({"at_ms": ev.at_ms, "event": ev.event, "run_id": ev.run_id or None,
                              "subject": ev.subject, "detail": ev.detail}), flush=True)
    except KeyboardInterrupt:
        pass
    except grpc.RpcError as e:
        raise CtlError(f"watch ended: {e.details()} ({e.code().name})") from None
    return 0
