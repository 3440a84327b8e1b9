"""Goal: the python executor turns what in-process subject and verifier callables do into honest
evidence, a throttled provider included, cheaply; method: run the fixture module
tests/fixtures/bench/toybench.py (and a throttling module the tests write) through
PythonExecutor with one behaviour per test, then time a batch of no-op cells."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from common.evidence import Cleanup, Execution, Status, Usage, Verification, evidence_problem, expected_status
from worker.executor import CellJob, CellOutcome
from worker.executor.base import AttemptDirs, CancelEvent
from worker.executor.pyfunc import InfrastructureError, PythonExecutor

BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "bench"
SECRET = "sk-python-fixture-secret"


def make_job(tmp_path: Path, subject: dict[str, Any] | None = None, verifier: dict[str, Any] | None = None,
             *, task: dict[str, Any] | None = None, timeout_s: int = 10, attempt: str = "run-1:add/r2/s1:a1",
             declared: tuple[str, ...] = (), credentials: dict[str, str] | None = None) -> CellJob:
    task = task if task is not None else {"id": "add", "input": "sum", "dir": "tasks/add"}
    subject = {"id": "s1", "callable": "toybench:subject", "params": {"mode": "right"}, **(subject or {})}
    if declared:
        subject["credentials"] = list(declared)
    verifier = {"callable": "toybench:verify", "params": {"mode": "answer"}, "timeoutSeconds": 10, **(verifier or {})}
    return CellJob(
        run_id="run-1", assignment_id="run-1:add/r2:g1", attempt_id=attempt, cell_id="add/r2/s1",
        task_id=task["id"], repetition=2, subject_id="s1", task=task, subject=subject,
        verifier=verifier, executor={"kind": "python"}, subject_timeout_s=timeout_s,
        bench_root=BENCH, work_root=tmp_path / "scratch", credentials=credentials or {})


def run_timed(job: CellJob, cancel_after_s: float | None = None,
              cancel_type: type[asyncio.Event] = CancelEvent) -> tuple[CellOutcome, float]:
    """The outcome and how long `run` took, timed inside the loop (a timed-out subject's
    thread runs on past it: the test below checks that it does not hold the process's exit).
    The cancel is the session's CancelEvent unless a test asks for a plain asyncio.Event (the
    executor protocol's type, which other callers may pass)."""
    async def go() -> tuple[CellOutcome, float]:
        cancel = cancel_type()
        if cancel_after_s is not None:
            asyncio.get_running_loop().call_later(cancel_after_s, cancel.set)
        t0 = time.monotonic()
        out = await PythonExecutor().run(job, cancel)
        return out, time.monotonic() - t0

    out, elapsed = asyncio.run(go())
    r = out.report
    assert evidence_problem(r) == "" and r.status == expected_status(r)
    assert not AttemptDirs.of(job.work_root, job.attempt_id).work.exists() or r.cleanup == Cleanup.UNKNOWN
    return out, elapsed


def run(job: CellJob, cancel_after_s: float | None = None,
        cancel_type: type[asyncio.Event] = CancelEvent) -> CellOutcome:
    return run_timed(job, cancel_after_s, cancel_type)[0]


EVENTS = pytest.mark.parametrize("cancel_type", [CancelEvent, asyncio.Event])


@EVENTS
def test_a_right_answer_completes_with_usage_and_leaves_nothing_on_disk(tmp_path: Path, cancel_type) -> None:
    job = make_job(tmp_path)
    out = run(job, cancel_type=cancel_type)
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (Status.COMPLETED, Execution.COMPLETED, Verification.VALID, 1.0)
    assert (r.usage, r.input_tokens, r.output_tokens, r.cost_usd, r.cached_tokens) == (Usage.COMPLETE, 7, 3, 0.01, 2)
    assert r.cleanup == Cleanup.CONFIRMED and out.files == ()
    assert not AttemptDirs.of(job.work_root, job.attempt_id).root.exists()


def test_a_wrong_answer_is_a_measured_zero_and_no_usage_is_missing(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, {"params": {"mode": "wrong"}})).report
    assert (r.status, r.score, r.usage, r.cost_usd) == (Status.COMPLETED, 0.0, Usage.MISSING, None)


