"""What the quick example's subjects share: their arguments, the files they write, and their
made-up but deterministic usage.

A subject runs as `python3 SUBJECT.py TASK_ID REPETITION` in the attempt's work dir (a copy
of tasks/TASK_ID, so README.md is there to "read"), writes ./solution.py for the verifier,
and reports what it "spent" in $FLEET_OUTPUT_DIR/usage.json. The numbers are derived from
the task statement, the solution and a hash of subject and task, so every run of the
example reports the same usage for the same cell.
"""
import hashlib
import json
import os
import sys
from pathlib import Path

BENCH_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = BENCH_ROOT / "solutions"
SYSTEM_PROMPT_TOKENS = 1200
# USD per million tokens (input, output), one made-up price list per subject's "model".
PRICES = {"reference": (3.00, 15.00), "sloppy": (0.25, 1.25), "flaky": (3.00, 15.00)}


def arguments():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {Path(sys.argv[0]).name} TASK_ID REPETITION")
    return sys.argv[1], int(sys.argv[2])


def attempt_number():
    """The dispatch count of this cell, from the attempt id's `:aN` suffix (1 when unknown)."""
    _, sep, n = os.environ.get("FLEET_ATTEMPT_ID", "").rpartition(":a")
    return int(n) if sep and n.isdigit() else 1


def reference_solution(task_id):
    return (SOLUTIONS / f"{task_id}.py").read_text()


def write_solution(text):
    Path("solution.py").write_text(text)


def _jitter(subject, task_id, salt, spread):
    digest = hashlib.sha256(f"{subject}/{task_id}/{salt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % spread


def write_usage(subject, task_id, solution_text, *, fraction=1.0):
    """usage.json for a subject that read the task and wrote `solution_text`; `fraction`
    scales it down for a call that failed part-way (it still cost something)."""
    statement = Path("README.md").read_text() if Path("README.md").is_file() else ""
    input_tokens = SYSTEM_PROMPT_TOKENS + len(statement) // 4 + _jitter(subject, task_id, "in", 400)
    output_tokens = len(solution_text) // 4 + 40 + _jitter(subject, task_id, "out", 120)
    input_tokens, output_tokens = int(input_tokens * fraction), int(output_tokens * fraction)
    price_in, price_out = PRICES[subject]
    cost = round((input_tokens * price_in + output_tokens * price_out) / 1e6, 6)
    usage = {"inputTokens": input_tokens, "outputTokens": output_tokens, "costUsd": cost}
    out = Path(os.environ.get("FLEET_OUTPUT_DIR", "."))
    (out / "usage.json").write_text(json.dumps(usage) + "\n")
    return usage
