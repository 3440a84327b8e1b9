"""The worker service's artifact uploads (a mixin of CoordinatorServicer)."""
from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from common import limits
from common.ids import Digest
from common.rejections import Rejection
from coordinator import codec, views
from coordinator.actor import Overloaded, Request
from coordinator.artifacts import UploadRejected
from coordinator.codec import FrameError
from coordinator.core import commands as c
from coordinator.core.effects import Outcome, OutcomeKind, Transition, rejected
from coordinator.edge import Session, submit
from coordinator.errors import StorageError, StoreIOError, fail_stop



def upload_key(worker_id: str, digest: str) -> str:
    return "u" + hashlib.sha256(f"{worker_id}\0{digest}".encode()).hexdigest()[:40]


class Uploads:
    """CoordinatorServicer's artifact uploads: each chunk checked, then written in one thread hop
    (`_chunk_io`), an upload resumed from its committed offset; a digest enters the state
    (ArtifactStored) only once the artifact store finished the file (coordinator/artifacts.py)."""

    def _committed_offset(self, worker_id: str, digest: str) -> int:
        if self.artifacts.has(digest):
            return self.artifacts.size(digest)
        part = self.artifacts.root / "tmp" / f"{upload_key(worker_id, digest)}.part"
        return part.stat().st_size if part.exists() else 0

    async def _upload(self, session: Session, seq: int, u: Any) -> None:
        digest = Digest(codec.require_digest(u.digest))
        attempt_id = codec.require_id(u.attempt_id, "attempt_id")
        if u.total_length > limits.ARTIFACT_BYTES_MAX:
            raise FrameError(Rejection.ARTIFACT_TOO_LARGE,
                             f"{u.total_length} bytes exceed the limit of {limits.ARTIFACT_BYTES_MAX}")
        if len(u.data) > limits.CHUNK_BYTES_MAX:
            raise FrameError(Rejection.MESSAGE_TOO_LARGE, f"chunk of {len(u.data)} bytes exceeds {limits.CHUNK_BYTES_MAX}")
        if attempt_id not in session.attempts_owned:
            owner = await submit(self.actor, query=lambda s: views.attempt_owner(s, attempt_id, session.worker_id))
            if owner is None:
                raise FrameError(Rejection.UNKNOWN_ATTEMPT, f"attempt {attempt_id} was never dispatched")
            if owner != session.worker_id:
                raise FrameError(Rejection.NOT_OWNER, f"attempt {attempt_id} belongs to worker {owner}")
            session.attempts_owned[attempt_id] = None
        key = upload_key(session.worker_id, digest)
        try:
            kind, committed = await asyncio.to_thread(self._chunk_io, key, digest, u)
            if kind != "partial":
                self._stored(session, seq, digest, committed, duplicate=kind == "stored")
                return
        except UploadRejected as e:
            committed = await asyncio.to_thread(self._committed_offset, session.worker_id, digest)
            self._ack(session, seq, rejected(e.reason, e.detail), committed_offset=committed, digest=digest)
            return
        except StoreIOError as e:
            if not e.disk_full:
                fail_stop(e)
            # A full disk: the worker keeps the file and sends it again (STORAGE_FULL is transient).
            committed = await asyncio.to_thread(self._committed_offset, session.worker_id, digest)
            self._ack(session, seq, rejected(Rejection.STORAGE_FULL, f"the coordinator's disk is full: {e.what}"),
                      committed_offset=committed, digest=digest)
            return
        except StorageError as e:
            fail_stop(e)
        session.send(codec.ack_frame(seq, Outcome(OutcomeKind.ACCEPTED), committed_offset=committed, digest=digest))

    def _chunk_io(self, key: str, digest: Digest, u: Any) -> tuple[str, int]:
        """All file work of one chunk in one thread hop: ("stored" | "finished" | "partial",
        the committed offset or size)."""
        if self.artifacts.has(digest):
            return "stored", self.artifacts.size(digest)
        if u.data and u.offset > 0:
            committed = self.artifacts.write(key, u.offset, bytes(u.data))  # begun by an earlier chunk
        else:
            committed = self.artifacts.begin(key, digest, u.total_length)
            if u.data:
                committed = self.artifacts.write(key, u.offset, bytes(u.data))
        if u.last:
            _, size = self.artifacts.finish(key)
            return "finished", size
        return "partial", committed  # a probe (no data) answers with the committed offset

    def _stored(self, session: Session, seq: int, digest: Digest, size: int, *, duplicate: bool) -> None:
        """The bytes are durable; only now may the core learn of the digest."""
        if not duplicate:
            self.metrics.artifact_bytes.inc(size)

        def done(t: Transition) -> None:
            outcome = t.outcome if not duplicate or t.outcome.kind != OutcomeKind.ACCEPTED else Outcome(OutcomeKind.DUPLICATE)
            self._ack(session, seq, outcome, committed_offset=size, digest=digest)

        try:
            self.actor.submit(Request(make=lambda now: c.ArtifactStored(now, digest, size), done=done))
        except Overloaded:
            session.send(codec.ack_frame(seq, rejected(session.overloaded, "coordinator overloaded: resend"),
                                         committed_offset=0, digest=digest))
