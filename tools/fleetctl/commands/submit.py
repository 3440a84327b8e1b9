"""`fleetctl submit SPEC.json [--policy P.json] [--run-id ID] [--bench-root DIR] [--order-from RUN]`: freeze
a spec as a run (with the submitter's measurement of its bench root, tools/fleetctl/submission.py);
prints the run id. `--order-from RUN` dispatches its groups longest first by RUN's durations."""
from __future__ import annotations

import argparse
import sys

from tools.fleetctl.client import Admin, CtlError
from tools.fleetctl.compat import spec_text_for_fleetctl
from tools.fleetctl.submission import SubmissionError, submit_request


def run(admin: Admin, args: argparse.Namespace) -> int:
    try:
        spec_text = args.spec.read_text()
        policy_text = args.policy.read_text() if args.policy else "{}"
    except OSError as e:
        raise CtlError(f"cannot read {e.filename}: {e.strerror}") from None
    spec_text = spec_text_for_fleetctl(spec_text, args.spec)  # a single-host evaluator spec: its fleet conversion
    try:  # the submitter's measurement of what the run uses: the reference every worker must match
        req = submit_request(spec_text, policy_text, args.bench_root or args.spec.resolve().parent,
                             order_from=args.order_from or "")
    except SubmissionError as e:
        raise CtlError(str(e)) from None
    if args.run_id:
        req.run_id = args.run_id
    resp = admin.call("SubmitRun", req)
    print(resp.run_id)
    if not resp.created:
        print(f"fleetctl: run {resp.run_id} already existed with this spec; nothing changed", file=sys.stderr)
    return 0
