"""`fleetctl status [RUN] [--json] [--workers]`: runs, workers (summarised past
views.WORKERS_LISTED_MAX unless --workers), dead letters.

Without --workers or --json the coordinator is asked for its worker summary, which lists the
workers themselves only for a fleet of at most WORKERS_LISTED_MAX: at 10,000 workers the
answer is a few kB instead of a megabyte, and cheaper for the actor thread to build."""
from __future__ import annotations

import argparse
import json

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin
from tools.fleetctl.views import WORKERS_LISTED_MAX, WORKERS_SLOWEST_SHOWN, print_status, status_json


def run(admin: Admin, args: argparse.Namespace) -> int:
    req = admin_pb2.GetStatusRequest()
    if args.run:
        req.run_id = args.run
    if not args.workers and not args.json:
        req.workers_view = admin_pb2.WORKERS_VIEW_SUMMARY
        req.workers_shown = WORKERS_SLOWEST_SHOWN
        req.workers_listed_max = WORKERS_LISTED_MAX
    data = status_json(admin.call("GetStatus", req))
    print(json.dumps(data, indent=1, sort_keys=True)) if args.json else print_status(data, args.workers)
    return 0
