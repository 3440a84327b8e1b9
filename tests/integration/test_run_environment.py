"""A run's environment comes from the submitter's copy of the benchmark: the three cases the
identity issue measured, through real coordinator and worker processes on 127.0.0.1 — a
bench root that gains a log file, a stale worker of another build that pinned a run and died,
and two runs of two benchmarks on one coordinator — plus `fleet-worker identity --against`."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.harness import INTBENCH, PY, REPO, Cluster, expected_score, intbench_spec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    c.start_coordinator()
    try:
        yield c
    finally:
        c.stop_all()


def bench_copy(tmp_path: Path, name: str, *, subject_comment: str = "") -> Path:
    """A copy of the integration bench; a comment appended to subject.sh makes another build."""
    root = tmp_path / name
    shutil.copytree(INTBENCH, root)
    if subject_comment:
        with (root / "subject.sh").open("a") as f:
            f.write(f"# {subject_comment}\n")
    return root


def wait_for(what: str, predicate, cluster: Cluster, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout_s}s\n{json.dumps(cluster.status(), indent=1)}\n{cluster.tails()}")


def worker_status(cluster: Cluster, wid: str) -> dict | None:
    return next((w for w in cluster.status()["workers"] if w["worker_id"] == wid), None)


def assert_all_selected_by(results: dict, run_id: str, workers: set[str], *, modes: bool = True) -> None:
    cells = results["cells"]
    assert cells and all(c["state"] == "selected" for c in cells), results["summary"]
    assert {c["worker_id"] for c in cells} <= workers, f"run {run_id} ran on {({c['worker_id'] for c in cells})}"
    for c in cells:  # "good" and "bad" answer as their names say; slow modes always answer right
        want = expected_score(int(c["task"][1:]), c["subject"]) if modes else 1.0
        assert c["score"] == want, c


def test_a_bench_root_that_gains_a_log_file_does_not_lock_its_worker_out(cluster: Cluster, tmp_path: Path) -> None:
    bench = bench_copy(tmp_path, "bench")
    spec = intbench_spec(8, subjects=("good",), cap=2)
    # The subject appends start/done lines to a log file inside its own bench root.
    spec["subjects"][0]["args"] = ["{{bench_root}}/subject.sh", "slow", "{{task.input}}", "{{bench_root}}/run.log"]
    spec["verifier"]["args"] = ["{{bench_root}}/verify.sh", "{{task.input}}"]
    run_id = cluster.submit(spec, bench_root=bench)
    w = cluster.start_worker("w1", slots=1, bench_root=bench)
    wait_for("a first result", lambda: cluster.results(run_id)["summary"]["selected"] >= 1, cluster)
    assert (bench / "run.log").stat().st_size > 0, "the subject wrote into the bench root"
    w.kill9()
    cluster.start_worker("w1", slots=2, bench_root=bench)  # same id, state dir and bench root
    results = cluster.wait_settled(run_id, timeout_s=120)
    assert results["summary"]["selected"] == 8
    assert {c["worker_id"] for c in results["cells"]} == {"w1"}
    status = worker_status(cluster, "w1")
    assert status["refusal"] is None and status["status"] == "active", status


def test_a_stale_worker_that_pinned_a_run_and_died_does_not_keep_the_right_build_out(
        cluster: Cluster, tmp_path: Path) -> None:
    bench = bench_copy(tmp_path, "bench")
    stale_bench = bench_copy(tmp_path, "stale", subject_comment="an older build: one comment differs")
    spec = intbench_spec(3, subjects=("good", "bad"), cap=3)
    for s in spec["subjects"]:  # slow enough that the stale worker holds its groups when killed
        s["args"] = ["{{bench_root}}/subject.sh", "hang" if s["id"] == "good" else "slow", "{{task.input}}"]
    run_id = cluster.submit(spec, bench_root=bench)

    # 1. A worker of another build of the subject is refused by the reference before any work.
    other = cluster.start_worker("other-build", slots=3, bench_root=stale_bench)
    refusal = wait_for("a refusal of the other build",
                       lambda: (worker_status(cluster, "other-build") or {}).get("refusal"), cluster)
    assert refusal["run_id"] == run_id
    (diff,) = [d for d in refusal["differences"] if d["key"] == "bench.file:subject.sh"]
    assert diff["run"] != diff["worker"] and len(diff["run"]) == 64
    assert other.alive(), "a run that refuses a worker does not end it"
    against = subprocess.run([PY, "-m", "worker.main", "identity", "--bench-root", str(stale_bench), "--against",
                              run_id, "--coordinator", cluster.address, "--token-file",
                              str(cluster.data_dir / "enroll.token")],
                             cwd=REPO, capture_output=True, text=True, timeout=60, env=cluster.env())
    assert against.returncode == 1, against.stderr
    shown = json.loads(against.stdout)
    assert shown["serves"] is False and shown["reference"]["differences"][0][0] == "bench.file:subject.sh"
    assert "bench.file:subject.sh" in against.stderr

    # 2. A stale worker whose `sh` is another program (a worker-only key) passes the
    # reference, takes the first groups, pins the run, and is killed before it reports.
    stale_bin = tmp_path / "stale-bin"
    stale_bin.mkdir()
    shutil.copy("/bin/bash", stale_bin / "sh")
    stale = cluster.start_worker("stale", slots=3, bench_root=bench,
                                 extra=("--command-path", f"{stale_bin}:/usr/bin:/bin"))
    wait_for("the stale worker holding groups", lambda: (worker_status(cluster, "stale") or {}).get("busy_slots"),
             cluster)
    run = next(r for r in cluster.status()["runs"] if r["run_id"] == run_id)
    assert run["environment"]["pinned_by"] == "stale"
    stale.kill9()

    # 3. The right build joins afterwards: refused by the pin at first, it gets the run once
    # the stale worker expired and its pin, on which nothing selected depends, is released.
    cluster.start_worker("good", slots=3, bench_root=bench)
    results = cluster.wait_settled(run_id, timeout_s=120)
    assert_all_selected_by(results, run_id, {"good"}, modes=False)
    assert results["summary"]["selected"] == 6
    run = next(r for r in cluster.status()["runs"] if r["run_id"] == run_id)
    assert run["environment"]["pinned_by"] == "good"
    log = cluster.coordinator.log_path.read_text()
    assert '"run_pin_released"' in log and "pinned by worker stale" in log
    other.term()


def test_two_runs_of_two_benchmarks_each_run_only_on_their_own_workers(cluster: Cluster, tmp_path: Path) -> None:
    bench_a = bench_copy(tmp_path, "a")
    bench_b = bench_copy(tmp_path, "b", subject_comment="benchmark B differs by one line")
    spec_a = intbench_spec(4, cap=4)
    spec_b = intbench_spec(4, cap=4)
    spec_b["benchmark"]["name"] = "intbench-b"
    for spec in (spec_a, spec_b):  # slow enough that neither run settles before both workers joined
        for subject in spec["subjects"]:
            subject["args"][1] = "slow"
    run_a = cluster.submit(spec_a, bench_root=bench_a)
    run_b = cluster.submit(spec_b, bench_root=bench_b)
    cluster.start_worker("wa", slots=2, bench_root=bench_a)  # registers first, as in the issue
    time.sleep(0.5)
    cluster.start_worker("wb", slots=2, bench_root=bench_b)
    results_a = cluster.wait_settled(run_a, timeout_s=120)
    results_b = cluster.wait_settled(run_b, timeout_s=120)
    assert_all_selected_by(results_a, run_a, {"wa"}, modes=False)
    assert_all_selected_by(results_b, run_b, {"wb"}, modes=False)
    assert worker_status(cluster, "wa")["refusal"]["run_id"] == run_b
    assert worker_status(cluster, "wb")["refusal"]["run_id"] == run_a
    assert worker_status(cluster, "wa")["serves_runs"] == [run_a]


def test_a_worker_too_old_to_measure_a_run_is_refused_typed(cluster: Cluster) -> None:
    from tests.integration.rawclient import RawSession, SessionClosed, hello, worker_metadata

    token = (cluster.data_dir / "enroll.token").read_text().strip()
    with RawSession(cluster.address, worker_metadata(token, "old")) as s:
        with pytest.raises(SessionClosed) as refused:
            s.open(hello("old", protocol_version=2))
    assert refused.value.code.name == "FAILED_PRECONDITION" and "PROTOCOL_UNSUPPORTED" in refused.value.details


def test_a_permanent_refusal_exits_77_unless_the_worker_is_told_to_keep_retrying(
        cluster: Cluster, tmp_path: Path) -> None:
    from worker.main import EXIT_REFUSED

    bad = tmp_path / "wrong.token"
    bad.write_text("not-a-token-this-coordinator-issued\n")
    w = cluster.start_worker("w-bad", extra=("--token-file", str(bad)))
    assert w.popen.wait(30) == EXIT_REFUSED, w.tail()
    assert "retry_refused" in w.log_path.read_text() or "--retry-refused" in w.log_path.read_text()
    keeps = cluster.start_worker("w-bad-retrying", extra=("--token-file", str(bad), "--retry-refused"))
    time.sleep(3)
    assert keeps.alive(), keeps.tail()
    assert keeps.log_path.read_text().count("retrying (retry_refused)") >= 2
    keeps.kill9()
