"""Benchmarks of the coordinator on loopback; every figure is a ratio measured in this one run.

    python -m tools.bench_coordinator [--only NAME[,NAME...]] [--quick] [--json FILE] [--profile DIR]

NAME is one of:
  w1      2,000 groups x 3 no-op python-executor cells on 4 `fleet-worker` processes x 2 slots,
          coordinator and workers on this machine, every cell durably committed: cells/s from
          SubmitRun to the run's completion and CPU per 1,000 cells per role; and the same
          workload on Dask distributed, on Celery+Redis (late acks, appendfsync always) and on
          Celery+Redis as both come (celery-defaults: shown, not a target), run here in the
          same run by tools/bench_peers.py (`pip install -e '.[bench]'`, `apt-get install
          redis-server`), in rounds of one run of every system each (the host drifts), and
          the ratios: of the medians, and per round.
  commit  durable commands/s with 64 simulated workers (raw `Coordinator.Session` clients in 2
          processes: hello, welcome, pushes, cell reports, acks, group finished) against the
          same coordinator with batching off (`Actor(batch_max=1)`: one LMDB transaction per
          command), and against bare LMDB commits of the same record size and batch size with
          sync=True on the same disk. Also the actor alone, in process, over the same closed
          loop of requests, with and without batching.
  refill  slot refill latency seen by 50 simulated workers of 1 slot holding each group for a
          while: from the ack of a group's last report to the next push (p50, p99), and from
          sending that report to the next push.
  idle    1,000 registered sessions (4 client processes, asyncio) for 30 s, no run, twice:
          protocol 3 (a heartbeat every 1 s), then protocol 4 (liveness by the coordinator's
          keepalive pings, a heartbeat only at the idle interval): coordinator CPU share
          (utime+stime from /proc/PID/stat) and VmRSS.
  reports durable reports/s from 64 simulated workers of protocol 4 (a group's reports in one
          ReportBatch): 3-cell groups with 2 and with 8 slots per worker, 32-cell groups with
          2; each run has 360,000 cells so that it outlasts the window (checked after it).
  upload  MB/s of a 64 MiB artifact uploaded in 1 MiB chunks through a session (8 chunks in
          flight, as the worker does), against SHA-256 plus write-and-fsync of the same bytes.

`--quick` shrinks every benchmark (about a minute in all) for a smoke check. `--profile DIR`
samples the coordinator with py-spy (when installed) during each measured window and prints
its hottest functions. Every process is started here, stopped by its pid, and every load loop
ends by itself (a stop file, and a hard deadline). Only 127.0.0.1.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import collections
import dataclasses
import functools
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from common import limits
from common.fleetpb import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tools.bench_peers import stat_fields, tree_cpu
from tools.fleetctl.pages import results_whole

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
NOOPBENCH = REPO / "tools" / "benchdata" / "noopbench"
NAMES = ("w1", "commit", "refill", "idle", "upload", "reports")
W1_SYSTEMS = ["fleet", "dask", "celery", "celery-defaults"]  # --w1-systems: the peers W1 runs after fleet
# The peers fleet's W1 targets are taken from (issue 8: "coordinator <= 0.3 s, workers <= 1.2 s",
# Dask's figures): celery-defaults is shown beside them, not a target, since its broker keeps
# nothing on disk and acks a task before it ran (a task dies with its worker).
W1_TARGET_PEERS = ("dask", "celery")
ENVIRONMENT_ID = "env-bench-coordinator-1"
SUBJECTS = 3
REPORTS_LARGE_GROUP = 32  # reports: groups of this many cells, so frames of as many reports
# --reports-shapes: the (slots per worker, cells per group) of each reports window
REPORTS_SHAPES = [(2, SUBJECTS), (8, SUBJECTS), (2, REPORTS_LARGE_GROUP)]
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60
CLIENT_DEADLINE_S = 600  # hard stop of any client process, whatever the parent does
CLIENT_MESSAGE_BYTES_MAX = 64 << 20


@dataclass(frozen=True)
class Sizes:
    w1_groups: int
    w1_repeats: int
    commit_clients: int
    commit_window_s: float
    commit_groups: int
    commit_rounds: int
    reports_cells: int  # the reports bench's run: enough for its warm-up and window above 20,000/s
    bare_window_s: float
    actor_window_s: float
    refill_workers: int
    refill_window_s: float
    refill_hold_ms: tuple[int, int]
    refill_groups: int
    idle_workers: int
    idle_clients: int
    idle_window_s: float
    upload_bytes: int
    upload_repeats: int


FULL = Sizes(w1_groups=2_000, w1_repeats=3, commit_clients=64, commit_window_s=8, commit_groups=30_000, commit_rounds=3,
             reports_cells=360_000,
             bare_window_s=3, actor_window_s=5,
             refill_workers=50, refill_window_s=20, refill_hold_ms=(100, 300), refill_groups=10_000,
             idle_workers=1_000, idle_clients=4,
             idle_window_s=30, upload_bytes=64 << 20, upload_repeats=5)
QUICK = Sizes(w1_groups=150, w1_repeats=1, commit_clients=64, commit_window_s=3, commit_groups=15_000, commit_rounds=1,
              reports_cells=120_000,
              bare_window_s=1.5, actor_window_s=2,
              refill_workers=50, refill_window_s=4, refill_hold_ms=(100, 300), refill_groups=2_000,
              idle_workers=200, idle_clients=2,
              idle_window_s=6, upload_bytes=16 << 20, upload_repeats=1)


def mono() -> float:
    return time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of this machine


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    return env


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def say(text: str) -> None:
    print(text, flush=True)


def raise_nofile() -> tuple[int, int]:
    """This process's soft RLIMIT_NOFILE raised to its hard limit (children inherit it): a
    bench of thousands of sessions needs a descriptor per connection on both sides. Nothing
    outside the processes started here is changed. Returns (soft, hard) after."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ---- processes ---------------------------------------------------------------------------------

