"""The admin service (fleetctl, the console): every call authenticated with the admin token,
every action a logged command through the actor, reads answered from the state after the
commit, paged where a run is large, and the event stream (Watch, WatchEvents); in process only,
the console's reads of a run's page and of a cell's (ReadRunPage, ReadCell: no RPC)."""
from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import structlog

from common import limits
from common.fleetpb import admin_pb2, admin_pb2_grpc
from common.ids import CellId, RunId, WorkerId, run_id_for
from common.policy import parse_policy_text
from common.rejections import Rejection
from common.spec import SpecError, canonical_json, parse_spec_text
from coordinator import codec, paging, views
from coordinator.actor import Actor
from coordinator.artifacts import ArtifactStore
from coordinator.auth import AuthError, TokenBook, bearer
from coordinator.backup import BackupError, take_backup
from coordinator.codec import FrameError
from coordinator.core import commands as c
from coordinator.core.effects import OutcomeKind, Transition
from coordinator.edge import Hub, status_for_auth, submit
from coordinator.errors import ArtifactCorrupt
from coordinator.core.summary import Tally
from coordinator.store import Store
from coordinator.paging import PageTokenError, PageTokens, Position
from coordinator.snapshot import no_gc

log = structlog.get_logger("fleet.servicer")
# Events a watcher may be behind by: a run submitted to 10,000 workers emits 10,000 at once
# (one measurement each); a watcher further behind loses events and is told how many.
WATCH_QUEUE_EVENTS_MAX = 20_000
# One message of a WatchEvents stream: far inside a message's limit, details included.
WATCH_BATCH_EVENTS_MAX = 2_000
WATCH_BATCH_BYTES_MAX = 1 << 20
# An unpaged GetResults or ListAttempts gathers pages while they stay under this: one more
# page (at most PAGE_BYTES_MAX and one item), the summary and the field tags still fit.
UNPAGED_BYTES_MAX = limits.MESSAGE_BYTES_MAX - limits.PAGE_BYTES_MAX - (1 << 20)


