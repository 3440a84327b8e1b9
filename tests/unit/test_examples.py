"""Goal: the examples under examples/ are valid specs and policies whose cells really score
what examples/README.md promises; method: parse them with the spec and policy parsers, run
the quick example's verifier directly on good, buggy and broken solutions, and run a handful
of real cells of each subject (and the exhausted example's) concurrently through the command
executor, without a coordinator."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
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
    is_selectable,
)
from common.ids import attempt_id_for, cell_id_for, run_id_for
from common.policy import Policy, parse_policy_text
from common.spec import ExperimentSpec, parse_spec_text
from worker.executor import CellJob, CellOutcome, executor_for
from worker.executor.command import DEFAULT_PATH

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUICK = EXAMPLES / "quick"
EXHAUSTED = EXAMPLES / "exhausted"
TASK_IDS = ["fizzbuzz", "reverse_words", "is_palindrome", "fibonacci", "word_count",
            "roman_numerals", "flatten", "anagrams", "binary_search", "run_length_encoding"]
SLOPPY_WRONG = {"fizzbuzz": 0.5, "roman_numerals": 0.4, "binary_search": 0.4, "run_length_encoding": 0.0}
# The python3 the executor runs the scripts with (its default PATH), not this venv's.
PYTHON3 = shutil.which("python3", path=DEFAULT_PATH)


def load(root: Path) -> tuple[ExperimentSpec, Policy]:
    return (parse_spec_text((root / "experiment.json").read_text()),
            parse_policy_text((root / "policy.json").read_text()))


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


# ---- the specs and policies -----------------------------------------------------------------


def test_the_quick_spec_and_policy_parse_as_documented() -> None:
    spec, policy = load(QUICK)
    assert spec.executor_kind == "command"
    assert [t.id for t in spec.tasks] == TASK_IDS
    assert [s.id for s in spec.subjects] == ["reference", "sloppy", "flaky"]
    assert (spec.repetitions, spec.group_count, spec.cell_count) == (2, 20, 60)
    assert (spec.subject_timeout_ms, spec.verifier_timeout_ms, spec.max_concurrent_groups) == (5000, 10000, 6)
    assert all(t.dir == f"tasks/{t.id}" and t.input for t in spec.tasks)
    assert (policy.max_attempts_per_cell, policy.retry_backoff_ms, policy.retry_backoff_max_ms) == (3, 200, 2000)
    assert (policy.heartbeat_interval_ms, policy.suspect_after_ms, policy.expire_after_ms) == (500, 2000, 6000)
    for s in spec.document()["subjects"]:
        assert s["command"] == "python3"
        assert s["args"] == [f"{{{{bench_root}}}}/subjects/{s['id']}.py", "{{task.id}}", "{{repetition}}"]
        assert (QUICK / "subjects" / f"{s['id']}.py").is_file()


def test_every_quick_task_has_a_statement_tests_and_a_reference_solution() -> None:
    assert sorted(p.name for p in (QUICK / "tasks").iterdir()) == sorted(TASK_IDS)
    for task_id in TASK_IDS:
        statement = (QUICK / "tasks" / task_id / "README.md").read_text().strip().splitlines()
        assert statement[0] == f"# {task_id}" and 2 <= len([s for s in statement[1:] if s]) <= 3
        assert "def test_" in (QUICK / "tasks" / task_id / "test_solution.py").read_text()
        assert (QUICK / "solutions" / f"{task_id}.py").is_file()
    assert sorted(p.stem for p in (QUICK / "solutions" / "sloppy").glob("*.py")) == sorted(SLOPPY_WRONG)


def test_the_exhausted_spec_and_policy_parse_and_are_self_contained() -> None:
    spec, policy = load(EXHAUSTED)
    assert (len(spec.tasks), [s.id for s in spec.subjects], spec.cell_count) == (2, ["unreachable"], 2)
    assert policy.max_attempts_per_cell == 2
    for t in spec.tasks:
        assert (EXHAUSTED / t.dir).is_dir() and not (EXHAUSTED / t.dir).is_relative_to(QUICK)
    doc = spec.document()
    for program in (*doc["subjects"], doc["verifier"]):
        script = program["args"][0].replace("{{bench_root}}", str(EXHAUSTED))
        assert Path(script).is_file()


# ---- the verifier on its own ----------------------------------------------------------------


def verify_all(tmp_path: Path, cases: dict[str, tuple[str, str | None]]) -> dict[str, dict[str, Any]]:
    """Run verify.py for every case {name: (task id, solution text or None)} at once; each
    case's verdict, with its stderr as "stderr"."""
    procs = {}
    for name, (task_id, solution) in cases.items():
        work = tmp_path / name
        work.mkdir()
        if solution is not None:
            (work / "solution.py").write_text(solution)
        procs[name] = subprocess.Popen([PYTHON3, str(QUICK / "verify.py"), task_id], cwd=work,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env={"PATH": DEFAULT_PATH, "HOME": str(work)})
    verdicts = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, f"{name}: verifier exit {proc.returncode}: {err}"
        verdicts[name] = {**json.loads(out.strip().splitlines()[-1]), "stderr": err}
    return verdicts


