#!/usr/bin/env python3
"""Subject `sloppy`: right on most tasks, but for the four that have a file under
solutions/sloppy/ it writes that subtly wrong version instead: FizzBuzz tested after Fizz,
no subtractive Roman numerals, a binary search that never looks at its last candidate, and
a run-length encoder that imports a function itertools does not have. It always exits 0:
the verifier's partial or zero scores are measured outcomes, never retried."""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the bench root
from _solver import SOLUTIONS, arguments, reference_solution, write_solution, write_usage  # noqa: E402

task_id, _repetition = arguments()
buggy = SOLUTIONS / "sloppy" / f"{task_id}.py"
text = buggy.read_text() if buggy.is_file() else reference_solution(task_id)
write_solution(text)
write_usage("sloppy", task_id, text)
print(f"sloppy: wrote solution.py for {task_id}" + (" (a buggy one)" if buggy.is_file() else ""))
