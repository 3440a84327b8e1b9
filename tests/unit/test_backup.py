"""coordinator/backup.py and Store.copy_to in one process: the copy is consistent while another
thread keeps appending, the backup holds the artifacts its copied state names (and refuses when
one is missing, leaving nothing at the destination), and bad destinations are refused by name."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from common.ids import DIGEST_PREFIX, Digest
from coordinator import backup
from coordinator.recovery import recover
from coordinator.artifacts import ArtifactStore
from coordinator.backup import BackupError, check_dest, take_backup
from coordinator.core import commands as c
from coordinator.logcodec import encode_record
from coordinator.store import Store


def test_the_copy_is_one_consistent_point_while_another_thread_appends(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data", snapshot_every=10**9)
    for _ in range(20):
        store.append([b"r" * 200] * 500)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            store.append([b"w" * 200] * 20)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        low = store.last_index
        (tmp_path / "copy").mkdir()
        store.copy_to(tmp_path / "copy")
    finally:
        stop.set()
        thread.join(10)
    high = store.last_index
    (tmp_path / "copy-data").mkdir()
    (tmp_path / "copy").rename(tmp_path / "copy-data" / "wal")
    with Store.open(tmp_path / "copy-data") as copy:
        assert low <= copy.last_index <= high
        records = list(copy.load().records)  # every checksum and the contiguity verified
        assert [i for i, _ in records] == list(range(1, copy.last_index + 1))
    store.close()


def artifact_state(tmp_path: Path, data: bytes, stored: bool) -> tuple[Store, ArtifactStore, Path, Digest]:
    data_dir = tmp_path / "data"
    store = Store.open(data_dir)
    digest = Digest(DIGEST_PREFIX + hashlib.sha256(data).hexdigest())
    store.append([encode_record(1, c.ArtifactStored(1_000, digest, len(data)))])
    artifacts = ArtifactStore(data_dir / "artifacts")
    if stored:
        assert artifacts.put_bytes(data) == digest
    (data_dir / "admin.token").write_text("secret\n")
    return store, artifacts, data_dir, digest


def test_a_backup_holds_the_log_the_artifacts_it_names_and_the_tokens(tmp_path: Path) -> None:
    store, artifacts, data_dir, digest = artifact_state(tmp_path, b"hello artifact", stored=True)
    artifacts.put_bytes(b"not named by the state")  # finished, never reported: not copied
    dest = tmp_path / "backup"
    report = take_backup(store, artifacts, data_dir, dest)
    assert (report.last_index, report.artifacts, report.artifact_bytes) == (1, 1, len(b"hello artifact"))
    copied = ArtifactStore(dest / "artifacts")
    assert copied.read_verified(digest) == b"hello artifact"
    assert len(list((dest / "artifacts" / "sha256").rglob("*"))) == 2, "one directory, one file"
    assert (dest / "admin.token").read_text() == "secret\n" and (dest / "BACKUP.json").exists()
    with Store.open(dest) as restored:
        state, index = recover(restored)
    assert index == 1 and digest in state.artifacts
    store.close()


def test_a_backup_refuses_when_a_named_artifact_is_missing_and_leaves_nothing(tmp_path: Path) -> None:
    store, artifacts, data_dir, _ = artifact_state(tmp_path, b"gone", stored=False)
    with pytest.raises(BackupError, match="not in the artifact store"):
        take_backup(store, artifacts, data_dir, tmp_path / "backup")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    store.close()


def test_bad_destinations_and_a_second_backup_at_once_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for dest, words in [(Path("relative/dir"), "absolute"), (data / "inner", "inside the data dir"),
                        (data, "inside the data dir"), (tmp_path, "exists"), (tmp_path / "no" / "dir", "not a directory")]:
        with pytest.raises(BackupError, match=words):
            check_dest(dest, data)
    assert check_dest(tmp_path / "new", data) == tmp_path / "new"
    with backup._one_at_a_time:
        with pytest.raises(BackupError, match="already running") as e:
            take_backup(None, None, data, tmp_path / "new")  # type: ignore[arg-type]
    assert e.value.busy


def test_a_backup_of_a_closed_store_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    store, artifacts, data_dir, _ = artifact_state(tmp_path, b"x", stored=True)
    store.close()
    with pytest.raises(BackupError, match="the store is closed"):
        take_backup(store, artifacts, data_dir, tmp_path / "backup")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