def test_partial_usage(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, {"params": {"mode": "usage", "usage": {"inputTokens": 5, "costUsd": -1}}})).report
    assert (r.usage, r.input_tokens, r.output_tokens, r.cost_usd) == (Usage.PARTIAL, 5, None, None)
    assert "costUsd" in r.detail


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_an_exception_is_a_subject_failure_and_still_verified(tmp_path: Path, mode: str) -> None:
    r = run(make_job(tmp_path, {"params": {"mode": mode}}, {"params": {"mode": "seen"}})).report
    assert (r.status, r.execution, r.verification, r.score) == (Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED, Verification.VALID, 1.0)
    assert "subject raised" in r.detail


@pytest.mark.parametrize("mode", ["infra", "infra-local"])
def test_an_infrastructure_error_is_unknown_and_retried(tmp_path: Path, mode: str) -> None:
    r = run(make_job(tmp_path, {"params": {"mode": mode}})).report
    assert (r.status, r.execution, r.verification) == (Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN)
    assert InfrastructureError.__name__ == "InfrastructureError"


@EVENTS
def test_a_timeout_is_a_subject_failure_that_says_the_thread_may_run_on(tmp_path: Path, cancel_type) -> None:
    out, elapsed = run_timed(make_job(tmp_path, {"params": {"mode": "sleep", "seconds": 1.5}},
                                      {"params": {"mode": "seen"}}, timeout_s=1), cancel_type=cancel_type)
    r = out.report
    assert elapsed < 1.4
    assert (r.execution, r.verification, r.score) == (Execution.SUBJECT_FAILED, Verification.VALID, 1.0)
    assert "timeout after 1s" in r.detail and "still be running" in r.detail


@pytest.mark.parametrize("target, words", [
    ("toybench_missing:subject", "import error: toybench_missing: ModuleNotFoundError"),
    ("toybench_broken:subject", "import error: toybench_broken: RuntimeError: this benchmark module is broken"),
    ("toybench:absent", "import error: toybench has no callable 'absent'"),
])
def test_an_import_error_is_a_deterministic_environment_failure(tmp_path: Path, target: str, words: str) -> None:
    r = run(make_job(tmp_path, {"callable": target})).report
    assert (r.status, r.execution, r.verification) == (Status.INFRA_FAILED, Execution.NOT_STARTED, Verification.NOT_RUN)
    assert r.environment_failure.startswith(words)


def test_a_verifier_import_error_keeps_the_subject_from_running(tmp_path: Path) -> None:
    job = make_job(tmp_path, {"params": {"mode": "output"}}, {"callable": "toybench:nope"})
    out = run(job)
    assert out.report.execution == Execution.NOT_STARTED and "nope" in out.report.environment_failure
    assert out.files == ()


@pytest.mark.parametrize("mode, verification, score", [
    ("number", Verification.VALID, 0.5),
    ("int", Verification.VALID, 1.0),
    ("text", Verification.INVALID, None),
    ("nan", Verification.INVALID, None),
    ("bool", Verification.INVALID, None),
    ("dict-nan", Verification.INVALID, None),
    ("none", Verification.INVALID, None),
    ("raise", Verification.INVALID, None),
])
def test_verifier_results(tmp_path: Path, mode: str, verification: Verification, score: float | None) -> None:
    r = run(make_job(tmp_path, verifier={"params": {"mode": mode}})).report
    assert (r.verification, r.score) == (verification, score)


def test_a_verifier_infrastructure_error_is_invalid(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, verifier={"params": {"mode": "infra"}})).report
    assert r.verification == Verification.INVALID and "verifier infrastructure failure" in r.detail


def test_a_verifier_timeout_is_invalid(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, verifier={"params": {"mode": "sleep", "seconds": 1.5}, "timeoutSeconds": 1})).report
    assert r.verification == Verification.INVALID and "verifier timeout after 1s" in r.detail