class Proc:
    """A child started here and stopped by its pid."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, stdout: Any = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.popen = subprocess.Popen(argv, stdout=stdout if stdout is not None else self._log, stderr=self._log,
                                      env=child_env(), cwd=REPO)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout_s: float = 30) -> int | None:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(10)
            return None
        finally:
            self._log.close()

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return f"--- {self.name} ---\n" + "\n".join(text[-lines:])


def cpu_seconds(pid: int) -> float:
    """CPU seconds of `pid`'s threads and of its descendants, as the peers' are counted
    (`tools.bench_peers.tree_cpu`): the coordinator's snapshot processes are its cost too."""
    return tree_cpu([pid])


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of `pid`'s own threads only (utime + stime)."""
    rest = stat_fields(f"/proc/{pid}/stat")
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def memory_kb(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


class Profiler:
    """py-spy sampling one pid for a window (nothing when py-spy is missing or no dir given)."""

    gil = False
    rate = 97  # samples a second (--profile-rate)

    def __init__(self, out_dir: Path | None, name: str, pid: int, seconds: float) -> None:
        self.proc: Proc | None = None
        self.perf: Proc | None = None
        self.path = None
        self.pid = pid
        self.threads0 = thread_cpu(pid) if out_dir is not None else {}
        exe = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
        if out_dir is None or not os.access(exe, os.X_OK):
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        perf = shutil.which("perf")
        if perf:  # CPU samples (only while running), C frames and the kernel included
            self.perf_path = out_dir / f"{name}.perf.data"
            self.perf = Proc(f"perf {name}", [perf, "record", "-F", "499", "-g", "-p", str(pid), "-o",
                                              str(self.perf_path), "--", "sleep", str(int(seconds) or 1)],
                             out_dir / f"{name}.perf.log")
        self.path = out_dir / f"{name}.collapsed.txt"
        self.proc = Proc(f"py-spy {name}", [exe, "record", "--pid", str(pid), "--duration", str(int(seconds) or 1),
                                           "--rate", str(self.rate), "--format", "raw", "--threads", "--nonblocking",
                                           *(["--gil"] if self.gil else []), "--output", str(self.path)],
                         out_dir / f"{name}.py-spy.log")

    def finish(self) -> None:
        threads1 = thread_cpu(self.pid) if self.threads0 else {}
        if self.proc is None:
            return
        for proc in (self.proc, self.perf):
            if proc is None:
                continue
            try:
                proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                proc.stop(5)
        if self.path and self.path.exists():
            say(f"  profile {self.path}:")
            for line in hottest(self.path):
                say(f"    {line}")
            names = {}
            for line in self.path.read_text().splitlines():
                head = line.split(";", 1)[0]  # "thread (TID): NAME" as py-spy writes it
                if head.startswith("thread (") and "): " in head:
                    names[int(head[8:head.index(")")])] = head.split("): ", 1)[1].split(" ")[0]
            used = sorted(((u1 + s1 - self.threads0.get(t, (0, 0))[0] - self.threads0.get(t, (0, 0))[1], t, u1, s1)
                           for t, (u1, s1) in threads1.items()), reverse=True)
            say("    CPU per thread (utime+stime, s): " + ", ".join(
                f"{names.get(t, t)} {d:.2f}" for d, t, _, _ in used[:8] if d > 0))


def thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """(utime, stime) in seconds of every live thread of `pid`, by thread id."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            rest = stat_fields(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        out[int(tid)] = (int(rest[11]) / CLK_TCK, int(rest[12]) / CLK_TCK)
    return out


def hottest(path: Path, top: int = 8) -> list[str]:
    """From py-spy's collapsed stacks: samples per thread, the functions with the most samples
    of their own, and the inclusive share of fleet's own functions (coordinator/, common/)."""
    threads: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        parts = stack.split(";")
        threads[parts[0].split(": ", 1)[-1]] += n
        frames = []
        for fr in parts[1:]:
            name, _, loc = fr.partition(" (")
            frames.append((name, loc.rstrip(")").rsplit(":", 1)[0]))
        if frames:
            name, file = frames[-1]
            own[f"{name} ({file.rsplit('/', 1)[-1]})"] += n
        for name, file in set(frames):
            if file.startswith(("coordinator/", "common/", "worker/")) and name not in ("main", "Actor._main", "Actor._serve"):
                inclusive[f"{name} ({file})"] += n
    if not total:
        return ["(no samples)"]
    pct = lambda n: f"{100 * n / total:4.1f}%"  # noqa: E731
    out = [f"{total} samples: " + ", ".join(f"{t} {pct(n)}" for t, n in threads.most_common(4))]
    out.append("own: " + "; ".join(f"{f} {pct(n)}" for f, n in own.most_common(top)))
    out.append("fleet, inclusive: " + "; ".join(f"{f} {pct(n)}" for f, n in inclusive.most_common(top)))
    return out


class Coordinator:
    """`fleet-coordinator` on 127.0.0.1:0 in its own data dir; with `batch_max` or `counters`
    it runs through `_serve` below, which only passes `batch_max` to `Actor` and reports the
    actor's commit counters on SIGUSR1 (no coordinator code is changed)."""

    switch_interval_ms = 0.0  # --switch-interval-ms: an experiment on the GIL hand-off, 0 = Python's default
    cprofile: Path | None = None  # --cprofile: cProfile (by thread CPU time) of the event loop and the actor

    def __init__(self, root: Path, *, batch_max: int | None = None, counters: bool = False,
                 extra: tuple[str, ...] = ()) -> None:
        self.root = root
        self.data_dir = root / "coordinator"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.counters_path = root / "counters.jsonl" if counters or batch_max else None
        args = ["--data-dir", str(self.data_dir), "--listen", "127.0.0.1:0", *extra]
        if self.counters_path is not None:
            argv = [PY, "-m", "tools.bench_coordinator", "_serve", "--counters", str(self.counters_path),
                    "--batch-max", str(batch_max or 0), "--switch-interval-ms", str(Coordinator.switch_interval_ms),
                    *(["--cprofile", str(Coordinator.cprofile / root.name)] if Coordinator.cprofile else []),
                    "--", *args]
        else:
            argv = [PY, "-m", "coordinator.main", *args]
        self.proc = Proc("coordinator", argv, root / "coordinator.log")
        addr_file = self.data_dir / "listen.addr"
        deadline = mono() + START_TIMEOUT_S
        while not (addr_file.exists() and addr_file.read_text().endswith("\n")):  # written whole, not begun
            if not self.proc.alive() or mono() > deadline:
                raise RuntimeError(f"coordinator did not start\n{self.proc.tail()}")
            time.sleep(0.05)
        self.address = addr_file.read_text().strip()
        self.admin_token = (self.data_dir / "admin.token").read_text().strip()
        self.enroll_token = (self.data_dir / "enroll.token").read_text().strip()
        self._channel = grpc.insecure_channel(self.address, options=[
            ("grpc.max_receive_message_length", CLIENT_MESSAGE_BYTES_MAX),
            ("grpc.max_send_message_length", CLIENT_MESSAGE_BYTES_MAX)])
        self.admin = admin_pb2_grpc.AdminStub(self._channel)
        self._md = (("authorization", f"Bearer {self.admin_token}"),)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, name: str, request: Any, timeout: float = 60) -> Any:
        return getattr(self.admin, name)(request, metadata=self._md, timeout=timeout)

    def submit(self, spec: dict, policy: dict | None = None) -> str:
        return self.call("SubmitRun", admin_pb2.SubmitRunRequest(
            spec_json=json.dumps(spec), policy_json=json.dumps(policy or {}))).run_id

    def active_workers(self) -> int:
        status = self.call("GetStatus", admin_pb2.GetStatusRequest())
        return sum(1 for w in status.workers if w.status == "active")

    def wait_workers(self, n: int, timeout_s: float) -> None:
        deadline = mono() + timeout_s
        while True:
            got = self.active_workers()
            if got >= n:
                return
            if mono() > deadline or not self.proc.alive():
                raise RuntimeError(f"{got} of {n} workers active after {timeout_s}s\n{self.proc.tail()}")
            time.sleep(0.2)

    def counters(self) -> dict:
        """The actor's counters right now (SIGUSR1 to the `_serve` wrapper)."""
        assert self.counters_path is not None
        before = self.counters_path.read_text().count("\n") if self.counters_path.exists() else 0
        os.kill(self.pid, signal.SIGUSR1)
        deadline = mono() + 10
        while mono() < deadline:
            if self.counters_path.exists():
                lines = self.counters_path.read_text().splitlines()
                if len(lines) > before:
                    return json.loads(lines[-1])
            time.sleep(0.002)
        raise RuntimeError("the coordinator did not report its counters")

    def stop(self) -> None:
        self._channel.close()
        code = self.proc.stop(30)
        if code not in (0, None):
            say(f"  warning: coordinator exited {code}\n{self.proc.tail()}")


def _serve(argv: list[str]) -> int:
    """`python -m tools.bench_coordinator _serve --counters FILE --batch-max N -- COORDINATOR ARGS`."""
    ap = argparse.ArgumentParser(prog="bench_coordinator _serve")
    ap.add_argument("--counters", type=Path, required=True)
    ap.add_argument("--batch-max", type=int, default=0, help="0: the coordinator's default")
    ap.add_argument("--switch-interval-ms", type=float, default=0.0, help="sys.setswitchinterval; 0: Python's 5 ms")
    ap.add_argument("--cprofile", type=Path, help="write cProfile stats of the event loop and the actor here")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    import coordinator.main as cm
    from coordinator.actor import Actor

    actors: list[Actor] = []

    class BenchActor(Actor):
        def __init__(self, *args: Any, **kw: Any) -> None:
            if a.batch_max:
                kw["batch_max"] = a.batch_max
            super().__init__(*args, **kw)
            actors.append(self)
            self.busy_s = 0.0  # wall time inside _apply (the batch, its commit, its routing)
            self.append_s = 0.0  # of it, in Store.append (LMDB and fsync)
            append = self._store.append

            def timed_append(records: Any) -> Any:
                t = time.perf_counter()
                try:
                    return append(records)
                finally:
                    self.append_s += time.perf_counter() - t
            self._store.append = timed_append  # type: ignore[method-assign]

        def _main(self) -> None:
            if a.cprofile is None:
                return super()._main()
            prof = cProfile.Profile(time.thread_time)
            try:
                prof.runcall(super()._main)
            finally:
                prof.dump_stats(str(a.cprofile / "actor.pstats"))

        def _apply(self, requests: Any) -> None:
            t = time.perf_counter()
            try:
                super()._apply(requests)
            finally:
                self.busy_s += time.perf_counter() - t

    def report(*_: Any) -> None:
        act = actors[0] if actors else None
        line = {"t": mono(), "commits": act.commits if act else 0, "records": act.records if act else 0,
                "batch_max": act._batch_max if act else 0, "busy_s": act.busy_s if act else 0.0,
                "append_s": act.append_s if act else 0.0}
        with a.counters.open("a") as f:
            f.write(json.dumps(line) + "\n")

    signal.signal(signal.SIGUSR1, report)
    if a.switch_interval_ms:
        sys.setswitchinterval(a.switch_interval_ms / 1000)
    cm.Actor = BenchActor  # serve() builds its actor from this module global
    if a.cprofile is None:
        return cm.main(rest)
    a.cprofile.mkdir(parents=True, exist_ok=True)
    prof = cProfile.Profile(time.thread_time)
    try:
        return prof.runcall(cm.main, rest)
    finally:
        prof.dump_stats(str(a.cprofile / "loop.pstats"))


# ---- specs -------------------------------------------------------------------------------------