def test_the_verifier_scores_references_one_and_sloppy_versions_as_documented(tmp_path: Path) -> None:
    cases = {f"ref-{t}": (t, (QUICK / "solutions" / f"{t}.py").read_text()) for t in TASK_IDS}
    cases |= {f"sloppy-{t}": (t, (QUICK / "solutions" / "sloppy" / f"{t}.py").read_text()) for t in SLOPPY_WRONG}
    verdicts = verify_all(tmp_path, cases)
    for t in TASK_IDS:
        v = verdicts[f"ref-{t}"]
        assert (v["score"], v["passed"]) == (1.0, v["total"]) and v["total"] >= 4, (t, v)
        assert v["stderr"] == ""
    for t, score in SLOPPY_WRONG.items():
        v = verdicts[f"sloppy-{t}"]
        assert v["score"] == score == v["passed"] / v["total"], (t, v)
        failed = v["total"] - v["passed"] if v["passed"] else 1  # a load failure is one line
        assert v["stderr"].count(f"FAIL {t}: ") == failed, v["stderr"]


def test_a_missing_crashing_or_hanging_solution_scores_zero_without_crashing_the_verifier(tmp_path: Path) -> None:
    verdicts = verify_all(tmp_path, {
        "missing": ("fizzbuzz", None),
        "syntax": ("fizzbuzz", "def fizzbuzz(n):\n    return [\n"),
        "raises": ("fizzbuzz", "raise RuntimeError('boom')\n"),
        "exits": ("fizzbuzz", "import sys\nsys.exit(0)\n"),
        "wrong-name": ("fizzbuzz", "def fizz_buzz(n):\n    return []\n"),
        "hangs": ("fizzbuzz", "while True:\n    pass\n"),
        "chatty": ("reverse_words", "print('{\"score\": 1.0}')\ndef reverse_words(t):\n    return t\n"),
    })
    for name in ("missing", "syntax", "raises", "exits", "wrong-name", "hangs"):
        v = verdicts[name]
        assert (v["score"], v["passed"], v["total"]) == (0.0, 0, 4), (name, v)
        assert "FAIL fizzbuzz: solution did not load" in v["stderr"], (name, v)
    # What a solution prints goes to stderr and cannot forge the verdict line.
    v = verdicts["chatty"]
    assert 0 < v["passed"] < v["total"] and '{"score": 1.0}' in v["stderr"]


# ---- real cells through the command executor ------------------------------------------------

# name: (bench root, task id, repetition, subject id, dispatch number)
CELLS = {
    "reference-fizzbuzz": (QUICK, "fizzbuzz", 1, "reference", 1),
    "reference-fizzbuzz-r2": (QUICK, "fizzbuzz", 2, "reference", 1),
    "reference-roman": (QUICK, "roman_numerals", 1, "reference", 1),
    "sloppy-fizzbuzz": (QUICK, "fizzbuzz", 1, "sloppy", 1),
    "sloppy-rle": (QUICK, "run_length_encoding", 1, "sloppy", 1),
    "sloppy-reverse": (QUICK, "reverse_words", 1, "sloppy", 1),
    "flaky-word_count-a1": (QUICK, "word_count", 1, "flaky", 1),
    "flaky-word_count-a2": (QUICK, "word_count", 1, "flaky", 2),
    "flaky-fizzbuzz-a1": (QUICK, "fizzbuzz", 1, "flaky", 1),
    "flaky-fibonacci": (QUICK, "fibonacci", 1, "flaky", 1),  # the one 5 s timeout
    "unreachable-a1": (EXHAUSTED, "shout", 1, "unreachable", 1),
    "unreachable-a2": (EXHAUSTED, "count_vowels", 1, "unreachable", 2),
}


