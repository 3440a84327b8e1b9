"""The coordinator bench `w1`: 2,000 groups x 3 no-op python-executor cells on 4 `fleet-worker`
processes x 2 slots, coordinator and workers on this machine, every cell durably committed: cells/s
from SubmitRun to the run's completion and CPU per 1,000 cells per role; and the same workload on
Dask distributed, on Celery+Redis (late acks, appendfsync always) and on Celery+Redis as both come
(celery-defaults: shown, not a target), run here in the same run by tools/bench/peers.py (`pip
install -e '.[bench]'`, `apt-get install redis-server`), in rounds of one run of every system each
(the host drifts), and the ratios: of the medians, and per round.

Run by `python -m tools.bench.coordinator --only w1` (tools/bench/coordinator.py: sizes, the
table of every figure, the command line).
"""
from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path

from common.fleetpb import admin_pb2
from tools.bench.clients import SUBJECTS, noop_spec
from tools.bench.harness import PY, REPO, START_TIMEOUT_S, Coordinator, Proc, Profiler, cpu_seconds, mono, say
from tools.bench.sizes import Sizes
from tools.fleetctl.pages import results_whole

NOOPBENCH = REPO / "tools" / "bench" / "data" / "noopbench"


W1_SYSTEMS = ["fleet", "dask", "dask-cells", "celery", "celery-defaults"]  # --w1-systems: the peers W1 runs after fleet


# The peers fleet's W1 targets are taken from (issue 8: "coordinator <= 0.3 s, workers <= 1.2 s",
# Dask's figures): celery-defaults is shown beside them, not a target, since its broker keeps
# nothing on disk and acks a task before it ran (a task dies with its worker).
W1_TARGET_PEERS = ("dask", "celery")


def _w1_fleet_once(sz: Sizes, root: Path, profile: Path | None, rep: int) -> dict:
    r = root / f"w1-{rep}"
    coord = Coordinator(r, counters=True)
    workers: list[Proc] = []
    try:
        for i in range(4):
            state = r / "workers" / f"w{i}"
            state.mkdir(parents=True)
            workers.append(Proc(f"worker w{i}", [
                PY, "-m", "worker.main", "--coordinator", coord.address,
                "--token-file", str(coord.data_dir / "enroll.token"), "--worker-id", f"w{i}", "--slots", "2",
                "--state-dir", str(state), "--bench-root", str(NOOPBENCH)], r / f"worker-w{i}.log"))
        coord.wait_workers(4, START_TIMEOUT_S)
        spec = noop_spec(sz.w1_groups, cap=8)
        cells = sz.w1_groups * SUBJECTS
        cpu0, c0 = cpu_seconds(coord.pid), coord.counters()
        wcpu0 = sum(cpu_seconds(w.pid) for w in workers)
        prof = Profiler(profile, f"w1-{rep}", coord.pid, 12)
        wprof = Profiler(profile, f"w1-{rep}-worker-w0", workers[0].pid, 12)
        t0 = mono()
        run_id = coord.submit(spec)
        selected = 0
        while True:
            st = coord.call("GetStatus", admin_pb2.GetStatusRequest(run_id=run_id)).runs[0]
            now = mono()
            if st.state in (admin_pb2.RUN_STATE_COMPLETE, admin_pb2.RUN_STATE_INCOMPLETE):
                t1 = now
                break
            if now - t0 > 1_800:
                raise RuntimeError(f"W1 run did not settle in 30 min: {st}")
            selected = st.cells_selected
            rate = selected / (now - t0) if selected else 0
            left = (cells - selected) / rate if rate else 1.0
            time.sleep(min(0.5, max(0.01, left / 5)))  # sparse polling, finer near the end
        elapsed = t1 - t0
        coord_cpu = (cpu_seconds(coord.pid) - cpu0) / elapsed
        c1 = coord.counters()
        worker_cpu = (sum(cpu_seconds(w.pid) for w in workers) - wcpu0) / elapsed
        coord_k, worker_k = coord_cpu * elapsed / cells * 1000, worker_cpu * elapsed / cells * 1000
        prof.finish()
        wprof.finish()
        res = results_whole(coord, run_id)
        good = sum(1 for c in res.cells if c.state == "selected" and c.score == 1.0)
        if good != cells or not res.summary.usage_complete:
            raise RuntimeError(f"W1: {good} of {cells} cells selected with score 1 "
                               f"(usage complete: {res.summary.usage_complete})")
        say(f"  run {rep + 1}: {cells} cells in {elapsed:.2f} s = {cells / elapsed:.0f} cells/s "
            f"(coordinator {100 * coord_cpu:.0f}% of a core, 4 workers {100 * worker_cpu:.0f}%; CPU per "
            f"1,000 cells: coordinator {coord_k:.2f} s, workers {worker_k:.2f} s; {c1['commits'] - c0['commits']} "
            f"commits of {c1['records'] - c0['records']} records, actor busy {100 * (c1['busy_s'] - c0['busy_s']) / elapsed:.0f}% "
            f"(in Store.append {100 * (c1['append_s'] - c0['append_s']) / elapsed:.0f}%))")
        return {"cells_per_s": cells / elapsed, "coordinator_cpu": coord_cpu, "workers_cpu": worker_cpu,
                "coordinator_cpu_s_per_1000": coord_k, "workers_cpu_s_per_1000": worker_k}
    finally:
        for w in workers:
            w.stop(60)
        coord.stop()