def noop_spec(groups: int, *, cap: int, name: str = "noopbench", subjects: int = SUBJECTS) -> dict:
    return {
        "benchmark": {"name": name, "version": "1"},
        "executor": {"kind": "python"},
        "subjects": [{"id": f"s{i}", "callable": "noopbench:noop"} for i in range(subjects)],
        "tasks": [{"id": f"t{i:06d}"} for i in range(groups)],
        "repetitions": 1,
        "budget": {"timeoutSeconds": 60},
        "verifier": {"callable": "noopbench:accept"},
        "execution": {"maxConcurrentTaskGroups": cap},
    }


# ---- simulated workers (raw Coordinator.Session clients) ----------------------------------------

def bench_report(now_ms: int) -> common_pb2.Report:
    """What a no-op python cell reports: completed, verified with score 1, usage complete."""
    return common_pb2.Report(
        status=common_pb2.STATUS_COMPLETED, execution=common_pb2.EXECUTION_COMPLETED,
        verification=common_pb2.VERIFICATION_VALID, usage=common_pb2.USAGE_COMPLETE,
        cleanup=common_pb2.CLEANUP_CONFIRMED, score=1.0, input_tokens=0, output_tokens=0, cost_usd=0.0,
        started_ms=now_ms, finished_ms=now_ms, detail="subject completed; score 1")


def hello_frame(worker_id: str, slots: int, protocol: int = 3) -> coordinator_pb2.WorkerFrame:
    return coordinator_pb2.WorkerFrame(seq=1, hello=coordinator_pb2.Hello(
        worker_id=worker_id, incarnation=1, slots=slots, cpu_millis=1_000 * slots, memory_mb=1_024 * slots,
        environment=[common_pb2.EnvironmentComponent(key="bench", value=ENVIRONMENT_ID)],
        environment_id=ENVIRONMENT_ID, protocol_version=protocol, software_version="bench_coordinator"))


def aio_channel(address: str) -> grpc.aio.Channel:
    # A subchannel pool of its own: one TCP connection per simulated worker, as per VM.
    return grpc.aio.insecure_channel(address, options=[
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.max_receive_message_length", CLIENT_MESSAGE_BYTES_MAX),
        ("grpc.max_send_message_length", CLIENT_MESSAGE_BYTES_MAX)])


class Sim:
    """One simulated worker: registers, heartbeats, and (modes commit, refill) reports every
    pushed group's cells as completed, then sends GroupFinished once they are all acked."""

    def __init__(self, cfg: dict, worker_id: str) -> None:
        self.cfg = cfg
        self.worker_id = worker_id
        self.mode = cfg["mode"]
        self.slots = cfg["slots"]
        self.hold = cfg.get("hold_ms") or (0, 0)
        self.seq = 1
        self.out: asyncio.Queue = asyncio.Queue()
        self.pending: dict[int, tuple[str, str]] = {}
        self.groups: dict[str, list] = {}  # assignment -> [acks outstanding, t last report sent]
        self.held: dict[str, None] = {}  # pushed and not yet finished (GroupFinished acked), as a worker holds
        self.finished: set[str] = set()
        self.repeats = 0  # pushes of an assignment already held or finished (heartbeat re-pushes)
        self.accepted_at: list[float] = []  # when each durable report ack came back
        self.rejected: collections.Counter[str] = collections.Counter()
        self.pushes = 0
        self.registered = False
        self.hello_retries = 0
        self.error = ""
        # refill (1 slot): the previous group's release as seen here
        self.released_at: float | None = None
        self.released_sent: float | None = None
        self.early_push: float | None = None
        self.refill: list[tuple[float, float, float]] = []  # (t push, ack->push, sent->push)
        self.stopping = False

    def send(self, kind: str, aid: str, **body: Any) -> None:
        self.seq += 1
        if kind:
            self.pending[self.seq] = (kind, aid)
        self.out.put_nowait(coordinator_pb2.WorkerFrame(seq=self.seq, **body))

    async def run(self, shared: grpc.aio.Channel | None = None) -> None:
        """`shared`: a channel several simulated workers multiplex their streams over (one TCP
        connection for many sessions); without it, a connection of its own, as per VM."""
        channel = shared or aio_channel(self.cfg["address"])
        md = (("authorization", f"Bearer {self.cfg['token']}"), ("x-fleet-worker-id", self.worker_id))
        tasks: list[asyncio.Task] = []
        try:
            attempts = self.cfg.get("hello_attempts", 1)
            for attempt in range(attempts):
                # As fleet-worker: a session that fails before its welcome is opened again
                # after a jittered backoff (only with hello_attempts > 1).
                call = coordinator_pb2_grpc.CoordinatorStub(channel).Session(metadata=md)
                try:
                    await call.write(hello_frame(self.worker_id, self.slots, self.cfg.get("protocol", 3)))
                    first = await asyncio.wait_for(call.read(), 60)
                except (grpc.aio.AioRpcError, asyncio.TimeoutError):
                    if attempt + 1 == attempts or self.cfg["_stop"].is_set():
                        raise
                    call.cancel()
                    self.hello_retries += 1
                    await asyncio.sleep(random.uniform(0.5, 1.0) * min(8.0, 0.5 * 2 ** attempt))
                    continue
                break
            if first is grpc.aio.EOF or first.WhichOneof("body") != "welcome":
                self.error = f"no welcome: {first}"
                return
            self.registered = True
            interval = max(0.01, first.welcome.heartbeat_interval_ms / 1000)
            if self.mode == "idle" and first.welcome.protocol_version >= 4 and first.welcome.idle_heartbeat_interval_ms:
                # As fleet-worker: nothing changes in an idle session, so only the idle heartbeat.
                interval = first.welcome.idle_heartbeat_interval_ms / 1000
            tasks = [asyncio.create_task(self._writer(call)), asyncio.create_task(self._heartbeats(interval)),
                     asyncio.create_task(self._reader(call))]
            await self.cfg["_stop"].wait()
            self.stopping = True
        except (grpc.aio.AioRpcError, asyncio.TimeoutError) as e:
            self.error = f"{type(e).__name__}: {getattr(e, 'code', lambda: '')()} {getattr(e, 'details', lambda: '')()}"
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                try:
                    await t
                except BaseException:  # noqa: BLE001 - ending on purpose
                    pass
            if shared is None:
                await channel.close(grace=None)

    async def _writer(self, call: Any) -> None:
        while True:
            frame = await self.out.get()
            await call.write(frame)

    async def _heartbeats(self, interval: float) -> None:
        await asyncio.sleep(random.random() * interval)  # spread the fleet's beats over the interval
        while True:
            self.send("", "", heartbeat=coordinator_pb2.Heartbeat(
                owned_assignment_ids=sorted(self.held), running_cells=SUBJECTS * len(self.groups)))
            await asyncio.sleep(interval)

    async def _reader(self, call: Any) -> None:
        try:
            while True:
                frame = await call.read()
                if frame is grpc.aio.EOF:
                    if not self.stopping:
                        self.error = "stream ended"
                    return
                for inner in (frame.bundle.frames if frame.WhichOneof("body") == "bundle" else [frame]):
                    self._on_frame(inner)
        except grpc.aio.AioRpcError as e:
            if not self.stopping:
                self.error = f"stream: {e.code().name}: {e.details()}"

    def _on_frame(self, frame: Any) -> None:
        kind = frame.WhichOneof("body")
        if kind == "ack":
            self._on_ack(frame.ack)
        elif kind == "acks":
            for ack in frame.acks.acks:
                self._on_ack(ack)
        elif kind == "assignment":
            self._on_push(frame.assignment)
        elif kind == "run_offer":  # what this worker measures for each key (a key it lacks: "")
            measure = self.cfg.get("measure") or {}
            self.send("", "", run_environment=coordinator_pb2.RunEnvironment(
                run_id=frame.run_offer.run_id, components=[
                    common_pb2.EnvironmentComponent(key=k, value=measure.get(k, "")) for k in frame.run_offer.keys]))

    def _on_push(self, p: Any) -> None:
        now = mono()
        if p.assignment_id in self.held or p.assignment_id in self.finished:
            self.repeats += 1  # a worker ignores a repeated push
            return
        self.held[p.assignment_id] = None
        self.pushes += 1
        if self.mode == "refill":
            if self.groups:  # the previous group's last ack has not arrived yet
                self.early_push = now
            elif self.released_at is not None:
                self.refill.append((now, now - self.released_at, now - self.released_sent))
                self.released_at = None
        if self.stopping:
            return
        if self.hold[1] > 0:
            asyncio.get_running_loop().call_later(random.uniform(*self.hold) / 1000, self._report_group, p)
        else:
            self._report_group(p)

    def _report_group(self, p: Any) -> None:
        if self.stopping:
            return
        aid = p.assignment_id
        report = bench_report(int(time.time() * 1000))
        reports = [coordinator_pb2.CellReport(run_id=p.run_id, attempt_id=cell.attempt_id, assignment_id=aid,
                                              generation=p.generation, report=report) for cell in p.cells]
        if self.cfg.get("protocol", 3) >= 4:  # one ReportBatch: one seq per report, as fleet-worker sends them
            first = self.seq + 1
            for i in range(len(reports)):
                self.pending[first + i] = ("report", aid)
            self.seq += len(reports)
            self.out.put_nowait(coordinator_pb2.WorkerFrame(
                seq=first, report_batch=coordinator_pb2.ReportBatch(reports=reports)))
        else:
            for r in reports:
                self.send("report", aid, cell_report=r)
        self.groups[aid] = [len(p.cells), mono()]

    def _on_ack(self, ack: Any) -> None:
        now = mono()
        kind, aid = self.pending.pop(ack.seq, ("", ""))
        if ack.outcome == common_pb2.ACK_OUTCOME_REJECTED:
            self.rejected[common_pb2.RejectionReason.Name(ack.rejection)] += 1
        if kind == "group_finished":
            self.held.pop(aid, None)
            self.finished.add(aid)
            return
        if kind != "report":
            return
        if ack.outcome == common_pb2.ACK_OUTCOME_ACCEPTED:
            self.accepted_at.append(now)
        g = self.groups.get(aid)
        if g is None:
            return
        g[0] -= 1
        if g[0] > 0:
            return
        del self.groups[aid]
        if self.mode == "refill":
            if self.early_push is not None:
                self.refill.append((self.early_push, self.early_push - now, self.early_push - g[1]))
                self.early_push = None
            else:
                self.released_at, self.released_sent = now, g[1]
        if not self.stopping:
            self.send("group_finished", aid, group_finished=coordinator_pb2.GroupFinished(
                assignment_id=aid, reason="completed"))


