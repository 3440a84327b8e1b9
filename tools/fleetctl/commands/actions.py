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
from tools.fleetctl.client import Admin, CtlError, UsageError
from tools.fleetctl.names import OUTCOME_NAMES, REJECTION_NAMES
from tools.fleetctl.pages import results_pages
from tools.fleetctl.views import results_json

NAMES = ("pause", "recover", "repair", "retry", "drain", "release")

# The keys of `retry --where`, and what each matches in a results cell (`results --json`):
# state (only "incomplete": the cells a retry can grant), reason (the incomplete reason), task,
# subject, and worker (the worker of the cell's last attempt).
WHERE_KEYS = {"state": "state", "reason": "incomplete_reason", "task": "task", "subject": "subject",
              "worker": "worker_id"}
# coordinator/core/summary.py IncompleteCell.reason: a typo matches nothing, so it is refused.
INCOMPLETE_REASONS = ("exhausted", "provider_throttled", "blocked", "paused", "running", "retry_pending",
                      "not_yet_run")


def where_filter(text: str) -> dict[str, str]:
    """`--where state=incomplete,reason=exhausted,...` as {key: value}; argparse turns the
    ArgumentTypeError into a usage error (exit 2)."""
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not KEY=VALUE (keys: {', '.join(WHERE_KEYS)})")
        if key not in WHERE_KEYS:
            raise argparse.ArgumentTypeError(f"unknown filter key {key!r} (keys: {', '.join(WHERE_KEYS)})")
        if key in out:
            raise argparse.ArgumentTypeError(f"filter key {key!r} is given twice")
        if key == "state" and value != "incomplete":
            raise argparse.ArgumentTypeError(f"state={value}: only incomplete cells can be retried "
                                             "(state=incomplete)")
        if key == "reason" and value not in INCOMPLETE_REASONS:
            raise argparse.ArgumentTypeError(f"unknown incomplete reason {value!r} "
                                             f"(reasons: {', '.join(INCOMPLETE_REASONS)})")
        out[key] = value
    return out


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
    fields = {WHERE_KEYS[k]: v for k, v in where.items() if k != "state"}
    out = []
    for page in results_pages(admin, run_id):
        for cell in results_json(page)["cells"]:
            if cell["state"] == "incomplete" and all(cell[f] == v for f, v in fields.items()):
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
