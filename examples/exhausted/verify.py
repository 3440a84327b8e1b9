#!/usr/bin/env python3
"""The exhausted example's verifier: `verify.py`, in the attempt's work dir (a copy of the
task dir). Score 1.0 when answer.txt equals expected.txt, else 0.0; the verdict is the last
stdout line. With the `unreachable` subject it never runs: a subject exiting 75 skips it."""
import json
from pathlib import Path

want = Path("expected.txt").read_text().strip()
got = Path("answer.txt").read_text().strip() if Path("answer.txt").is_file() else None
print(f"expected {want!r}, got {got!r}")
print(json.dumps({"score": 1.0 if got == want else 0.0}))
