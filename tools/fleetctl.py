"""`fleetctl`: the operator's command line over the coordinator's Admin API.

    fleetctl --coordinator HOST:PORT --token-file FILE submit SPEC.json [--policy P.json]
    fleetctl ... status [RUN] [--json] | results RUN [--json] | watch [RUN]
    fleetctl ... pause RUN | recover RUN | repair RUN REASON | retry RUN CELL | drain WORKER
    fleetctl ... artifact get DIGEST [-o FILE]
    fleetctl ... report RUN --html FILE [--attempts FILE]   (one self-contained HTML page)
    fleetctl local SPEC.json --workers N [--slots S]     (a whole fleet on this machine)

Errors are one clear line on stderr and a non-zero exit (2 for usage, 1 for a refusal).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import grpc

from common import limits
from common.fleetpb import admin_pb2, admin_pb2_grpc, common_pb2

RUN_STATE_NAMES = {v: k.removeprefix("RUN_STATE_").lower() for k, v in admin_pb2.RunState.items()}
STATUS_NAMES = {v: k.removeprefix("STATUS_").lower() for k, v in common_pb2.Status.items()}
USAGE_NAMES = {v: k.removeprefix("USAGE_").lower() for k, v in common_pb2.Usage.items()}
OUTCOME_NAMES = {v: k.removeprefix("ACK_OUTCOME_").lower() for k, v in common_pb2.AckOutcome.items()}
REJECTION_NAMES = {v: k.removeprefix("REJECTION_REASON_") for k, v in common_pb2.RejectionReason.items()}
CALL_TIMEOUT_S = 30


class CtlError(Exception):
    pass


def channel(address: str, tls_ca: Path | None, tls_cert: Path | None = None,
            tls_key: Path | None = None) -> grpc.Channel:
    options = [("grpc.max_send_message_length", limits.SPEC_BYTES_MAX),
               ("grpc.max_receive_message_length", limits.SPEC_BYTES_MAX)]
    if tls_ca is not None:
        creds = grpc.ssl_channel_credentials(tls_ca.read_bytes(), tls_key.read_bytes() if tls_key else None,
                                             tls_cert.read_bytes() if tls_cert else None)
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


class Admin:
    def __init__(self, address: str, token: str, tls_ca: Path | None = None, tls_cert: Path | None = None,
                 tls_key: Path | None = None) -> None:
        self.channel = channel(address, tls_ca, tls_cert, tls_key)
        self.stub = admin_pb2_grpc.AdminStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.address = address

    def call(self, name: str, request: Any, timeout: float | None = CALL_TIMEOUT_S) -> Any:
        try:
            return getattr(self.stub, name)(request, metadata=self.metadata, timeout=timeout)
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                raise CtlError(f"coordinator at {self.address} is unreachable: {e.details()}") from None
            raise CtlError(f"{e.details()} ({code.name})") from None

    def close(self) -> None:
        self.channel.close()


def results_json(resp: Any) -> dict:
    cells = []
    for cell in resp.cells:
        cells.append({
            "cell_id": cell.cell_id, "task": cell.task_id, "repetition": cell.repetition, "subject": cell.subject_id,
            "state": cell.state, "score": cell.score if cell.HasField("score") else None,
            "status": STATUS_NAMES.get(cell.status, "unspecified") if cell.state == "selected" else None,
            "attempt_id": cell.attempt_id or None, "worker_id": cell.worker_id or None,
            "assignment_id": cell.assignment_id or None, "generation": cell.generation or None,
            "dispatch_order": cell.dispatch_order or None, "attempts": cell.attempts,
            "cost_usd": cell.cost_usd if cell.HasField("cost_usd") else None,
            "usage": USAGE_NAMES.get(cell.usage) if cell.state == "selected" else None,
            "incomplete_reason": cell.incomplete_reason or None,
            "incomplete_detail": cell.incomplete_detail or None,
            "started_ms": cell.started_ms if cell.HasField("started_ms") else None,
            "finished_ms": cell.finished_ms if cell.HasField("finished_ms") else None,
            "artifacts": [{"name": a.name, "digest": a.digest, "size_bytes": a.size_bytes} for a in cell.artifacts],
        })
    s = resp.summary
    return {"cells": cells, "summary": {
        "selected": s.selected, "incomplete": s.incomplete, "observed_cost_usd": s.observed_cost_usd,
        "usage_complete": s.usage_complete, "state": RUN_STATE_NAMES.get(s.state, "unspecified"),
        "blocked_reason": s.blocked_reason, "peak_concurrent_groups": s.peak_concurrent_groups,
        "slots_offered": s.slots_offered, "late_reports": s.late_reports,
        "selected_cost_usd": s.selected_cost_usd}}


def status_json(resp: Any) -> dict:
    return {
        "runs": [{"run_id": r.run_id, "state": RUN_STATE_NAMES.get(r.state), "blocked_reason": r.blocked_reason,
                  "cells_total": r.cells_total, "cells_selected": r.cells_selected,
                  "cells_incomplete": r.cells_incomplete, "cells_running": r.cells_running,
                  "cells_exhausted": r.cells_exhausted, "retries": r.retries,
                  "groups": {g.state: g.count for g in r.group_counts},
                  "peak_concurrent_groups": r.peak_concurrent_groups, "slots_offered": r.slots_offered,
                  "max_concurrent_groups": r.max_concurrent_groups,
                  "environment": {"reference_id": r.environment_id or None, "reference_keys": r.reference_keys,
                                  "pin_id": r.pin_environment_id or None, "pinned_by": r.pinned_by or None,
                                  "pinned_age_ms": r.pinned_age_ms if r.pin_environment_id else None}}
                 for r in resp.runs],
        "workers": [{"worker_id": w.worker_id, "status": w.status, "incarnation": w.incarnation, "slots": w.slots,
                     "busy_slots": w.busy_slots, "last_heartbeat_age_ms": w.last_heartbeat_age_ms,
                     "environment_id": w.environment_id, "serves_runs": list(w.serves_runs),
                     "refusal": {"run_id": w.refused_run_id, "reason": w.refused_reason,
                                 "age_ms": w.refused_age_ms,
                                 "differences": [{"key": d.key, "run": d.run_value, "worker": d.worker_value}
                                                 for d in w.refused_differences]} if w.refused_run_id else None}
                    for w in resp.workers],
        "dead_letters": [{"worker_id": d.worker_id, "attempt_id": d.attempt_id, "reason": d.reason}
                         for d in resp.dead_letters],
    }


def age(ms: int) -> str:
    s = ms / 1000
    if s < 120:
        return f"{s:.1f}s"
    return f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


def environment_line(env: dict) -> str:
    ref = (f"reference {env['reference_id']} ({env['reference_keys']} keys, fixed by the submitter)"
           if env["reference_id"] else "no reference (submitted without a manifest)")
    pin = (f"pin {env['pin_id']} fixed by worker {env['pinned_by']} at its first dispatch, "
           f"{age(env['pinned_age_ms'])} ago" if env["pin_id"] else "not pinned yet (pinned at the first dispatch)")
    return f"environment: {ref}; {pin}"


def refusal_lines(worker_id: str, refusal: dict, shown_max: int = 10) -> str:
    lines = [f"worker {worker_id} refused by run {refusal['run_id']}: {refusal['reason']}"]
    diffs = refusal["differences"]
    for d in diffs[:shown_max]:
        lines.append(f"    {d['key']}: run {d['run']}, worker {d['worker']}")
    if len(diffs) > shown_max:
        lines.append(f"    ... and {len(diffs) - shown_max} more (fleetctl status --json lists them)")
    return "\n".join(lines)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def print_status(data: dict) -> None:
    for r in data["runs"]:
        g = r["groups"]
        print(f"run {r['run_id']}: {r['state']}"
              + (f" (blocked: {r['blocked_reason']} — repair with: fleetctl repair {r['run_id']} "
                 f"{json.dumps(r['blocked_reason'])})" if r["blocked_reason"] else ""))
        print(f"  cells {r['cells_selected']}/{r['cells_total']} selected, {r['cells_running']} running, "
              f"{r['cells_incomplete']} incomplete; groups waiting {g.get('waiting', 0)}, "
              f"assigned {g.get('assigned', 0)}, settled {g.get('settled', 0)}; "
              f"peak {r['peak_concurrent_groups']} groups at once (cap {r['max_concurrent_groups']}, "
              f"{r['slots_offered']} slots offered)")
        print("  " + environment_line(r["environment"]))
    if data["workers"]:
        print(table([[w["worker_id"], w["status"], w["incarnation"], f"{w['busy_slots']}/{w['slots']}",
                      age(w["last_heartbeat_age_ms"]), w["environment_id"], len(w["serves_runs"]),
                      f"{w['refusal']['run_id']} {age(w['refusal']['age_ms'])} ago" if w["refusal"] else "-"]
                     for w in data["workers"]],
                    ["worker", "status", "incarnation", "busy", "last heard", "environment", "serves", "refused by"]))
        for w in data["workers"]:
            if w["refusal"]:
                print(refusal_lines(w["worker_id"], w["refusal"]))
    else:
        print("no workers registered")
    for d in data["dead_letters"]:
        print(f"dead letter: worker {d['worker_id']} attempt {d['attempt_id']}: {d['reason']}")


def print_results(data: dict) -> None:
    from tools.stats import fmt, paired_differences, subject_stats

    print_cells(data)
    stats = subject_stats(data["cells"])
    print()
    print(table([[s.subject, s.selected, s.incomplete, fmt(s.score), fmt(s.pass_rate, percent=True)] for s in stats],
                ["subject", "selected", "incomplete", "mean score [95% CI, clustered by task]", "pass rate"]))
    diffs = paired_differences(data["cells"])
    if diffs:
        print()
        print(table([[f"{d.a} - {d.b}", d.difference.n, fmt(d.difference)] for d in diffs],
                    ["paired difference", "pairs", "mean [95% CI]"]))
    incomplete = [c for c in data["cells"] if c["state"] != "selected"]
    if incomplete:
        print("\nincomplete cells (not counted as zero):")
        for c in incomplete:
            print(f"  {c['cell_id']}: {c['incomplete_reason']} after {c['attempts']} attempts")
    print_summary(data["summary"])


def results_csv(data: dict) -> str:
    import csv
    import io

    out = io.StringIO()
    fields = ["cell_id", "task", "repetition", "subject", "state", "score", "status", "attempts", "attempt_id",
              "worker_id", "assignment_id", "generation", "dispatch_order", "cost_usd", "usage", "incomplete_reason"]
    w = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for cell in data["cells"]:
        w.writerow(cell)
    return out.getvalue()


def with_stats(data: dict) -> dict:
    from tools.stats import paired_differences, subject_stats

    data = dict(data)
    data["subjects"] = [s.as_dict() for s in subject_stats(data["cells"])]
    data["paired_differences"] = [d.as_dict() for d in paired_differences(data["cells"])]
    return data


def print_cells(data: dict) -> None:
    rows = []
    for cell in data["cells"]:
        if cell["state"] == "selected":
            rows.append([cell["cell_id"], f"{cell['score']:g}", cell["status"], cell["worker_id"],
                         f"g{cell['generation']}", cell["attempts"],
                         "" if cell["cost_usd"] is None else f"{cell['cost_usd']:.4f}"])
        else:
            rows.append([cell["cell_id"], "-", f"incomplete: {cell['incomplete_reason']}", "", "", cell["attempts"], ""])
    print(table(rows, ["cell", "score", "status", "worker", "gen", "attempts", "cost_usd"]))


def print_summary(s: dict) -> None:
    print(f"\n{s['selected']} selected, {s['incomplete']} incomplete; run {s['state']}"
          f"{' (blocked: ' + s['blocked_reason'] + ')' if s['blocked_reason'] else ''}; observed cost "
          f"${s['observed_cost_usd']:.4f}{'' if s['usage_complete'] else ' (usage incomplete: the true cost is higher or unknown)'}"
          f"; {s['late_reports']} late reports")


def action(admin: Admin, name: str, request: Any) -> int:
    resp = admin.call(name, request)
    outcome = OUTCOME_NAMES.get(resp.outcome, "unspecified")
    if outcome == "rejected":
        raise CtlError(f"refused: {REJECTION_NAMES.get(resp.rejection, resp.rejection)}: {resp.detail}")
    print(outcome if outcome != "duplicate" else "already done (nothing changed)")
    return 0


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
    p = sub.add_parser("status", help="runs, workers, dead letters")
    p.add_argument("run", nargs="?")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("results", help="selected and incomplete cells of a run, with statistics")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.add_argument("--csv", action="store_true")
    p = sub.add_parser("local", help="run a spec on a coordinator and N workers on this machine")
    p.add_argument("spec", type=Path)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--data-dir", type=Path, help="default ./.fleet")
    p.add_argument("--bench-root", type=Path, help="default: the spec's directory")
    p.add_argument("--policy", type=Path, help="default: policy.json beside the spec, if any")
    for name in ("pause", "recover"):
        sub.add_parser(name).add_argument("run")
    p = sub.add_parser("repair", help="unblock a run after fixing its environment failure")
    p.add_argument("run")
    p.add_argument("reason")
    p = sub.add_parser("retry", help="grant an exhausted cell one more attempt")
    p.add_argument("run")
    p.add_argument("cell")
    sub.add_parser("drain", help="give a worker no new work").add_argument("worker")
    p = sub.add_parser("watch", help="live events")
    p.add_argument("run", nargs="?")
    p = sub.add_parser("report", help="one self-contained HTML page: timeline per worker slot, scores, cost")
    p.add_argument("run")
    p.add_argument("--html", type=Path, required=True, help="the page to write")
    p.add_argument("--attempts", type=Path, help="optional JSON list of further attempts (retried, late) to draw")
    p = sub.add_parser("artifact", help="artifacts by digest")
    p.add_argument("verb", choices=["get"])
    p.add_argument("digest")
    p.add_argument("-o", "--output", type=Path)
    return ap


def run(args: argparse.Namespace) -> int:
    if args.cmd == "local":
        from tools.local import run_local

        if args.workers < 1 or args.slots < 1:
            raise CtlError("--workers and --slots must be at least 1")
        from tools.compat import local_args  # a single-host evaluator spec runs as its fleet conversion

        args.spec, args.bench_root, args.policy = local_args(args.spec, args.data_dir, args.bench_root, args.policy)
        try:
            return run_local(args.spec, args.workers, args.slots, args.data_dir, args.bench_root, args.policy)
        except RuntimeError as e:
            raise CtlError(str(e)) from None
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
        if args.cmd == "submit":
            try:
                spec_text = args.spec.read_text()
                policy_text = args.policy.read_text() if args.policy else "{}"
            except OSError as e:
                raise CtlError(f"cannot read {e.filename}: {e.strerror}") from None
            from tools.compat import spec_text_for_fleetctl  # a single-host evaluator spec: its fleet conversion

            spec_text = spec_text_for_fleetctl(spec_text, args.spec)
            from tools.submission import SubmissionError, submit_request

            try:
                req = submit_request(spec_text, policy_text, args.bench_root or args.spec.resolve().parent)
            except SubmissionError as e:
                raise CtlError(str(e)) from None
            if args.run_id:
                req.run_id = args.run_id
            resp = admin.call("SubmitRun", req)
            print(resp.run_id)
            if not resp.created:
                print(f"fleetctl: run {resp.run_id} already existed with this spec; nothing changed", file=sys.stderr)
            return 0
        if args.cmd == "status":
            req = admin_pb2.GetStatusRequest()
            if args.run:
                req.run_id = args.run
            data = status_json(admin.call("GetStatus", req))
            print(json.dumps(data, indent=1, sort_keys=True)) if args.json else print_status(data)
            return 0
        if args.cmd == "results":
            data = results_json(admin.call("GetResults", admin_pb2.GetResultsRequest(run_id=args.run)))
            if args.json:
                print(json.dumps(with_stats(data), indent=1, sort_keys=True))
            elif args.csv:
                sys.stdout.write(results_csv(data))
            else:
                print_results(data)
            return 0
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
        if args.cmd == "watch":
            req = admin_pb2.WatchRequest()
            if args.run:
                req.run_id = args.run
            try:
                for ev in admin.call("Watch", req, timeout=None):
                    print(json.dumps({"at_ms": ev.at_ms, "event": ev.event, "run_id": ev.run_id or None,
                                      "subject": ev.subject, "detail": ev.detail}), flush=True)
            except KeyboardInterrupt:
                pass
            except grpc.RpcError as e:
                raise CtlError(f"watch ended: {e.details()} ({e.code().name})") from None
            return 0
        if args.cmd == "report":
            from tools.report import main_report

            return main_report(admin, args)
        if args.cmd == "artifact":
            out = args.output.open("wb") if args.output else sys.stdout.buffer
            try:
                for chunk in admin.call("GetArtifact", admin_pb2.GetArtifactRequest(digest=args.digest), timeout=None):
                    out.write(chunk.data)
            except grpc.RpcError as e:
                raise CtlError(f"{e.details()} ({e.code().name})") from None
            finally:
                if args.output:
                    out.close()
            return 0
        raise AssertionError(args.cmd)
    finally:
        admin.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except CtlError as e:
        print(f"fleetctl: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