@EVENTS
def test_subject_and_verifier_share_a_thread_but_keep_their_own_timeouts(tmp_path: Path, cancel_type) -> None:
    """One thread runs both, yet each timeout counts from its own start: 0.6 s + 0.6 s passes
    timeouts of 1 s each; a verifier that overruns after a slow subject is cut at its own 1 s."""
    out, elapsed = run_timed(make_job(tmp_path, {"params": {"mode": "sleep", "seconds": 0.6}},
                                      {"params": {"mode": "sleep", "seconds": 0.6}, "timeoutSeconds": 1}, timeout_s=1),
                             cancel_type=cancel_type)
    r = out.report
    assert (r.execution, r.verification, r.score) == (Execution.COMPLETED, Verification.VALID, 1.0), r.detail
    assert elapsed >= 1.2
    out, elapsed = run_timed(make_job(tmp_path, {"params": {"mode": "sleep", "seconds": 0.8}},
                                      {"params": {"mode": "sleep", "seconds": 3}, "timeoutSeconds": 1}, timeout_s=2,
                                      attempt="run-1:add/r2/s1:a2"), cancel_type=cancel_type)
    r = out.report
    assert r.execution == Execution.COMPLETED and r.verification == Verification.INVALID
    assert "verifier timeout after 1s" in r.detail and 1.7 <= elapsed < 2.6, (elapsed, r.detail)


def test_the_context_carries_the_cell(tmp_path: Path) -> None:
    job = make_job(tmp_path, {"params": {"mode": "ctx", "k": 1}}, {"params": {"mode": "number"}},
                   declared=("FIXTURE_SECRET",), credentials={"FIXTURE_SECRET": SECRET, "UNDECLARED": "x"})
    out = run(job)
    assert [f.name for f in out.files] == ["output/ctx.json"]
    ctx = json.loads(out.files[0].path.read_text())
    dirs = AttemptDirs.of(job.work_root, job.attempt_id)
    assert ctx == {
        "task": {"id": "add", "input": "sum", "dir": "tasks/add"}, "params": {"mode": "ctx", "k": 1},
        "repetition": 2, "work_dir": str(dirs.work), "output_dir": str(dirs.output),
        "credentials": ["FIXTURE_SECRET"], "attempt_id": job.attempt_id,
        "work_files": ["expected.txt", "prompt.txt"],
    }


def test_output_files_become_artifacts_outside_the_work_dir(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, {"params": {"mode": "output"}}, {"params": {"mode": "number"}}))
    (f,) = out.files
    assert f.name == "output/notes.txt" and f.path.read_text() == "written by the subject"


def test_a_credential_never_reaches_an_artifact_or_the_report(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, {"params": {"mode": "leak"}}, {"params": {"mode": "number"}},
                       declared=("FIXTURE_SECRET",), credentials={"FIXTURE_SECRET": SECRET}))
    assert out.report.execution == Execution.SUBJECT_FAILED
    assert SECRET not in repr(out.report) and "[redacted]" in out.report.detail
    assert [f.path.read_text() for f in out.files] == ["key=[redacted]"]


@EVENTS
def test_cancel_returns_promptly(tmp_path: Path, cancel_type) -> None:
    out, elapsed = run_timed(make_job(tmp_path, {"params": {"mode": "sleep", "seconds": 1.5}}), cancel_after_s=0.2,
                             cancel_type=cancel_type)
    r = out.report
    assert elapsed < 1.0
    assert (r.status, r.execution, r.verification) == (Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN)


def test_no_op_cells_one_after_another_complete_and_leave_no_dir(tmp_path: Path) -> None:
    """A cell that makes no file leaves nothing behind, however many run on one executor. (What
    a no-op cell costs is a benchmark's figure, not a test's: `python -m tools.bench.worker_parts`.)"""
    cells = 300
    jobs = [make_job(tmp_path, {"callable": "toybench:noop", "params": {}},
                     {"callable": "toybench:accept", "params": {}}, task={"id": "t"},
                     attempt=f"run-1:t/r1/s1:a{i}") for i in range(cells)]

    async def go() -> list[Status]:
        ex = PythonExecutor()
        cancel = CancelEvent()
        return [(await ex.run(job, cancel)).report.status for job in jobs]

    assert asyncio.run(go()) == [Status.COMPLETED] * cells
    scratch = tmp_path / "scratch"
    assert not scratch.exists() or list(scratch.iterdir()) == []  # a no-op cell leaves no dir


