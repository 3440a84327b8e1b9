"""Goal: the command executor turns what real subject and verifier processes do into honest
evidence, a throttled provider included; method: run the fixture bench's Python scripts
(tests/fixtures/bench, and a throttling subject the tests write) through CommandExecutor in
temp dirs, one behaviour per test, and check report, artifacts and disk."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from common.evidence import (
    Cleanup,
    Execution,
    Status,
    Usage,
    Verification,
    evidence_problem,
    expected_status,
)
from common.limits import ID_CHARS_MAX, RETRY_AFTER_MS_MAX
from worker.executor import CellJob, CellOutcome, executor_for
from worker.executor.base import AttemptDirs, safe_name
from worker.executor.command import CommandExecutor

BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "bench"
SOLVE = "{{bench_root}}/subjects/solve.py"
CHECK = "{{bench_root}}/verifier/check.py"
SECRET = "sk-fixture-5ecr3t-value"


def make_job(tmp_path: Path, mode: str, *extra: str, verifier: tuple[str, ...] = (CHECK,),
             task: dict[str, Any] | None = None, timeout_s: int = 10, verifier_timeout_s: int = 10,
             declared: tuple[str, ...] = (), credentials: dict[str, str] | None = None,
             attempt: str = "run-0123456789abcdef:add/r1/s1:a1") -> CellJob:
    task = task if task is not None else {"id": "add", "input": "sum the numbers", "dir": "tasks/add"}
    subject = {"id": "s1", "command": sys.executable, "args": [SOLVE, mode, *extra]}
    if declared:
        subject["credentials"] = list(declared)
    return CellJob(
        run_id="run-0123456789abcdef", assignment_id="run-0123456789abcdef:add/r1:g1",
        attempt_id=attempt, cell_id=f"{task['id']}/r1/s1", task_id=task["id"], repetition=1,
        subject_id="s1", task=task, subject=subject,
        verifier={"command": sys.executable, "args": list(verifier), "timeoutSeconds": verifier_timeout_s},
        executor={"kind": "command"}, subject_timeout_s=timeout_s, bench_root=BENCH,
        work_root=tmp_path / "scratch", credentials=credentials or {})


def run(job: CellJob, cancel_after_s: float | None = None, **kwargs: Any) -> CellOutcome:
    async def go() -> CellOutcome:
        cancel = asyncio.Event()
        if cancel_after_s is not None:
            asyncio.get_running_loop().call_later(cancel_after_s, cancel.set)
        return await CommandExecutor(kill_grace_ms=300, **kwargs).run(job, cancel)

    outcome = asyncio.run(go())
    r = outcome.report
    assert evidence_problem(r) == "" and r.status == expected_status(r)
    assert r.artifacts == ()
    assert r.started_ms <= r.finished_ms
    dirs = AttemptDirs.of(job.work_root, job.attempt_id)
    if r.cleanup == Cleanup.CONFIRMED:
        assert not dirs.work.exists() and not dirs.tmp.exists()
    for f in outcome.files:
        assert f.path.is_file() and f.path.is_relative_to(dirs.artifacts)
    return outcome


def names(outcome: CellOutcome) -> set[str]:
    return {f.name for f in outcome.files}


def text(outcome: CellOutcome, name: str) -> str:
    return next(f.path for f in outcome.files if f.name == name).read_text()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_right_answer_completes_with_score_usage_and_logs(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, "right"))
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (Status.COMPLETED, Execution.COMPLETED, Verification.VALID, 1.0)
    assert (r.usage, r.input_tokens, r.output_tokens, r.cost_usd) == (Usage.COMPLETE, 10, 5, 0.25)
    assert r.cached_tokens is None
    assert r.cleanup == Cleanup.CONFIRMED and r.environment_failure == ""
    assert names(out) == {"subject.stdout", "subject.stderr", "verifier.stdout", "verifier.stderr", "output/usage.json"}
    assert "solving in mode right" in text(out, "subject.stdout")
    assert "subject completed" in r.detail and "score 1" in r.detail


def test_a_wrong_answer_is_a_measured_zero(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "wrong")).report
    assert (r.status, r.execution, r.verification, r.score) == (Status.COMPLETED, Execution.COMPLETED, Verification.VALID, 0.0)


def test_the_task_dir_is_copied_and_the_original_is_untouched(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "right", task={"id": "answer42", "dir": "tasks/answer42"})).report
    assert r.score == 1.0  # the subject summed the copied prompt, the verifier read expected.txt
    assert sorted(p.name for p in (BENCH / "tasks/answer42").iterdir()) == ["expected.txt", "prompt.txt"]


def test_a_nonzero_exit_is_a_subject_failure_and_still_verified(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "exit", "3")).report
    assert (r.status, r.execution, r.verification, r.score) == (Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED, Verification.VALID, 1.0)
    assert "exit code 3" in r.detail


def test_a_timeout_kills_the_process_group_and_the_verifier_still_runs(tmp_path: Path) -> None:
    job = make_job(tmp_path, "sleep", "30", timeout_s=1)
    t0 = time.monotonic()
    out = run(job)
    assert time.monotonic() - t0 < 5
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED, Verification.VALID, 0.0)
    assert "timeout after 1s" in r.detail
    leader, child = json.loads(text(out, "output/pids.json"))
    deadline = time.monotonic() + 2
    while (alive(leader) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(leader) and not alive(child)


def test_a_child_left_behind_by_a_finished_subject_is_killed(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, "orphan"))
    assert out.report.status == Status.COMPLETED
    (child,) = json.loads(text(out, "output/pids.json"))
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(child)


def test_a_subject_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    t0 = time.monotonic()
    out = run(make_job(tmp_path, "stubborn", timeout_s=1))
    assert time.monotonic() - t0 < 4
    assert out.report.execution == Execution.SUBJECT_FAILED and "timeout after 1s" in out.report.detail
    (pid,) = json.loads(text(out, "output/pids.json"))
    assert not alive(pid)


def test_exit_75_is_an_infrastructure_failure_and_skips_the_verifier(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, "exit", "75"))
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, None)
    assert r.environment_failure == ""
    assert "verifier.stdout" not in names(out)


def test_exit_78_is_a_deterministic_environment_failure_with_the_last_stderr_line(tmp_path: Path) -> None:
    long_line = "missing /opt/toolchain " + "x" * 300
    out = run(make_job(tmp_path, "exit", "78", "first line", long_line, ""))
    r = out.report
    assert (r.status, r.execution, r.verification) == (Status.INFRA_FAILED, Execution.NOT_STARTED, Verification.NOT_RUN)
    assert r.environment_failure.startswith("EX_CONFIG: missing /opt/toolchain xxx")
    assert len(r.environment_failure) == len("EX_CONFIG: ") + 150
    assert "verifier.stdout" not in names(out)


@pytest.mark.parametrize("mode, note", [
    ("garbage", "not JSON"),
    ("exit1", "exit code 1"),
    ("tempfail", "verifier infrastructure failure"),
    ("nan", "no finite numeric score"),
    ("bool", "no finite numeric score"),
    ("string", "no finite numeric score"),
    ("list", "not a JSON object"),
    ("notlast", "not JSON"),
])
def test_a_verifier_without_a_valid_verdict_is_invalid(tmp_path: Path, mode: str, note: str) -> None:
    r = run(make_job(tmp_path, "right", verifier=(CHECK, mode))).report
    assert (r.status, r.execution, r.verification, r.score) == (Status.INDETERMINATE, Execution.COMPLETED, Verification.INVALID, None)
    assert note in r.detail


def test_the_verdict_is_the_last_non_empty_line(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "right", verifier=(CHECK, "trailing-blank"))).report
    assert (r.verification, r.score) == (Verification.VALID, 0.25)


def test_a_verifier_timeout_is_invalid(tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = run(make_job(tmp_path, "right", verifier=(CHECK, "sleep"), verifier_timeout_s=1)).report
    assert time.monotonic() - t0 < 4
    assert r.verification == Verification.INVALID and "verifier timeout after 1s" in r.detail


@pytest.mark.parametrize("usage_text, usage, fields, note", [
    ('{"inputTokens": 3, "outputTokens": 4, "costUsd": 0, "cachedTokens": 1}', Usage.COMPLETE, (3, 4, 0.0, 1), ""),
    ('{"inputTokens": 3, "outputTokens": 4}', Usage.PARTIAL, (3, 4, None, None), ""),
    ('{"inputTokens": 3, "outputTokens": -4, "costUsd": "lots"}', Usage.PARTIAL, (3, None, None, None), "outputTokens, costUsd"),
    ('{"inputTokens": true}', Usage.MISSING, (None, None, None, None), "inputTokens"),
    ("not json", Usage.MISSING, (None, None, None, None), "usage.json unparseable"),
    ("[1, 2]", Usage.MISSING, (None, None, None, None), "not an object"),
    ("-", Usage.MISSING, (None, None, None, None), ""),
])
def test_usage_is_what_the_subject_reported_never_an_invented_zero(
        tmp_path: Path, usage_text: str, usage: Usage, fields: tuple, note: str) -> None:
    r = run(make_job(tmp_path, "usage", usage_text)).report
    assert r.usage == usage
    assert (r.input_tokens, r.output_tokens, r.cost_usd, r.cached_tokens) == fields
    assert note in r.detail
    assert r.status == Status.COMPLETED  # missing usage alone never makes a report unselectable


def test_the_environment_is_minimal_and_names_the_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_PRIVATE_SETTING", "must-not-pass")
    job = make_job(tmp_path, "env", declared=("FIXTURE_SECRET",),
                   credentials={"FIXTURE_SECRET": SECRET, "OTHER_SECRET": "undeclared"})
    out = run(job)
    env = json.loads(text(out, "output/env.json"))
    dirs = AttemptDirs.of(job.work_root, job.attempt_id)
    expected = {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "FLEET_RUN_ID", "FLEET_TASK_ID",
                "FLEET_TASK_INPUT", "FLEET_REPETITION", "FLEET_SUBJECT_ID", "FLEET_CELL_ID",
                "FLEET_ATTEMPT_ID", "FLEET_OUTPUT_DIR", "FLEET_BENCH_ROOT", "FIXTURE_SECRET"}
    # Python itself may add LC_CTYPE when coercing the C locale; nothing from the worker.
    assert expected <= set(env) <= expected | {"LC_CTYPE"}
    assert env["HOME"] == str(dirs.work)
    assert Path(env["TMPDIR"]).is_relative_to(dirs.root) and not Path(env["TMPDIR"]).is_relative_to(dirs.work)
    output = Path(env["FLEET_OUTPUT_DIR"])
    assert output.is_relative_to(dirs.root) and not output.is_relative_to(dirs.work)
    assert (env["FLEET_TASK_ID"], env["FLEET_TASK_INPUT"], env["FLEET_REPETITION"]) == ("add", "sum the numbers", "1")
    assert (env["FLEET_SUBJECT_ID"], env["FLEET_CELL_ID"], env["FLEET_ATTEMPT_ID"]) == ("s1", "add/r1/s1", job.attempt_id)
    assert env["FLEET_RUN_ID"] == "run-0123456789abcdef" and env["FLEET_BENCH_ROOT"] == str(BENCH)
    assert out.report.status == Status.COMPLETED


def test_args_are_templated(tmp_path: Path) -> None:
    job = make_job(tmp_path, "args", "{{task.id}}", "{{task.input}}", "{{subject.id}}",
                   "rep={{repetition}}", "{{ bench_root }}/x", "plain")
    out = run(job)
    assert json.loads(text(out, "output/args.json")) == [
        "add", "sum the numbers", "s1", "rep=1", f"{BENCH}/x", "plain"]


def test_an_unknown_placeholder_is_an_environment_failure(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "args", "{{task.inptu}}")).report
    assert r.execution == Execution.NOT_STARTED and "unknown placeholder {{task.inptu}}" in r.environment_failure


def test_a_credential_never_reaches_an_artifact_or_the_report(tmp_path: Path) -> None:
    job = make_job(tmp_path, "leak", "FIXTURE_SECRET", declared=("FIXTURE_SECRET",),
                   credentials={"FIXTURE_SECRET": SECRET})
    out = run(job)
    assert {"subject.stdout", "subject.stderr", "verifier.stdout", "output/leak.txt",
            "output/nested/again.txt"} <= names(out)
    for f in out.files:
        assert SECRET.encode() not in f.path.read_bytes(), f.name
    assert "[redacted]" in text(out, "subject.stdout")
    assert text(out, "output/leak.txt").endswith("x[redacted]\n")
    assert SECRET not in repr(out.report)
    assert "[redacted]" in out.report.detail  # the verifier echoed the leaked answer back
    # Nothing else of the attempt is left on disk with the secret in it either.
    for dirpath, _dirs, files in os.walk(job.work_root):
        for name in files:
            assert SECRET.encode() not in Path(dirpath, name).read_bytes(), name


def test_a_declared_credential_missing_on_the_worker_is_an_environment_failure(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "right", declared=("FIXTURE_SECRET",))).report
    assert (r.status, r.execution) == (Status.INFRA_FAILED, Execution.NOT_STARTED)
    assert r.environment_failure == "credential FIXTURE_SECRET is not set on this worker"


def test_cancel_kills_the_subject_and_returns_promptly(tmp_path: Path) -> None:
    job = make_job(tmp_path, "sleep", "30")
    t0 = time.monotonic()
    out = run(job, cancel_after_s=0.5)
    assert time.monotonic() - t0 < 2.5
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, None)
    assert r.cleanup == Cleanup.CONFIRMED and "cancelled" in r.detail
    leader, child = json.loads(text(out, "output/pids.json"))
    deadline = time.monotonic() + 2
    while (alive(leader) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(leader) and not alive(child)


def test_cancel_during_the_verifier(tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = run(make_job(tmp_path, "right", verifier=(CHECK, "sleep")), cancel_after_s=1.0).report
    assert time.monotonic() - t0 < 3
    assert (r.execution, r.verification) == (Execution.UNKNOWN, Verification.NOT_RUN)


def test_a_cancel_before_the_start_runs_nothing(tmp_path: Path) -> None:
    async def go() -> CellOutcome:
        cancel = asyncio.Event()
        cancel.set()
        return await CommandExecutor().run(make_job(tmp_path, "right"), cancel)

    out = asyncio.run(go())
    assert out.report.execution == Execution.UNKNOWN and out.files == ()


def test_output_files_become_artifacts_but_links_are_not_followed(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, "output"))
    assert {"output/a.txt", "output/deep/er/b.txt"} <= names(out)
    assert "output/link" not in names(out)
    assert [u.name for u in out.report.unavailable] == ["output/dirlink", "output/link"]
    assert text(out, "output/deep/er/b.txt") == "b"


def test_a_subject_that_removes_its_own_dirs_is_still_judged_not_an_environment_failure(tmp_path: Path) -> None:
    out = run(make_job(tmp_path, "vandal"))
    r = out.report
    assert (r.execution, r.environment_failure, r.cleanup) == (Execution.COMPLETED, "", Cleanup.CONFIRMED)
    assert r.verification == Verification.INVALID  # the verifier ran, in an empty dir, and failed
    assert "verifier.stderr" in names(out)


def test_a_command_that_does_not_exist_is_an_environment_failure(tmp_path: Path) -> None:
    job = make_job(tmp_path, "right")
    job = CellJob(**{**{f: getattr(job, f) for f in CellJob.__slots__},
                     "subject": {"id": "s1", "command": "no-such-fleet-binary", "args": []}})
    r = run(job).report
    assert (r.status, r.execution) == (Status.INFRA_FAILED, Execution.NOT_STARTED)
    assert "cannot start subject: no-such-fleet-binary" in r.environment_failure


def test_a_missing_task_dir_is_an_environment_failure(tmp_path: Path) -> None:
    r = run(make_job(tmp_path, "right", task={"id": "ghost", "dir": "tasks/ghost"})).report
    assert r.execution == Execution.NOT_STARTED and "tasks/ghost" in r.environment_failure


def test_cleanup_is_confirmed_only_when_the_work_dir_is_really_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
    r = run(make_job(tmp_path, "right")).report
    assert r.cleanup == Cleanup.UNKNOWN
    assert (r.status, r.verification) == (Status.INDETERMINATE, Verification.VALID)


def test_each_attempt_gets_its_own_fresh_dir(tmp_path: Path) -> None:
    a = run(make_job(tmp_path, "right", attempt="run-x:add/r1/s1:a1"))
    b = run(make_job(tmp_path, "right", attempt="run-x:add/r1/s1:a2"))
    assert {f.path.parent for f in a.files}.isdisjoint({f.path.parent for f in b.files})
    assert safe_name("run-x:a/b") != safe_name("run-x:a_b")
    assert "/" not in safe_name("run-x:add/r1/s1:a1") and ":" not in safe_name("run-x:add/r1/s1:a1")


def test_executor_for_knows_command_and_python() -> None:
    assert isinstance(executor_for("command"), CommandExecutor)
    assert type(executor_for("python")).__name__ == "PythonExecutor"
    with pytest.raises(ValueError):
        executor_for("no-such-kind")


def test_a_relative_bench_root_is_made_absolute_for_the_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(BENCH.parent)
    job = make_job(tmp_path, "args", "{{bench_root}}")
    job = CellJob(**{**{f: getattr(job, f) for f in CellJob.__slots__}, "bench_root": Path("bench")})
    out = run(job)
    assert out.report.status == Status.COMPLETED
    assert json.loads(text(out, "output/args.json")) == [str(BENCH)]


# ---- throttled attempts: exit 75 with throttled.json --------------------------------------

THROTTLING_SUBJECT = '''
import os, sys
from pathlib import Path
code, throttled = int(sys.argv[1]), sys.argv[2]
out = Path(os.environ["FLEET_OUTPUT_DIR"])
# The right answer, so that a verifier run by mistake would score it.
Path("answer.txt").write_text(str(sum(int(x) for x in Path("prompt.txt").read_text().split())))
if throttled != "-":
    (out / "throttled.json").write_text(throttled)
if len(sys.argv) > 3:
    (out / "usage.json").write_text(sys.argv[3])
sys.exit(code)
'''


def throttling_job(tmp_path: Path, code: int, throttled: Any, *usage: str, **kwargs: Any) -> CellJob:
    """A subject that writes `throttled` (JSON-encoded unless a str; "-": no file) as its
    throttled.json, and usage.json if given, then exits `code`."""
    script = tmp_path / "throttling.py"
    script.write_text(THROTTLING_SUBJECT)
    job = make_job(tmp_path, "unused", **kwargs)
    text_ = throttled if isinstance(throttled, str) else json.dumps(throttled)
    subject = {**job.subject, "args": [str(script), str(code), text_, *usage]}
    return CellJob(**{**{f: getattr(job, f) for f in CellJob.__slots__}, "subject": subject})


def test_exit_75_with_throttled_json_is_throttled_unverified_and_keeps_its_usage(tmp_path: Path) -> None:
    said = {"provider": "openai", "retryAfterSeconds": 30, "message": "Rate limit reached for gpt-4o"}
    out = run(throttling_job(tmp_path, 75, said, '{"inputTokens": 120, "costUsd": 0.002}'))
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (
        Status.THROTTLED, Execution.SUBJECT_FAILED, Verification.NOT_RUN, None)
    assert r.throttled == "provider openai throttled: Rate limit reached for gpt-4o"
    assert r.retry_after_ms == 30_000 and r.environment_failure == ""
    assert (r.usage, r.input_tokens, r.output_tokens, r.cost_usd) == (Usage.PARTIAL, 120, None, 0.002)
    assert r.cleanup == Cleanup.CONFIRMED
    assert "verifier.stdout" not in names(out) and "verifier skipped" in r.detail
    assert {"subject.stdout", "output/throttled.json", "output/usage.json"} <= names(out)


@pytest.mark.parametrize("said, retry_after_ms, reason, note", [
    ({"retryAfterSeconds": 1.5}, 1_500, "provider throttled", ""),
    ({"provider": "anthropic", "message": "overloaded_error"}, 0, "provider anthropic throttled: overloaded_error", ""),
    ({}, 0, "provider throttled", ""),
    ({"retryAfterSeconds": -3}, 0, "provider throttled", "clamped to 0s"),
    ({"retryAfterSeconds": 10 ** 9}, RETRY_AFTER_MS_MAX, "provider throttled", "clamped to 3600s"),
    ({"retryAfterSeconds": "soon", "provider": 7}, 0, "provider throttled",
     "malformed: fields ignored as invalid: provider, retryAfterSeconds"),
    ({"retryAfterSeconds": True}, 0, "provider throttled", "retryAfterSeconds"),
    ("not json {", 0, "provider throttled", "throttled.json malformed: not JSON"),
    ([1, 2], 0, "provider throttled", "throttled.json malformed: not a JSON object"),
    ("", 0, "provider throttled", "throttled.json malformed: not JSON"),
])
def test_a_throttled_json_of_any_shape_with_exit_75_is_throttled(
        tmp_path: Path, said: Any, retry_after_ms: int, reason: str, note: str) -> None:
    r = run(throttling_job(tmp_path, 75, said)).report
    assert (r.status, r.verification, r.score) == (Status.THROTTLED, Verification.NOT_RUN, None)
    assert (r.retry_after_ms, r.throttled) == (retry_after_ms, reason)
    assert note in r.detail


def test_exit_75_without_throttled_json_is_not_guessed_to_be_throttled(tmp_path: Path) -> None:
    out = run(throttling_job(tmp_path, 75, "-"))
    r = out.report
    assert (r.status, r.execution, r.verification, r.throttled, r.retry_after_ms) == (
        Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, "", 0)
    assert "verifier.stdout" not in names(out) and "throttled.json" not in r.detail


@pytest.mark.parametrize("code, status, execution", [
    (0, Status.COMPLETED, Execution.COMPLETED),
    (3, Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED),
])
def test_throttled_json_beside_another_exit_is_only_mentioned(
        tmp_path: Path, code: int, status: Status, execution: Execution) -> None:
    out = run(throttling_job(tmp_path, code, {"retryAfterSeconds": 5, "message": "429"}))
    r = out.report
    assert (r.status, r.execution, r.verification, r.score) == (status, execution, Verification.VALID, 1.0)
    assert (r.throttled, r.retry_after_ms) == ("", 0)
    assert "throttled.json ignored" in r.detail and "verifier.stdout" in names(out)


def test_a_throttled_reason_is_redacted_one_line_and_bounded(tmp_path: Path) -> None:
    said = {"provider": "openai", "message": f"bad key {SECRET}\nsecond line " + "y" * 400}
    r = run(throttling_job(tmp_path, 75, said, declared=("FIXTURE_SECRET",),
                           credentials={"FIXTURE_SECRET": SECRET})).report
    assert r.status == Status.THROTTLED
    assert r.throttled.startswith("provider openai throttled: bad key [redacted] second line yyy")
    assert len(r.throttled) <= ID_CHARS_MAX and "\n" not in r.throttled
    assert SECRET not in repr(r)
