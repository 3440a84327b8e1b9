"""The Node.js worker (tools/node_worker/worker.js), generated from nothing but protos/, against
a real coordinator on 127.0.0.1.

1. Alone, it runs a benchmark to the expected scores, with artifacts by digest, complete usage
   and provenance naming it; its enrollment credential is saved 0600.
2. It survives kill -9 of the coordinator (resending what was not acknowledged) and its own
   restart (a new incarnation presenting the saved credential).
3. Mixed with a Python worker on one run whose policy compares the cell environment
   (`environmentMatch: "cell"`): both workers contribute results. See docs/other-languages.md.

`npm ci` runs into tools/node_worker when node_modules is missing (the npm registry must be
reachable then); the tests skip when `node` is not installed.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2
from tests.integration.harness import FAST_POLICY, INTBENCH, REPO, Cluster, Proc, expected_score, intbench_spec

NODE = shutil.which("node")
NPM = shutil.which("npm")
NODE_DIR = REPO / "tools" / "node_worker"
WORKER_JS = NODE_DIR / "worker.js"

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Node.js >= 18 is needed for tools/node_worker)")


class EnvironmentSplit(AssertionError):
    """The mixed fleet split on environment identity (the known, documented limitation)."""


@pytest.fixture(scope="module")
def node_worker() -> Path:
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        if NPM is None:
            pytest.skip("npm is not installed: cannot install tools/node_worker's dependencies")
        verb = "ci" if (NODE_DIR / "package-lock.json").exists() else "install"
        t0 = time.monotonic()
        done = subprocess.run([NPM, verb, "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"npm {verb} failed in {NODE_DIR}:\n{done.stdout}\n{done.stderr}"
        print(f"npm {verb} took {time.monotonic() - t0:.1f}s")
    return WORKER_JS


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def start_node_worker(cluster: Cluster, worker_id: str, *, slots: int = 2, bench_root: Path = INTBENCH) -> Proc:
    state = cluster.root / "node-workers" / worker_id
    log_path = cluster.root / f"worker-{worker_id}.log"
    log = log_path.open("ab")
    popen = subprocess.Popen([NODE, str(WORKER_JS), "--coordinator", cluster.address,
                              "--token-file", str(cluster.data_dir / "enroll.token"), "--worker-id", worker_id,
                              "--slots", str(slots), "--state-dir", str(state), "--bench-root", str(bench_root)],
                             stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    cluster.workers[worker_id] = Proc(f"node worker {worker_id}", popen, log_path)
    return cluster.workers[worker_id]


def registered(cluster: Cluster, worker_id: str, *, incarnation: int = 1, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc = cluster.workers[worker_id]
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited {proc.popen.returncode}\n{cluster.tails()}")
        try:
            workers = {w["worker_id"]: w for w in cluster.status()["workers"]}
        except Exception:
            workers = {}
        w = workers.get(worker_id)
        if w is not None and w["incarnation"] >= incarnation and w["status"] == "active":
            return w
        time.sleep(0.1)
    raise AssertionError(f"{worker_id} did not register (incarnation {incarnation}) within {timeout_s}s\n"
                         + cluster.tails())


def wait_for(predicate, what: str, cluster: Cluster, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{cluster.tails()}")
        time.sleep(0.05)


def log_events(proc: Proc) -> list[dict]:
    out = []
    for line in proc.log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def check_expected(results: dict, cells: int) -> None:
    assert results["summary"]["state"] == "complete", results["summary"]
    assert results["summary"]["selected"] == cells
    for cell in results["cells"]:
        assert cell["state"] == "selected", cell
        assert cell["score"] == expected_score(int(cell["task"][1:]), cell["subject"]), cell
        assert cell["assignment_id"] and cell["generation"] >= 1 and cell["dispatch_order"] >= 1, cell


def artifact_bytes(cluster: Cluster, digest: str) -> bytes:
    admin = cluster.admin()
    try:
        return b"".join(c.data for c in admin.stub.GetArtifact(admin_pb2.GetArtifactRequest(digest=digest),
                                                               metadata=admin.metadata, timeout=10))
    finally:
        admin.close()


def test_node_worker_alone_runs_the_benchmark_to_the_expected_scores(cluster: Cluster, node_worker: Path) -> None:
    cluster.start_coordinator()
    proc = start_node_worker(cluster, "node-1", slots=4)
    registered(cluster, "node-1")
    run_id = cluster.submit(intbench_spec(20, ("good", "bad"), cap=4))
    results = cluster.wait_settled(run_id, 120)

    check_expected(results, 40)
    assert {c["worker_id"] for c in results["cells"]} == {"node-1"}
    assert results["summary"]["usage_complete"] is True
    assert results["summary"]["observed_cost_usd"] == pytest.approx(0.04)
    assert 1 <= results["summary"]["peak_concurrent_groups"] <= 4
    for cell in results["cells"]:
        assert cell["usage"] == "complete" and cell["status"] == "completed", cell
        arts = {a["name"]: a for a in cell["artifacts"]}
        assert {"subject.stdout", "subject.stderr", "verifier.stdout", "output/usage.json"} <= set(arts), arts
        for a in arts.values():
            assert a["digest"].startswith("sha256:") and len(a["digest"]) == 71, a
    # The uploaded bytes are the subject's own output, content-addressed.
    cell = next(c for c in results["cells"] if c["task"] == "t003" and c["subject"] == "bad")
    out = next(a for a in cell["artifacts"] if a["name"] == "subject.stdout")
    data = artifact_bytes(cluster, out["digest"])
    assert data == b"subject bad answered wrong\n" and len(data) == out["size_bytes"]

    status = {w["worker_id"]: w for w in cluster.status()["workers"]}
    assert status["node-1"]["environment_id"].startswith("env-")
    state = cluster.root / "node-workers" / "node-1"
    assert stat.S_IMODE((state / "credential").stat().st_mode) == 0o600
    assert (state / "incarnation").read_text() == "1"
    assert proc.term(20) == 0, proc.tail()
    events = [e["event"] for e in log_events(proc)]
    assert "worker credential issued and saved" in events and events.count("report acknowledged") == 40


def test_node_worker_survives_coordinator_kills_and_its_own_restart(cluster: Cluster, node_worker: Path) -> None:
    cluster.start_coordinator()
    start_node_worker(cluster, "node-r", slots=2)
    registered(cluster, "node-r")
    run_id = cluster.submit(intbench_spec(16, ("good", "medium"), cap=4))
    proc = cluster.workers["node-r"]
    for sessions in (2, 3):
        time.sleep(0.8)
        cluster.coordinator.kill9()
        cluster.start_coordinator()
        wait_for(lambda: sum(e["event"] == "session open" for e in log_events(proc)) >= sessions,
                 f"the node worker to reconnect (session {sessions})", cluster)
    results = cluster.wait_settled(run_id, 120)
    check_expected(results, 32)
    assert {c["worker_id"] for c in results["cells"]} == {"node-r"}

    # A restart counts a new incarnation and presents the saved credential: the enrollment
    # token alone would be refused for an enrolled worker id.
    assert proc.term(20) == 0, proc.tail()
    restarted = start_node_worker(cluster, "node-r", slots=2)
    w = registered(cluster, "node-r", incarnation=2)
    assert w["incarnation"] == 2
    assert "worker credential issued and saved" not in [e["event"] for e in log_events(restarted)][-20:]
    assert (cluster.root / "node-workers" / "node-r" / "incarnation").read_text() == "2"


def test_python_and_node_workers_share_one_run(cluster: Cluster, node_worker: Path) -> None:
    cluster.start_coordinator()
    # Each language measures its own build into environment_id; a mixed fleet agrees on the
    # cell environment (common/identity.py), which such a run compares instead.
    run_id = cluster.submit(intbench_spec(12, ("good", "slow"), cap=4),
                            {**FAST_POLICY, "requiredEnvironmentId": "", "environmentMatch": "cell"})
    start_node_worker(cluster, "node-m", slots=2)
    registered(cluster, "node-m")
    py = cluster.start_worker("py-m", slots=2)
    results = cluster.wait_settled(run_id, 120)
    check_expected(results, 24)  # whoever ran it, the results are right

    contributors = {c["worker_id"] for c in results["cells"]}
    if contributors == {"node-m", "py-m"}:
        return
    # Diagnose precisely; anything but the known split is a real failure.
    try:
        code = py.popen.wait(15)
    except subprocess.TimeoutExpired:
        code = None
    refusal = [line for line in py.log_path.read_text(errors="replace").splitlines() if "ENVIRONMENT_MISMATCH" in line]
    assert contributors == {"node-m"} and code == 2 and refusal, (
        f"unexpected: contributors {contributors}, python worker exit {code}\n{cluster.tails()}")
    raise EnvironmentSplit(f"only {sorted(contributors)} ran cells; the Python worker was refused: {refusal[-1][:400]}")


def test_the_node_worker_measures_a_runs_keys_exactly_as_the_python_worker(tmp_path: Path) -> None:
    # The same keys, one bench root, both implementations: a run compares these values.
    from worker.identity import measure_keys, run_manifest

    bench = REPO / "examples" / "quick"
    reference, worker_keys = run_manifest(json.loads((bench / "experiment.json").read_text()), bench)
    keys = [*reference, *worker_keys, "bench.file:missing.py", "image.sha256:x"]
    script = ("const {measureKeys} = require(process.argv[1]); "
              "console.log(JSON.stringify(measureKeys(JSON.parse(process.argv[2]), process.argv[3])));")
    done = subprocess.run([NODE, "-e", script, str(NODE_DIR / "identity.js"), json.dumps(keys), str(bench)],
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == measure_keys(keys, bench)
    assert len(reference) > 10 and worker_keys
