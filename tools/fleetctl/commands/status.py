"""`fleetctl status [RUN] [--json] [--workers]`: runs, workers (summarised past
views.WORKERS_LISTED_MAX unless --workers), dead letters."""
from __future__ import annotations

import argparse
import json

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin
from tools.fleetctl.views import print_status, status_json


def run(admin: Admin, args: argparse.Namespace) -> int:
    req = admin_pb2.GetStatusRequest()
    if args.run:
        req.run_id = args.run
    data = status_json(admin.call("GetStatus", req))
    print(json.dumps(data, indent=1, sort_keys=True)) if args.json else print_status(data, args.workers)
    return 0
