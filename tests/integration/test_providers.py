"""Model providers' limits on real processes (issue 22): a coordinator and 4 workers x 2 slots
on 127.0.0.1 run the provider bench (tests/fixtures/provbench: 3 subjects per task, each
asking a fake provider, tests/integration/fakeprovider.py) against a provider that admits 6
requests at once, holds each 0.5 s and answers the rest 429 with Retry-After 1 s.

- declared (`providers.fake.maxConcurrentCells: 6`): nothing refused, nothing lost;
- undeclared (the spec names the provider, the policy gives no limit): the coordinator finds
  the limit from the throttled reports; nothing lost and under 10% of requests refused;
- a provider that refuses everything for one subject: that subject's cells end incomplete
  (reason "provider_throttled") after maxThrottledAttemptsPerCell attempts, never scored, and the
  other subjects' cells are all selected.

tools/bench/providers.py runs the same workload for its wall time against the ideal.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.provbench.make_spec import provbench_spec, url_env
from tests.integration.fakeprovider import FakeProvider
from tests.integration.harness import FAST_POLICY, PY, REPO, Cluster

pytestmark = pytest.mark.timeout(150)

PROVBENCH = REPO / "tests" / "fixtures" / "provbench"
WORKERS, SLOTS, CAP = 4, 2, 8
TASKS = 20  # x 3 subjects: 60 cells, 5 s of provider time at 6 at once
# The undeclared limit's case at the issue's own size (40 tasks x 3): its refusals are mostly
# the first burst's (slow start until the first 429, larger on a loaded machine) plus one per
# probe, so a run twice as long holds the 10% bound with the first burst's cost amortised (at
# 60 cells a loaded CI saw 7 of 67, the bound missed by one request).
UNDECLARED_TASKS = 40
LIMIT, HOLD_S, RETRY_AFTER_S = 6, 0.5, 1.0
SETTLE_TIMEOUT_S = 100


def provider_cluster(tmp_path: Path, providers: list[FakeProvider]) -> Cluster:
    """A cluster whose processes have every provider's URL in their environment (the subjects
    declare it as a credential, so the workers pass it on)."""
    return Cluster(tmp_path, extra_env={url_env(p.name): p.url for p in providers})


def run_workload(cluster: Cluster, spec: dict, policy: dict) -> tuple[dict, float, list[dict]]:
    """Start the coordinator and the workers, submit, wait for the run to settle; its results
    (as `fleetctl results --json` prints them: the same tools/fleetctl views), the wall time,
    and the coordinator's providers (`fleetctl status --json`) sampled while it ran."""
    cluster.start_coordinator()
    for i in range(WORKERS):
        cluster.start_worker(f"w{i}", slots=SLOTS, bench_root=PROVBENCH)
    t0 = time.monotonic()
    run_id = cluster.submit(spec, policy)
    samples: list[dict] = []
    deadline = t0 + SETTLE_TIMEOUT_S
    while True:
        results = cluster.results(run_id)
        if results["summary"]["state"] in ("complete", "incomplete"):
            return results, time.monotonic() - t0, samples
        assert time.monotonic() < deadline, f"run did not settle: {results['summary']}\n{cluster.tails()}"
        status = cluster.status()
        # Taken while the run is unsettled only: once it settles its declared limits no longer
        # count (core providers.refresh_declared), and it may settle between the two reads.
        if all(r["state"] not in ("complete", "incomplete") for r in status["runs"]):
            samples += status["providers"]
        time.sleep(0.1)


def run_id_of(cluster: Cluster) -> str:
    [run] = cluster.status()["runs"]
    return run["run_id"]


def by_state(results: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for c in results["cells"]:
        out.setdefault(c["state"], []).append(c)
    return out


def describe(results: dict, stats: dict, wall: float) -> str:
    reasons: dict[str, int] = {}
    for c in results["cells"]:
        if c["state"] != "selected":
            key = f"{c['subject']}:{c['incomplete_reason']}"
            reasons[key] = reasons.get(key, 0) + 1
    return (f"wall {wall:.1f}s; summary {results['summary']}; provider {stats}; incomplete by subject:reason "
            f"{reasons}")


def test_a_declared_limit_is_never_exceeded_and_nothing_is_refused(tmp_path: Path) -> None:
    provider = FakeProvider(limit=LIMIT, hold_s=HOLD_S, retry_after_s=RETRY_AFTER_S).start()
    cluster = provider_cluster(tmp_path, [provider])
    try:
        policy = dict(FAST_POLICY, providers={"fake": {"maxConcurrentCells": LIMIT}})
        results, wall, samples = run_workload(cluster, provbench_spec(TASKS, cap=CAP), policy)
        stats = provider.stats()
        what = describe(results, stats, wall) + "\n" + cluster.tails()
        cells = by_state(results)
        assert results["summary"]["incomplete"] == 0 and len(cells.get("selected", ())) == TASKS * 3, what
        assert results["summary"]["usage_complete"], what  # the throttled attempts' zero cost too
        assert all(c["score"] == 1 for c in cells["selected"]), what
        assert stats["refused"] == 0, what
        assert stats["max_at_once"] <= LIMIT, what
        assert stats["admitted"] == TASKS * 3, what  # one request per cell: no attempt ran twice
        # The operator's view (fleetctl status --json) agrees while the run runs: the declared
        # limit, effective, never passed, never throttled.
        fake = [p for p in samples if p["name"] == "fake"]
        assert fake and all(p["declared"] == LIMIT and p["effective"] == LIMIT for p in fake), fake[-1:]
        assert max(p["peak_running"] for p in fake) <= LIMIT and all(p["throttled"] == 0 for p in fake), fake[-1:]
        print(f"declared: {what.splitlines()[0]}; ideal {TASKS * 3 * HOLD_S / LIMIT:.1f}s")
        # `fleetctl results` ends with the fleet's providers (the peak held at the limit).
        out = subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", cluster.address, "--token-file",
                              str(cluster.data_dir / "admin.token"), "results", run_id_of(cluster)],
                             cwd=REPO, env=cluster.env(), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        tail = out.stdout.split("providers (the fleet's, now):", 1)
        assert len(tail) == 2, out.stdout[-2000:]
        row = next(line for line in tail[1].splitlines() if line.startswith("fake")).split()
        # Settled, the run declares nothing any more (only unsettled runs do): the limit it left stays.
        assert row[:4] == ["fake", f"0/{LIMIT}", str(LIMIT), "-"], row
    finally:
        cluster.stop_all()
        provider.stop()