class AdminServicer(admin_pb2_grpc.AdminServicer):
    def __init__(self, actor: Actor, hub: Hub, tokens: TokenBook, artifacts: ArtifactStore, *,
                 store: Store | None = None, data_dir: Path | None = None,
                 incarnation: int = 0, page_key: bytes | None = None) -> None:
        self.actor, self.hub, self.tokens, self.artifacts = actor, hub, tokens, artifacts
        self.store, self.data_dir = store, data_dir  # for Backup (coordinator/backup.py)
        # The key lives and dies with the process: a token from an earlier one is stale.
        self.page_tokens = PageTokens(page_key or secrets.token_bytes(32), incarnation)

    async def _auth(self, context: Any) -> None:
        token, _ = bearer(context.invocation_metadata())
        try:
            self.tokens.check_admin(token)
        except AuthError as e:
            await context.abort(status_for_auth(e), f"{Rejection.UNAUTHENTICATED.name if e.code == 'unauthenticated' else Rejection.PERMISSION_DENIED.name}: {e}")

    async def SubmitRun(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        if len(request.spec_json) > limits.SPEC_BYTES_MAX:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "SPEC_INVALID: spec too large")
        try:
            with no_gc():  # a large spec is many small records and no cycles
                spec = parse_spec_text(request.spec_json)
            policy = parse_policy_text(request.policy_json or "{}")
        except SpecError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"SPEC_INVALID: {e}")
            return None
        try:
            manifest = codec.decode_manifest(request.manifest, "the environment manifest")
        except FrameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"SPEC_INVALID: {e.detail}")
            return None
        worker_keys = tuple(dict.fromkeys(request.worker_keys))
        if any(not k or len(k) > limits.MANIFEST_KEY_CHARS_MAX for k in worker_keys) or \
                len(worker_keys) > limits.MANIFEST_ENTRIES_MAX or set(worker_keys) & set(dict(manifest)):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "SPEC_INVALID: worker keys must be non-empty, bounded and not in the manifest")
            return None
        frozen_env = canonical_json({"manifest": dict(manifest), "workerKeys": list(worker_keys)}) \
            if manifest or worker_keys else ""
        run_id = run_id_for(spec.canonical, policy.canonical(), frozen_env)
        if request.HasField("run_id") and request.run_id and request.run_id != run_id:
            # A run is named by what it freezes: another id would be another spec or policy.
            given = request.run_id
            exists = await submit(self.actor, query=lambda s: given in s.runs)
            code = grpc.StatusCode.ALREADY_EXISTS if exists else grpc.StatusCode.INVALID_ARGUMENT
            what = "is frozen with another spec or policy" if exists else "is not this spec and policy's id"
            await context.abort(code, f"SPEC_CONFLICT: run id {given} {what} ({run_id})")
        t: Transition = await submit(self.actor, make=lambda now: c.RunSubmitted(now, run_id, spec, policy,
                                                                                 manifest, worker_keys))
        if t.outcome.kind == OutcomeKind.ACCEPTED:
            log.info("run_frozen", run_id=run_id, reference_keys=len(manifest), worker_keys=len(worker_keys),
                     bench_root=request.bench_root or None)
        if t.outcome.rejection == Rejection.SPEC_CONFLICT:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"SPEC_CONFLICT: {t.outcome.detail}")
        if t.outcome.rejection == Rejection.UNKNOWN_RUN:  # orderFrom names no run
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: {t.outcome.detail}")
        if not t.outcome.ok:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{t.outcome.rejection.name}: {t.outcome.detail}")
        return admin_pb2.SubmitRunResponse(run_id=run_id, created=t.outcome.kind == OutcomeKind.ACCEPTED)

    async def GetStatus(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        run_id = request.run_id if request.HasField("run_id") else None
        actor = self.actor
        view, shown, listed = request.workers_view, request.workers_shown, request.workers_listed_max
        out = await submit(actor, query=lambda s: views.status(s, run_id, actor.last_now_ms, view, shown, listed))
        if run_id and not out.runs:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        for wid, attempt_id, reason in self.hub.dead_letters:
            out.dead_letters.append(admin_pb2.DeadLetterStatus(worker_id=wid, attempt_id=attempt_id, reason=reason))
        return out

    async def _page_request(self, context: Any, kind: int, request: Any) -> tuple[int, Position, Tally]:
        """The page size and where to continue, or abort with INVALID_ARGUMENT."""
        if request.page_size < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{Rejection.MALFORMED_FRAME.name}: page_size {request.page_size} is negative")
        size = min(request.page_size or limits.PAGE_ITEMS_DEFAULT, limits.PAGE_ITEMS_MAX)
        if not request.page_token:
            return size, Position(), Tally()
        try:
            at, tally = self.page_tokens.decode(request.page_token, kind, request.run_id, self.actor.last_now_ms)
        except PageTokenError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{Rejection.PAGE_TOKEN_INVALID.name}: {e}")
            raise AssertionError("abort returns only by raising") from None
        return size, at, tally

    async def _page(self, context: Any, run_id: RunId, at: Position,
                    make: Callable[[Any], views.Page | None]) -> views.Page:
        """One page, built by one actor query: between pages the actor commits, so a large run
        never holds it for a whole walk. A verified token pointing past its run (it cannot: the
        order is fixed by the frozen spec) is refused like any other bad token."""
        def query(s: Any) -> views.Page | str | None:
            if run_id not in s.runs:
                return None
            return views.position_problem(s, run_id, at) or make(s)

        out = await submit(self.actor, query=query)
        if out is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        if isinstance(out, str):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{Rejection.PAGE_TOKEN_INVALID.name}: {out}")
        return out

    async def _too_large(self, context: Any, what: str) -> None:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, (
            f"{Rejection.MESSAGE_TOO_LARGE.name}: {what} do not fit one message of {limits.MESSAGE_BYTES_MAX} "
            "bytes: read them in pages (page_size, page_token; fleetctl does)"))

    async def GetResults(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        run_id = RunId(request.run_id)
        whole = not request.page_size and not request.page_token  # unpaged: one message or a refusal
        size, at, tally = await self._page_request(context, paging.KIND_RESULTS, request)
        out = admin_pb2.GetResultsResponse()
        total_bytes = 0
        while True:
            page = await self._page(context, run_id, at, lambda s, at=at, tally=tally: views.results_page(
                s, run_id, at, size, limits.PAGE_BYTES_MAX, tally))
            out.cells.extend(page.items)
            out.total_size = page.total
            total_bytes += page.size_bytes
            if page.next_at is None:
                assert page.summary is not None
                out.summary.CopyFrom(page.summary)
                return out
            at, tally = page.next_at, page.tally
            if not whole:
                out.next_page_token = self.page_tokens.encode(paging.KIND_RESULTS, run_id, at,
                                                              self.actor.last_now_ms, tally)
                return out
            if total_bytes > UNPAGED_BYTES_MAX:
                await self._too_large(context, f"the {page.total} cells of run {run_id}")

    async def ListAttempts(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        run_id = RunId(request.run_id)
        whole = not request.page_size and not request.page_token
        size, at, _ = await self._page_request(context, paging.KIND_ATTEMPTS, request)
        records: list = []
        total_bytes = 0
        while True:
            page = await self._page(context, run_id, at, lambda s, at=at: views.attempts_page(
                s, run_id, at, size, limits.PAGE_BYTES_MAX))
            records.extend(page.items)
            total_bytes += page.size_bytes
            if page.next_at is None:
                if whole:  # as before paging existed: the whole run in dispatch order
                    records.sort(key=lambda rec: rec.dispatch_order)
                return admin_pb2.ListAttemptsResponse(attempts=records)
            at = page.next_at
            if not whole:
                return admin_pb2.ListAttemptsResponse(attempts=records, next_page_token=self.page_tokens.encode(
                    paging.KIND_ATTEMPTS, run_id, at, self.actor.last_now_ms, Tally()))
            if total_bytes > UNPAGED_BYTES_MAX:
                await self._too_large(context, f"the attempts of run {run_id}")

    # ---- in process only: the console's reads (coordinator/console/admin.py), no RPC (what a
    # page draws is not a contract of the wire); authenticated and answered as the RPCs are.

    async def ReadRunPage(self, request: Any, context: Any) -> AsyncIterator[views.RunPagePart]:
        """What the console's run page folds (coordinator/console/runview.py) of run
        `request.run_id`: its cells and attempts, RUN_PART_CELLS_MAX cells an actor query
        (views.run_part), each part made into records off the actor and the event loop
        (views.part_cells); the last part carries the summary."""
        await self._auth(context)
        run_id = RunId(request.run_id)
        at, tally = Position(), Tally()
        while True:
            part = await self._page(context, run_id, at, lambda s, at=at: views.run_part(  # type: ignore[arg-type, return-value]
                s, run_id, at, views.RUN_PART_CELLS_MAX, tally))
            yield await asyncio.to_thread(views.part_cells, part)  # type: ignore[arg-type]
            if part.next_at is None:
                return
            at = part.next_at

    async def ReadCell(self, request: Any, context: Any) -> tuple[Any, list]:
        """Cell `request.cell_id` of run `request.run_id` as GetResults lists it (None: the run
        has no such cell) and its attempts as ListAttempts does: one cell's cost."""
        await self._auth(context)
        run_id, cell_id = RunId(request.run_id), CellId(request.cell_id)
        out = await submit(self.actor, query=lambda s: views.cell_read(s, run_id, cell_id))
        if out is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        return out

    async def _action(self, context: Any, make: Callable[[int], object]) -> Any:
        await self._auth(context)
        t: Transition = await submit(self.actor, make=make)
        return codec.action_response(t.outcome)

    async def PauseRun(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.RunPaused(now, RunId(request.run_id)))

    async def RecoverRun(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        # A new spend cap, when given; the core judges it against the run's spend (SPEND_CAP_REACHED).
        cap = request.max_observed_cost_usd if request.HasField("max_observed_cost_usd") else None
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{Rejection.MALFORMED_FRAME.name}: "
                                f"max_observed_cost_usd must be a positive number of dollars, not {cap!r}")
        t: Transition = await submit(self.actor, make=lambda now: c.RunRecovered(now, RunId(request.run_id), cap))
        return codec.action_response(t.outcome)

    async def RepairRun(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.RunRepaired(now, RunId(request.run_id), request.reason))

    async def RetryCell(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.CellRetryGranted(now, RunId(request.run_id),
                                                                           CellId(request.cell_id)))

    async def DrainWorker(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.WorkerDrained(now, WorkerId(request.worker_id)))

    async def ReleaseWorker(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.WorkerReleased(now, WorkerId(request.worker_id)))

    async def Watch(self, request: Any, context: Any) -> Any:
        async with contextlib.aclosing(self._watch(request, context)) as batches:  # unregisters at once
            async for batch in batches:
                for ev in batch:
                    yield ev

    async def WatchEvents(self, request: Any, context: Any) -> Any:
        async with contextlib.aclosing(self._watch(request, context)) as batches:
            async for batch in batches:
                yield admin_pb2.EventBatch(events=batch)

    async def _watch(self, request: Any, context: Any) -> AsyncIterator[list[Any]]:
        """Every event published from the registration on, as many as are queued at each turn:
        a watcher one message behind per event would fall behind a burst for good."""
        await self._auth(context)
        q: asyncio.Queue = asyncio.Queue(WATCH_QUEUE_EVENTS_MAX)
        entry = (request.run_id if request.HasField("run_id") else None, q)
        self.hub.watchers.append(entry)
        try:
            # First, that the watch is live: every event from here on reaches this watcher.
            yield [admin_pb2.Event(at_ms=time.time_ns() // 1_000_000, event="watch_started", run_id=entry[0] or "",
                                   detail=f"watching run {entry[0]}" if entry[0] else "watching every run")]
            while True:
                batch = [await q.get()]
                size = batch[0].ByteSize()
                while not q.empty() and len(batch) < WATCH_BATCH_EVENTS_MAX and size < WATCH_BATCH_BYTES_MAX:
                    batch.append(q.get_nowait())
                    size += batch[-1].ByteSize()
                dropped = self.hub.watch_dropped.pop(id(q), 0)
                if dropped:
                    batch.insert(0, admin_pb2.Event(at_ms=batch[0].at_ms, event="watch_events_dropped", detail=(
                        f"{dropped} events were dropped: this watcher fell more than "
                        f"{WATCH_QUEUE_EVENTS_MAX} events behind")))
                yield batch
        finally:
            self.hub.watchers.remove(entry)
            self.hub.watch_dropped.pop(id(q), None)

    async def Backup(self, request: Any, context: Any) -> Any:
        """On a thread of its own: LMDB's copy is one read transaction beside the actor's commits."""
        await self._auth(context)
        if self.store is None or self.data_dir is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this coordinator was started without backup support")
        store, data_dir = self.store, self.data_dir
        try:
            r = await asyncio.to_thread(take_backup, store, self.artifacts, data_dir, Path(request.dest_dir))
        except BackupError as e:
            await context.abort(grpc.StatusCode.ABORTED if e.busy else grpc.StatusCode.FAILED_PRECONDITION,
                                f"BACKUP_FAILED: {e}")
            return None
        log.info("backup_written", dest=r.dest_dir, last_index=r.last_index, artifacts=r.artifacts,
                 copy_ms=r.copy_ms, total_ms=r.total_ms)
        return admin_pb2.BackupResponse(dest_dir=r.dest_dir, last_index=r.last_index, runs=r.runs,
                                        artifacts=r.artifacts, artifact_bytes=r.artifact_bytes, wal_bytes=r.wal_bytes,
                                        copy_ms=r.copy_ms, total_ms=r.total_ms)

    async def GetArtifact(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        digest = request.digest
        if not await asyncio.to_thread(self.artifacts.has, digest):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"ARTIFACT_MISSING: {digest} is not stored")
        try:
            chunks = await asyncio.to_thread(lambda: list(self.artifacts.open_verified(digest, limits.CHUNK_BYTES_MAX)))
        except ArtifactCorrupt as e:
            await context.abort(grpc.StatusCode.DATA_LOSS, f"DIGEST_MISMATCH: {e}")
            return
        total = sum(len(b) for b in chunks)
        offset = 0
        for data in chunks:
            yield admin_pb2.ArtifactChunk(offset=offset, data=data, total_length=total)
            offset += len(data)
        if not chunks:
            yield admin_pb2.ArtifactChunk(offset=0, data=b"", total_length=0)
