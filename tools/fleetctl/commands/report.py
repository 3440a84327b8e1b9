"""`fleetctl report RUN --html FILE [--attempts FILE]`: one self-contained HTML page about a run
(the page itself: tools/fleetctl/report_page.py)."""
from __future__ import annotations

import argparse

from tools.fleetctl.client import Admin
from tools.fleetctl.report_page import page_from_admin, write_page


def run(admin: Admin, args: argparse.Namespace) -> int:
    page, results, timeline = page_from_admin(admin, args.run, getattr(args, "attempts", None))
    write_page(args.html, page, results, timeline)
    return 0
