"""The python executor: a subject and a verifier as in-process callables, for measuring
fleet's own overhead and for benchmarks that are plain Python.

Rules. Callables are `module:function` imported from the bench root (added to sys.path
once per root, after the worker's own paths so a bench module cannot shadow the standard
library); an import failure is a deterministic environment failure. The subject runs in a
worker thread as `fn(ctx)`; returning is COMPLETED, raising is SUBJECT_FAILED, raising an
exception named `InfrastructureError` is UNKNOWN (retried). Raising it after writing
throttled.json into `ctx.output_dir` is the command executor's exit 75 with that file: the
model provider refused the subject, a throttled report, never verified nor scored (the
exception's `usage` attribute, if any, is its usage). A timeout is a measured
failure, but a thread cannot be killed, so it may still be running: the detail says so.
The verifier runs as `fn(ctx, subject_result)` and returns a number or {"score": x}.
No subprocess and no file per cell unless the callables write into `ctx.output_dir`.

One thread hop per cell: the worker thread that ran the subject goes on to the verifier
(waking a thread costs more than a no-op cell), each with its own timeout measured by the
event loop. Should the loop give up on the subject first (its timeout, a cancel), a lock
decides once whether the thread was still in the subject, and then it never starts the
verifier; the verifier runs in a thread of its own, as it always did after a timeout.
"""
from __future__ import annotations

import asyncio
import importlib
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from common.evidence import ArtifactUnavailable, Cleanup, Execution, Report, Status, Usage, Verification
from common.limits import ARTIFACTS_PER_REPORT_MAX, CELL_THREADS_MAX, ID_CHARS_MAX
from common.spec import VERIFIER_TIMEOUT_SECONDS_DEFAULT
from worker.executor.base import (
    THROTTLED_FILE,
    AttemptDirs,
    CancelEvent,
    CellJob,
    CellOutcome,
    LocalArtifact,
    Redactor,
    copy_task_dir,
    declared_credentials,
    now_ms,
    one_line,
    output_artifacts,
    read_throttled,
    remove_tree,
    score_of,
    seal,
    usage_fields,
)

INFRASTRUCTURE_ERROR_NAME = "InfrastructureError"


class InfrastructureError(Exception):
    """Raise from a subject when the infrastructure failed, not the subject (a provider
    outage, a lost connection to a sandbox): the attempt is UNKNOWN and the cell is retried.
    Raised after writing `ctx.output_dir / "throttled.json"`, the provider throttled the
    subject (docs/configuration.md); a `usage` attribute (the dict a subject returns as its
    "usage") is the usage observed before the refusal. Benchmarks that cannot import fleet
    may define their own class of this name."""


class CellContext:
    """What a subject or verifier callable is given. The work and output dirs are created on
    first use: a cell whose callables touch neither costs no directory at all."""

    __slots__ = ("task", "params", "repetition", "credentials", "attempt_id", "run_id", "cell_id",
                 "task_id", "subject_id", "bench_root", "_dirs")

    def __init__(self, *, task: dict[str, Any], params: dict[str, Any], repetition: int,
                 dirs: AttemptDirs, credentials: Mapping[str, str], attempt_id: str, run_id: str,
                 cell_id: str, task_id: str, subject_id: str, bench_root: Path) -> None:
        self.task = task  # the task's JSON object from the spec (a copy)
        self.params = params  # the subject's (or, for the verifier, the verifier's) params
        self.repetition = repetition
        self.credentials = credentials  # the subject's declared credentials; empty for the verifier
        self.attempt_id = attempt_id
        self.run_id = run_id
        self.cell_id = cell_id
        self.task_id = task_id
        self.subject_id = subject_id
        self.bench_root = bench_root
        self._dirs = dirs

    @property
    def work_dir(self) -> Path:
        """A fresh dir holding a copy of the task's dir; deleted after the cell."""
        self._dirs.work.mkdir(parents=True, exist_ok=True)
        return self._dirs.work

    @property
    def output_dir(self) -> Path:
        """Every file written here becomes an artifact `output/<relpath>`."""
        self._dirs.output.mkdir(parents=True, exist_ok=True)
        return self._dirs.output


