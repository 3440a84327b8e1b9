"""The actor: one thread owns the core state and the write-ahead store.

Order, fixed, for every batch of requests taken from the queue:
  0. gather: a command that meets a busy actor (its last commit ended less than
     ACTOR_GATHER_AFTER_MS ago) waits ACTOR_GATHER_WAIT_MS for the commands behind it, so
     that they share one commit; an isolated one, a query or a chore does not wait;
  1. decode: callers hand in requests that build their command from `now_ms` (the actor's
     clock, so that time in the log never goes backwards);
  2. step: each command goes through the pure core, in queue order;
  3. commit: the durable commands of the whole batch are appended in ONE LMDB transaction
     (group commit);
  4. send: only then are outcomes and effects handed to the event loop for delivery.
Nothing leaves the process before the commit it depends on.

Snapshots are encoded off the actor thread, by a process of their own
(coordinator/snapshotter.py, spawned, not forked: a fork's page tables and copy-on-write
faults stalled the coordinator): it folds the store to the index of the last commit, exactly
as recovery does, and writes the encoding into a pipe; a reader thread hands the bytes to the
actor part by part as they arrive (parts of SNAPSHOT_PART_BYTES, at most
SNAPSHOT_PARTS_AHEAD_MAX held), and the actor stores each (LMDB writes are the actor's) in one
short transaction between two batches, then, once the process exited cleanly, the manifest
that makes the snapshot exist, then retention's deletions in bounded steps; commits go on
meanwhile. The actor thread pays the spawn and each part's write, not the encoding. Should
the process fail, that snapshot and the later ones are encoded on the actor thread instead.

A storage error is fail-stop:
the process exits with a clear line and recovers from disk on restart. An assertion failure
(an invariant of ours broken) ends the process the same way; it is never caught and
carried on from.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import os
import queue
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog

from common.ids import WorkerId
from common.limits import (
    ACTOR_GATHER_AFTER_MS,
    ACTOR_GATHER_WAIT_MS,
    ACTOR_QUEUE_COMMANDS_MAX,
    COMMIT_BATCH_COMMANDS_MAX,
    COMPACT_STEP_KEYS_MAX,
    COORDINATOR_STALL_MS,
    SNAPSHOT_CHILD_MEMORY_BASE_BYTES,
    SNAPSHOT_CHILD_MEMORY_FACTOR,
    SNAPSHOT_PART_BYTES,
    SNAPSHOT_PARTS_AHEAD_MAX,
)
from common.rejections import Rejection
from coordinator import codec, headroom, snapshotter
from coordinator.core import commands as c
from coordinator.core import step
from coordinator.core.effects import (
    Emit,
    EndSession,
    NotifyRunState,
    OfferRun,
    PushAssignment,
    RefuseRun,
    RequestDrain,
    RevokeAssignment,
    Transition,
    rejected,
)
from coordinator.core.state import State
from coordinator.config import TICK_MS_DEFAULT
from coordinator.errors import DISK_ROOM_BYTES, StorageError, StoreIOError, disk_nearly_full, fail_stop
from coordinator.logcodec import encode_cell_reported, encode_record
from coordinator.recovery import recover_with_time, store_path
from coordinator.snapshot import FORMAT_TAG, no_gc, write_state
from coordinator.store import Store

log = structlog.get_logger("fleet.actor")
SNAPSHOT_HANDOVER_S = 60  # how long the reader thread waits for room in the actor's queue


def _commands_of(req: Request, clock: Callable[[], int]) -> Iterator[tuple[int, object, Any]]:
    """(time, command, its wire report or None) for each command of a `reports` or `many`
    request: a ReportBatch's rows at one time for the frame, or each `make` at its own."""
    if req.reports is not None:
        batch = req.reports
        now = clock()
        worker_id, made = batch.worker_id, codec.cell_reported
        for row, wire in zip(batch.rows, batch.wire, strict=True):
            yield now, made(now, worker_id, row), wire
    else:
        assert req.many is not None
        for make in req.many:
            now = clock()
            yield now, make(now), None