def bench_w1(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Rounds: each runs fleet once, then each peer once, every system on fresh processes. The
    host's speed drifts by tens of percent within minutes here, so each system's runs are
    spread over the whole bench instead of being taken one system after another; the ratios
    are also given per round (each round's systems ran minutes apart at most)."""
    from tools.bench import peers as bench_peers

    say(f"W1: {sz.w1_groups} groups x {SUBJECTS} no-op python cells, 4 fleet-worker processes x 2 slots, "
        f"{sz.w1_repeats} round(s) of every system in turn")
    peer_benches = [(name, bench) for name, bench in (
        ("dask", bench_peers.bench_dask), ("dask-cells", functools.partial(bench_peers.bench_dask, per_cell=True)),
        ("celery", bench_peers.bench_celery),
        ("celery-defaults", functools.partial(bench_peers.bench_celery, durable=False))) if name in W1_SYSTEMS]
    fleet: list[dict] = []
    rounds: dict[str, list[dict]] = {name: [] for name, _ in peer_benches}
    for rep in range(sz.w1_repeats):
        fleet.append(_w1_fleet_once(sz, root, profile, rep))
        for name, bench in peer_benches:
            got = bench(sz.w1_groups, rep + 1, root / f"w1-{name}-{rep}", Proc, say)
            if got is not None:
                rounds[name].append(got)
    keys = ("cells_per_s", "coordinator_cpu_s_per_1000", "workers_cpu_s_per_1000")
    med = statistics.median(f["cells_per_s"] for f in fleet)
    fleet_k = (statistics.median(f["coordinator_cpu_s_per_1000"] for f in fleet),
               statistics.median(f["workers_cpu_s_per_1000"] for f in fleet))
    peers = {}
    for name, runs in rounds.items():
        if len(runs) != len(fleet):
            continue  # skipped (not installed)
        peers[name] = {k: statistics.median(r[k] for r in runs) for k in keys}
        peers[name]["runs"] = [r["cells_per_s"] for r in runs]
        paired = {k: [f[k] / r[k] for f, r in zip(fleet, runs)] for k in keys}
        peers[name]["paired_ratios"] = paired
        say(f"  fleet / {name}: cells/s {med / peers[name]['cells_per_s']:.2f}x; CPU per 1,000 cells: coordinator "
            f"{fleet_k[0] / peers[name]['coordinator_cpu_s_per_1000']:.2f}x, workers "
            f"{fleet_k[1] / peers[name]['workers_cpu_s_per_1000']:.2f}x (ratio of medians)")
        say(f"    per round: cells/s {', '.join(f'{x:.2f}' for x in paired['cells_per_s'])}; coordinator "
            f"{', '.join(f'{x:.2f}' for x in paired['coordinator_cpu_s_per_1000'])}; workers "
            f"{', '.join(f'{x:.2f}' for x in paired['workers_cpu_s_per_1000'])}")
    return {"w1_cells_per_s": med, "w1_runs": [f["cells_per_s"] for f in fleet], "w1_peers": peers,
            "w1_vs_dask": med / peers["dask"]["cells_per_s"] if "dask" in peers else float("nan"),
            "w1_vs_celery": med / peers["celery"]["cells_per_s"] if "celery" in peers else float("nan"),
            "w1_coordinator_cpu": statistics.median(f["coordinator_cpu"] for f in fleet),
            "w1_workers_cpu": statistics.median(f["workers_cpu"] for f in fleet),
            "w1_coordinator_cpu_s_per_1000": fleet_k[0],
            "w1_workers_cpu_s_per_1000": fleet_k[1]}