async def _client_async(cfg: dict) -> dict:
    stop = asyncio.Event()
    cfg["_stop"] = stop
    sims = [Sim(cfg, wid) for wid in cfg["workers"]]
    stop_file = Path(cfg["stop_file"])
    deadline = cfg["deadline"]

    async def watch_stop() -> None:
        while not stop_file.exists() and mono() < deadline:
            await asyncio.sleep(0.05)
        stop.set()

    watcher = asyncio.create_task(watch_stop())
    ramp = cfg.get("ramp_s", 0.0)
    per_channel = cfg.get("streams_per_channel", 1)
    channels: list[grpc.aio.Channel] = []
    runs = []
    for i, s in enumerate(sims):
        shared = None
        if per_channel > 1:
            if i % per_channel == 0:
                channels.append(aio_channel(cfg["address"]))
            shared = channels[-1]
        runs.append(asyncio.create_task(s.run(shared)))
        if ramp:
            await asyncio.sleep(ramp / len(sims))
    await asyncio.gather(*runs, return_exceptions=True)
    for ch in channels:
        await ch.close(grace=None)
    await watcher
    rejected: collections.Counter[str] = collections.Counter()
    for s in sims:
        rejected.update(s.rejected)
    errors = [f"{s.worker_id}: {s.error}" for s in sims if s.error]
    return {
        "registered": sum(s.registered for s in sims),
        "hello_retries": sum(s.hello_retries for s in sims),
        "errors": errors[:10], "error_count": len(errors),
        "pushes": sum(s.pushes for s in sims),
        "repeats": sum(s.repeats for s in sims),
        "accepted_at": [t for s in sims for t in s.accepted_at],
        "refill": [r for s in sims for r in s.refill],
        "rejected": dict(rejected),
        "cpu_s": time.process_time(),
    }


def _client(argv: list[str]) -> int:
    """`python -m tools.bench_coordinator _client CONFIG.json`: prints one JSON line."""
    cfg = json.loads(Path(argv[0]).read_text())
    raise_nofile()
    out = asyncio.run(_client_async(cfg))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


class Clients:
    """Client processes, each running a share of the simulated workers until the stop file."""

    def __init__(self, root: Path, coord: Coordinator, *, mode: str, workers: int, processes: int,
                 slots: int = 1, hold_ms: tuple[int, int] | None = None, ramp_s: float = 0.0,
                 protocol: int = 3, name: str = "", streams_per_channel: int = 1,
                 measure: dict[str, str] | None = None, deadline_s: float = CLIENT_DEADLINE_S,
                 hello_attempts: int = 1, nice: int = 0) -> None:
        """`name` tells apart several sets of clients of one coordinator (worker ids, files);
        `measure`: what the workers answer a run offer with, key by key; `nice`: the client
        processes' nice value (`nice -n`), so that they yield the cores to the coordinator."""
        self.root = root
        name = name or mode
        self.stop_file = root / f"stop-{name}"
        self.procs: list[Proc] = []
        self.outputs: list[Path] = []
        prefix = "sim" if name == mode else name
        ids = [f"{prefix}-{i:05d}" for i in range(workers)]
        for p in range(processes):
            cfg = {"address": coord.address, "token": coord.enroll_token, "mode": mode, "slots": slots,
                   "hold_ms": list(hold_ms) if hold_ms else None, "workers": ids[p::processes],
                   "stop_file": str(self.stop_file), "deadline": mono() + deadline_s, "ramp_s": ramp_s,
                   "protocol": protocol, "streams_per_channel": streams_per_channel, "measure": measure or {},
                   "hello_attempts": hello_attempts}
            cfg_path = root / f"client-{name}-{p}.json"
            cfg_path.write_text(json.dumps(cfg))
            out_path = root / f"client-{name}-{p}.out"
            self.outputs.append(out_path)
            argv = [PY, "-m", "tools.bench_coordinator", "_client", str(cfg_path)]
            if nice:
                argv = ["nice", "-n", str(nice), *argv]
            self.procs.append(Proc(f"client {name} {p}", argv, root / f"client-{name}-{p}.log",
                                   stdout=out_path.open("wb")))

    def finish(self, timeout_s: float = 60) -> dict:
        self.stop_file.touch()
        merged: dict = {"registered": 0, "hello_retries": 0, "errors": [], "error_count": 0, "pushes": 0, "repeats": 0,
                        "accepted_at": [],
                        "refill": [], "rejected": collections.Counter(), "cpu_s": 0.0}
        for proc, out in zip(self.procs, self.outputs):
            try:
                proc.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.stop(5)
            try:
                got = json.loads(out.read_text().strip().splitlines()[-1])
            except (OSError, IndexError, json.JSONDecodeError):
                merged["errors"].append(f"{proc.name} gave no result\n{proc.tail()}")
                continue
            for k in ("registered", "error_count", "pushes", "repeats", "hello_retries"):
                merged[k] += got.get(k, 0)
            merged["cpu_s"] += got["cpu_s"]
            merged["errors"] += got["errors"]
            merged["accepted_at"] += got["accepted_at"]
            merged["refill"] += got["refill"]
            merged["rejected"].update(got["rejected"])
        return merged

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs if p.alive())

    def kill(self) -> None:
        self.stop_file.touch()
        for p in self.procs:
            if p.alive():
                p.stop(10)


