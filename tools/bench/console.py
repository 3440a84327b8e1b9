"""Benchmark of what the live console costs a running coordinator: W1 (2,000 groups x 3 no-op
python cells on 4 `fleet-worker` processes x 2 slots, as tools/bench/coordinator.py) with and
without five browsers on its console, in one run of this bench.

    python -m tools.bench.console [--groups N] [--rounds R] [--browsers B] [--json FILE]

The coordinator serves its console (`--http-listen 127.0.0.1:0`) in both arms; the arms differ
only in who is looking. A third arm runs without a console at all (the cost of the feed that
watches the events for the console even when nobody looks). A "browser" is what coordinator/console/static/console.js does, in a
client process of its own (at nice 19: real browsers run elsewhere): an EventSource on /events
(every event read), and on events a read of the run's progress (?fragment=progress) at most
every second and of its heavy part (?fragment=1) no more often than that part's
data-refresh-ms, and one fleet page read every 5 s. The rounds alternate (without, with, no console, without, ...) since
the host drifts; each arm's figure is the median of its rounds, and the cost is the ratio of
the medians of cells/s, plus the coordinator's CPU per 1,000 cells in each arm. Every process
is started here and stopped by its pid; every client loop ends by itself (a stop file and a
hard deadline). Only 127.0.0.1.

    python -m tools.bench.console actor-read [--groups N] [--done F] [--repeats R]

measures, in this process and without any other, the actor thread's time of one read of the run
page's heavy part at W1's size: the core alone drives a W1-shaped run (N groups x 3 cells, 4
workers x 2 slots, one report in ten an infrastructure failure that is retried, scores of 0, 0.5
and 1) until a fraction F of its groups has settled, then times the actor queries of the read as
the console made it before issue 24 (GetResults and ListAttempts in pages of 5,000: every cell's
and attempt's proto) and as it makes it now (ReadRunPage's parts, coordinator/views.py run_part),
and, apart, what the new read does off the actor (part_cells and the console's fold). Medians of R.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from common.fleetpb import admin_pb2
from tools.bench.clients import SUBJECTS, noop_spec
from tools.bench.harness import PY, START_TIMEOUT_S, Coordinator, Proc, Profiler, cpu_seconds, mono, say, thread_cpu

NOOPBENCH = Path(__file__).resolve().parent / "data" / "noopbench"
CLIENT_DEADLINE_S = 1_800
FLEET_PAGE_EVERY_S = 5.0
REFRESH_MS_DEFAULT = 1_000


# ---- the browsers (a client process: python -m tools.bench.console _browsers ...) ----------------

class Browser(threading.Thread):
    def __init__(self, address: str, token: str, stop: Path, deadline: float, mode: str = "both") -> None:
        super().__init__(daemon=True)
        self.mode = mode  # "both", "sse" (the event stream only) or "pages" (pages on a timer, no stream)
        self.address, self.token, self.stop_file, self.deadline = address, token, stop, deadline
        self.events = self.fetches = self.bytes = 0
        self.run_id = ""
        self.refresh_ms = REFRESH_MS_DEFAULT
        self._dirty = threading.Event()

    def _get(self, path: str) -> str:
        host, port = self.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
            body = conn.getresponse().read()
        finally:
            conn.close()
        self.fetches += 1
        self.bytes += len(body)
        return body.decode("utf-8", errors="replace")

    def _pages(self) -> None:
        """What console.js does on events: the live part, at most every data-refresh-ms."""
        last = fleet = heavy = 0.0
        while not self.stop_file.exists() and mono() < self.deadline:
            if mono() - fleet >= FLEET_PAGE_EVERY_S:
                self._get("/?fragment=1")
                fleet = mono()
            if not self._dirty.wait(0.2) or not self.run_id:
                continue
            wait = last + REFRESH_MS_DEFAULT / 1000 - mono()  # the progress part's gap
            if wait > 0:
                time.sleep(wait)
            self._dirty.clear()
            self._get(f"/runs/{self.run_id}?fragment=progress")
            if mono() - heavy >= self.refresh_ms / 1000:
                html = self._get(f"/runs/{self.run_id}?fragment=1")
                m = re.search(r'data-refresh-ms="(\d+)"', html)
                self.refresh_ms = int(m.group(1)) if m else REFRESH_MS_DEFAULT
                heavy = mono()
            last = mono()

    def run(self) -> None:
        if self.mode != "sse":
            threading.Thread(target=self._pages, daemon=True).start()
        if self.mode == "pages":  # no stream: the run found from the fleet, pages as if events came
            while not self.stop_file.exists() and mono() < self.deadline:
                m = re.search(r'data-run-id="([^"]+)"', self._get("/?fragment=1"))
                if m:
                    self.run_id = m.group(1)
                self._dirty.set()
                time.sleep(0.2)
            return
        host, port = self.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=20)
        conn.request("GET", "/events", headers={"Authorization": f"Bearer {self.token}"})
        resp = conn.getresponse()
        while not self.stop_file.exists() and mono() < self.deadline:
            try:
                line = resp.readline()
            except TimeoutError:
                continue
            if not line:
                break
            if line.startswith(b"data: "):
                self.events += 1
                if not self.run_id:
                    m = re.search(rb'"run_id":"([^"]+)"', line)
                    if m:
                        self.run_id = m.group(1).decode()
                self._dirty.set()
        conn.close()


def browsers_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tools.bench.console _browsers")
    ap.add_argument("address")
    ap.add_argument("token_file", type=Path)
    ap.add_argument("count", type=int)
    ap.add_argument("stop", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("mode", nargs="?", default="both", choices=("both", "sse", "pages"))
    a = ap.parse_args(argv)
    token = a.token_file.read_text().strip()
    # Real browsers run elsewhere; on this 2-core host they yield to the coordinator and workers
    # (the cost measured is the coordinator's serving, not a competing client's CPU).
    os.nice(19)
    deadline = mono() + CLIENT_DEADLINE_S
    bs = [Browser(a.address, token, a.stop, deadline, a.mode) for _ in range(a.count)]
    for b in bs:
        b.start()
    (a.stop.parent / "browsers.ready").write_text("ready\n")
    while not a.stop.exists() and mono() < deadline:
        time.sleep(0.1)
    a.out.write_text(json.dumps([{"events": b.events, "fetches": b.fetches, "bytes": b.bytes} for b in bs]))
    return 0


# ---- the bench ------------------------------------------------------------------------------------

def w1_once(root: Path, groups: int, browsers: int, console: bool = True, mode: str = "both",
            profile: Path | None = None, name: str = "") -> dict:
    """One W1 run; with `profile`, the coordinator is py-spied (--gil) for the run into that dir."""
    coord = Coordinator(root, extra=("--http-listen", "127.0.0.1:0") if console else ())
    workers: list[Proc] = []
    clients: Proc | None = None
    stop = root / "stop"
    try:
        http_addr = coord.data_dir / "http.addr"
        deadline = mono() + START_TIMEOUT_S
        while console and not http_addr.exists():
            if mono() > deadline:
                raise RuntimeError(f"no console\n{coord.proc.tail()}")
            time.sleep(0.05)
        address = http_addr.read_text().strip() if console else ""
        for i in range(4):
            state = root / "workers" / f"w{i}"
            state.mkdir(parents=True)
            workers.append(Proc(f"worker w{i}", [
                PY, "-m", "worker.main", "--coordinator", coord.address,
                "--token-file", str(coord.data_dir / "enroll.token"), "--worker-id", f"w{i}", "--slots", "2",
                "--state-dir", str(state), "--bench-root", str(NOOPBENCH)], root / f"worker-w{i}.log"))
        coord.wait_workers(4, START_TIMEOUT_S)
        if browsers:
            clients = Proc("browsers", [PY, "-m", "tools.bench.console", "_browsers", address,
                                        str(coord.data_dir / "viewer.token"), str(browsers), str(stop),
                                        str(root / "browsers.json"), mode], root / "browsers.log")
            deadline = mono() + START_TIMEOUT_S
            while not (root / "browsers.ready").exists():
                if mono() > deadline or not clients.alive():
                    raise RuntimeError(f"the browsers did not start\n{clients.tail()}")
                time.sleep(0.05)
            time.sleep(1.0)  # every stream open and its first page read before the run
        cells = groups * SUBJECTS
        cpu0 = cpu_seconds(coord.pid)
        threads0 = thread_cpu(coord.pid)
        prof = Profiler(profile, name, coord.pid, max(3.0, groups * SUBJECTS / 800))
        t0 = mono()
        run_id = coord.submit(noop_spec(groups, cap=8))
        while True:
            st = coord.call("GetStatus", admin_pb2.GetStatusRequest(run_id=run_id)).runs[0]
            if st.state in (admin_pb2.RUN_STATE_COMPLETE, admin_pb2.RUN_STATE_INCOMPLETE):
                t1 = mono()
                break
            if mono() - t0 > CLIENT_DEADLINE_S:
                raise RuntimeError(f"W1 did not settle: {st}")
            time.sleep(0.1)
        elapsed = t1 - t0
        prof.finish()
        coord_cpu_k = (cpu_seconds(coord.pid) - cpu0) / cells * 1000
        # The event loop's thread (the main thread: gRPC's servicers and the console) apart from
        # every other (the actor, gRPC's own, the console's render threads).
        threads1 = thread_cpu(coord.pid)
        spent = {t: sum(v) - sum(threads0.get(t, (0.0, 0.0))) for t, v in threads1.items()}
        loop_k = spent.get(coord.pid, 0.0) / cells * 1000
        other_k = sum(v for t, v in spent.items() if t != coord.pid) / cells * 1000
        if st.cells_selected != cells:
            raise RuntimeError(f"W1: {st.cells_selected} of {cells} cells selected")
        stats: list[dict] = []
        if clients is not None:
            stop.write_text("stop\n")
            clients.popen.wait(30)  # it sees the stop file, writes its figures and exits by itself
            stats = json.loads((root / "browsers.json").read_text())
        return {"cells_per_s": cells / elapsed, "coordinator_cpu_s_per_1000": coord_cpu_k, "seconds": elapsed,
                "loop_cpu_s_per_1000": loop_k, "other_threads_cpu_s_per_1000": other_k, "browsers": stats}
    finally:
        stop.write_text("stop\n")
        if clients is not None and clients.alive():
            clients.stop(30)
        for w in workers:
            w.stop(60)
        coord.stop()


# ---- the actor's time of one heavy read (actor-read) ------------------------------------------------

def w1_state(groups: int, done: float) -> tuple:
    """The core's state of a W1-shaped run with `done` of its groups finished (see the docstring)."""
    from common.evidence import ArtifactRef, Cleanup, Execution, Report, Status, Usage, Verification
    from common.ids import RunId, WorkerId, sha256_digest
    from common.policy import Policy
    from common.spec import parse_spec
    from coordinator.core import commands as c
    from coordinator.core import new_state, step
    from coordinator.core.effects import PushAssignment
    from tools.bench.core import answer_offers

    state = new_state()
    run_id = RunId("run-w1")
    state, t = step(state, c.RunSubmitted(0, run_id, parse_spec(noop_spec(groups, cap=8)),
                                          Policy(retry_backoff_ms=0, retry_backoff_max_ms=0)))
    assert t.outcome.ok, t.outcome
    now = 1
    queue: list = []
    for i in range(4):
        state, t = step(state, c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 2, "env"))
        state, effects = answer_offers(state, t.effects, now)
        queue.extend(e for e in effects if isinstance(e, PushAssignment))
    ref = ArtifactRef("subject.stdout", sha256_digest(b"log"), 3)
    state, _ = step(state, c.ArtifactStored(now, ref.digest, ref.size_bytes))
    k = 0
    run = state.runs[run_id]
    while run.settled_groups < int(groups * done):
        if not queue:
            now += 1
            state, t = step(state, c.ClockTicked(now))
            queue.extend(e for e in t.effects if isinstance(e, PushAssignment))
            if not queue:
                break
            continue
        push = queue.pop(0)
        for cd in push.cells:
            now += 1
            k += 1
            report = (Report(Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN,
                             Cleanup.UNKNOWN, artifacts=(ref,), detail="lost track") if k % 10 == 0 else
                      Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE,
                             Cleanup.CONFIRMED, score=0.0 if k % 7 == 0 else 0.5 if k % 11 == 0 else 1.0,
                             cost_usd=0.0, artifacts=(ref,), started_ms=now, finished_ms=now + 1, detail="score 1"))
            state, t = step(state, c.CellReported(now, push.worker_id, cd.attempt_id, push.assignment_id,
                                                  push.generation, report))
            assert t.outcome.ok, t.outcome
            queue.extend(e for e in t.effects if isinstance(e, PushAssignment))
        state, t = step(state, c.GroupFinished(now, push.worker_id, push.assignment_id))
        queue.extend(e for e in t.effects if isinstance(e, PushAssignment))
    return state, run_id