_lock = threading.Lock()
_roots_on_path: set[str] = set()
_callables: dict[tuple[str, str], Callable[..., Any]] = {}


def _is_infrastructure_error(e: BaseException) -> bool:
    return any(c.__name__ == INFRASTRUCTURE_ERROR_NAME for c in type(e).__mro__)


def _import(bench_root: Path, target: str) -> Callable[..., Any] | str:
    """The callable `module:function`, or an environment failure reason. Slow path: may import."""
    module_name, sep, func_name = target.partition(":")
    if not sep or not module_name or not func_name:
        return f"import error: {target!r} is not 'module:function'"
    with _lock:
        root = str(bench_root.resolve())
        if root not in _roots_on_path:
            sys.path.append(root)
            _roots_on_path.add(root)
    try:
        module = importlib.import_module(module_name)
    except BaseException as e:  # a module's top level can raise anything, SystemExit included
        return one_line(f"import error: {module_name}: {type(e).__name__}: {e}", ID_CHARS_MAX)
    fn = getattr(module, func_name, None)
    if not callable(fn):
        return one_line(f"import error: {module_name} has no callable {func_name!r}", ID_CHARS_MAX)
    with _lock:
        _callables[(str(bench_root), target)] = fn
    return fn


async def _load(bench_root: Path, target: str) -> Callable[..., Any] | str:
    fn = _callables.get((str(bench_root), target))
    if fn is not None:
        return fn
    return await asyncio.to_thread(_import, bench_root, target)


