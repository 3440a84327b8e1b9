"""The operator's one-shot actions: `pause RUN`, `recover RUN [--max-cost DOLLARS]`,
`repair RUN REASON`, `retry RUN CELL`, `retry RUN --where KEY=VALUE,... [--dry-run]`,
`drain WORKER`, `release WORKER`. Each prints the outcome, or fails with the refusal's reason.
A run paused at its spend cap recovers only with a higher cap (`--max-cost`): the refusal says so.

A retry by filter is the client's: it reads the run's results (every page, as `results` does),
selects the incomplete cells that match every key given (WHERE_KEYS), prints exactly those
(count and ids), and unless `--dry-run` grants each one through the same RetryCell RPC as
`retry RUN CELL`, printing each outcome. A cell refused (say, selected meanwhile) is reported and
the rest go on; the exit is 1 if any was refused, 2 for a filter it cannot read."""
from __future__ import annotations

import argparse
import math
from typing import Any

from common.fleetpb import admin_pb2
from common.report.shapes import INCOMPLETE_REASONS, WHERE_KEYS, WhereError, cell_matches, parse_where  # noqa: F401
from tools.fleetctl.client import Admin, CtlError, UsageError
from common.report.names import OUTCOME_NAMES, REJECTION_NAMES
from tools.fleetctl.pages import results_pages
from tools.fleetctl.views import results_json

NAMES = ("pause", "recover", "repair", "retry", "drain", "release")

def where_filter(text: str) -> dict[str, str]:
    """`--where state=incomplete,reason=exhausted,...` as {key: value} (the keys and their checks:
    common/report/shapes.py, shared with the console's bulk retry); argparse turns the
    ArgumentTypeError into a usage error (exit 2)."""
    pairs = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not KEY=VALUE (keys: {', '.join(WHERE_KEYS)})")
        pairs.append((key, value))
    try:
        return parse_where(pairs)
    except WhereError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def refusal(resp: Any, name: str, request: Any) -> str | None:
    """Why an action was refused, as fleetctl says it; None when it was not."""
    if OUTCOME_NAMES.get(resp.outcome, "unspecified") != "rejected":
        return None
    reason = REJECTION_NAMES.get(resp.rejection, resp.rejection)
    hint = (f" (raise the cap: fleetctl recover {request.run_id} --max-cost DOLLARS)"
            if reason == "SPEND_CAP_REACHED" and name == "RecoverRun" else "")
    return f"refused: {reason}: {resp.detail}{hint}"


def outcome_text(resp: Any) -> str:
    outcome = OUTCOME_NAMES.get(resp.outcome, "unspecified")
    return outcome if outcome != "duplicate" else "already done (nothing changed)"


def action(admin: Admin, name: str, request: Any) -> int:
    resp = admin.call(name, request)
    refused = refusal(resp, name, request)
    if refused is not None:
        raise CtlError(refused)
    print(outcome_text(resp))
    return 0


def matching_cells(admin: Admin, run_id: str, where: dict[str, str]) -> list[tuple[str, tuple]]:
    """(id, group) of the run's incomplete cells that match every key of `where`, in the run's
    order; the listing is read page by page and only those kept."""
    out = []
    for page in results_pages(admin, run_id):
        for cell in results_json(page)["cells"]:
            if cell_matches(cell, where):
                out.append((cell["cell_id"], (cell["task"], cell["repetition"])))
    return out


def retry_where(admin: Admin, run_id: str, where: dict[str, str], dry_run: bool) -> int:
    what = ",".join(f"{k}={v}" for k, v in where.items())
    cells = matching_cells(admin, run_id, where)
    if not cells:
        print(f"no incomplete cell of run {run_id} matches {what}: nothing to retry")
        return 0
    print(f"{'would retry' if dry_run else 'retrying'} {len(cells)} cells of run {run_id} ({what}):")
    if dry_run:
        for cid, _ in cells:
            print(f"  {cid}")
        return 0
    refused = 0
    for cid, _group in cells:
        request = admin_pb2.RetryCellRequest(run_id=run_id, cell_id=cid)
        try:
            resp = admin.call("RetryCell", request)
        except CtlError as e:  # this cell's call failed; the others are still worth granting
            why: str | None = f"failed: {e}"
        else:
            why = refusal(resp, "RetryCell", request)
        refused += why is not None
        print(f"  {cid}: {why if why is not None else outcome_text(resp)}")
    print(f"{len(cells) - refused} of {len(cells)} cells granted one more attempt"
          + (f"; {refused} refused" if refused else ""))
    return 1 if refused else 0


def run(admin: Admin, args: argparse.Namespace) -> int:
    if args.cmd == "pause":
        return action(admin, "PauseRun", admin_pb2.PauseRunRequest(run_id=args.run))
    if args.cmd == "recover":
        req = admin_pb2.RecoverRunRequest(run_id=args.run)
        if args.max_cost is not None:
            if not (math.isfinite(args.max_cost) and args.max_cost > 0):
                raise CtlError(f"--max-cost must be a positive number of dollars, not {args.max_cost:g}")
            req.max_observed_cost_usd = args.max_cost
        return action(admin, "RecoverRun", req)
    if args.cmd == "repair":
        return action(admin, "RepairRun", admin_pb2.RepairRunRequest(run_id=args.run, reason=args.reason))
    if args.cmd == "retry":
        where, dry_run = getattr(args, "where", None), getattr(args, "dry_run", False)
        if (args.cell is None) == (where is None):
            raise UsageError("retry takes a CELL or --where KEY=VALUE,..., one of the two")
        if where is None:
            if dry_run:
                raise UsageError("--dry-run goes with --where")
            return action(admin, "RetryCell", admin_pb2.RetryCellRequest(run_id=args.run, cell_id=args.cell))
        return retry_where(admin, args.run, where, dry_run)
    if args.cmd == "drain":
        return action(admin, "DrainWorker", admin_pb2.DrainWorkerRequest(worker_id=args.worker))
    if args.cmd == "release":
        return action(admin, "ReleaseWorker", admin_pb2.ReleaseWorkerRequest(worker_id=args.worker))
    raise AssertionError(args.cmd)
