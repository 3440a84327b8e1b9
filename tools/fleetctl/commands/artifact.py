"""`fleetctl artifact get DIGEST [-o FILE]`: an artifact's bytes by digest (stdout by default)."""
from __future__ import annotations

import argparse
import sys

import grpc

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError


def run(admin: Admin, args: argparse.Namespace) -> int:
    out = args.output.open("wb") if args.output else sys.stdout.buffer
    try:
        for chunk in admin.call("GetArtifact", admin_pb2.GetArtifactRequest(digest=args.digest), timeout=None):
            out.write(chunk.data)
    except grpc.RpcError as e:
        raise CtlError(f"{e.details()} ({e.code().name})") from None
    finally:
        if args.output:
            out.close()
    return 0