# ---- W1: the peer comparison -------------------------------------------------------------------

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
    from tools import bench_peers

    say(f"W1: {sz.w1_groups} groups x {SUBJECTS} no-op python cells, 4 fleet-worker processes x 2 slots, "
        f"{sz.w1_repeats} round(s) of every system in turn")
    peer_benches = [(name, bench) for name, bench in (
        ("dask", bench_peers.bench_dask), ("celery", bench_peers.bench_celery),
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


# ---- group commit ------------------------------------------------------------------------------

def grpc_commit_rate(sz: Sizes, root: Path, batch_max: int | None, profile: Path | None, *,
                     protocol: int = 3, slots: int = 2, cells: int = SUBJECTS, total_cells: int = 0) -> dict:
    """`total_cells`: the run's size (default `commit_groups` groups of 3 cells). The run must
    outlast the warm-up and the window: a run that settles inside the window measures idle time
    (the 32-cell shape did, and understated its rate by a third), so that is checked after the
    window and reported as `ran_out`."""
    label = "default batching" if batch_max is None else f"batch_max={batch_max}"
    if protocol >= 4:
        label += f", protocol {protocol} (ReportBatch), {slots} slots per worker, {cells} cells per group"
    coord = Coordinator(root, batch_max=batch_max, counters=True)
    clients = None
    try:
        workers = sz.commit_clients
        groups = max(workers * slots * 4, (total_cells or sz.commit_groups * SUBJECTS) // cells)
        run_id = coord.submit(noop_spec(groups, cap=workers * slots, name="commitbench", subjects=cells))
        clients = Clients(root, coord, mode="commit", workers=workers, processes=2, slots=slots, protocol=protocol)
        coord.wait_workers(workers, START_TIMEOUT_S)
        time.sleep(1.0)  # warm-up: every slot busy, the log past its first batches
        c0, cpu0, own0, ccpu0 = coord.counters(), cpu_seconds(coord.pid), process_cpu_seconds(coord.pid), clients.cpu()
        # One file per window: the reports shapes share the mode, and overwrote each other's.
        name = f"commit-{'batched' if batch_max is None else 'unbatched'}"
        if protocol >= 4:
            name = f"reports-{slots}x{cells}"
        prof = Profiler(profile, name, coord.pid, sz.commit_window_s)
        time.sleep(sz.commit_window_s)
        c1, cpu1, own1, ccpu1 = coord.counters(), cpu_seconds(coord.pid), process_cpu_seconds(coord.pid), clients.cpu()
        status = next(r for r in coord.call("GetStatus", admin_pb2.GetStatusRequest()).runs if r.run_id == run_id)
        ran_out = status.cells_selected >= status.cells_total
        prof.finish()
        out = clients.finish()
        clients = None
    finally:
        if clients is not None:
            clients.kill()
        coord.stop()
    if ran_out:
        say(f"  warning: the run's {groups * cells} cells were all selected within the window: the rate "
            f"below counts idle time (a lower bound); give the run more cells")
    dt = c1["t"] - c0["t"]
    records, commits = c1["records"] - c0["records"], c1["commits"] - c0["commits"]
    acked = sum(1 for t in out["accepted_at"] if c0["t"] <= t <= c1["t"])
    sizes = log_record_sizes(coord.data_dir / "wal")
    r = {"rate": records / dt, "acked_rate": acked / dt, "batch_mean": records / max(1, commits),
         "commits_per_s": commits / dt, "cpu": (cpu1 - cpu0) / dt, "cpu_process": (own1 - own0) / dt,
         "record_bytes": sizes,
         "actor_busy": (c1["busy_s"] - c0["busy_s"]) / dt, "actor_append": (c1["append_s"] - c0["append_s"]) / dt,
         "client_cpu": (ccpu1 - ccpu0) / dt, "rejected": dict(out["rejected"]), "errors": out["errors"],
         "ran_out": ran_out, "cells": groups * cells}
    say(f"  gRPC, {label}: {r['rate']:.0f} durable commands/s ({r['acked_rate']:.0f}/s accepted report acks seen "
        f"by clients), {r['commits_per_s']:.0f} commits/s, {r['batch_mean']:.1f} records/commit, coordinator "
        f"{100 * r['cpu']:.0f}% of a core (its own process {100 * r['cpu_process']:.0f}%, the rest its snapshot "
        f"processes; clients {100 * r['client_cpu']:.0f}%), {1e6 * r['cpu'] / max(1.0, r['acked_rate']):.0f} µs of "
        f"coordinator CPU per report ({1e6 * r['cpu_process'] / max(1.0, r['acked_rate']):.0f} in its own process); actor busy {100 * r['actor_busy']:.0f}% of the window (in Store.append "
        f"{100 * r['actor_append']:.0f}%); log record {sizes:.0f} B (median)")
    if out["errors"] or out["rejected"]:
        say(f"    client errors {out['error_count']}: {out['errors'][:3]}; rejections {dict(out['rejected'])}")
    return r


def log_record_sizes(wal_dir: Path) -> float:
    import lmdb

    env = lmdb.open(str(wal_dir), readonly=True, lock=False, max_dbs=3, subdir=True)
    try:
        db = env.open_db(b"log", create=False)
        with env.begin(db=db) as txn:
            lens = [len(v) for _, v in txn.cursor()]
    finally:
        env.close()
    return statistics.median(lens) if lens else 0.0  # the run's spec record is large and rare


def bare_lmdb_rate(root: Path, record_bytes: int, batch: int, seconds: float) -> float:
    """Records/s committed by LMDB alone: same flags as the coordinator's store (sync, metasync),
    `batch` records of `record_bytes` appended per write transaction plus the last-index key."""
    import lmdb

    path = root / f"bare-{batch}"
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), subdir=True, max_dbs=3, map_size=1 << 30, sync=True, metasync=True,
                    writemap=False, map_async=False, lock=True)
    try:
        log, meta = env.open_db(b"log"), env.open_db(b"meta")
        payload = os.urandom(record_bytes)
        index = 0
        t0 = mono()
        while mono() - t0 < seconds:
            with env.begin(write=True) as txn:
                for _ in range(batch):
                    index += 1
                    txn.put(index.to_bytes(8, "big"), payload, db=log, append=True)
                txn.put(b"last_index", index.to_bytes(8, "big"), db=meta)
        return index / (mono() - t0)
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)


def actor_rate(root: Path, batch_max: int | None, seconds: float, groups: int, workers: int = 64,
               slots: int = 2) -> dict:
    """The actor and store alone, in this process: the same closed loop as the gRPC clients
    (every push answered by its cells' reports, GroupFinished once they are done), driven from
    the actor's delivery callback; no gRPC, no protobuf decode of reports."""
    from common.evidence import Cleanup, Execution, Report, Status, Usage, Verification
    from common.ids import RunId, WorkerId
    from common.policy import Policy
    from common.spec import parse_spec
    from coordinator.actor import Actor, Overloaded, Request
    from coordinator.core import commands as c
    from coordinator.core import new_state
    from coordinator.store import Store

    path = root / f"actor-{batch_max or 'default'}"
    store = Store.open(path)
    report = Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE, Cleanup.CONFIRMED,
                    score=1.0, input_tokens=0, output_tokens=0, cost_usd=0.0, detail="subject completed; score 1")
    stopping = threading.Event()
    outstanding: dict[str, int] = {}
    finished: set[str] = set()
    held: dict[str, dict[str, None]] = {WorkerId(f"a{i:03d}"): {} for i in range(workers)}
    rejected: collections.Counter[str] = collections.Counter()
    actor: Actor

    def on_batch(batch: Any) -> None:
        for done, value in batch.completions:
            done(value)
        for o in batch.outgoing:
            if stopping.is_set() or not o.worker_id:
                continue
            body = o.frame.WhichOneof("body")
            if body == "run_offer":  # a worker of the run's build: its measurement is the reference's
                offer = o.frame.run_offer
                actor.submit(Request(make=lambda now, w=WorkerId(o.worker_id), r=RunId(offer.run_id):
                                     c.RunEnvironmentMeasured(now, w, 1, r, ())))
                continue
            if body != "assignment":
                continue
            p = o.frame.assignment
            wid, aid, gen = WorkerId(o.worker_id), p.assignment_id, p.generation
            if aid in outstanding or aid in finished:
                continue  # a repeated push: a worker ignores it
            outstanding[aid] = len(p.cells)
            held[wid][aid] = None
            for cell in p.cells:
                actor.submit(Request(
                    make=lambda now, t=cell.attempt_id, w=wid, a=aid, g=gen: c.CellReported(now, w, t, a, g, report),
                    done=lambda tr, a=aid, w=wid: reported(tr, a, w)))

    def reported(t: Any, aid: str, wid: str) -> None:
        if not t.outcome.ok:
            rejected[t.outcome.rejection.name] += 1
        outstanding[aid] -= 1
        if outstanding[aid] == 0 and not stopping.is_set():
            del outstanding[aid]
            finished.add(aid)
            actor.submit(Request(make=lambda now: c.GroupFinished(now, wid, aid),
                                 done=lambda _t: held[wid].pop(aid, None)))

    def heartbeats() -> None:  # as every worker does, or the core suspects it after 3.5 s
        while not stopping.wait(1.0):
            for w in list(held):
                try:
                    actor.submit(Request(make=lambda now, w=w: c.HeartbeatReceived(now, w, tuple(held[w]))))
                except Overloaded:
                    return  # stopping

    kw = {} if batch_max is None else {"batch_max": batch_max}
    beater = None
    actor = Actor(store, new_state(), 0, deliver=on_batch, **kw)
    try:
        spec = parse_spec(noop_spec(groups, cap=workers * slots, name="actorbench"))
        actor.start()
        # No manifest: every key a run offer names is measured as absent, as the reference has it.
        actor.submit(Request(make=lambda now: c.RunSubmitted(now, RunId("run-actorbench"), spec, Policy())))
        for w in held:
            actor.submit(Request(make=lambda now, w=w: c.WorkerRegistered(
                now, w, 1, slots, ENVIRONMENT_ID, 1_000 * slots, 1_024 * slots)))
        beater = threading.Thread(target=heartbeats, daemon=True)
        beater.start()
        time.sleep(1.0)
        r0, k0, t0 = actor.records, actor.commits, mono()
        time.sleep(seconds)
        r1, k1, t1 = actor.records, actor.commits, mono()
    finally:
        stopping.set()
        actor.stop()
        store.close()
        if beater is not None:
            beater.join(5)
        shutil.rmtree(path, ignore_errors=True)
    if rejected:
        raise RuntimeError(f"in-process actor bench: reports rejected {dict(rejected)}")
    if r1 >= groups * SUBJECTS:
        say("  warning: the in-process run ran out of groups within the window: raise commit_groups")
    return {"rate": (r1 - r0) / (t1 - t0), "batch_mean": (r1 - r0) / max(1, k1 - k0)}


