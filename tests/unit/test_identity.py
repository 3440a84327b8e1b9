"""Goal: the environment id changes exactly when something a cell depends on changes; method:
compute manifests over a copy of the fixture bench, edit one file at a time (a task file, the
verifier, a callable's module, an unrelated file) and compare ids, with and without git."""
from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from worker.identity import compute_manifest, describe, environment_id

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bench"


@pytest.fixture()
def bench(tmp_path: Path) -> Path:
    root = tmp_path / "bench"
    shutil.copytree(FIXTURES, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def command_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "benchmark": {"name": "toy", "version": "1"},
        "executor": {"kind": "command"},
        "subjects": [{"id": "s1", "command": sys.executable,
                      "args": ["{{bench_root}}/subjects/solve.py", "right", "{{task.id}}"]}],
        "tasks": [{"id": "add", "dir": "tasks/add"}, {"id": "answer42", "dir": "tasks/answer42"}],
        "repetitions": 2,
        "budget": {"timeoutSeconds": 10},
        "verifier": {"command": "python3", "args": ["{{bench_root}}/verifier/check.py", "relative.txt"]},
        "execution": {"maxConcurrentTaskGroups": 2},
    }
    spec.update(overrides)
    return spec


def python_spec(module: str = "toybench") -> dict[str, Any]:
    return command_spec(
        executor={"kind": "python"},
        subjects=[{"id": "s1", "callable": f"{module}:subject", "params": {}}],
        verifier={"callable": f"{module}:verify"})


def env_id(spec: dict[str, Any], bench: Path) -> str:
    return environment_id(compute_manifest(spec, bench))


def test_the_manifest_measures_this_machine(bench: Path) -> None:
    (bench / "relative.txt").write_text("a bench file that a relative arg happens to name")
    m = compute_manifest(command_spec(), bench)
    assert m["python.version"] == platform.python_version()
    assert m["python.implementation"] == platform.python_implementation()
    assert m["platform.machine"] == platform.machine() and m["platform.system"] == platform.system()
    assert m["executor.kind"] == "command"
    assert m["fleet.version"]
    assert set(m) >= {"bench.file:subjects/solve.py", "bench.file:verifier/check.py",
                      "bench.taskdir:tasks/add", "bench.taskdir:tasks/answer42", "tool:python3",
                      f"tool:{sys.executable}", "fleet.source"}
    assert "bench.file:NOTES.txt" not in m
    assert "bench.file:relative.txt" not in m  # relative args name files of the task dir copy
    assert "bench.revision" not in m  # a plain directory, not a git checkout
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in m.items())


def test_a_relative_bench_root_names_the_same_files(bench: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(bench.parent)
    assert compute_manifest(command_spec(), Path("bench")) == compute_manifest(command_spec(), bench)


def test_the_same_inputs_give_the_same_id(bench: Path) -> None:
    first = env_id(command_spec(), bench)
    assert first.startswith("env-") and len(first) == 4 + 16
    assert env_id(command_spec(), bench) == first
    assert env_id(json.loads(json.dumps(command_spec())), bench) == first


@pytest.mark.parametrize("path", ["tasks/add/prompt.txt", "tasks/answer42/expected.txt",
                                  "verifier/check.py", "subjects/solve.py"])
def test_editing_a_file_a_cell_depends_on_changes_the_id(bench: Path, path: str) -> None:
    before = env_id(command_spec(), bench)
    with open(bench / path, "a") as f:
        f.write("\n# edited\n")
    assert env_id(command_spec(), bench) != before


def test_adding_a_file_to_a_task_dir_or_making_it_executable_changes_the_id(bench: Path) -> None:
    before = env_id(command_spec(), bench)
    (bench / "tasks/add/extra.txt").write_text("x")
    added = env_id(command_spec(), bench)
    assert added != before
    (bench / "tasks/add/extra.txt").chmod(0o755)
    assert env_id(command_spec(), bench) != added


def test_an_unrelated_file_does_not_change_the_id(bench: Path) -> None:
    before = env_id(command_spec(), bench)
    (bench / "NOTES.txt").write_text("rewritten")
    (bench / "new-unrelated.txt").write_text("new")
    (bench / "tasks/add/__pycache__").mkdir()
    (bench / "tasks/add/__pycache__/x.pyc").write_bytes(b"cache")
    assert env_id(command_spec(), bench) == before


def test_a_python_spec_hashes_the_callables_modules(bench: Path) -> None:
    # A module name no other test imports: an imported module is measured as the process
    # has it loaded (as the executor would run it), and this test edits the file on disk.
    (bench / "identity_only_bench.py").write_text((bench / "toybench.py").read_text())
    spec = python_spec("identity_only_bench")
    m = compute_manifest(spec, bench)
    assert m["executor.kind"] == "python" and "python.module:identity_only_bench" in m
    assert "identity_only_bench" not in sys.modules  # measured without importing it
    before = environment_id(m)
    (bench / "toybench_broken.py").write_text("# not named by the spec\n")
    assert env_id(spec, bench) == before
    with open(bench / "identity_only_bench.py", "a") as f:
        f.write("\n# edited\n")
    assert env_id(spec, bench) != before


def test_a_missing_named_file_is_recorded_not_skipped(bench: Path) -> None:
    spec = command_spec(tasks=[{"id": "ghost", "dir": "tasks/ghost"}],
                        verifier={"command": "no-such-fleet-tool", "args": []})
    m = compute_manifest(spec, bench)
    assert m["bench.taskdir:tasks/ghost"] == "missing" and m["tool:no-such-fleet-tool"] == "missing"


def test_the_executor_kind_is_part_of_the_id(bench: Path) -> None:
    assert env_id(command_spec(), bench) != env_id(python_spec(), bench)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_git_checkout_contributes_its_revision(bench: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(bench), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "bench")
    m = compute_manifest(command_spec(), bench)
    assert m["bench.revision"] == git("rev-parse", "HEAD")
    before = environment_id(m)
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "again")
    assert env_id(command_spec(), bench) != before


