#!/usr/bin/env python3
"""Subject `unreachable`: its "model API" is never reachable, so every attempt exits 75
(EX_TEMPFAIL), an infrastructure failure. Each attempt is INDETERMINATE and is retried until
the policy's maxAttemptsPerCell (2 here) is spent; the cell then stays incomplete, with no
score invented for it."""
import sys

print(f"unreachable: attempt {sys.argv[1:]} cannot reach the model API (simulated)", file=sys.stderr)
sys.exit(75)
