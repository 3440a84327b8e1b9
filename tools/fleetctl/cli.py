"""fleetctl's argument parser, and the dispatch of a parsed command line to its command module
(tools/fleetctl/commands/). The commands and their flags are listed in tools/fleetctl/__init__.py."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.fleetctl.client import Admin, CtlError
from tools.fleetctl.commands import actions, artifact, backup, local, report, results, status, submit, watch
from common.report.stats import CI_METHODS
from tools.fleetctl.views import WORKERS_LISTED_MAX

COMMANDS = {"submit": submit, "status": status, "results": results, "watch": watch, "report": report,
            "artifact": artifact, "backup": backup, **{name: actions for name in actions.NAMES}}


ORDER_FROM_HELP = ("dispatch the groups longest first, by the durations observed in RUN (an earlier, settled "
                   "run of the same benchmark on this coordinator); sets the policy's orderFrom")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fleetctl", description="Operate a fleet coordinator.")
    ap.add_argument("--coordinator", default="127.0.0.1:7443", help="HOST:PORT of the coordinator")
    ap.add_argument("--token-file", type=Path, help="the admin token (the coordinator's DATA_DIR/admin.token)")
    ap.add_argument("--tls-ca", type=Path, help="CA certificate to verify a TLS coordinator")
    ap.add_argument("--tls-cert", type=Path, help="client certificate, for a coordinator with tls_client_ca")
    ap.add_argument("--tls-key", type=Path, help="private key of --tls-cert")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("submit", help="freeze a spec as a run; prints the run id")
    p.add_argument("spec", type=Path)
    p.add_argument("--policy", type=Path)
    p.add_argument("--run-id")
    p.add_argument("--bench-root", type=Path,
                   help="the benchmark's folder to measure the run's files from (default: the spec's folder)")
    p.add_argument("--order-from", metavar="RUN", help=ORDER_FROM_HELP)
    p = sub.add_parser("status", help="runs, workers, dead letters")
    p.add_argument("run", nargs="?")
    p.add_argument("--json", action="store_true")
    p.add_argument("--workers", action="store_true",
                   help=f"list every worker (more than {WORKERS_LISTED_MAX} are otherwise summarised)")
    p = sub.add_parser("results", help="selected and incomplete cells of a run, with statistics")
    p.add_argument("run")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON document: cells, statistics, summary")
    form.add_argument("--csv", action="store_true", help="a row per cell")
    form.add_argument("--jsonl", action="store_true",
                      help="a JSON line per cell, then one line with the summary and statistics")
    p.add_argument("--ci", choices=CI_METHODS, default="t",
                   help="t: analytic intervals (default); bootstrap: a seeded cluster bootstrap over tasks, "
                        "with the analytic interval shown too where they disagree")
    p = sub.add_parser("local", help="run a spec on a coordinator and N workers on this machine")
    p.add_argument("spec", type=Path)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--data-dir", type=Path, help="default ./.fleet")
    p.add_argument("--bench-root", type=Path, help="default: the spec's directory")
    p.add_argument("--policy", type=Path, help="default: policy.json beside the spec, if any")
    p.add_argument("--html", type=Path, help="when the run ends, write its HTML report (as fleetctl report) here")
    p.add_argument("--order-from", metavar="RUN", help=ORDER_FROM_HELP)
    p.add_argument("--console", nargs="?", const="127.0.0.1:0", metavar="HOST:PORT",
                   help="serve the coordinator's live web console (default 127.0.0.1 on a free port); "
                        "the address is printed")
    sub.add_parser("pause", help="freeze a run's dispatch and expiry").add_argument("run")
    p = sub.add_parser("recover", help="resume a paused run")
    p.add_argument("run")
    p.add_argument("--max-cost", type=float, metavar="DOLLARS",
                   help="a new spend cap for the run (its policy's maxObservedCostUsd); a run paused at its cap "
                        "resumes only with a higher one")
    p = sub.add_parser("repair", help="unblock a run after fixing its environment failure")
    p.add_argument("run")
    p.add_argument("reason")
    p = sub.add_parser("retry", help="grant an exhausted cell one more attempt, or every incomplete cell that "
                                     "matches --where")
    p.add_argument("run")
    p.add_argument("cell", nargs="?")
    p.add_argument("--where", type=actions.where_filter, metavar="KEY=VALUE,...",
                   help="retry the incomplete cells matching every key: " + ", ".join(
                       f"{k}=" + ("incomplete" if k == "state" else "|".join(actions.INCOMPLETE_REASONS)
                                  if k == "reason" else k.upper()) for k in actions.WHERE_KEYS)
                   + " (worker: of the cell's last attempt)")
    p.add_argument("--dry-run", action="store_true", help="with --where: print the cells it would retry, and stop")
    sub.add_parser("drain", help="give a worker no new work").add_argument("worker")
    sub.add_parser("release", help="lift a worker's quarantine (fleetctl status shows why it is quarantined)"
                   ).add_argument("worker")
    p = sub.add_parser("watch", help="live events")
    p.add_argument("run", nargs="?")
    p = sub.add_parser("report", help="one self-contained HTML page: timeline per worker slot, scores, cost")
    p.add_argument("run")
    p.add_argument("--html", type=Path, required=True, help="the page to write")
    p.add_argument("--attempts", type=Path, help="optional JSON list of further attempts (retried, late) to draw")
    p = sub.add_parser("backup", help="a consistent copy of the coordinator's data dir, taken while it serves")
    p.add_argument("dest", nargs="?",
                   help="a new directory on the coordinator's host (restore: fleet-coordinator --data-dir DEST)")
    p.add_argument("--into", metavar="ROOT",
                   help="instead of DEST: write ROOT/<UTC time> (ROOT: an existing directory on the coordinator's "
                        "host, where fleetctl runs), then prune ROOT's oldest backups beyond --keep")
    p.add_argument("--keep", type=backup.keep_count, metavar="N",
                   help="with --into: how many backups stay under ROOT, the new one included (at least 1)")
    p = sub.add_parser("artifact", help="artifacts by digest")
    p.add_argument("verb", choices=["get"])
    p.add_argument("digest")
    p.add_argument("-o", "--output", type=Path)
    return ap


def run(args: argparse.Namespace) -> int:
    if args.cmd == "local":
        return local.run(args)
    if args.cmd == "backup":
        backup.check_args(args)  # a command line it cannot act on exits 2 before any connection
    if args.token_file is None:
        raise CtlError("--token-file is required (the coordinator's admin.token)")
    try:
        token = args.token_file.read_text().strip()
    except OSError as e:
        raise CtlError(f"cannot read the token file: {e}") from None
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_cert and not args.tls_ca):
        raise CtlError("--tls-cert and --tls-key go together, and need --tls-ca")
    admin = Admin(args.coordinator, token, args.tls_ca, args.tls_cert, args.tls_key)
    try:
        return COMMANDS[args.cmd].run(admin, args)
    finally:
        admin.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except CtlError as e:
        print(f"fleetctl: {e}", file=sys.stderr)
        return e.exit_code