def bench_commit(sz: Sizes, root: Path, profile: Path | None) -> dict:
    say(f"Group commit: {sz.commit_clients} simulated workers x 2 slots on loopback, {sz.commit_window_s:g} s "
        f"windows, {sz.commit_rounds} round(s) of every variant back to back (the disk is shared: paired ratios)")
    got: dict[str, list[float]] = collections.defaultdict(list)
    for rnd in range(sz.commit_rounds):
        prof = profile if rnd == 0 else None
        b = grpc_commit_rate(sz, root / f"commit-{rnd}-batched", None, prof)
        u = grpc_commit_rate(sz, root / f"commit-{rnd}-unbatched", 1, prof)
        record = max(1, round(b["record_bytes"]))
        batch = max(1, round(b["batch_mean"]))
        bare = bare_lmdb_rate(root, record, batch, sz.bare_window_s)
        bare1 = bare_lmdb_rate(root, record, 1, sz.bare_window_s)
        say(f"  bare LMDB, sync=True, {record} B records: {bare:.0f} records/s at {batch} per commit, "
            f"{bare1:.0f}/s at 1 per commit")
        act = actor_rate(root, None, sz.actor_window_s, sz.commit_groups)
        act1 = actor_rate(root, 1, sz.actor_window_s, sz.commit_groups)
        say(f"  actor in process (same closed loop, no gRPC): {act['rate']:.0f} durable commands/s default "
            f"({act['batch_mean']:.1f}/commit), {act1['rate']:.0f}/s with batch_max=1")
        for k, v in (("batched", b["rate"]), ("unbatched", u["rate"]), ("batch", b["batch_mean"]),
                     ("record", record), ("bare", bare), ("bare1", bare1), ("actor", act["rate"]),
                     ("actor1", act1["rate"]), ("actor_batch", act["batch_mean"]), ("cpu", b["cpu"]),
                     ("cpu1", u["cpu"]), ("client_cpu", b["client_cpu"]),
                     ("ratio", b["rate"] / u["rate"]), ("vs_bare", b["rate"] / bare),
                     ("actor_ratio", act["rate"] / act1["rate"]), ("unbatched_vs_bare1", u["rate"] / bare1)):
            got[k].append(v)
    m = {k: statistics.median(v) for k, v in got.items()}
    say(f"  medians of {sz.commit_rounds} round(s): group commit {m['batched']:.0f}/s, batch_max=1 "
        f"{m['unbatched']:.0f}/s, ratio {m['ratio']:.2f}x; bare LMDB {m['bare']:.0f}/s, group commit / bare "
        f"{m['vs_bare']:.3f}; actor alone {m['actor_ratio']:.2f}x")
    return {
        "commit_batched_per_s": m["batched"], "commit_unbatched_per_s": m["unbatched"], "commit_ratio": m["ratio"],
        "commit_batch_mean": m["batch"], "commit_coordinator_cpu": m["cpu"], "commit_unbatched_cpu": m["cpu1"],
        "commit_client_cpu": m["client_cpu"], "commit_record_bytes": round(m["record"]),
        "bare_lmdb_per_s": m["bare"], "bare_lmdb_batch": round(m["batch"]), "bare_lmdb_batch1_per_s": m["bare1"],
        "commit_vs_bare": m["vs_bare"], "commit_unbatched_vs_bare1": m["unbatched_vs_bare1"],
        "actor_batched_per_s": m["actor"], "actor_unbatched_per_s": m["actor1"], "actor_ratio": m["actor_ratio"],
        "actor_batch_mean": m["actor_batch"], "commit_rounds": dict(got),
    }


# ---- slot refill latency -----------------------------------------------------------------------

def bench_refill(sz: Sizes, root: Path, profile: Path | None) -> dict:
    lo, hi = sz.refill_hold_ms
    say(f"Slot refill: {sz.refill_workers} simulated workers x 1 slot, each group held {lo}-{hi} ms, "
        f"{sz.refill_window_s:g} s window")
    coord = Coordinator(root / "refill")
    clients = None
    try:
        coord.submit(noop_spec(sz.refill_groups, cap=sz.refill_workers, name="refillbench"))
        clients = Clients(root / "refill", coord, mode="refill", workers=sz.refill_workers, processes=2, slots=1,
                          hold_ms=(lo, hi))
        coord.wait_workers(sz.refill_workers, START_TIMEOUT_S)
        time.sleep(1.0)
        t0, cpu0 = mono(), cpu_seconds(coord.pid)
        prof = Profiler(profile, "refill", coord.pid, sz.refill_window_s)
        time.sleep(sz.refill_window_s)
        t1, cpu1 = mono(), cpu_seconds(coord.pid)
        prof.finish()
        out = clients.finish()
        clients = None
    finally:
        if clients is not None:
            clients.kill()
        coord.stop()
    samples = [r for r in out["refill"] if t0 <= r[0] <= t1]
    ack = [1000 * r[1] for r in samples]
    sent = [1000 * r[2] for r in samples]
    early = sum(1 for v in ack if v < 0)
    groups_s = len(samples) / (t1 - t0)
    r = {"refill_p50_ms": percentile(ack, 50), "refill_p99_ms": percentile(ack, 99),
         "refill_max_ms": max(ack) if ack else float("nan"),
         "refill_sent_p50_ms": percentile(sent, 50), "refill_sent_p99_ms": percentile(sent, 99),
         "refill_samples": len(samples), "refill_push_before_ack": early, "refill_groups_per_s": groups_s,
         "refill_coordinator_cpu": (cpu1 - cpu0) / (t1 - t0), "refill_repeated_pushes": out["repeats"]}
    say(f"  {len(samples)} refills ({groups_s:.0f} groups/s, coordinator {100 * r['refill_coordinator_cpu']:.0f}% "
        f"of a core): last report's ack -> next push p50 {r['refill_p50_ms']:.2f} ms, p99 {r['refill_p99_ms']:.2f} "
        f"ms, max {r['refill_max_ms']:.2f} ms ({early} pushes before the ack); last report sent -> next push "
        f"p50 {r['refill_sent_p50_ms']:.2f} ms, p99 {r['refill_sent_p99_ms']:.2f} ms; {out['repeats']} repeated "
        "pushes ignored")
    if out["errors"] or out["rejected"]:
        say(f"    client errors {out['error_count']}: {out['errors'][:3]}; rejections {dict(out['rejected'])}")
    return r


# ---- idle fleet --------------------------------------------------------------------------------