class Overloaded(Exception):
    """The actor's queue is full, or the actor is stopping. The servicer retries a while where a
    reply is awaited (`_put`), answers a worker's frame with a rejection the worker resends, and
    drops soft news (liveness) that the next pass carries again."""


class _PartsOut:
    """A file for `write_state` that stores what it is given as the snapshot's parts of
    `size` bytes (the snapshot process's), each in a transaction of its own as it fills."""

    def __init__(self, store: Store, index: int, size: int) -> None:
        self._store, self._index, self._size = store, index, size
        self._buf = bytearray()
        self.parts = self.total = self.crc = 0
        self.store_s = 0.0  # of the part writes

    def write(self, data: bytes) -> int:
        self._buf += data
        while len(self._buf) >= self._size:
            self._put(bytes(self._buf[:self._size]))
            del self._buf[:self._size]
        return len(data)

    def flush(self) -> None:
        if self._buf or not self.parts:
            self._put(bytes(self._buf))
            self._buf.clear()

    def _put(self, part: bytes) -> None:
        t = time.perf_counter()
        self._store.write_snapshot_part(self._index, self.parts, part)
        self.store_s += time.perf_counter() - t
        self.crc = zlib.crc32(part, self.crc)
        self.total += len(part)
        self.parts += 1


@dataclass(slots=True)
class Reply:
    """Where a worker frame's answer goes: an Ack on `session` for each of `seqs` (a
    ReportBatch: one seq per row), built and sent by the edge after the commit, with the
    batch's pushes (edge.Hub.on_batch), from data rather than a closure per frame.
    `received`: perf_counter when the frame arrived, for the slot_refill histogram when
    `refill`."""

    session: Any  # edge.Session (the edge imports the actor, not the other way)
    seqs: tuple[int, ...]
    received: float = 0.0
    refill: bool = False
    batch: bool = False  # a ReportBatch's: answered with AckBatch frames where the worker reads them


@dataclass(slots=True)
class Request:
    """A command to apply (`make(now_ms)`) or a read-only `query(state)`; `done` receives the
    Transition or the query's value on the event loop after the commit, or, for a worker's
    frame, `reply` says where its Ack goes."""

    make: Callable[[int], object] | None = None
    query: Callable[[State], Any] | None = None
    done: Callable[[Any], None] | None = None
    many: list[Callable[[int], object]] | None = None  # several commands; `done` gets their Transitions
    chore: Callable[[], None] | None = None  # the actor's own work between batches (a snapshot to store)
    reports: Reports | None = None  # a ReportBatch's reports; `done` gets their Transitions
    reply: Reply | None = None


@dataclass(slots=True)
class Reports:
    """The reports of one ReportBatch, as rows: each becomes a `CellReported` of `worker_id`
    at the request's time (they arrived together). `wire[i]` is the worker's message row i was
    decoded from (or None), which its log record copies instead of encoding the Python object
    again. Rows rather than a command-making closure each: a closure built on the loop and
    called on the actor, and a clock read per report, were 1 us a report."""

    worker_id: WorkerId
    rows: list[codec.ReportRow]
    wire: list[Any]


@dataclass(slots=True)
class Outgoing:
    """A frame for one worker."""

    worker_id: str
    frame: Any


@dataclass(slots=True)
class Batch:
    """What one commit hands back to the event loop, routed there in this order (edge.Hub.on_batch)."""

    completions: list[tuple[Callable[[Any], None], Any]] = field(default_factory=list)
    replies: list[tuple[Reply, Any]] = field(default_factory=list)  # each with its Transition(s)
    outgoing: list[Outgoing] = field(default_factory=list)
    broadcast: list[Any] = field(default_factory=list)  # frames for every connected worker
    # Events for logs, metrics and watchers, in order, each with its time: one or more per
    # cell, so a pair each rather than a record.
    events: list[tuple[Emit, int]] = field(default_factory=list)


