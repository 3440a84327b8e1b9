#!/usr/bin/env python3
"""Subject `flaky`: correct, but unreliable in two ways.

- On the FIRST attempt of a cell (FLEET_ATTEMPT_ID ends with `:a1`) for the tasks in
  TEMPFAIL_TASKS it "loses its connection to the model API" and exits 75 (EX_TEMPFAIL):
  an infrastructure failure, so the attempt is INDETERMINATE, the verifier is skipped, and
  the coordinator dispatches the cell again; the second attempt succeeds. The failed call
  still reports the usage it "spent", so observed cost exceeds the selected results' cost.
- For SLOW_TASK, on every attempt, it "thinks" far past the budget: the executor kills it
  at budget.timeoutSeconds. A timeout is the subject's own failure, a measured outcome:
  the verifier still runs, finds no solution.py, and scores 0; there is no retry. It is
  killed before writing usage.json, so that cell's cost is unknown, not zero.
"""
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the bench root
from _solver import attempt_number, arguments, reference_solution, write_solution, write_usage  # noqa: E402

EX_TEMPFAIL = 75
TEMPFAIL_TASKS = ("word_count", "flatten", "anagrams")
SLOW_TASK = "fibonacci"
SLOW_SECONDS = 30  # far beyond the example's 5 s budget

task_id, _repetition = arguments()
text = reference_solution(task_id)
if task_id == SLOW_TASK:
    print(f"flaky: thinking about {task_id} for {SLOW_SECONDS}s", flush=True)
    time.sleep(SLOW_SECONDS)
if task_id in TEMPFAIL_TASKS and attempt_number() == 1:
    write_usage("flaky", task_id, text, fraction=0.5)
    print("flaky: connection to the model API reset (simulated); exit 75 to be retried", file=sys.stderr)
    sys.exit(EX_TEMPFAIL)
write_solution(text)
write_usage("flaky", task_id, text)
print(f"flaky: wrote solution.py for {task_id} on attempt {attempt_number()}")