def bench_idle(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Twice, back to back: sessions of protocol 3 (a heartbeat every 1 s), then of protocol 4
    (liveness by the coordinator's HTTP/2 keepalive pings, a heartbeat only on change or at the
    idle interval, as fleet-worker does)."""
    out: dict = {}
    for protocol in (3, 4):
        r = _idle_once(sz, root / f"idle-p{protocol}", profile, protocol)
        out[f"idle_p{protocol}"] = r
    out.update(out["idle_p4"])
    out["idle_cpu_p3"] = out["idle_p3"]["idle_cpu"]
    say(f"  protocol 4 / protocol 3 idle CPU: {out['idle_cpu'] / out['idle_cpu_p3']:.2f}")
    return out


def _idle_once(sz: Sizes, root: Path, profile: Path | None, protocol: int) -> dict:
    say(f"Idle fleet, protocol {protocol}: {sz.idle_workers} sessions in {sz.idle_clients} client processes "
        f"for {sz.idle_window_s:g} s, no run"
        + (" (a heartbeat every 1 s)" if protocol < 4 else " (keepalive pings; heartbeats on change)"))
    coord = Coordinator(root)
    clients = None
    try:
        rss_start = memory_kb(coord.pid)["VmRSS"]
        clients = Clients(root, coord, mode="idle", workers=sz.idle_workers, processes=sz.idle_clients,
                          ramp_s=min(10.0, sz.idle_workers / 200), protocol=protocol)
        t_reg = mono()
        coord.wait_workers(sz.idle_workers, 120)
        registered_s = mono() - t_reg
        time.sleep(2.0)  # every session past its first heartbeat
        t0, cpu0 = mono(), cpu_seconds(coord.pid)
        prof = Profiler(profile, f"idle-p{protocol}", coord.pid, sz.idle_window_s)
        time.sleep(sz.idle_window_s)
        t1, cpu1 = mono(), cpu_seconds(coord.pid)
        prof.finish()
        mem = memory_kb(coord.pid)
        active_end = coord.active_workers()
        out = clients.finish()
        clients = None
    finally:
        if clients is not None:
            clients.kill()
        coord.stop()
    r = {"idle_cpu": (cpu1 - cpu0) / (t1 - t0), "idle_rss_mb": mem["VmRSS"] / 1024, "idle_hwm_mb": mem["VmHWM"] / 1024,
         "idle_rss_start_mb": rss_start / 1024, "idle_active_end": active_end, "idle_registered_s": registered_s}
    say(f"  {active_end} active at the end (all {sz.idle_workers} registered within {registered_s:.1f} s): "
        f"coordinator {100 * r['idle_cpu']:.1f}% of one core, VmRSS {r['idle_rss_mb']:.0f} MB (peak "
        f"{r['idle_hwm_mb']:.0f} MB; {r['idle_rss_start_mb']:.0f} MB before any session)")
    if active_end < sz.idle_workers:
        raise RuntimeError(f"idle, protocol {protocol}: only {active_end} of {sz.idle_workers} sessions active")
    if out["errors"]:
        say(f"    client errors {out['error_count']}: {out['errors'][:3]}")
    return r


# ---- artifact upload ---------------------------------------------------------------------------

async def _upload_session(coord: Coordinator, blobs: list[bytes], window: int,
                          before_each: Any = None) -> tuple[list[float], str]:
    channel = aio_channel(coord.address)
    md = (("authorization", f"Bearer {coord.enroll_token}"), ("x-fleet-worker-id", "uploader"))
    call = coordinator_pb2_grpc.CoordinatorStub(channel).Session(metadata=md)
    seq = 1
    try:
        await call.write(hello_frame("uploader", 1))
        push = None
        while push is None:
            f = await asyncio.wait_for(call.read(), 30)
            if f is grpc.aio.EOF:
                raise RuntimeError("upload session ended before a push")
            if f.WhichOneof("body") == "assignment":
                push = f.assignment
            elif f.WhichOneof("body") == "run_offer":
                seq += 1
                await call.write(coordinator_pb2.WorkerFrame(seq=seq, run_environment=coordinator_pb2.RunEnvironment(
                    run_id=f.run_offer.run_id)))
        attempt = push.cells[0].attempt_id
        acks: asyncio.Queue = asyncio.Queue()

        async def reader() -> None:
            while True:
                fr = await call.read()
                if fr is grpc.aio.EOF:
                    return
                if fr.WhichOneof("body") == "ack":
                    acks.put_nowait(fr.ack)
                elif fr.WhichOneof("body") == "acks":
                    for ack in fr.acks.acks:
                        acks.put_nowait(ack)

        rt = asyncio.create_task(reader())
        times = []
        digest = ""
        for n, data in enumerate(blobs):
            if before_each is not None:
                before_each(data)  # the local baselines, interleaved with the uploads (a shared disk drifts)
            digest = "sha256:" + hashlib.sha256(data).hexdigest()  # known to a worker before it uploads
            chunk = limits.CHUNK_BYTES_MAX
            offsets = list(range(0, len(data), chunk))
            t0 = mono()
            in_flight = 0
            last_seq = 0
            for off in offsets:
                seq += 1
                last = off + chunk >= len(data)
                await call.write(coordinator_pb2.WorkerFrame(seq=seq, upload_chunk=coordinator_pb2.UploadChunk(
                    upload_id=f"u{n}", attempt_id=attempt, digest=digest, total_length=len(data), offset=off,
                    data=data[off:off + chunk], last=last)))
                in_flight += 1
                last_seq = seq
                while in_flight >= window:
                    a = await acks.get()
                    in_flight -= 1
                    if a.outcome == common_pb2.ACK_OUTCOME_REJECTED:
                        raise RuntimeError(f"chunk refused: {a}")
            while True:
                a = await acks.get()
                if a.outcome == common_pb2.ACK_OUTCOME_REJECTED:
                    raise RuntimeError(f"chunk refused: {a}")
                if a.seq == last_seq:
                    break
            times.append(mono() - t0)
        # The report referencing the last artifact must be accepted: the digest is really stored.
        seq += 1
        rep = bench_report(int(time.time() * 1000))
        rep.artifacts.append(common_pb2.ArtifactRef(name="big.bin", digest=digest, size_bytes=len(blobs[-1])))
        await call.write(coordinator_pb2.WorkerFrame(seq=seq, cell_report=coordinator_pb2.CellReport(
            run_id=push.run_id, attempt_id=attempt, assignment_id=push.assignment_id, generation=push.generation,
            report=rep)))
        while True:
            a = await asyncio.wait_for(acks.get(), 30)
            if a.seq == seq:
                verdict = common_pb2.AckOutcome.Name(a.outcome)
                break
        rt.cancel()
        return times, verdict
    finally:
        call.cancel()
        await channel.close(grace=None)


def local_write(root: Path, data: bytes, *, chunked: bool = False, rehash: bool = False) -> float:
    """SHA-256 of the bytes plus writing them to a file on the same disk and one fsync (the
    baseline). `chunked`: an fsync after every CHUNK_BYTES_MAX instead, as the coordinator
    commits each chunk; `rehash`: the SHA-256 computed by reading the file back afterwards, as
    the coordinator's finish does. Both only explain the gap; the baseline is neither."""
    path = root / "local.bin"
    t0 = mono()
    if not rehash:
        hashlib.sha256(data).hexdigest()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        step = limits.CHUNK_BYTES_MAX if chunked else len(data) or 1
        for off in range(0, len(data), step):
            view = memoryview(data)[off:off + step]
            while view:
                view = view[os.write(fd, view):]
            if chunked:
                os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    if rehash:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(limits.CHUNK_BYTES_MAX):
                h.update(block)
        h.hexdigest()
    dt = mono() - t0
    path.unlink()
    return dt


def bench_upload(sz: Sizes, root: Path, profile: Path | None) -> dict:
    mib = sz.upload_bytes / (1 << 20)
    say(f"Artifact upload: {mib:.0f} MiB in {limits.CHUNK_BYTES_MAX >> 20} MiB chunks, 8 in flight, "
        f"{sz.upload_repeats} repeat(s), against SHA-256 + write + fsync locally")
    r = root / "upload"
    coord = Coordinator(r)
    try:
        coord.submit(noop_spec(1, cap=1, name="uploadbench"))
        blobs = [os.urandom(sz.upload_bytes) for _ in range(sz.upload_repeats)]
        local_write(r, blobs[0])  # warm-up, not counted
        local: list[float] = []
        chunked: list[float] = []
        both: list[float] = []

        def before_each(data: bytes) -> None:
            local.append(local_write(r, data))
            chunked.append(local_write(r, data, chunked=True))
            both.append(local_write(r, data, chunked=True, rehash=True))

        prof = Profiler(profile, "upload", coord.pid, 5)
        times, verdict = asyncio.run(_upload_session(coord, blobs, window=8, before_each=before_each))
        prof.finish()
    finally:
        coord.stop()
    mib_s = lambda ts: sz.upload_bytes / (1 << 20) / statistics.median(ts)  # noqa: E731
    up, loc = mib_s(times), mib_s(local)
    res = {"upload_mib_s": up, "local_mib_s": loc, "upload_ratio": up / loc, "upload_report": verdict,
           "local_chunk_fsync_mib_s": mib_s(chunked), "local_chunk_fsync_rehash_mib_s": mib_s(both)}
    say(f"  upload {up:.0f} MiB/s (median of {len(times)}), local SHA-256 + write + fsync {loc:.0f} MiB/s "
        f"(median of {len(local)}): ratio {up / loc:.2f}; report referencing it: {verdict}")
    say(f"  to explain the gap, locally: an fsync per 1 MiB chunk {mib_s(chunked):.0f} MiB/s; that plus the "
        f"SHA-256 read back from the file afterwards {mib_s(both):.0f} MiB/s")
    return res


# ---- the table ---------------------------------------------------------------------------------

def table(fig: dict) -> list[str]:
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: str, target: str, met: bool | None) -> None:
        rows.append((name, value, target, "—" if met is None else ("yes" if met else "NO")))

    if "w1_cells_per_s" in fig:
        peers = {k: v for k, v in fig.get("w1_peers", {}).items() if k in W1_TARGET_PEERS}
        best_rate = max((p["cells_per_s"] for p in peers.values()), default=float("nan"))
        best_c = min((p["coordinator_cpu_s_per_1000"] for p in peers.values()), default=float("nan"))
        best_w = min((p["workers_cpu_s_per_1000"] for p in peers.values()), default=float("nan"))
        row("W1 fleet cells/s (submit -> complete)", f"{fig['w1_cells_per_s']:.0f}",
            f">= best peer ({best_rate:.0f})", fig["w1_cells_per_s"] >= best_rate if peers else None)
        row("W1 fleet coordinator CPU per 1,000 cells", f"{fig['w1_coordinator_cpu_s_per_1000']:.2f} s",
            f"<= best peer ({best_c:.2f} s)", fig["w1_coordinator_cpu_s_per_1000"] <= best_c if peers else None)
        row("W1 fleet workers CPU per 1,000 cells", f"{fig['w1_workers_cpu_s_per_1000']:.2f} s",
            f"<= best peer ({best_w:.2f} s)", fig["w1_workers_cpu_s_per_1000"] <= best_w if peers else None)
        for name, p in fig.get("w1_peers", {}).items():  # every peer run, the targets' and the others
            row(f"W1 {name}: cells/s; CPU/1,000 cells coord, workers",
                f"{p['cells_per_s']:.0f}; {p['coordinator_cpu_s_per_1000']:.2f} s, {p['workers_cpu_s_per_1000']:.2f} s",
                "—", None)
            row(f"W1 fleet / {name} cells/s", f"{fig['w1_cells_per_s'] / p['cells_per_s']:.2f}x", "—", None)
            pr = {k: statistics.median(v) for k, v in p["paired_ratios"].items()}
            row(f"W1 fleet / {name}, median of the rounds: cells/s; CPU coord, workers",
                f"{pr['cells_per_s']:.2f}x; {pr['coordinator_cpu_s_per_1000']:.2f}x, "
                f"{pr['workers_cpu_s_per_1000']:.2f}x", "—", None)
    if "commit_batched_per_s" in fig:
        row("durable cmds/s, gRPC, group commit", f"{fig['commit_batched_per_s']:.0f}", "", None)
        row("durable cmds/s, gRPC, batch_max=1", f"{fig['commit_unbatched_per_s']:.0f}", "", None)
        row("group commit / one txn per command", f"{fig['commit_ratio']:.2f}x", ">= 10x", fig["commit_ratio"] >= 10)
        row(f"bare LMDB, {fig['bare_lmdb_batch']}/commit, {fig['commit_record_bytes']} B",
            f"{fig['bare_lmdb_per_s']:.0f}", "", None)
        row("group commit / bare LMDB", f"{fig['commit_vs_bare']:.3f}", ">= 0.5", fig["commit_vs_bare"] >= 0.5)
        row("actor alone: batched / batch_max=1", f"{fig['actor_ratio']:.2f}x", "(>= 10x)", fig["actor_ratio"] >= 10)
    for slots, cells in REPORTS_SHAPES:
        key = f"reports_p4_{slots}slots" + ("" if cells == SUBJECTS else f"_{cells}cells")
        if f"{key}_per_s" in fig:
            ran_out = fig.get(key, {}).get("ran_out", False)  # a lower bound: the run ended in the window
            row(f"durable reports/s, 64 workers, ReportBatch, {slots} slots, {cells} cells/group",
                f"{fig[f'{key}_per_s']:.0f}" + (" (run ran out)" if ran_out else ""), ">= 20,000",
                fig[f"{key}_per_s"] >= 20_000 and not ran_out)
    if "refill_p99_ms" in fig:
        row("refill ack -> push p50", f"{fig['refill_p50_ms']:.2f} ms", "", None)
        row("refill ack -> push p99", f"{fig['refill_p99_ms']:.2f} ms", "< 20 ms", fig["refill_p99_ms"] < 20)
        row("refill report sent -> push p99", f"{fig['refill_sent_p99_ms']:.2f} ms", "", None)
    if "idle_cpu" in fig:
        if "idle_cpu_p3" in fig:
            row("idle fleet CPU, protocol 3 (beat every 1 s)", f"{100 * fig['idle_cpu_p3']:.1f}% of a core", "", None)
        row("idle fleet coordinator CPU, protocol 4", f"{100 * fig['idle_cpu']:.1f}% of a core", "<= 5%",
            fig["idle_cpu"] <= 0.05)
        row("idle fleet coordinator VmRSS", f"{fig['idle_rss_mb']:.0f} MB", "< 400 MB", fig["idle_rss_mb"] < 400)
    if "upload_ratio" in fig:
        row("artifact upload", f"{fig['upload_mib_s']:.0f} MiB/s", "", None)
        row("upload / local sha256+write+fsync", f"{fig['upload_ratio']:.2f}", ">= 0.5", fig["upload_ratio"] >= 0.5)
    widths = [max(len(r[i]) for r in rows + [("figure", "measured", "target", "met")]) for i in range(4)]
    out = []
    for r in [("figure", "measured", "target", "met"), tuple("-" * w for w in widths)] + rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return out


