#!/usr/bin/env python3
"""The quick example's verifier: `verify.py TASK_ID`, run with the attempt's work dir as cwd.

It imports ./solution.py by path as the module `solution`, then runs every top-level
`test_*` function of the task's test_solution.py, read from the bench root (beside this
script) rather than from the work dir, so a subject cannot edit the tests it is judged by.
Each failed test gets one line on stderr; the last stdout line is the verdict
{"score": passed/total, "passed": n, "total": m}. A missing, crashing or hanging solution
scores 0: that is a valid verdict on the subject, so this script exits 0 whenever it could
judge, and non-zero only when it could not (an unknown task: the bench itself is broken).
"""
import ast
import contextlib
import importlib.util
import json
import signal
import sys
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the bench root or the work dir
BENCH_ROOT = Path(__file__).resolve().parent
TEST_SECONDS = 2  # one test running longer fails (an endless loop in a solution)
TOTAL_SECONDS = 6  # tests not started by then fail; the spec gives the verifier 10 s


class TestTimeout(Exception):
    pass


def test_names(path):
    """The test functions by reading the file, so they can be counted even when the
    solution they import is broken."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def why(e):
    """One short line for a failure: the exception and the solution's line it came from."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()
    summary = text[-1] if text else type(e).__name__
    if isinstance(e, AssertionError) and not str(e):
        frame = traceback.extract_tb(e.__traceback__)[-1]
        summary = f"assert failed: {(frame.line or '').strip()}"
    return summary[:300]


def on_alarm(_signum, _frame):
    raise TestTimeout(f"took longer than {TEST_SECONDS}s")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: verify.py TASK_ID")
    task_id = sys.argv[1]
    tests_path = BENCH_ROOT / "tasks" / task_id / "test_solution.py"
    if not tests_path.is_file():
        sys.exit(f"no tests for task {task_id!r} at {tests_path}")
    names = test_names(tests_path)
    failures = []
    passed = 0
    deadline = time.monotonic() + TOTAL_SECONDS
    signal.signal(signal.SIGALRM, on_alarm)
    # Whatever the solution prints goes to stderr: stdout is reserved for the verdict.
    with contextlib.redirect_stdout(sys.stderr):
        tests = None
        try:
            signal.alarm(TEST_SECONDS)
            if not Path("solution.py").is_file():
                raise FileNotFoundError("no solution.py in the work dir")
            load("solution", Path("solution.py").resolve())
            tests = load("test_solution", tests_path)
        except BaseException as e:  # SyntaxError, SystemExit, a timeout: all the solution's
            failures = [f"solution did not load: {why(e)}"]
        finally:
            signal.alarm(0)
        for name in names if tests is not None else ():
            if time.monotonic() > deadline:
                failures.append(f"{name}: not run, the verifier's {TOTAL_SECONDS}s were spent")
                continue
            try:
                signal.alarm(TEST_SECONDS)
                getattr(tests, name)()
                passed += 1
            except BaseException as e:
                failures.append(f"{name}: {why(e)}")
            finally:
                signal.alarm(0)
    for line in failures:
        print(f"FAIL {task_id}: {line}", file=sys.stderr)
    total = len(names)
    print(f"{task_id}: {passed}/{total} tests passed")
    print(json.dumps({"score": passed / total if total else 0.0, "passed": passed, "total": total}))


if __name__ == "__main__":
    main()
