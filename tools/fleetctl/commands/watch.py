"""`fleetctl watch [RUN]`: live events, one JSON line each, until Ctrl-C or the stream ends."""
from __future__ import annotations

import argparse
import json

import grpc

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError


def run(admin: Admin, args: argparse.Namespace) -> int:
    req = admin_pb2.WatchRequest()
    if args.run:
        req.run_id = args.run
    try:
        for ev in admin.call("Watch", req, timeout=None):
            print(json.dumps({"at_ms": ev.at_ms, "event": ev.event, "run_id": ev.run_id or None,
                              "subject": ev.subject, "detail": ev.detail}), flush=True)
    except KeyboardInterrupt:
        pass
    except grpc.RpcError as e:
        raise CtlError(f"watch ended: {e.details()} ({e.code().name})") from None
    return 0