def test_an_undeclared_limit_is_found_from_throttling_and_nothing_is_lost(tmp_path: Path) -> None:
    provider = FakeProvider(limit=LIMIT, hold_s=HOLD_S, retry_after_s=RETRY_AFTER_S).start()
    cluster = provider_cluster(tmp_path, [provider])
    try:
        results, wall, samples = run_workload(cluster, provbench_spec(UNDECLARED_TASKS, cap=CAP), dict(FAST_POLICY))
        stats = provider.stats()
        what = describe(results, stats, wall) + "\n" + cluster.tails()
        cells = by_state(results)
        assert results["summary"]["incomplete"] == 0 and len(cells.get("selected", ())) == UNDECLARED_TASKS * 3, what
        assert results["summary"]["usage_complete"], what  # the throttled attempts' zero cost too
        assert all(c["score"] == 1 for c in cells["selected"]), what
        assert stats["admitted"] == UNDECLARED_TASKS * 3, what
        assert stats["refused"] < 0.10 * stats["total"], what
        fake = [p for p in samples if p["name"] == "fake"]
        assert fake and all(p["declared"] is None for p in fake), fake[-1:]
        effective = [p["effective"] for p in fake]
        print(f"undeclared: {what.splitlines()[0]}; ideal {UNDECLARED_TASKS * 3 * HOLD_S / LIMIT:.1f}s; effective limit "
              f"{[e for i, e in enumerate(effective) if i == 0 or e != effective[i - 1]]}")
        # Converged: once the provider has throttled, the limit stays near what it admits (a
        # probe for one more group of 3 cells goes to LIMIT + 3, and is lowered back). The first
        # 429 lowers it to the cells running then, less one, which a slow-started burst can put
        # above LIMIT + 3 on a loaded machine (seen: 10); the next 429s bring it down.
        after = [p["effective"] for p in fake if p["throttled"]]
        assert after, "the provider never throttled: nothing was learnt"
        settled = after[next((i for i, e in enumerate(after) if e <= LIMIT + 3), len(after)):]
        assert len(settled) >= len(after) // 2, f"the effective limit took too long to come down: {after}"
        assert all(LIMIT - 2 <= e <= LIMIT + 3 for e in settled), f"the effective limit wandered: {after}"
    finally:
        cluster.stop_all()
        provider.stop()


DOWN_TASKS = 12
DOWN_MAX_THROTTLED = 3


def test_a_provider_that_refuses_everything_leaves_its_cells_incomplete_and_the_rest_selected(tmp_path: Path) -> None:
    fake = FakeProvider(limit=LIMIT, hold_s=HOLD_S, retry_after_s=RETRY_AFTER_S).start()
    down = FakeProvider(name="down", refuse_all=True, retry_after_s=RETRY_AFTER_S).start()
    cluster = provider_cluster(tmp_path, [fake, down])
    try:
        spec = provbench_spec(DOWN_TASKS, {"s0": "fake", "s1": "fake", "s2": "down"}, cap=CAP)
        policy = dict(FAST_POLICY, providers={"fake": {"maxConcurrentCells": LIMIT}},
                      maxThrottledAttemptsPerCell=DOWN_MAX_THROTTLED)
        results, wall, samples = run_workload(cluster, spec, policy)
        stats = {"fake": fake.stats(), "down": down.stats()}
        what = describe(results, stats, wall) + "\n" + cluster.tails()
        assert results["summary"]["state"] == "incomplete" and results["summary"]["usage_complete"], what
        throttled = [c for c in results["cells"] if c["subject"] == "s2"]
        others = [c for c in results["cells"] if c["subject"] != "s2"]
        assert len(throttled) == DOWN_TASKS and len(others) == 2 * DOWN_TASKS, what
        assert all(c["state"] == "incomplete" for c in throttled), what
        # coordinator/core/summary.py's reason for a cell the provider throttled to its end.
        assert {c["incomplete_reason"] for c in throttled} == {"provider_throttled"}, what
        assert all("throttled" in (c["incomplete_detail"] or "") for c in throttled), what
        assert all(c["throttled"] == DOWN_MAX_THROTTLED for c in throttled), what
        assert all(c["score"] is None and c["status"] is None for c in throttled), "nothing scored: " + what
        assert all(c["state"] == "selected" and c["score"] == 1 and c["throttled"] == 0 for c in others), what
        assert results["summary"]["selected"] == 2 * DOWN_TASKS and results["summary"]["incomplete"] == DOWN_TASKS, what
        # Each throttled cell asked exactly maxThrottledAttemptsPerCell times, and then no more.
        assert stats["down"]["admitted"] == 0, what
        assert stats["down"]["total"] == DOWN_TASKS * DOWN_MAX_THROTTLED, what
        assert stats["fake"]["refused"] == 0 and stats["fake"]["max_at_once"] <= LIMIT, what
        print(f"down: {what.splitlines()[0]}")
    finally:
        cluster.stop_all()
        fake.stop()
        down.stop()