class _CellThreads:
    """The threads that run subjects and verifiers: each call claims an idle thread, or
    starts one up to `threads_max` (past it, calls wait in the queue); each thread hands its
    result to the loop with one call_soon_threadsafe. asyncio's default executor costs more
    per hop (a semaphore in Python, a concurrent Future with its condition and callbacks,
    then a second future on the loop): `python -m tools.bench.hops` measures both. Threads
    are daemons: one that a timed-out subject never leaves does not hold the worker's exit
    (asyncio.run would wait for the default executor's threads at its end)."""

    def __init__(self, threads_max: int) -> None:
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[..., Any],
                                             tuple[Any, ...]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._threads_max = threads_max

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """`fn(*args)` in a thread; the future (of the running loop) gets its value or exception."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:  # claim an idle thread for this call, or start one
            start = self._idle <= 0 and self._threads < self._threads_max
            if start:
                self._threads += 1
                name = f"cell-{self._threads}"
            else:  # below zero: calls wait in the queue for the next thread that comes back
                self._idle -= 1
        self._queue.put((loop, fut, fn, args))
        if start:
            threading.Thread(target=self._main, name=name, daemon=True).start()
        return fut

    def _main(self) -> None:
        while True:
            loop, fut, fn, args = self._queue.get()
            try:
                outcome: tuple[bool, Any] = (True, fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the loop, never lost here
                outcome = (False, e)
            # Idle before the loop hears of the result: a caller it wakes, which calls again
            # at once, claims this thread rather than starting another.
            with self._lock:
                self._idle += 1
            try:
                loop.call_soon_threadsafe(_settle, fut, outcome)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this any more
            del loop, fut, fn, args, outcome


def _settle(fut: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if fut.done():  # cancelled: the loop stopped waiting
        return
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


# Cells of a worker run at once up to its slots times a group's cells; a subject that never
# returns keeps its thread, so the cap is well above what runs at once.
_cell_threads = _CellThreads(CELL_THREADS_MAX)


def _call(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """Runs in the worker thread; never raises, so nothing a callable does (SystemExit
    included) escapes into the event loop."""
    try:
        return True, fn(*args)
    except BaseException as e:  # noqa: BLE001 - the callable's failure is evidence
        return False, e


_TIMEOUT = object()
_CANCELLED = object()
_DONE = object()


class _Hop:
    """What the loop and the worker thread of one cell agree on, under `lock`: whether the
    subject returned (and when), and whether the loop gave up on it first."""

    __slots__ = ("lock", "subject", "subject_done_at", "abandoned")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.subject: tuple[bool, Any] | None = None
        self.subject_done_at = 0.0
        self.abandoned = False

    def give_up(self) -> bool:
        """True if the subject had not returned: the thread will not start the verifier."""
        with self.lock:
            if self.subject is None:
                self.abandoned = True
                return True
            return False


def _subject_then_verifier(hop: _Hop, subject_fn: Callable[..., Any], ctx: CellContext,
                           verifier_fn: Callable[..., Any], vctx: CellContext) -> tuple[tuple[bool, Any], Any]:
    """In the worker thread: the subject, then (unless the loop gave up on the subject, or it
    raised an infrastructure error) the verifier on its result. Never raises."""
    subject = _call(subject_fn, ctx)
    with hop.lock:
        if hop.abandoned:
            return subject, None
        hop.subject = subject
        hop.subject_done_at = time.monotonic()
    ok, value = subject
    if not ok and _is_infrastructure_error(value):
        return subject, None
    return subject, _call(verifier_fn, vctx, value if ok else None)


async def _wait(fut: asyncio.Future[Any], timeout_s: float, cancel: asyncio.Event) -> object:
    """_DONE, _TIMEOUT or _CANCELLED, whichever comes first. With a CancelEvent (the
    session's), on one future woken by whichever comes first; else with a task in `cancel.wait()`."""
    if not fut.done() and not cancel.is_set() and isinstance(cancel, CancelEvent):
        loop = asyncio.get_running_loop()
        wake = loop.create_future()

        def woken(_: object = None) -> None:
            if not wake.done():
                wake.set_result(None)

        fut.add_done_callback(woken)
        cancel.add_callback(woken)
        timer = loop.call_later(timeout_s, woken)
        try:
            await wake
        finally:
            timer.cancel()
            fut.remove_done_callback(woken)
            cancel.remove_callback(woken)
    elif not fut.done() and not cancel.is_set():
        cancelled = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait((fut, cancelled), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
    if cancel.is_set():
        return _CANCELLED
    return _DONE if fut.done() else _TIMEOUT


async def _race(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float,
                cancel: asyncio.Event) -> Any:
    """(ok, value) from the thread, or _TIMEOUT / _CANCELLED, whichever comes first."""
    call = _cell_threads.run(_call, fn, *args)
    cancelled = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait((call, cancelled), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancelled.cancel()
        if not call.done():
            call.cancel()  # the thread runs on; only our wait for it ends
    if cancel.is_set():
        return _CANCELLED
    if call.done() and not call.cancelled():
        return call.result()
    return _TIMEOUT


@dataclass(slots=True)
class _Evidence:
    execution: Execution = Execution.UNKNOWN
    verification: Verification = Verification.NOT_RUN
    score: float | None = None
    environment_failure: str = ""
    usage: Usage = Usage.MISSING
    usage_fields: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    throttled: str = ""  # the provider's refusal, from throttled.json; redacted and bounded at the end
    retry_after_ms: int = 0


class PythonExecutor:
    """Runs `executor.kind == "python"` cells. Stateless between cells: many run at once."""

    async def run(self, job: CellJob, cancel: asyncio.Event) -> CellOutcome:
        started = now_ms()
        ev = _Evidence()
        dirs = AttemptDirs.of(job.work_root, job.attempt_id)
        credentials, missing = declared_credentials(job)
        redactor = Redactor(credentials.values())
        if cancel.is_set():
            ev.notes.append("cancelled before the subject started")
            return self._finish(ev, dirs, redactor, started)
        if missing:
            ev.execution, ev.environment_failure = Execution.NOT_STARTED, missing
            return self._finish(ev, dirs, redactor, started)
        subject_fn = await _load(job.bench_root, job.subject.get("callable", ""))
        verifier_fn = await _load(job.bench_root, job.verifier.get("callable", ""))
        for role, fn in (("subject", subject_fn), ("verifier", verifier_fn)):
            if isinstance(fn, str):
                ev.execution = Execution.NOT_STARTED
                ev.environment_failure = fn
                ev.notes.append(f"the {role}'s callable could not be imported")
                return self._finish(ev, dirs, redactor, started)
        assert not isinstance(subject_fn, str) and not isinstance(verifier_fn, str)
        try:
            if os.path.lexists(dirs.root):
                remove_tree(dirs.root)  # a leftover of an earlier life of this worker
            if job.task.get("dir"):
                dirs.work.mkdir(parents=True)
                failure = await asyncio.to_thread(copy_task_dir, job.bench_root, job.task, dirs.work)
                if failure:
                    ev.execution, ev.environment_failure = Execution.NOT_STARTED, failure
                    return self._finish(ev, dirs, redactor, started)
        except OSError as e:
            ev.execution = Execution.NOT_STARTED
            ev.notes.append(f"could not prepare the attempt dir: {e.strerror or e}")
            return self._finish(ev, dirs, redactor, started)

        common = dict(task=dict(job.task), repetition=job.repetition, dirs=dirs,
                      attempt_id=job.attempt_id, run_id=job.run_id, cell_id=job.cell_id,
                      task_id=job.task_id, subject_id=job.subject_id, bench_root=job.bench_root)
        ctx = CellContext(params=dict(job.subject.get("params") or {}), credentials=dict(credentials), **common)
        vctx = CellContext(params=dict(job.verifier.get("params") or {}), credentials={}, **common)
        timeout_s = int(job.verifier.get("timeoutSeconds", VERIFIER_TIMEOUT_SECONDS_DEFAULT))
        hop = _Hop()
        both = _cell_threads.run(_subject_then_verifier, hop, subject_fn, ctx, verifier_fn, vctx)
        got: Any
        verified: Any = None  # the verifier's (ok, value) or _TIMEOUT; None: run it on its own below
        subject_deadline = time.monotonic() + job.subject_timeout_s
        while True:
            # The loop wakes at the subject's deadline, or earlier at the soonest moment the
            # verifier's could pass (had the subject returned just then); once the subject has
            # returned, at the verifier's own deadline. So both timeouts are kept exactly, and a
            # cell that ends in time costs one wait.
            now = time.monotonic()
            with hop.lock:
                done_at = hop.subject_done_at if hop.subject is not None else None
            if done_at is None:
                if now >= subject_deadline:
                    if hop.give_up():
                        got = _TIMEOUT
                        break
                    continue  # it returned just now
                wait_s = min(subject_deadline, now + timeout_s) - now
            else:
                if now >= done_at + timeout_s:
                    got, verified = hop.subject, _TIMEOUT
                    break
                wait_s = done_at + timeout_s - now
            waited = await _wait(both, wait_s, cancel)
            if waited is _CANCELLED:
                hop.give_up()
                return self._cancelled(ev, dirs, redactor, started)
            if waited is _DONE:
                got, verified = both.result()
                break
        subject_result: Any = None
        if got is _TIMEOUT:
            ev.execution = Execution.SUBJECT_FAILED
            ev.notes.append(f"timeout after {job.subject_timeout_s}s (a thread cannot be killed: "
                            "the subject may still be running)")
        else:
            ok, value = got
            throttle = read_throttled(dirs.output / THROTTLED_FILE) if not ok and _is_infrastructure_error(value) \
                else None
            if throttle is not None:
                # The provider refused the subject: neither a measurement nor the subject's
                # failure; the verifier was not started (_subject_then_verifier).
                ev.execution = Execution.SUBJECT_FAILED
                ev.throttled, ev.retry_after_ms = throttle.reason, throttle.retry_after_ms
                ev.notes.append(f"subject raised {type(value).__name__} with {THROTTLED_FILE}: throttled, "
                                "verifier skipped")
                if throttle.note:
                    ev.notes.append(throttle.note)
                said = getattr(value, "usage", None)
                if said is not None:
                    ev.usage, ev.usage_fields, note = usage_fields(said)
                    if note:
                        ev.notes.append(note)
                return await self._finish_async(ev, dirs, redactor, started)
            if ok:
                ev.execution = Execution.COMPLETED
                ev.notes.append("subject completed")
                subject_result = value
                if isinstance(value, dict) and "usage" in value:
                    ev.usage, ev.usage_fields, note = usage_fields(value["usage"])
                    if note:
                        ev.notes.append(note)
            elif _is_infrastructure_error(value):
                ev.execution = Execution.UNKNOWN
                ev.notes.append(f"subject infrastructure failure: {value}; verifier skipped")
                return await self._finish_async(ev, dirs, redactor, started)
            else:
                ev.execution = Execution.SUBJECT_FAILED
                ev.notes.append(f"subject raised {type(value).__name__}: {value}")

        # The attempt's dir first: a cell that wrote no file (most python cells) has none, and
        # is spared building the file's path (three pathlib joins: 3% of the executor's part of
        # a no-op group, tools.bench.worker_parts).
        if os.path.lexists(dirs.root) and os.path.lexists(dirs.output / THROTTLED_FILE):
            ev.notes.append(f"{THROTTLED_FILE} ignored: only a subject that raises InfrastructureError is throttled")
        got = verified if verified is not None else await _race(verifier_fn, (vctx, subject_result), timeout_s, cancel)
        if got is _CANCELLED:
            return self._cancelled(ev, dirs, redactor, started)
        ev.verification = Verification.INVALID
        if got is _TIMEOUT:
            ev.notes.append(f"verifier timeout after {timeout_s}s")
        else:
            ok, value = got
            if not ok:
                ev.notes.append("verifier infrastructure failure" if _is_infrastructure_error(value)
                                else f"verifier raised {type(value).__name__}: {value}")
            else:
                score = score_of(value["score"] if isinstance(value, dict) and "score" in value else value)
                if score is None:
                    ev.notes.append(f"verifier returned no finite score ({type(value).__name__})")
                else:
                    ev.verification, ev.score = Verification.VALID, score
                    ev.notes.append(f"score {score:g}")
        return await self._finish_async(ev, dirs, redactor, started)

    def _cancelled(self, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor, started: int) -> CellOutcome:
        ev.execution, ev.verification, ev.score = Execution.UNKNOWN, Verification.NOT_RUN, None
        ev.notes.append("cancelled (a thread cannot be killed: the callable may still be running)")
        return self._finish(ev, dirs, redactor, started)

    async def _finish_async(self, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor,
                            started: int) -> CellOutcome:
        """The common ending: a cell that made no directory costs one stat; anything with
        files in it is removed and collected in a thread, off the event loop."""
        if not os.path.lexists(dirs.root):
            return self._finish(ev, dirs, redactor, started, scratch=False)
        return await asyncio.to_thread(self._finish, ev, dirs, redactor, started)

    def _finish(self, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor, started: int, *,
                scratch: bool | None = None) -> CellOutcome:
        """`scratch`: whether the attempt's dir exists, when the caller has just looked."""
        files: list[LocalArtifact] = []
        unavailable: list[ArtifactUnavailable] = []
        gone = True
        if os.path.lexists(dirs.root) if scratch is None else scratch:
            gone = remove_tree(dirs.work)
            if not gone:
                ev.notes.append("work dir could not be removed")
            if dirs.output.is_dir():
                files, unavailable = output_artifacts(dirs.output, ARTIFACTS_PER_REPORT_MAX, redactor)
            if not files and not unavailable:
                # Nothing for the session to upload: leave no empty directories behind.
                for d in (dirs.output, dirs.artifacts, dirs.root):
                    try:
                        os.rmdir(d)
                    except FileNotFoundError:
                        pass
                    except OSError:
                        break
        report = Report(
            status=Status.UNSPECIFIED,
            execution=ev.execution,
            verification=ev.verification,
            usage=ev.usage,
            cleanup=Cleanup.CONFIRMED if gone else Cleanup.UNKNOWN,
            score=ev.score,
            environment_failure=one_line(redactor.text(ev.environment_failure), ID_CHARS_MAX),
            started_ms=started,
            finished_ms=now_ms(),
            detail=one_line(redactor.text("; ".join(ev.notes))),
            unavailable=tuple(unavailable),
            throttled=one_line(redactor.text(ev.throttled), ID_CHARS_MAX),
            retry_after_ms=ev.retry_after_ms,
            **ev.usage_fields,
        )
        return CellOutcome(seal(report), tuple(files))
