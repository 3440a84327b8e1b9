"""Snapshots of the core state: a versioned pickle of the durable part.

The store frames and checksums the bytes; this module only adds a format tag, so that a
build refuses a snapshot written by an incompatible one with a message instead of folding
garbage. Liveness (`state.soft`) is left out: after a restart it is rebuilt by recovery.
Pickle is acceptable here because the bytes never come from a peer: only this process
writes them, into a directory it holds a kernel lock on.
"""
from __future__ import annotations

import gc
import io
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, fields
from typing import Any, BinaryIO

from common.evidence import Report
from coordinator.core.state import Soft, State

# v2: run manifests, pins and per-worker fits. v3: records pickled as a bare object and its
# fields as list items (common/fastpickle.py), which a build that reads v2 only cannot load.
# v4: an attempt's report packed into bytes (coordinator/core/reportpack.py).
FORMAT_TAG = b"fleet-snapshot-v4\n"
_UNPACKED_TAGS = (b"fleet-snapshot-v3\n", b"fleet-snapshot-v2\n")  # an attempt's report a Report record
READABLE_TAGS = (FORMAT_TAG, *_UNPACKED_TAGS)  # v2's records load through their class
assert all(len(tag) == len(FORMAT_TAG) for tag in READABLE_TAGS)


class SnapshotFormatError(ValueError):
    pass


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic collector paused: unpickling millions of records creates no garbage, but
    would set off collections that walk the whole growing heap again and again (loading a
    100,000-cell snapshot took 3.5x as long with it running)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def _durable_only(state: State) -> Iterator[None]:
    """The state without its liveness, with the collector paused, while it is pickled."""
    soft = state.soft
    state.soft = Soft()
    try:
        with no_gc():
            yield
    finally:
        state.soft = soft


def encode_state(state: State) -> bytes:
    with _durable_only(state):
        return FORMAT_TAG + pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def write_state(out: BinaryIO, state: State) -> None:
    """The bytes of `encode_state`, written to `out` as they are pickled (in frames of 64 KiB)
    instead of built as one bytes object first: the snapshot process's peak is the state and
    the pickler's memo, not also the whole encoding (246 MB at a million cells)."""
    with _durable_only(state):
        out.write(FORMAT_TAG)
        pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)


class _Parts(io.RawIOBase):
    """The parts of a snapshot read as one stream, each dropped once read: a large snapshot is
    unpickled without ever being joined into one bytes object (that copy was the size of the
    snapshot, 250 MB at a million cells, on top of the state being built). A list is emptied
    from the front as it is read; an iterator (the store's) is drawn from as the stream needs."""

    def __init__(self, parts: list[bytes] | Iterator[bytes]) -> None:
        self._next = (lambda: parts.pop(0) if parts else None) if isinstance(parts, list) \
            else (lambda: next(parts, None))
        self._view = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._view:
            part = self._next()
            if part is None:
                return 0
            self._view = memoryview(part)
        n = min(len(buffer), len(self._view))
        buffer[:n] = self._view[:n]
        self._view = self._view[n:]
        return n


def decode_state(data: bytes | list[bytes] | Iterator[bytes]) -> State:
    """The state a snapshot holds; `data` is its bytes or its parts in order (a list, which is
    emptied as it is read, or an iterator, which is consumed)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        stream = io.BufferedReader(_Parts(data), buffer_size=1 << 20)
        head = stream.read(len(FORMAT_TAG))  # across parts, however small they are
        if head not in READABLE_TAGS:
            head += stream.read(40)
    else:
        stream, head = None, bytes(data[:len(FORMAT_TAG) + 40])
    if not head.startswith(READABLE_TAGS):
        shown = head.split(b"\n", 1)[0]
        raise SnapshotFormatError(f"snapshot format {shown!r} is not {FORMAT_TAG.strip()!r}: "
                                  "written by another version of fleet")
    try:
        with no_gc():
            if stream is None:
                state = pickle.loads(memoryview(data)[len(FORMAT_TAG):])  # type: ignore[arg-type]
            else:
                state = pickle.load(stream)
    except Exception as e:  # any unpickling failure means the same thing: unreadable
        raise SnapshotFormatError(f"snapshot does not decode: {e}") from e
    if not isinstance(state, State):
        raise SnapshotFormatError(f"snapshot holds a {type(state).__name__}, not a State")
    # Never durable (encode_state stores an empty one): a fresh one, so that a snapshot of a
    # build whose Soft had fewer fields (slots missing on load) recovers all the same.
    state.soft = Soft()
    _fill_added_fields(state)
    if head.startswith(_UNPACKED_TAGS):
        _pack_reports(state)
    return state


def _pack_reports(state: State) -> None:
    """A snapshot of a build that kept each report as a Report record: the record lands in
    the slot that now holds the packed bytes, and is packed there."""
    for attempt in state.attempts.values():
        if isinstance(attempt.packed_report, Report):
            attempt.report = attempt.packed_report


def _fill_added_fields(state: State) -> None:
    """A slotted record pickles only the slots it had; a field added since (with a default)
    is absent from an older snapshot's records and takes its default here."""
    for run in state.runs.values():  # derived at submit; a snapshot from before it lacks it
        if not getattr(run, "provider_names", ()) and getattr(run, "subject_providers", ()):
            run.provider_names = tuple(dict.fromkeys(run.subject_providers))
            run.provider_by_subject = {s.id: p for s, p in zip(run.spec.subjects, run.subject_providers)}
    for record in (state, *state.runs.values()):
        for f in fields(record):
            if not hasattr(record, f.name):
                if f.default is not MISSING:
                    setattr(record, f.name, f.default)
                elif f.default_factory is not MISSING:
                    setattr(record, f.name, f.default_factory())