def job(root: Path, task_id: str, rep: int, subject_id: str, dispatch: int, work_root: Path) -> CellJob:
    """The job a worker would get, built from the example's own spec documents."""
    spec, policy = load(root)
    doc = spec.document()
    run = run_id_for(spec.canonical, policy.canonical())
    cell = cell_id_for(task_id, rep, subject_id)
    return CellJob(
        run_id=run, assignment_id=f"{run}:{task_id}/r{rep}:g{dispatch}",
        attempt_id=attempt_id_for(run, cell, dispatch), cell_id=cell, task_id=task_id,
        repetition=rep, subject_id=subject_id,
        task=next(t for t in doc["tasks"] if t["id"] == task_id),
        subject=next(s for s in doc["subjects"] if s["id"] == subject_id),
        verifier=doc["verifier"], executor=doc["executor"],
        subject_timeout_s=spec.subject_timeout_ms // 1000, bench_root=root,
        work_root=work_root, credentials={})


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CellOutcome]:
    """Every cell of CELLS, run at once (so the timeout costs its 5 s only once)."""
    work_root = tmp_path_factory.mktemp("cells")
    before = {root: tree(root) for root in (QUICK, EXHAUSTED)}
    jobs = {name: job(*spec, work_root) for name, spec in CELLS.items()}

    async def go() -> list[CellOutcome]:
        executor = executor_for("command")
        return await asyncio.gather(*(executor.run(j, asyncio.Event()) for j in jobs.values()))

    outcomes = dict(zip(jobs, asyncio.run(go())))
    for name, outcome in outcomes.items():
        r = outcome.report
        assert evidence_problem(r) == "" and r.status == expected_status(r), name
        assert r.cleanup == Cleanup.CONFIRMED and r.environment_failure == "", (name, r)
    # Nothing was written into the bench roots (no solution files, no __pycache__).
    assert {root: tree(root) for root in (QUICK, EXHAUSTED)} == before
    return outcomes


def artifact(outcome: CellOutcome, name: str) -> str:
    return next(f.path for f in outcome.files if f.name == name).read_text()


def test_reference_scores_one_with_complete_deterministic_usage(ran: dict[str, CellOutcome]) -> None:
    for name in ("reference-fizzbuzz", "reference-roman"):
        r = ran[name].report
        assert (r.status, r.execution, r.verification, r.score) == (
            Status.COMPLETED, Execution.COMPLETED, Verification.VALID, 1.0), (name, r.detail)
        assert r.usage == Usage.COMPLETE and r.input_tokens > 1000 and r.output_tokens > 0 and r.cost_usd > 0
        assert "output/usage.json" in {f.name for f in ran[name].files}
    one, two = ran["reference-fizzbuzz"].report, ran["reference-fizzbuzz-r2"].report
    assert (one.input_tokens, one.output_tokens, one.cost_usd) == (two.input_tokens, two.output_tokens, two.cost_usd)


def test_sloppy_is_measured_wrong_where_it_is_buggy_and_right_elsewhere(ran: dict[str, CellOutcome]) -> None:
    r = ran["sloppy-fizzbuzz"].report
    assert (r.status, r.verification, r.score) == (Status.COMPLETED, Verification.VALID, 0.5)
    assert is_selectable(r)  # a wrong answer is a result, not a retry
    assert "FAIL fizzbuzz: test_fifteen_is_fizzbuzz" in artifact(ran["sloppy-fizzbuzz"], "verifier.stderr")
    r = ran["sloppy-rle"].report
    assert (r.status, r.verification, r.score) == (Status.COMPLETED, Verification.VALID, 0.0)
    assert "solution did not load: ImportError" in artifact(ran["sloppy-rle"], "verifier.stderr")
    assert ran["sloppy-reverse"].report.score == 1.0
    assert ran["sloppy-fizzbuzz"].report.cost_usd < ran["reference-fizzbuzz"].report.cost_usd


def test_flaky_first_attempt_is_indeterminate_and_its_retry_scores_one(ran: dict[str, CellOutcome]) -> None:
    r = ran["flaky-word_count-a1"].report
    assert (r.status, r.execution, r.verification, r.score) == (
        Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, None)
    assert "exit 75" in r.detail and not is_selectable(r)
    assert r.usage == Usage.COMPLETE and r.cost_usd > 0  # the failed call's cost is observed
    r = ran["flaky-word_count-a2"].report
    assert (r.status, r.score) == (Status.COMPLETED, 1.0)
    # Only the listed tasks fail at first: elsewhere the first attempt already counts.
    assert (ran["flaky-fizzbuzz-a1"].report.status, ran["flaky-fizzbuzz-a1"].report.score) == (Status.COMPLETED, 1.0)


def test_flaky_timeout_is_a_subject_failure_with_a_valid_zero(ran: dict[str, CellOutcome]) -> None:
    r = ran["flaky-fibonacci"].report
    assert (r.status, r.execution, r.verification, r.score) == (
        Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED, Verification.VALID, 0.0)
    assert "timeout after 5s" in r.detail and is_selectable(r)
    assert r.usage == Usage.MISSING and r.cost_usd is None  # killed before it reported: unknown, not zero
    assert 5000 <= r.finished_ms - r.started_ms < 20_000  # killed at the budget, not after its 30 s


def test_the_exhausted_subject_is_indeterminate_on_every_attempt(ran: dict[str, CellOutcome]) -> None:
    for name in ("unreachable-a1", "unreachable-a2"):
        r = ran[name].report
        assert (r.status, r.execution, r.verification, r.score) == (
            Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, None), name
        assert r.usage == Usage.MISSING and "exit 75" in r.detail
        assert "cannot reach the model API" in artifact(ran[name], "subject.stderr")