def bench_reports(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Durable reports/s over gRPC from 64 simulated workers of protocol 4 (every group's
    reports in one ReportBatch), with 2 and with 8 slots per worker."""
    say(f"Reports over gRPC: {sz.commit_clients} simulated workers of protocol 4, {sz.commit_window_s:g} s windows")
    out: dict = {}
    for slots, cells in REPORTS_SHAPES:
        r = grpc_commit_rate(sz, root / f"reports-{slots}-{cells}", None, profile, protocol=4, slots=slots, cells=cells,
                             total_cells=sz.reports_cells)
        key = f"reports_p4_{slots}slots" + ("" if cells == SUBJECTS else f"_{cells}cells")
        out[f"{key}_per_s"] = r["acked_rate"]
        out[key] = r
    return out


BENCHES = {"w1": bench_w1, "commit": bench_commit, "refill": bench_refill, "idle": bench_idle,
           "reports": bench_reports,
           "upload": bench_upload}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_serve"]:
        return _serve(argv[1:])
    if argv[:1] == ["_client"]:
        return _client(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m tools.bench_coordinator", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help=f"comma-separated, of: {', '.join(NAMES)}")
    ap.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--profile", type=Path, help="py-spy the coordinator during each window into this dir")
    ap.add_argument("--profile-gil", action="store_true", help="with --profile: sample only the thread holding "
                    "the GIL (CPU spent in Python), not every running thread")
    ap.add_argument("--profile-rate", type=int, default=97, help="with --profile: py-spy samples a second "
                    "(997 for a W1 run of a few seconds; the default disturbs the run least)")
    ap.add_argument("--switch-interval-ms", type=float, default=0.0,
                    help="commit only: run its coordinators with sys.setswitchinterval(MS) (default: Python's 5 ms)")
    ap.add_argument("--cprofile", type=Path, help="cProfile (thread CPU time) the coordinator's event loop and actor "
                    "threads into DIR/<bench>/{loop,actor}.pstats (slows it down; for call counts, not figures)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, data dirs)")
    ap.add_argument("--w1-repeats", type=int, default=0, help="runs of W1 per system (default: 3, --quick 1)")
    ap.add_argument("--reports-shapes", default=",".join(f"{s}x{c}" for s, c in REPORTS_SHAPES),
                    help="reports: the windows, each SLOTSxCELLS (slots per worker, cells per group); "
                         "default: %(default)s")
    ap.add_argument("--w1-systems", default=",".join(W1_SYSTEMS),
                    help="W1's systems, of fleet, dask, celery, celery-defaults (default: all; fleet always runs)")
    a = ap.parse_args(argv)
    names = NAMES if not a.only else tuple(n.strip() for n in a.only.split(","))
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(NAMES)}")
    sz = QUICK if a.quick else FULL
    if a.w1_repeats:
        sz = dataclasses.replace(sz, w1_repeats=a.w1_repeats)
    Profiler.gil = a.profile_gil
    Profiler.rate = a.profile_rate
    W1_SYSTEMS[:] = [n.strip() for n in a.w1_systems.split(",")]
    try:
        REPORTS_SHAPES[:] = [(int(s), int(c)) for s, c in (p.strip().split("x") for p in a.reports_shapes.split(","))]
    except ValueError:
        ap.error(f"--reports-shapes {a.reports_shapes!r}: expected SLOTSxCELLS[,SLOTSxCELLS...], e.g. 2x32")
    Coordinator.switch_interval_ms = a.switch_interval_ms
    Coordinator.cprofile = a.cprofile
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    say(f"bench_coordinator: {'quick' if a.quick else 'full'} run on {os.cpu_count()} cores, scratch {root}")
    figures: dict = {}
    started = mono()
    try:
        probe = [bare_lmdb_rate(root, 200, 1, 2.0)]
        say(f"disk probe: {probe[0]:.0f} synchronous 1-record LMDB commits/s ({1000 / probe[0]:.2f} ms each)")
        for n in names:
            t = mono()
            figures.update(BENCHES[n](sz, root, a.profile))
            say(f"  ({n}: {mono() - t:.0f} s)")
        probe.append(bare_lmdb_rate(root, 200, 1, 2.0))
        say(f"disk probe: {probe[1]:.0f} synchronous 1-record LMDB commits/s ({1000 / probe[1]:.2f} ms each)")
        figures["disk_probe_commits_per_s"] = probe
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    say(f"\nfigures, measured in this one run ({mono() - started:.0f} s):")
    for line in table(figures):
        say(line)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