def test_a_cancel_event_runs_each_callback_once_when_set() -> None:
    """CancelEvent: callbacks run at `set` (or at once when already set), once; a removed one
    never runs; it stays an asyncio.Event for every executor that waits on it."""
    async def go() -> list[str]:
        ran: list[str] = []
        e = CancelEvent()
        e.add_callback(lambda: ran.append("a"))
        gone = lambda: ran.append("removed")  # noqa: E731
        e.add_callback(gone)
        e.remove_callback(gone)
        e.remove_callback(gone)  # twice: nothing
        waiter = asyncio.ensure_future(e.wait())
        await asyncio.sleep(0)
        e.set()
        e.set()
        assert await waiter is True
        e.add_callback(lambda: ran.append("late"))
        return ran

    assert asyncio.run(go()) == ["a", "late"]


def test_an_attempts_dir_is_built_once_for_the_executor_and_the_session(tmp_path: Path) -> None:
    """AttemptDirs.of answers a repeat (the session's, after the executor's) from its cache,
    with the same path it always built; distinct attempts keep distinct dirs."""
    from worker.executor.base import safe_name

    root = tmp_path / "scratch"
    first = AttemptDirs.of(root, "run-1:add/r2/s1:a1")
    assert first.root == root / safe_name("run-1:add/r2/s1:a1")
    assert AttemptDirs.of(root, "run-1:add/r2/s1:a1").root is first.root
    assert AttemptDirs.of(root, "run-1:add/r2/s1:a2").root != first.root
    assert AttemptDirs.of(tmp_path / "other", "run-1:add/r2/s1:a1").root.parent == tmp_path / "other"


