"""`fleetctl submit --order-from RUN` against real processes on 127.0.0.1: the second run of a
benchmark dispatches its longest groups first (by the first run's durations), selects the same
scores, and `fleetctl results` says so; an unknown run, a run in progress and a run of another
benchmark are refused with their typed reasons; the order survives a coordinator kill -9."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2
from tests.integration.harness import FAST_POLICY, INTBENCH, PY, REPO, Cluster, intbench_spec


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def fleetctl(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", cluster.address, "--token-file",
                           str(cluster.data_dir / "admin.token"), *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))


def write_spec(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def skewed() -> dict:
    """Six one-subject groups, task i sleeping 0.2 i s before it answers: the later, the longer
    (by 0.1 i s, the first group's cold start under a loaded CI, two test files at once, took
    longer than the last one's sleep)."""
    doc = intbench_spec(6, ("good",), cap=1)
    doc["subjects"][0]["args"] = ["-c", 'sleep "0.$1"; sleep "0.$1"; exec sh "$0" good "$1"',
                                  "{{bench_root}}/subject.sh",
                                  "{{task.input}}"]
    return doc


def test_the_second_run_goes_longest_first_and_says_so(cluster: Cluster, tmp_path: Path) -> None:
    spec = skewed()
    cluster.start_coordinator()
    cluster.start_worker("w1", slots=1)
    first = cluster.submit(spec)
    cluster.wait_settled(first, 90)

    spec_path = write_spec(tmp_path, "spec", spec)
    policy_path = write_spec(tmp_path, "policy", FAST_POLICY)
    # Refusals first, each with its typed reason and nothing created.
    other = write_spec(tmp_path, "other", dict(spec, benchmark={"name": "otherbench", "version": "1"}))
    for argv, reason in (([str(spec_path), "--order-from", "run-0000000000000000"], "UNKNOWN_RUN"),
                         ([str(other), "--order-from", first], "ORDER_RUN_OTHER_BENCHMARK")):
        out = fleetctl(cluster, "submit", *argv, "--policy", str(policy_path), "--bench-root", str(INTBENCH))
        assert out.returncode != 0 and reason in out.stderr, out

    out = fleetctl(cluster, "submit", str(spec_path), "--policy", str(policy_path), "--bench-root", str(INTBENCH),
                   "--order-from", first)
    assert out.returncode == 0, out.stderr
    second = out.stdout.strip()
    assert second != first
    # While it runs (held paused here, so that it cannot settle first), ordering from it is refused.
    admin = cluster.admin()
    try:
        admin.call("PauseRun", admin_pb2.PauseRunRequest(run_id=second))
        busy = fleetctl(cluster, "submit", str(spec_path), "--bench-root", str(INTBENCH), "--order-from", second)
        assert busy.returncode != 0 and "ORDER_RUN_IN_PROGRESS" in busy.stderr, busy
        admin.call("RecoverRun", admin_pb2.RecoverRunRequest(run_id=second))
    finally:
        admin.close()
    results = cluster.wait_settled(second, 90)
    before = {c["cell_id"]: c["score"] for c in cluster.results(first)["cells"]}
    assert {c["cell_id"]: c["score"] for c in results["cells"]} == before, "the order changed a result"

    text = fleetctl(cluster, "results", second)
    assert text.returncode == 0 and f"dispatch order: longest first, by the group durations observed in run {first}" \
        in text.stdout, text.stdout
    data = json.loads(fleetctl(cluster, "results", second, "--json").stdout)
    assert data["dispatch_order"] == {"kind": "longest_first", "from_run": first,
                                      "text": f"longest first, by the group durations observed in run {first}"}
    assert json.loads(fleetctl(cluster, "results", first, "--json").stdout)["dispatch_order"]["kind"] == "spec"

    # With cap 1 the dispatch order is the order of the groups' first attempts.
    def order_of(run: str) -> list[str]:
        cells = [c for c in cluster.results(run)["cells"] if c["subject"] == "good"]
        return [c["task"] for c in sorted(cells, key=lambda c: c["dispatch_order"])]
    assert order_of(first) == [f"t{i:03d}" for i in range(6)]
    ordered = order_of(second)
    assert sorted(ordered) == order_of(first)
    assert ordered.index("t005") < ordered.index("t000"), f"not longest first: {ordered}"

    # The order is in the log: a coordinator killed and restarted still reports it.
    cluster.coordinator.kill9()
    cluster.start_coordinator()
    again = fleetctl(cluster, "results", second, "--json")
    assert json.loads(again.stdout)["dispatch_order"]["from_run"] == first
