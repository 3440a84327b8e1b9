"""`fleetctl`: the operator's command line over the coordinator's Admin API.

    fleetctl --coordinator HOST:PORT --token-file FILE submit SPEC.json [--policy P.json] [--bench-root DIR]
             [--order-from RUN]
    fleetctl ... status [RUN] [--json] [--workers] | results RUN [--json | --csv | --jsonl] [--ci t|bootstrap]
    fleetctl ... watch [RUN]
    fleetctl ... pause RUN | recover RUN [--max-cost DOLLARS] | repair RUN REASON | retry RUN CELL
             | retry RUN --where state=incomplete,reason=R,task=T,subject=S,worker=W [--dry-run]
             | drain WORKER | release WORKER
    fleetctl ... artifact get DIGEST [-o FILE] | backup DEST | backup --into ROOT --keep N
    fleetctl ... report RUN --html FILE [--attempts FILE]   (one self-contained HTML page)
    fleetctl local SPEC.json --workers N [--slots S] [--html FILE] [--order-from RUN]   (a whole fleet here)

Errors are one clear line on stderr and a non-zero exit (2 for usage, 1 for a refusal).

The package, and the one way its imports run (tests/test_tidy.py enforces both: no cycle
among these modules, and no shared module importing a command or the parser):

    cli.py                 the argument parser and the dispatch to one command module
      commands/*.py        one module per command or command family (submit, status,
                           results, actions, watch, report, artifact, backup, local)
        shared modules     client.py (Admin, CtlError), names.py (enum name tables),
                           views.py (results/status as dicts, tables), stats.py (intervals),
                           pages.py (listings page by page), results_out.py (results written
                           page by page),
                           report_page.py (the HTML page, pure), compat.py (single-host specs),
                           submission.py (the submitter's measurement of its bench root)

This file imports nothing of the package at import time, so that importing a shared module
never drags in the commands; `main` is here for the console script (`tools.fleetctl:main`).
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from tools.fleetctl.cli import main as cli_main

    return cli_main(argv)