def actor_read_main(argv: list[str]) -> int:
    from common import limits as common_limits
    from coordinator import views
    from coordinator.console.admin import _fold
    from coordinator.core.summary import Tally
    from coordinator.paging import Position

    ap = argparse.ArgumentParser(prog="python -m tools.bench.console actor-read")
    ap.add_argument("--groups", type=int, default=2_000)
    ap.add_argument("--done", type=float, default=0.6, help="the fraction of the groups settled (default 0.6)")
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args(argv)
    state, run_id = w1_state(a.groups, a.done)
    run = state.runs[run_id]

    def before() -> tuple[float, int]:
        """GetResults then ListAttempts, pages of 5,000, as coordinator/console/admin.py read them."""
        spent, queries = 0.0, 0
        at, tally = Position(), Tally()
        while True:
            t0 = time.perf_counter()
            page = views.results_page(state, run_id, at, 5_000, common_limits.PAGE_BYTES_MAX, tally)
            spent += time.perf_counter() - t0
            queries += 1
            if page.next_at is None:
                break
            at, tally = page.next_at, page.tally
        at = Position()
        while True:
            t0 = time.perf_counter()
            page = views.attempts_page(state, run_id, at, 5_000, common_limits.PAGE_BYTES_MAX)
            spent += time.perf_counter() - t0
            queries += 1
            if page.next_at is None:
                return spent, queries
            at = page.next_at

    def after() -> tuple[float, int, float]:
        """ReadRunPage's actor queries (run_part), and apart what is done off the actor."""
        spent = off = 0.0
        queries = 0
        at: Position | None = Position()
        tally = Tally()
        builder = None
        while at is not None:
            t0 = time.perf_counter()
            part = views.run_part(state, run_id, at, views.RUN_PART_CELLS_MAX, tally)
            t1 = time.perf_counter()
            builder = _fold(builder, views.part_cells(part), {}, 0)
            off += time.perf_counter() - t1
            spent += t1 - t0
            queries += 1
            at = part.next_at
        return spent, queries, off

    olds, news, offs = [], [], []
    for _ in range(a.repeats):
        s, n_old = before()
        olds.append(s)
        s, n_new, o = after()
        news.append(s)
        offs.append(o)
    med = statistics.median
    say(f"one run page heavy read of a W1-shaped run: {len(run.cells)} cells, {run.selected_cells} selected, "
        f"{len(state.attempts)} attempts; medians of {a.repeats}, actor thread time:")
    say(f"  before (GetResults + ListAttempts, {n_old} queries): {1000 * med(olds):.1f} ms "
        f"(min {1000 * min(olds):.1f}, max {1000 * max(olds):.1f})")
    say(f"  after  (ReadRunPage, {n_new} queries of at most {views.RUN_PART_CELLS_MAX} cells): {1000 * med(news):.1f} ms "
        f"(min {1000 * min(news):.1f}, max {1000 * max(news):.1f}); off the actor: {1000 * med(offs):.1f} ms")
    say(f"  ratio: {med(olds) / med(news):.1f}x less of the actor's time")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_browsers":
        return browsers_main(argv[1:])
    if argv and argv[0] == "actor-read":
        return actor_read_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m tools.bench.console", description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2_000, help="W1's groups (default 2,000)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each arm, alternated (default 3)")
    ap.add_argument("--browsers", type=int, default=5)
    ap.add_argument("--browser-mode", default="both", choices=("both", "sse", "pages"),
                    help="what a browser does: both (default), the event stream only, or the pages only")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--profile", type=Path, help="py-spy (--gil) the coordinator of every run into this dir")
    a = ap.parse_args(argv)
    Profiler.gil = True
    if a.groups < 1 or a.rounds < 1 or a.browsers < 1:
        ap.error("--groups, --rounds and --browsers must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="bench-console-"))
    arms: dict[str, list[dict]] = {"without": [], "with": [], "no console": []}
    try:
        say(f"W1 with and without {a.browsers} browsers on the console: {a.groups} groups x {SUBJECTS} no-op cells, "
            f"4 workers x 2 slots, {a.rounds} rounds alternated")
        for r in range(a.rounds):
            for arm, n in (("without", 0), ("with", a.browsers), ("no console", 0)):
                got = w1_once(root / f"{arm.replace(' ', '-')}-{r}", a.groups, n, console=arm != "no console",
                              mode=a.browser_mode, profile=a.profile, name=f"{arm.replace(' ', '-')}-{r}")
                arms[arm].append(got)
                extra = ""
                if got["browsers"]:
                    ev = sum(b["events"] for b in got["browsers"])
                    fe = sum(b["fetches"] for b in got["browsers"])
                    mb = sum(b["bytes"] for b in got["browsers"]) / 1e6
                    extra = f"; browsers read {ev} events, {fe} pages ({mb:.1f} MB)"
                say(f"  round {r + 1} {arm:10s}: {got['cells_per_s']:.0f} cells/s, coordinator "
                    f"{got['coordinator_cpu_s_per_1000']:.3f} CPU s per 1,000 cells (loop thread "
                    f"{got['loop_cpu_s_per_1000']:.3f}, other threads {got['other_threads_cpu_s_per_1000']:.3f}){extra}")
        med = {arm: {k: statistics.median(x[k] for x in runs) for k in (
            "cells_per_s", "coordinator_cpu_s_per_1000", "loop_cpu_s_per_1000", "other_threads_cpu_s_per_1000")}
            for arm, runs in arms.items()}
        cost = 1 - med["with"]["cells_per_s"] / med["without"]["cells_per_s"]
        say(f"median cells/s: without {med['without']['cells_per_s']:.0f}, with {med['with']['cells_per_s']:.0f} "
            f"({100 * cost:+.1f}% throughput lost); coordinator CPU per 1,000 cells: without "
            f"{med['without']['coordinator_cpu_s_per_1000']:.3f} s, with {med['with']['coordinator_cpu_s_per_1000']:.3f} s; "
            f"with no console at all: {med['no console']['cells_per_s']:.0f} cells/s, "
            f"{med['no console']['coordinator_cpu_s_per_1000']:.3f} s; the loop thread's: without "
            f"{med['without']['loop_cpu_s_per_1000']:.3f} s, with {med['with']['loop_cpu_s_per_1000']:.3f} s, "
            f"no console {med['no console']['loop_cpu_s_per_1000']:.3f} s")
        if a.json:
            a.json.write_text(json.dumps({"arms": arms, "medians": med, "throughput_cost": cost}, indent=1))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            say(f"kept {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
