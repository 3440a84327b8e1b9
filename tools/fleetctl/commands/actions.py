"""The operator's one-shot actions: `pause RUN`, `recover RUN`, `repair RUN REASON`,
`retry RUN CELL`, `drain WORKER`. Each prints the outcome, or fails with the refusal's reason."""
from __future__ import annotations

import argparse
from typing import Any

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError
from tools.fleetctl.names import OUTCOME_NAMES, REJECTION_NAMES

NAMES = ("pause", "recover", "repair", "retry", "drain")


def action(admin: Admin, name: str, request: Any) -> int:
    resp = admin.call(name, request)
    outcome = OUTCOME_NAMES.get(resp.outcome, "unspecified")
    if outcome == "rejected":
        raise CtlError(f"refused: {REJECTION_NAMES.get(resp.rejection, resp.rejection)}: {resp.detail}")
    print(outcome if outcome != "duplicate" else "already done (nothing changed)")
    return 0


def run(admin: Admin, args: argparse.Namespace) -> int:
    if args.cmd == "pause":
        return action(admin, "PauseRun", admin_pb2.PauseRunRequest(run_id=args.run))
    if args.cmd == "recover":
        return action(admin, "RecoverRun", admin_pb2.RecoverRunRequest(run_id=args.run))
    if args.cmd == "repair":
        return action(admin, "RepairRun", admin_pb2.RepairRunRequest(run_id=args.run, reason=args.reason))
    if args.cmd == "retry":
        return action(admin, "RetryCell", admin_pb2.RetryCellRequest(run_id=args.run, cell_id=args.cell))
    if args.cmd == "drain":
        return action(admin, "DrainWorker", admin_pb2.DrainWorkerRequest(worker_id=args.worker))
    raise AssertionError(args.cmd)
