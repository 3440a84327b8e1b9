"""What `fleetctl submit` and `fleetctl local` send to freeze a run: the spec, the policy, and
the submitter's own measurement of what the run uses under its bench root.

The measurement is the reference for the run's environment (README, "How identity is
computed"): a worker serves the run only when its measurement of the same keys is equal, so
a worker of another benchmark or an older build of this one never runs it. Bench files the
spec names but the bench root lacks are measured as "missing", like a worker would: a
submission from the wrong folder makes a run no correct worker matches, so it is refused
here with the keys that are missing.
"""
from __future__ import annotations

import json
from pathlib import Path

from common.fleetpb import admin_pb2, common_pb2
from worker.identity import MISSING, run_manifest


class SubmissionError(Exception):
    pass


def with_order_from(policy_text: str, order_from: str) -> str:
    """The policy text with `orderFrom` set (`--order-from RUN`): the run whose observed group
    durations order this one's dispatch, longest first. A policy that already names another
    run is refused rather than silently overridden."""
    if not order_from:
        return policy_text
    try:
        policy = json.loads(policy_text or "{}")
    except ValueError as e:
        raise SubmissionError(f"the policy is not JSON: {e}") from None
    if not isinstance(policy, dict):
        raise SubmissionError("the policy is not a JSON object")
    named = policy.get("orderFrom")
    if named and named != order_from:
        raise SubmissionError(f"--order-from {order_from} contradicts the policy's orderFrom {named}")
    policy["orderFrom"] = order_from
    return json.dumps(policy, sort_keys=True)


def submit_request(spec_text: str, policy_text: str, bench_root: Path, *, allow_missing: bool = False,
                   order_from: str = "") -> admin_pb2.SubmitRunRequest:
    policy_text = with_order_from(policy_text, order_from)
    try:
        document = json.loads(spec_text)
    except ValueError as e:
        raise SubmissionError(f"the spec is not JSON: {e}") from None
    if not isinstance(document, dict):
        raise SubmissionError("the spec is not a JSON object")
    root = bench_root.resolve()
    if not root.is_dir():
        raise SubmissionError(f"bench root {bench_root} is not a directory")
    reference, worker_keys = run_manifest(document, root)
    missing = [k for k, v in reference.items() if v == MISSING]
    if missing and not allow_missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise SubmissionError(f"the spec names what bench root {root} does not hold: {shown} "
                              "(pass --bench-root DIR, the folder the spec's paths are relative to)")
    return admin_pb2.SubmitRunRequest(
        spec_json=spec_text, policy_json=policy_text, bench_root=str(root), worker_keys=worker_keys,
        manifest=[common_pb2.EnvironmentComponent(key=k, value=v) for k, v in sorted(reference.items())])
