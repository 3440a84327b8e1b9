"""The benches' shared harness: child processes started here and stopped by their pid, CPU and
memory read from /proc (a process tree's CPU counted as the peers' are), py-spy and perf
profiles of a window, and `Coordinator`, a real `fleet-coordinator` on 127.0.0.1:0 in a data
dir of its own (through `_serve` below when a bench wants the actor's commit counters or a
batch size of its own: `python -m tools.bench.harness _serve ...`; no coordinator code is
changed). The raw Session clients the coordinator benches drive are tools/bench/clients.py.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from common.fleetpb import admin_pb2, admin_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60
CLIENT_MESSAGE_BYTES_MAX = 64 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (which may hold spaces and
    parentheses): [0] state, [1] ppid, [11] utime, [12] stime, [13] cutime, [14] cstime, in
    clock ticks. Raises OSError for a process or thread that is gone."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            rest = stat_fields(f"/proc/{entry}/stat")
        except OSError:
            continue
        kids.setdefault(int(rest[1]), []).append(int(entry))
    return kids


def _tree(pids: list[int]) -> Iterator[int]:
    """`pids` and all their descendants, as /proc lists them now (one listing for the walk)."""
    kids = _children()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        yield pid


def tree_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) of `pids` and all their descendants: the living ones, and
    through cutime + cstime those a process of the tree has waited for (a child that lived and
    ended inside a window counts; one alive at its start and reaped before its end counts once,
    as the difference of the two readings)."""
    total = 0.0
    for pid in _tree(pids):
        try:
            rest = stat_fields(f"/proc/{pid}/stat")
        except OSError:
            continue
        total += (int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])) / CLK_TCK
    return total


def tree_rss_kb(pid: int) -> tuple[int, int, int]:
    """VmRSS of `pid` and all its descendants now, in KiB: (the whole tree, the descendants
    alone, the whole tree's anonymous pages). A sum of RSS counts a page two processes share
    twice (a store both map) and counts clean file pages the kernel may drop and read again:
    an upper bound on what the tree holds. The anonymous sum (RssAnon: heaps, the state) is
    what no reclaim can take back on a machine without swap."""
    total = own = anon = 0
    for p in _tree([pid]):
        try:
            m = memory_kb(p)
        except OSError:
            continue
        total += m.get("VmRSS", 0)
        anon += m.get("RssAnon", 0)
        own = m.get("VmRSS", 0) if p == pid else own
    return total, total - own, anon


class MemoryLimitUnavailable(RuntimeError):
    """No memory cgroup can be made here (not root, not cgroup v1)."""


class MemoryLimit:
    """A memory cgroup (v1) of the bench's own with a hard limit, that every daemon is started
    in (the processes a daemon starts inherit it): the direct test of "fits N MB all told".
    With no swap, a tree whose anonymous pages pass the limit is OOM-killed by the kernel; its
    clean file pages (the store's mmap) are dropped and read again instead. Needs root and
    cgroup v1's memory controller (`tools.bench.scale --memory-limit-mb`, and the OOM test of
    the snapshot process)."""

    ROOT = Path("/sys/fs/cgroup/memory")
    _made = itertools.count()

    def __init__(self, limit_mb: int) -> None:
        own = next((line.split(":", 2)[2].strip() for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.split(":", 2)[1] == "memory"), None)
        if own is None or not (self.ROOT / own.lstrip("/")).is_dir():
            raise MemoryLimitUnavailable("no cgroup v1 memory controller at /sys/fs/cgroup/memory")
        self.limit_mb = limit_mb
        self.path = self.ROOT / own.lstrip("/") / f"fleet-memory-limit-{os.getpid()}-{next(self._made)}"
        try:
            self.path.mkdir()
            self._write("memory.limit_in_bytes", limit_mb << 20)
        except OSError as e:
            with contextlib.suppress(OSError):
                self.path.rmdir()
            raise MemoryLimitUnavailable(f"cannot make a memory cgroup at {self.path}: {e}") from None

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value))

    def _read(self, name: str) -> int:
        return int((self.path / name).read_text().split()[0])

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` run by a shell that first moves itself into the cgroup, then execs (same pid)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *cmd]

    def take_peak(self) -> int:
        """The cgroup's peak charge since the last call, in KiB (anonymous and file pages)."""
        peak = self._read("memory.max_usage_in_bytes") >> 10
        self._write("memory.max_usage_in_bytes", 0)
        return peak

    def oom_kills(self) -> int:
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def close(self) -> str | None:
        """Removes the cgroup (every process of it stopped first); what went wrong, if anything."""
        try:
            self.path.rmdir()
        except OSError as e:
            return f"memory cgroup {self.path} left behind: {e}"
        return None


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
    (`tree_cpu` above): the coordinator's snapshot processes are its cost too."""
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
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
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
            argv = [PY, "-m", "tools.bench.harness", "_serve", "--counters", str(self.counters_path),
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
    """`python -m tools.bench.harness _serve --counters FILE --batch-max N -- COORDINATOR ARGS`."""
    ap = argparse.ArgumentParser(prog="python -m tools.bench.harness _serve")
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


if __name__ == "__main__":
    if sys.argv[1:2] != ["_serve"]:
        sys.exit("usage: python -m tools.bench.harness _serve --counters FILE --batch-max N -- COORDINATOR ARGS")
    sys.exit(_serve(sys.argv[2:]))