# The snapshot process: a module run with this interpreter (tests put a stand-in here).
SNAPSHOTTER_MODULE = "coordinator.snapshotter"
SNAPSHOT_PROCESS_FAILURES_MAX = 3  # failed in a row: snapshots are then encoded on the actor thread
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the child imports from here


class Actor:
    def __init__(self, store: Store, state: State, index: int, *,
                 deliver: Callable[[Batch], None],
                 clock_ms: Callable[[], int] | None = None,
                 tick_ms: int = TICK_MS_DEFAULT,
                 batch_max: int = COMMIT_BATCH_COMMANDS_MAX,
                 on_commit: Callable[[int, float], None] | None = None,
                 last_now_ms: int = 0,
                 snapshot_in_child: bool = hasattr(os, "posix_spawn"),
                 snapshot_part_bytes: int = SNAPSHOT_PART_BYTES,
                 on_snapshot: Callable[[dict], None] | None = None,
                 gather_ms: float = ACTOR_GATHER_WAIT_MS,
                 gather_after_ms: float = ACTOR_GATHER_AFTER_MS,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._state = state
        self._index = index
        self._deliver = deliver
        self._clock = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._last_now = last_now_ms  # time in the log never goes backwards, across restarts too
        self._queue: queue.Queue[Request | None] = queue.Queue(maxsize=ACTOR_QUEUE_COMMANDS_MAX)
        self._tick_ms = tick_ms
        self._tick_pending = threading.Event()
        self._stopping = threading.Event()
        self._batch_max = batch_max
        self._parts: dict[str, codec.RunParts] = {}
        self._on_commit = on_commit  # (records, seconds) of each group commit, for metrics
        self._thread = threading.Thread(target=self._main, name="fleet-actor", daemon=True)
        self._ticker = threading.Thread(target=self._tick_loop, name="fleet-ticker", daemon=True)
        self._snapshot_in_child = snapshot_in_child
        self._snapshot_part_bytes = snapshot_part_bytes
        self._chores: collections.deque[Callable[[], None]] = collections.deque()  # actor thread only
        self._snapshot_pending: int | None = None  # index of the snapshot a child is encoding
        self._snapshot_failures = 0  # snapshot processes failed in a row
        self._snapshot_process_fitted = True  # the last judgement of _snapshot_process_fits
        self._on_snapshot = on_snapshot  # timings of each snapshot, for benchmarks
        self._gather_s = gather_ms / 1000  # 0: never wait for more
        self._gather_after_s = gather_after_ms / 1000
        self._sleep = sleep
        self._busy_until = 0.0  # perf_counter before which a command meets a busy actor
        self.gathers = 0  # waits for more commands (for benchmarks and tests)
        self.commits = 0  # batches committed (for benchmarks and metrics)
        self.records = 0
        self.last_now_ms = 0
        self.stalls = 0  # CoordinatorStalled commands applied (for tests and metrics)
        self._monotonic = monotonic
        self._last_tick_mono = monotonic()  # when the actor last applied a tick
        self._loop_beat: float | None = None  # when the event loop last said it is alive
        self._stall_s = COORDINATOR_STALL_MS / 1000
        # A full disk: the reason while the coordinator serves reads only (`_degrade`), and when
        # it last tried whether the disk takes writes again.
        self.read_only = ""
        self._probed_mono = 0.0

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._last_tick_mono = self._monotonic()
        self._thread.start()
        if self._tick_ms > 0:
            self._ticker.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Apply what is queued, write a snapshot, stop the thread."""
        self._stopping.set()
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._ticker.is_alive():
            self._ticker.join(timeout_s)

    # -- entry points (any thread) ---------------------------------------------------------------
    def submit(self, request: Request) -> None:
        if self._stopping.is_set():
            raise Overloaded("the coordinator is shutting down")
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise Overloaded(f"actor queue holds {ACTOR_QUEUE_COMMANDS_MAX} requests") from None

    def loop_beat(self) -> None:
        """The event loop that reads the workers' frames is running (any thread; coordinator/main.py
        calls it every LOOP_BEAT_MS from the loop). Until the first beat, only ticks are judged."""
        self._loop_beat = self._monotonic()

    # -- the thread ----------------------------------------------------------------------------
    def _now(self) -> int:
        now = self._clock()
        if now < self._last_now:
            now = self._last_now  # a wall clock stepped back: time in the log never does
        self._last_now = now
        self.last_now_ms = now
        return now

    def _tick_loop(self) -> None:
        while not self._stopping.wait(self._tick_ms / 1000):
            if self._tick_pending.is_set():
                continue  # coalesce: one tick in the queue is enough
            self._tick_pending.set()
            try:
                self._queue.put_nowait(Request(make=self._tick))
            except queue.Full:
                self._tick_pending.clear()

    def _tick(self, now: int) -> object | None:
        """The clock's tick, unless the coordinator was not itself since the last one: then a
        CoordinatorStalled in its place (its own silence expires nobody), and nothing at all
        while the event loop is blocked now (time stands still for liveness meanwhile)."""
        self._tick_pending.clear()
        mono = self._monotonic()
        beat = self._loop_beat
        if beat is not None and mono - beat > self._stall_s:
            return None  # the loop that would read the workers' heartbeats is not running
        gap = mono - self._last_tick_mono
        self._last_tick_mono = mono
        if gap > self._stall_s:
            self.stalls += 1
            stalled_ms = round(gap * 1000)
            log.warning("coordinator_stalled", stalled_ms=stalled_ms,
                        detail="the coordinator itself was not running (frozen, paused, blocked): "
                               "every worker gets the recovery grace")
            return c.CoordinatorStalled(now, stalled_ms)
        return c.ClockTicked(now)

    def _main(self) -> None:
        try:
            self._serve()
        except StorageError as e:
            fail_stop(e)
        except BaseException as e:  # an invariant of ours broke: crash, recover from disk
            log.critical("actor_crashed", error=repr(e))
            print(f"fleet-coordinator: internal error in the actor: {e!r}; restart recovers from disk",
                  file=sys.stderr, flush=True)
            os._exit(70)

    def _serve(self) -> None:
        while True:
            if self._chores:
                # Snapshot parts and compaction steps go one at a time between batches: each
                # is one short transaction, and requests never wait behind all of them.
                try:
                    first = self._queue.get_nowait()
                except queue.Empty:
                    self._chore(self._chores.popleft())
                    continue
            else:
                first = self._queue.get()
            if first is None:
                self._drain_and_close()
                return
            if (self._gather_s and first.chore is None and first.query is None
                    and time.perf_counter() < self._busy_until):
                # Gather: sleep, not wait on the queue, which would wake this thread (and make
                # it contend for the GIL) once per command that arrives meanwhile.
                self.gathers += 1
                self._sleep(self._gather_s)
            batch = [first]
            while len(batch) < self._batch_max:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # handle the stop after this batch
                    break
                batch.append(nxt)
            self._apply(batch)
            if self._chores:
                self._chore(self._chores.popleft())

    def _chore(self, chore: Callable[[], None]) -> None:
        """Snapshot parts and compaction: on a full disk they wait (dropped: the next snapshot
        starts over), everything else is fail-stop as before."""
        if self.read_only:
            return
        try:
            chore()
        except StoreIOError as e:
            if not e.disk_full:
                raise
            self._chores.clear()
            self._enter_read_only(e)

    def _drain_and_close(self) -> None:
        rest: list[Request] = []
        while True:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is not None:
                rest.append(nxt)
        if rest:
            self._apply(rest)
        newest = self._store.snapshot_indexes[-1] if self._store.snapshot_indexes else 0
        if self._index > newest and not self.read_only:
            try:
                self._snapshot_here(self._index)  # a fast next start
            except StoreIOError as e:
                if not e.disk_full:
                    raise
                log.warning("final_snapshot_skipped", error=e.what, detail="the disk is full; the log has it all")
        log.info("actor_stopped", last_index=self._index)

    def _apply(self, requests: list[Request]) -> None:
        if self.read_only and not self._writable_again():
            self._refuse(requests)
            return
        out = Batch()
        records: list[bytes] = []
        effects: list[tuple[int, tuple[object, ...]]] = []  # each transition's, with its time
        state = self._state
        for req in requests:
            if req.chore is not None:
                self._chore(req.chore)
                continue
            if req.query is not None:
                value = req.query(state)
                if req.done is not None:
                    out.completions.append((req.done, value))
                continue
            if req.reports is not None or req.many is not None:
                transitions = []
                for now, cmd, wire in _commands_of(req, self._now):
                    state, t = step(state, cmd)
                    for durable in t.durable:
                        self._index += 1
                        if durable is cmd and wire is not None:
                            records.append(encode_cell_reported(self._index, durable, wire))
                        else:
                            records.append(encode_record(self._index, durable))
                    if t.effects:
                        effects.append((now, t.effects))
                    transitions.append(t)
                if req.reply is not None:
                    out.replies.append((req.reply, transitions))
                elif req.done is not None:
                    out.completions.append((req.done, transitions))
                continue
            assert req.make is not None
            now = self._now()
            cmd = req.make(now)
            if cmd is None:
                continue  # a tick withheld (`_tick`)
            # A run's records are built at once and live as long as the process: build (and
            # log) them without collections (3x faster at 300,000 cells), then keep them out
            # of every later collection's walk.
            big = isinstance(cmd, c.RunSubmitted)
            with no_gc() if big else contextlib.nullcontext():
                state, t = step(state, cmd)
                for durable in t.durable:
                    self._index += 1
                    records.append(encode_record(self._index, durable))
                if big:
                    gc.freeze()  # before the collector is enabled again (see recovery.recover_with_time)
            if t.effects:
                effects.append((now, t.effects))
            if req.reply is not None:
                out.replies.append((req.reply, t))
            elif req.done is not None:
                out.completions.append((req.done, t))
        self._state = state
        if records:
            started = time.perf_counter()
            try:
                self._store.append(records)  # durable from here on; StorageError is fail-stop
            except StoreIOError as e:
                if not e.disk_full:
                    raise
                self._degrade(e, requests)  # but a full disk is not: reads go on
                return
            self._busy_until = time.perf_counter() + self._gather_after_s
            self.commits += 1
            self.records += len(records)
            if self._on_commit is not None:
                self._on_commit(len(records), time.perf_counter() - started)
        for now, fx in effects:
            for e in fx:
                self._route(now, e, out)
        if out.completions or out.replies or out.outgoing or out.broadcast or out.events:
            self._deliver(out)
        if records and self._store.snapshot_due and self._snapshot_pending is None:
            self._begin_snapshot()

    # -- a full disk -------------------------------------------------------------------------------
    # The log cannot be written: the coordinator stays up and serves reads (status, results,
    # watch, metrics) from the state on disk, refuses every command with STORAGE_FULL (workers
    # keep their reports in their outboxes and send them again), applies no tick (so the time
    # spent read-only is, once writing resumes, a CoordinatorStalled: nobody is expired for it),
    # and tries a small write at most once a second until the disk takes it.

    def _enter_read_only(self, err: StoreIOError) -> None:
        self.read_only = f"{err.what}: {err.advice}"
        self._probed_mono = self._monotonic()
        self._snapshot_pending = None  # its parts wait for nothing: the next snapshot starts over
        log.error("storage_full_read_only", error=err.what, path=str(err.path), advice=err.advice)
        print(f"fleet-coordinator: the disk is full: {err.what}: {err.path}: serving reads only, "
              "refusing writes until there is room again", file=sys.stderr, flush=True)

    def _degrade(self, err: StoreIOError, requests: list[Request]) -> None:
        """The batch's commit failed on a full disk: nothing of it is durable, so the state goes
        back to what the disk holds, and the batch is answered as refused."""
        self._enter_read_only(err)
        self._store.reopen()  # LMDB after a failed commit is not trusted; StoreCorrupt is fail-stop
        self._state, self._index, _ = recover_with_time(self._store)
        self._refuse(requests)

    def _writable_again(self) -> bool:
        mono = self._monotonic()
        if mono - self._probed_mono < 1.0:
            return False
        self._probed_mono = mono
        if disk_nearly_full(store_path(self._store), DISK_ROOM_BYTES):
            return False  # a small write may still fit in the log's free pages: wait for room
        try:
            self._store.probe_write()
        except StoreIOError as e:
            if not e.disk_full:
                raise
            self._store.reopen()
            return False
        log.warning("storage_writable_again", detail="the disk takes writes again: commands are applied")
        print("fleet-coordinator: the disk takes writes again", file=sys.stderr, flush=True)
        self.read_only = ""
        return True

    def _refuse(self, requests: list[Request]) -> None:
        """Answer `requests` read-only: queries from the state, commands refused unapplied."""
        out = Batch()
        refused = Transition(rejected(Rejection.STORAGE_FULL, "the coordinator's disk is full: it serves reads "
                                      "only until there is room; nothing was changed, send it again later"))
        for req in requests:
            if req.chore is not None:
                continue
            if req.query is not None:
                value = req.query(self._state)
            elif req.make is not None and getattr(req.make, "__func__", None) is Actor._tick:
                self._tick_pending.clear()  # time stands still for liveness meanwhile
                continue
            elif req.reports is not None or req.many is not None:
                value = [refused for _ in _commands_of(req, self._now)]
            else:
                value = refused
            if req.reply is not None:
                out.replies.append((req.reply, value))
            elif req.done is not None:
                out.completions.append((req.done, value))
        if out.completions or out.replies:
            self._deliver(out)

    # -- snapshots -------------------------------------------------------------------------------
    def _begin_snapshot(self) -> None:
        index = self._index
        if not self._snapshot_in_child or not self._snapshot_process_fits(index):
            started = time.perf_counter()
            out = self._snapshot_here(index)
            self._snapshot_done(index, out.total, encode_s=time.perf_counter() - started - out.store_s,
                                spawn_s=0.0, store_s=out.store_s, parts=out.parts, in_child=False)
            self._chores.append(self._compact)
            return
        started = time.perf_counter()
        r, w = os.pipe()
        try:
            pid = self._spawn_snapshotter(index, w)
        except OSError as e:
            os.close(r)
            log.warning("snapshot_process_not_started", index=index, error=str(e))
            self._snapshot_in_child = False  # encode here from now on: progress over speed
            self._begin_snapshot()
            return
        finally:
            os.close(w)
        spawn_s = time.perf_counter() - started
        self._snapshot_pending = index
        threading.Thread(target=self._collect_snapshot, args=(pid, r, index, spawn_s, started),
                         name="fleet-snapshot", daemon=True).start()

    def _snapshot_process_fits(self, index: int) -> bool:
        """Whether a snapshot process (a second copy of the state) fits in the memory the host
        and the coordinator's cgroups have left; logged when the answer changes. Unknown: yes."""
        anon, room = headroom.own_anonymous_bytes(), headroom.room_bytes()
        if anon is None or room is None:
            return True
        need = int(anon * SNAPSHOT_CHILD_MEMORY_FACTOR) + SNAPSHOT_CHILD_MEMORY_BASE_BYTES
        fits = room >= need
        if fits != self._snapshot_process_fitted:
            self._snapshot_process_fitted = fits
            if fits:
                log.info("snapshot_process_fits_again", index=index, need_mb=need >> 20, room_mb=room >> 20)
            else:
                log.warning("snapshot_process_skipped", index=index, need_mb=need >> 20, room_mb=room >> 20,
                            detail="a snapshot process would not fit in the memory left (it holds a second copy "
                                   "of the state): snapshots are encoded on the actor thread, which stalls it, "
                                   "until there is room")
        return fits

    def _snapshot_here(self, index: int) -> _PartsOut:
        """The state encoded on this thread, into the store's parts as it is pickled (each part a
        transaction, then the manifest: the snapshot process's format), never as one bytes
        object: at a million cells that object (265 MB) and the transaction that wrote it whole
        (as many dirty pages again) were a fifth of a 2 GB host on top of the state. The actor
        stalls for the whole encode: the fallback when no snapshot process can be had, and the
        stop's final snapshot."""
        out = _PartsOut(self._store, index, self._snapshot_part_bytes)
        try:
            write_state(out, self._state)
            out.flush()
        except BaseException:
            self._store.abandon_parts(index)  # orphans, deleted by the compaction steps
            raise
        t = time.perf_counter()
        self._store.finish_snapshot(index, out.parts, out.total, out.crc)
        out.store_s += time.perf_counter() - t
        return out

    def _spawn_snapshotter(self, index: int, w: int) -> int:
        """The snapshot process for `index`, its fd 3 the pipe's write end, its stdout
        /dev/null, its stderr ours. posix_spawn (vfork underneath): the coordinator's memory is
        not copied, not even its page tables."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        argv = [sys.executable, "-m", SNAPSHOTTER_MODULE, store_path(self._store), str(index), str(os.getpid())]
        spare = os.dup(w) if w == snapshotter.OUT_FD else None  # dup2 onto itself would keep close-on-exec
        try:
            return os.posix_spawn(sys.executable, argv, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, w if spare is None else spare, snapshotter.OUT_FD),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
        finally:
            if spare is not None:
                os.close(spare)

    def _collect_snapshot(self, pid: int, r: int, index: int, spawn_s: float, started: float) -> None:
        """Reader thread: the child's bytes, handed to the actor one part at a time as they
        arrive (each a chore: one short transaction between batches), then the manifest once
        the child has exited cleanly. At most SNAPSHOT_PARTS_AHEAD_MAX parts are held here: the
        coordinator never holds the whole snapshot (264 MB at a million cells, twice that while
        it was joined into one bytes object: the peak RSS of a read that overlapped a snapshot),
        and the actor never pays for joining, copying or checksumming it."""
        size = self._snapshot_part_bytes
        room = threading.BoundedSemaphore(SNAPSHOT_PARTS_AHEAD_MAX)
        stalls: list[float] = []
        head = b""
        crc = total = parts = 0
        handed = True

        def part(i: int, data: bytes) -> None:
            try:
                if self._snapshot_pending != index:
                    return  # abandoned (a newer snapshot was stored at shutdown)
                t = time.perf_counter()
                self._store.write_snapshot_part(index, i, data)
                stalls.append(time.perf_counter() - t)
            finally:
                room.release()

        with os.fdopen(r, "rb") as f:
            while chunk := f.read(size):
                if len(head) < len(FORMAT_TAG):
                    head += chunk[:len(FORMAT_TAG) - len(head)]
                crc = zlib.crc32(chunk, crc)
                total += len(chunk)
                # Bounded: a slow actor makes this thread wait, and the child wait on its pipe.
                handed = (room.acquire(timeout=SNAPSHOT_HANDOVER_S)
                          and self._hand(lambda i=parts, data=chunk: self._chores.append(lambda: part(i, data))))
                if not handed:
                    break  # closing the pipe ends the child (EPIPE)
                parts += 1
        _, status = os.waitpid(pid, 0)
        encode_s = time.perf_counter() - started
        ok = handed and os.waitstatus_to_exitcode(status) == 0 and head == FORMAT_TAG

        def finish() -> None:
            if self._snapshot_pending != index:
                return
            self._snapshot_pending = None
            if not ok:
                self._store.abandon_parts(index)  # orphans, deleted by the compaction steps
                self._chores.append(self._compact)
                if handed:
                    self._snapshot_failures += 1
                    # A process that failed is tried again at the next batch (a transient cause
                    # must not cost every later snapshot a stall of the actor); after a few
                    # failures in a row, encode here from now on: progress over speed.
                    giving_up = self._snapshot_failures >= SNAPSHOT_PROCESS_FAILURES_MAX
                    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
                    log.warning("snapshot_child_failed", index=index, exit_status=status,
                                failures=self._snapshot_failures, encode_in_actor_from_now=giving_up,
                                **({"cause": "killed by SIGKILL: most likely the kernel's OOM killer (the "
                                              "snapshot process holds a second copy of the state and "
                                              "volunteers to be killed first)"} if killed else {}))
                    if giving_up:
                        self._snapshot_in_child = False
                return
            self._snapshot_failures = 0
            newest = self._store.snapshot_indexes[-1] if self._store.snapshot_indexes else 0
            if index <= newest:
                return
            t = time.perf_counter()
            self._store.finish_snapshot(index, parts, total, crc)
            stalls.append(time.perf_counter() - t)
            self._snapshot_done(index, total, encode_s=encode_s, spawn_s=spawn_s,
                                store_s=sum(stalls), store_stall_max_s=max(stalls), parts=parts,
                                in_child=True)
            self._chores.append(self._compact)

        # After every part's chore (the actor runs chores in order); a failed hand-over above
        # leaves the snapshot pending, so the manifest's own hand-over is the last attempt.
        if not self._hand(lambda: self._chores.append(finish)):
            self._snapshot_pending = None  # the next batch that commits starts the snapshot again

    def _hand(self, chore: Callable[[], None]) -> bool:
        """Give the actor thread a chore to queue (from another thread); False if it is too busy."""
        try:
            self._queue.put(Request(chore=chore), timeout=SNAPSHOT_HANDOVER_S)
            return True
        except queue.Full:
            return False

    def _compact(self) -> None:
        """One bounded step of deleting what retention freed; again until nothing is left."""
        if self._store.compaction_due:
            self._store.compact_step(COMPACT_STEP_KEYS_MAX)
            if self._store.compaction_due:
                self._chores.append(self._compact)

    def _snapshot_done(self, index: int, size: int, **timings: Any) -> None:
        log.info("snapshot_written", index=index, bytes=size, behind=self._index - index,
                 **{k: round(v, 4) if isinstance(v, float) else v for k, v in timings.items()})
        if self._on_snapshot is not None:
            self._on_snapshot(dict(index=index, bytes=size, behind=self._index - index, **timings))

    def _route(self, now: int, e: object, out: Batch) -> None:
        # Most common first: an event per cell, a push per group.
        if isinstance(e, Emit):
            out.events.append((e, now))
        elif isinstance(e, PushAssignment):
            parts = self._parts.get(e.run_id)
            if parts is None:
                parts = self._parts[e.run_id] = codec.RunParts.of(self._state.runs[e.run_id].spec)
            out.outgoing.append(Outgoing(e.worker_id, codec.push_frame(e, parts, now)))
        elif isinstance(e, RevokeAssignment):
            out.outgoing.append(Outgoing(e.worker_id, codec.revoke_frame(e)))
        elif isinstance(e, RequestDrain):
            out.outgoing.append(Outgoing(e.worker_id, codec.drain_frame(e)))
        elif isinstance(e, OfferRun):
            out.outgoing.append(Outgoing(e.worker_id, codec.offer_frame(e)))
        elif isinstance(e, RefuseRun):
            out.outgoing.append(Outgoing(e.worker_id, codec.refused_frame(e)))
        elif isinstance(e, NotifyRunState):
            out.broadcast.append(codec.run_state_frame(e))
            out.events.append((Emit("run_state", e.run_id, e.run_id,
                                    e.blocked_reason or ("paused" if e.paused else "resumed")), now))
        elif isinstance(e, EndSession):
            pass  # the requester's `done` ends it: the sessions are the servicer's
        else:
            raise AssertionError(f"unrouted effect {e!r}")

