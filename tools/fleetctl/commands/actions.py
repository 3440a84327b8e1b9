"""The operator's one-shot actions: `pause RUN`, `recover RUN [--max-cost DOLLARS]`,
`repair RUN REASON`, `retry RUN CELL`, `drain WORKER`. Each prints the outcome, or fails with
the refusal's reason. A run paused at its spend cap recovers only with a higher cap
(`--max-cost`): the refusal says so."""
from __future__ import annotations

import argparse
import math
from typing import Any

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError
from tools.fleetctl.names import OUTCOME_NAMES, REJECTION_NAMES

NAMES = ("pause", "recover", "repair", "retry", "drain")


def action(admin: Admin, name: str, request: Any) -> int:
    resp = admin.call(name, request)
    outcome = OUTCOME_NAMES.get(resp.outcome, "unspecified")
    if outcome == "rejected":
        reason = REJECTION_NAMES.get(resp.rejection, resp.rejection)
        hint = (f" (raise the cap: fleetctl recover {request.run_id} --max-cost DOLLARS)"
                if reason == "SPEND_CAP_REACHED" and name == "RecoverRun" else "")
        raise CtlError(f"refused: {reason}: {resp.detail}{hint}")
    print(outcome if outcome != "duplicate" else "already done (nothing changed)")
    return 0


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
        return action(admin, "RetryCell", admin_pb2.RetryCellRequest(run_id=args.run, cell_id=args.cell))
    if args.cmd == "drain":
        return action(admin, "DrainWorker", admin_pb2.DrainWorkerRequest(worker_id=args.worker))
    raise AssertionError(args.cmd)
