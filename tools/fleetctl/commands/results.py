"""`fleetctl results RUN [--json | --csv | --jsonl] [--ci t|bootstrap]`: selected and incomplete
cells of a run, with statistics (intervals: tools/fleetctl/stats.py), read page by page and
written as they come (tools/fleetctl/results_out.py): memory is a page, not the run."""
from __future__ import annotations

import argparse
import sys

from tools.fleetctl import results_out
from tools.fleetctl.client import Admin
from tools.fleetctl.pages import results_pages


def run(admin: Admin, args: argparse.Namespace) -> int:
    write = (results_out.write_json if args.json else results_out.write_csv if args.csv
             else results_out.write_jsonl if args.jsonl else results_out.write_table)
    write(results_pages(admin, args.run), sys.stdout, args.ci)
    return 0
