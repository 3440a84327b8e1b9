"""Simulated workers for the coordinator benches: raw `Coordinator.Session` clients (hello,
heartbeats, every pushed group's cells reported completed, group finished once acked), run in
client processes of their own (`python -m tools.bench.clients CONFIG.json`, one JSON line of
results on stdout) until a stop file or a hard deadline; and the no-op spec they run.
"""
from __future__ import annotations

import asyncio
import collections
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from common.fleetpb import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tools.bench.harness import CLIENT_MESSAGE_BYTES_MAX, PY, Coordinator, Proc, cpu_seconds, mono, raise_nofile

ENVIRONMENT_ID = "env-bench-coordinator-1"
SUBJECTS = 3
CLIENT_DEADLINE_S = 600  # hard stop of any client process, whatever the parent does


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
    """`python -m tools.bench.clients CONFIG.json`: prints one JSON line."""
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
            argv = [PY, "-m", "tools.bench.clients", str(cfg_path)]
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


if __name__ == "__main__":
    sys.exit(_client(sys.argv[1:]))
