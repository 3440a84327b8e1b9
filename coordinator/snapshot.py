"""Snapshots of the core state: a versioned pickle of the durable part.

The store frames and checksums the bytes; this module only adds a format tag, so that a
build refuses a snapshot written by an incompatible one with a message instead of folding
garbage. Liveness (`state.soft`) is left out: after a restart it is rebuilt by recovery.
Pickle is acceptable here because the bytes never come from a peer: only this process
writes them, into a directory it holds a kernel lock on.
"""
from __future__ import annotations

import gc
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, fields

from coordinator.core.state import Soft, State

FORMAT_TAG = b"fleet-snapshot-v2\n"  # v2: run manifests, pins and per-worker fits


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


def encode_state(state: State) -> bytes:
    soft = state.soft
    state.soft = Soft()
    try:
        with no_gc():
            return FORMAT_TAG + pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        state.soft = soft


def decode_state(data: bytes) -> State:
    if not data.startswith(FORMAT_TAG):
        head = data[:40].split(b"\n", 1)[0]
        raise SnapshotFormatError(f"snapshot format {head!r} is not {FORMAT_TAG.strip()!r}: "
                                  "written by another version of fleet")
    try:
        with no_gc():
            state = pickle.loads(memoryview(data)[len(FORMAT_TAG):])
    except Exception as e:  # any unpickling failure means the same thing: unreadable
        raise SnapshotFormatError(f"snapshot does not decode: {e}") from e
    if not isinstance(state, State):
        raise SnapshotFormatError(f"snapshot holds a {type(state).__name__}, not a State")
    _fill_added_fields(state)
    return state


def _fill_added_fields(state: State) -> None:
    """A slotted record pickles only the slots it had; a field added since (with a default)
    is absent from an older snapshot's records and takes its default here."""
    for run in state.runs.values():
        for f in fields(run):
            if not hasattr(run, f.name) and f.default is not MISSING:
                setattr(run, f.name, f.default)
