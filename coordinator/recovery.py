"""Recovery: the state a store holds, folded from its newest valid snapshot and every log record
after it, each replayed through the pure core. What cannot be verified is refused
(`StoreCorrupt`), never skipped. Three callers: the coordinator's start (coordinator/main.py),
the snapshot process, which folds to the actor's last commit (coordinator/snapshotter.py), and a
backup's check of its copy (coordinator/backup.py); the actor recovers with it after a failed
apply. It lives apart from the actor so that none of them imports the actor.
"""
from __future__ import annotations

import gc

import structlog

from coordinator.core import new_state, step
from coordinator.core.state import State
from coordinator.errors import StoreCorrupt
from coordinator.logcodec import LogCodecError, decode_record
from coordinator.snapshot import SnapshotFormatError, decode_state, no_gc
from coordinator.store import Store

log = structlog.get_logger("fleet.actor")


def recover(store: Store) -> tuple[State, int]:
    state, index, _ = recover_with_time(store)
    return state, index


def recover_with_time(store: Store) -> tuple[State, int, int]:
    """Fold the newest valid snapshot and every record after it; refuse what cannot be verified.

    The cyclic collector is paused meanwhile (recovery builds millions of long-lived records
    and no cycles) and the recovered state is then frozen out of its reach (`gc.freeze`):
    collections never walk it again."""
    with no_gc():
        out = _recover(store)
        # Frozen before the collector is back: enabled first, it would run at once a full
        # collection over everything just built (1.5 s at a million cells), collecting nothing.
        gc.freeze()
    return out


def _recover(store: Store) -> tuple[State, int, int]:
    state, index, last_now, snapshot_index, replayed = _fold(store, None)
    log.info("recovered", snapshot_index=snapshot_index or 0, replayed=replayed,
             last_index=index, runs=len(state.runs), workers=len(state.workers))
    return state, index, last_now


def fold_to(store: Store, upto: int) -> tuple[State, int]:
    """The state as of log index `upto` (or as far as the store goes, if less) and that index:
    the newest valid snapshot at or below it and the records after it. The snapshot process's
    fold, with the collector off as in recovery; nothing is logged."""
    with no_gc():
        state, index, _, _, _ = _fold(store, upto)
    return state, index


def _fold(store: Store, upto: int | None) -> tuple[State, int, int, int | None, int]:
    rec = store.load()
    for warning in rec.warnings:
        log.warning("store_warning", detail=warning)
    if upto is not None and rec.snapshot_index is not None and rec.snapshot_index > upto:
        raise StoreCorrupt(f"the newest snapshot, at {rec.snapshot_index}, is past index {upto}",
                           store_path(store), index=upto)
    if rec.snapshot_index is not None:
        index = rec.snapshot_index
        try:
            state = decode_state(rec.snapshot_parts)
        except SnapshotFormatError as e:
            raise StoreCorrupt(f"snapshot at index {index} is unreadable: {e}", store_path(store), index=index) from e
    else:
        index, state = 0, new_state()
    replayed = 0
    last_now = 0
    for position, data in rec.records:
        if upto is not None and position > upto:
            break
        try:
            record_index, cmd = decode_record(data)
        except LogCodecError as e:
            raise StoreCorrupt(f"log record {position} does not decode: {e}", store_path(store), index=position) from e
        if record_index != position or position != index + 1:
            raise StoreCorrupt(f"log record at position {position} says index {record_index} after {index}",
                               store_path(store), index=position)
        state, t = step(state, cmd)
        if not t.outcome.ok or t.durable != (cmd,):
            raise StoreCorrupt(f"log record {position} ({type(cmd).__name__}) does not replay: {t.outcome.detail}",
                               store_path(store), index=position)
        index = position
        replayed += 1
        last_now = max(last_now, cmd.now_ms)
    return state, index, last_now, rec.snapshot_index, replayed


def store_path(store: Store) -> str:
    return str(getattr(store, "_data_dir", "data dir"))