def test_describe_prints_the_manifest_and_its_id(bench: Path) -> None:
    shown = json.loads(describe(command_spec(), bench))
    assert shown["environmentId"] == environment_id(shown["manifest"])
    assert shown["manifest"] == compute_manifest(command_spec(), bench)


# ---- what a run uses: the submitter's reference and a worker's measurement ------------------

def test_a_worker_measures_exactly_what_the_submitter_measured_on_an_equal_copy(bench: Path, tmp_path: Path) -> None:
    from worker.identity import measure_keys, run_manifest

    reference, worker_keys = run_manifest(command_spec(), bench)
    assert "bench.file:subjects/solve.py" in reference and "bench.taskdir:tasks/add" in reference
    assert set(worker_keys) == {"tool:python3", f"tool:{sys.executable}"}, "tools are measured by workers"
    assert not any(k.startswith(("python.version", "platform.", "fleet.")) for k in reference)
    copy = tmp_path / "copy"
    shutil.copytree(bench, copy)
    (copy / "unrelated.log").write_text("a file the run never reads")
    (copy / "cache").mkdir()
    (copy / "cache" / "x").write_text("a tool's cache")
    assert measure_keys(reference, copy) == reference, "a copy with extra files measures the same"
    (copy / "subjects" / "solve.py").write_text("# another build\n")
    assert measure_keys(reference, copy)["bench.file:subjects/solve.py"] != reference["bench.file:subjects/solve.py"]


def test_measure_keys_never_reads_outside_the_bench_root_and_answers_unknown_kinds(bench: Path) -> None:
    from worker.identity import MISSING, UNKNOWN_KEY, measure_keys

    (bench.parent / "secret.txt").write_text("outside")
    got = measure_keys(["bench.file:../secret.txt", "bench.file:/etc/hostname", "bench.taskdir:../",
                        "image.sha256:x", "tool:no-such-tool-here"], bench)
    assert got == {"bench.file:../secret.txt": MISSING, "bench.file:/etc/hostname": MISSING,
                   "bench.taskdir:../": MISSING, "image.sha256:x": UNKNOWN_KEY, "tool:no-such-tool-here": MISSING}


@pytest.mark.parametrize("ignore_file", [".fleetignore", ".gitignore"])
def test_ignore_rules_keep_results_and_caches_out_of_a_task_dir(bench: Path, ignore_file: str) -> None:
    from worker.identity import run_manifest

    (bench / ignore_file).write_text("# results and caches are not the benchmark\nresults/\n*.log\n!keep.log\n")
    before, _ = run_manifest(command_spec(), bench)
    task = bench / "tasks" / "add"
    (task / "results").mkdir()
    (task / "results" / "r1.json").write_text("{}")
    (task / "trace.log").write_text("noise")
    after, _ = run_manifest(command_spec(), bench)
    assert after == before, "ignored files do not change a task dir's digest"
    (task / "keep.log").write_text("re-included by a negation")
    assert run_manifest(command_spec(), bench)[0]["bench.taskdir:tasks/add"] != before["bench.taskdir:tasks/add"]


def test_a_nested_gitignore_applies_below_its_own_directory(bench: Path) -> None:
    from worker.identity import run_manifest

    (bench / "tasks" / "add" / ".gitignore").write_text("scratch\n")
    before, _ = run_manifest(command_spec(), bench)
    (bench / "tasks" / "add" / "scratch").write_text("x")
    assert run_manifest(command_spec(), bench)[0] == before
    (bench / "tasks" / "answer42" / "scratch").write_text("x")  # not below that .gitignore
    assert run_manifest(command_spec(), bench)[0]["bench.taskdir:tasks/answer42"] != \
        before["bench.taskdir:tasks/answer42"]


def test_an_ignored_file_an_argument_names_is_not_part_of_the_reference(bench: Path) -> None:
    from worker.identity import run_manifest

    spec = command_spec()
    spec["subjects"][0]["args"] = ["{{bench_root}}/subjects/solve.py", "right", "{{bench_root}}/run.log"]
    (bench / "run.log").write_text("appended to by every run")
    assert "bench.file:run.log" in run_manifest(spec, bench)[0]
    (bench / ".fleetignore").write_text("run.log\n")
    assert "bench.file:run.log" not in run_manifest(spec, bench)[0]


def test_the_hello_no_longer_digests_the_whole_bench_root(bench: Path) -> None:
    from worker.identity import worker_identity

    manifest, env = worker_identity(bench)
    assert not any(k.startswith("bench.") for k in manifest)
    (bench / "new-log-file.txt").write_text("grows")
    assert worker_identity(bench) == (manifest, env)


def test_a_submit_naming_a_file_the_bench_root_lacks_is_refused_with_the_key(bench: Path, tmp_path: Path) -> None:
    from tools.fleetctl.submission import SubmissionError, submit_request

    text = json.dumps(command_spec())
    req = submit_request(text, "{}", bench)
    assert {c.key for c in req.manifest} >= {"bench.file:subjects/solve.py", "bench.taskdir:tasks/add"}
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    with pytest.raises(SubmissionError, match="bench.taskdir:tasks/add"):
        submit_request(text, "{}", empty)