def test_cell_threads_start_only_when_none_is_idle_and_hand_back_values_and_exceptions() -> None:
    import threading

    from worker.executor.pyfunc import _CellThreads

    def boom() -> None:
        raise SystemExit("a callable's SystemExit reaches the loop as the future's exception")

    async def main() -> None:
        threads = _CellThreads(threads_max=3)
        assert await threads.run(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(SystemExit):
            await threads.run(boom)
        for _ in range(20):  # one after another: the one idle thread takes each
            await threads.run(time.sleep, 0)
        assert threads._threads == 1
        gate = threading.Event()
        held = [threads.run(gate.wait, 5) for _ in range(5)]  # five at once, three threads at most
        await asyncio.sleep(0.2)
        assert threads._threads == 3
        assert sum(f.done() for f in held) == 0
        held[0].cancel()  # the loop stops waiting; the thread's late result is dropped
        gate.set()
        assert await asyncio.gather(*held[1:]) == [True] * 4
        assert threads._threads == 3
        # The two calls that queued past the cap were counted: once all five are back, three
        # threads are idle, no more and no fewer, and three calls at once start none.
        for _ in range(500):
            if threads._idle == 3:
                break
            await asyncio.sleep(0.01)
        assert threads._idle == 3
        assert await asyncio.gather(*(threads.run(time.sleep, 0.05) for _ in range(3))) == [None] * 3
        assert threads._threads == 3

    asyncio.run(main())


def test_a_subject_that_never_returns_does_not_hold_the_process_exit(tmp_path: Path) -> None:
    # asyncio's default executor, which ran cells before, is joined when asyncio.run ends:
    # a worker whose subject timed out could not exit. The cell threads are daemons.
    code = (
        "import asyncio, pathlib\n"
        "from tests.unit.test_python_executor import make_job\n"
        "from worker.executor.base import CancelEvent\n"
        "from worker.executor.pyfunc import PythonExecutor\n"
        f"job = make_job(pathlib.Path({str(tmp_path)!r}), {{'params': {{'mode': 'sleep', 'seconds': 3600}}}}, timeout_s=1)\n"
        "out = asyncio.run(PythonExecutor().run(job, CancelEvent()))\n"
        "print(out.report.execution.name)\n")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SUBJECT_FAILED"
    assert time.monotonic() - t0 < 30, "the process waited for the subject's thread"


# ---- throttled attempts: an InfrastructureError with throttled.json in the output dir ------

THROTTLING_BENCH = '''
import json


class InfrastructureError(Exception):  # fleet's name, without importing fleet
    pass


def subject(ctx):
    said = ctx.params.get("throttled")
    if said is not None:
        (ctx.output_dir / "throttled.json").write_text(said if isinstance(said, str) else json.dumps(said))
    how = ctx.params.get("how", "infra")
    if how == "infra":
        e = InfrastructureError("HTTP 429 from the provider")
        if "usage" in ctx.params:
            e.usage = ctx.params["usage"]
        raise e
    if how == "raise":
        raise ValueError("the subject fell over")
    return {"answer": 1}


def verify(ctx, result):
    (ctx.output_dir / "verifier-ran.txt").write_text("the verifier ran")
    return 1.0
'''


@pytest.fixture(scope="module")
def throttling_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bench root holding throttlebench.py (imported once per process, like any bench module)."""
    root = tmp_path_factory.mktemp("throttling-bench")
    (root / "throttlebench.py").write_text(THROTTLING_BENCH)
    return root


def throttling_job(tmp_path: Path, bench: Path, **params: Any) -> CellJob:
    job = make_job(tmp_path, {"callable": "throttlebench:subject", "params": params},
                   {"callable": "throttlebench:verify", "params": {}}, task={"id": "t"})
    return CellJob(**{**{f: getattr(job, f) for f in CellJob.__slots__}, "bench_root": bench})


def test_an_infrastructure_error_with_throttled_json_is_throttled_unverified_and_keeps_its_usage(
        tmp_path: Path, throttling_bench: Path) -> None:
    said = {"provider": "openai", "retryAfterSeconds": 12.5, "message": "Rate limit reached"}
    out = run(throttling_job(tmp_path, throttling_bench, throttled=said,
                             usage={"inputTokens": 40, "outputTokens": 0, "costUsd": 0.001}))
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (
        Status.THROTTLED, Execution.SUBJECT_FAILED, Verification.NOT_RUN, None)
    assert (r.throttled, r.retry_after_ms) == ("provider openai throttled: Rate limit reached", 12_500)
    assert (r.usage, r.input_tokens, r.output_tokens, r.cost_usd) == (Usage.COMPLETE, 40, 0, 0.001)
    assert r.cleanup == Cleanup.CONFIRMED and r.environment_failure == ""
    assert [f.name for f in out.files] == ["output/throttled.json"]  # the verifier wrote nothing: it never ran


@pytest.mark.parametrize("said, retry_after_ms, note", [
    ("{oops", 0, "throttled.json malformed: not JSON"),
    ({"retryAfterSeconds": "later"}, 0, "fields ignored as invalid: retryAfterSeconds"),
    ({"retryAfterSeconds": 7200}, 3_600_000, "clamped to 3600s"),
])
def test_a_malformed_or_out_of_range_throttled_json_is_still_throttled(
        tmp_path: Path, throttling_bench: Path, said: Any, retry_after_ms: int, note: str) -> None:
    r = run(throttling_job(tmp_path, throttling_bench, throttled=said)).report
    assert (r.status, r.verification, r.throttled, r.retry_after_ms) == (
        Status.THROTTLED, Verification.NOT_RUN, "provider throttled", retry_after_ms)
    assert note in r.detail and r.usage == Usage.MISSING


def test_an_infrastructure_error_without_throttled_json_is_not_guessed_to_be_throttled(
        tmp_path: Path, throttling_bench: Path) -> None:
    r = run(throttling_job(tmp_path, throttling_bench)).report
    assert (r.status, r.execution, r.verification, r.throttled) == (
        Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, "")


@pytest.mark.parametrize("how, status, execution", [
    ("return", Status.COMPLETED, Execution.COMPLETED),
    ("raise", Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED),
])
def test_throttled_json_beside_another_ending_is_only_mentioned(
        tmp_path: Path, throttling_bench: Path, how: str, status: Status, execution: Execution) -> None:
    out = run(throttling_job(tmp_path, throttling_bench, how=how, throttled={"message": "429"}))
    r = out.report
    assert (r.status, r.execution, r.verification, r.score, r.throttled) == (
        status, execution, Verification.VALID, 1.0, "")
    assert "throttled.json ignored" in r.detail
    assert {f.name for f in out.files} == {"output/throttled.json", "output/verifier-ran.txt"}
