#!/usr/bin/env python3
"""Subject `reference`: writes the known-correct solution of every task (solutions/ID.py).
Expected: every cell scores 1.0 on its first attempt, with complete usage."""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the bench root
from _solver import arguments, reference_solution, write_solution, write_usage  # noqa: E402

task_id, _repetition = arguments()
text = reference_solution(task_id)
write_solution(text)
write_usage("reference", task_id, text)
print(f"reference: wrote solution.py for {task_id}")
