"""The tasks' test_solution.py files are the benchmark's content, run by verify.py against a
subject's solution; pytest must not collect them (there is no `solution` module beside them)."""
collect_ignore_glob = ["quick/tasks/*/test_solution.py"]
