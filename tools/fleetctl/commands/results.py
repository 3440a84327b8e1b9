"""`fleetctl results RUN [--json | --csv] [--ci t|bootstrap]`: selected and incomplete cells of a run,
with statistics (intervals: tools/fleetctl/stats.py)."""
from __future__ import annotations

import argparse
import json
import sys

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin
from tools.fleetctl.views import print_results, results_csv, results_json, with_stats


def run(admin: Admin, args: argparse.Namespace) -> int:
    data = results_json(admin.call("GetResults", admin_pb2.GetResultsRequest(run_id=args.run)))
    if args.json:
        print(json.dumps(with_stats(data, args.ci), indent=1, sort_keys=True))
    elif args.csv:
        sys.stdout.write(results_csv(data))
    else:
        print_results(data, args.ci)
    return 0
