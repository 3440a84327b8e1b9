"""`fleetctl results RUN [--json | --csv | --jsonl] [--ci t|bootstrap]`: selected and incomplete
cells of a run, with statistics (intervals: common/report/stats.py), read page by page and
written as they come (tools/fleetctl/results_out.py): memory is a page, not the run. The table,
the JSON and the last JSON line also say which order the run's groups were dispatched in."""
from __future__ import annotations

import argparse
import sys

from common.fleetpb import admin_pb2
from tools.fleetctl import results_out
from tools.fleetctl.client import Admin
from tools.fleetctl.pages import results_pages
from tools.fleetctl.views import dispatch_order, print_providers, shown_providers, status_json


def run(admin: Admin, args: argparse.Namespace) -> int:
    status = status_json(admin.call("GetStatus", admin_pb2.GetStatusRequest(run_id=args.run)))
    order = dispatch_order(status, args.run)
    # Providers are the fleet's, shared by every run on the coordinator: as they are now.
    providers = shown_providers(status.get("providers") or [])
    pages = results_pages(admin, args.run)
    if args.json:
        results_out.write_json(pages, sys.stdout, args.ci, extra={"dispatch_order": order, "providers": providers})
    elif args.jsonl:
        results_out.write_jsonl(pages, sys.stdout, args.ci, extra={"dispatch_order": order, "providers": providers})
    elif args.csv:
        results_out.write_csv(pages, sys.stdout, args.ci)
    else:
        results_out.write_table(pages, sys.stdout, args.ci)
        sys.stdout.write(f"dispatch order: {order['text']}\n")
        if providers:
            sys.stdout.write("\nproviders (the fleet's, now):\n")
            sys.stdout.flush()
            print_providers(providers)
    return 0
