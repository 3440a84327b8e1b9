"""Goal: an artifact is accepted only whole, in order and with its declared length and SHA-256,
and is re-verified on read; method: drive `ArtifactStore` on a temp dir, "crash" by dropping
the object and opening a new one on the same directory, and tamper with files directly."""
from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.ids import is_digest, sha256_digest
from common.limits import ARTIFACT_BYTES_MAX, ARTIFACT_TMP_AGE_MS_MAX, CHUNK_BYTES_MAX
from common.rejections import Rejection
from coordinator.artifacts import ArtifactStore, UploadRejected
from coordinator.errors import ArtifactCorrupt

DATA = bytes(range(256)) * 40  # 10 KiB
DIGEST = sha256_digest(DATA)
KEY = "worker-1:attempt-7.log"


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def tmp_names(store: ArtifactStore) -> list[str]:
    return sorted(os.listdir(store.root / "tmp"))


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def upload(store: ArtifactStore, key: str, data: bytes, digest: str, size: int = 1000) -> int:
    offset = store.begin(key, digest, len(data))
    while offset < len(data):
        offset = store.write(key, offset, data[offset:offset + size])
    return offset


@contextlib.contextmanager
def rejected(reason: Rejection) -> Iterator[pytest.ExceptionInfo[UploadRejected]]:
    with pytest.raises(UploadRejected) as info:
        yield info
    assert info.value.reason is reason, info.value


def test_chunked_upload_lands_at_its_content_address(store: ArtifactStore) -> None:
    assert not store.has(DIGEST)
    assert store.begin(KEY, DIGEST, len(DATA)) == 0
    offset = 0
    for chunk in chunks(DATA, 3000):
        offset = store.write(KEY, offset, chunk)
    assert offset == len(DATA)
    assert store.finish(KEY) == (DIGEST, len(DATA))
    hexpart = DIGEST.removeprefix("sha256:")
    final = store.root / "sha256" / hexpart[:2] / hexpart[2:]
    assert final.read_bytes() == DATA
    assert final.stat().st_mode & 0o222 == 0, "stored artifacts are read-only"
    assert store.has(DIGEST) and store.size(DIGEST) == len(DATA)
    assert store.read_verified(DIGEST) == DATA
    assert b"".join(store.open_verified(DIGEST, chunk_bytes=1000)) == DATA
    assert tmp_names(store) == [], "finish cleans its temp files"


def test_resume_after_a_crash_continues_at_the_committed_offset(tmp_path: Path) -> None:
    first = ArtifactStore(tmp_path / "artifacts")
    first.begin(KEY, DIGEST, len(DATA))
    assert first.write(KEY, 0, DATA[:4000]) == 4000
    del first  # the coordinator dies; only the directory remains
    second = ArtifactStore(tmp_path / "artifacts")
    assert second.begin(KEY, DIGEST, len(DATA)) == 4000
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        second.write(KEY, 0, DATA[:4000])  # the worker's stale offset is refused
    assert second.write(KEY, 4000, DATA[4000:]) == len(DATA)
    assert second.finish(KEY) == (DIGEST, len(DATA))
    assert second.read_verified(DIGEST) == DATA


def test_a_different_declaration_under_the_same_key_starts_over(store: ArtifactStore) -> None:
    store.begin(KEY, DIGEST, len(DATA))
    store.write(KEY, 0, DATA[:100])
    other = b"other bytes"
    assert store.begin(KEY, sha256_digest(other), len(other)) == 0
    store.write(KEY, 0, other)
    assert store.finish(KEY) == (sha256_digest(other), len(other))


def test_an_already_stored_digest_short_circuits(store: ArtifactStore) -> None:
    digest = store.put_bytes(DATA)
    assert digest == DIGEST
    assert store.begin("again", DIGEST, len(DATA)) == len(DATA)
    assert store.write("again", len(DATA), b"") == len(DATA)
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        store.write("again", len(DATA), b"x")
    assert store.finish("again") == (DIGEST, len(DATA))
    assert tmp_names(store) == []
    with rejected(Rejection.LENGTH_MISMATCH):
        store.begin("liar", DIGEST, len(DATA) + 1)


def test_a_wrong_digest_is_rejected_and_the_retry_starts_over(store: ArtifactStore) -> None:
    wrong = sha256_digest(b"something else")
    upload(store, KEY, DATA, wrong)
    with rejected(Rejection.DIGEST_MISMATCH) as info:
        store.finish(KEY)
    assert DIGEST in info.value.detail
    assert not store.has(wrong) and not store.has(DIGEST)
    assert tmp_names(store) == []
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        store.write(KEY, len(DATA), b"")  # nothing left to continue
    assert store.begin(KEY, wrong, len(DATA)) == 0


def test_a_short_upload_is_a_length_mismatch_and_stays_resumable(store: ArtifactStore) -> None:
    store.begin(KEY, DIGEST, len(DATA))
    store.write(KEY, 0, DATA[:5000])
    with rejected(Rejection.LENGTH_MISMATCH):
        store.finish(KEY)
    assert not store.has(DIGEST)
    assert store.begin(KEY, DIGEST, len(DATA)) == 5000
    store.write(KEY, 5000, DATA[5000:])
    assert store.finish(KEY) == (DIGEST, len(DATA))


def test_a_chunk_past_the_declared_length_writes_nothing(store: ArtifactStore) -> None:
    store.begin(KEY, DIGEST, len(DATA))
    store.write(KEY, 0, DATA[:-10])
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        store.write(KEY, len(DATA) - 10, DATA[-10:] + b"extra")
    assert store.begin(KEY, DIGEST, len(DATA)) == len(DATA) - 10, "nothing was written"


@pytest.mark.parametrize("offset", [0, 999, 1001, 5000])
def test_a_chunk_off_the_committed_offset_writes_nothing(store: ArtifactStore,
                                                        offset: int) -> None:
    store.begin(KEY, DIGEST, len(DATA))
    store.write(KEY, 0, DATA[:1000])
    with rejected(Rejection.CHUNK_OUT_OF_RANGE) as info:
        store.write(KEY, offset, DATA[offset:offset + 100])
    assert "committed offset is 1000" in info.value.detail
    assert store.begin(KEY, DIGEST, len(DATA)) == 1000


def test_an_oversize_artifact_is_refused_before_any_byte(store: ArtifactStore) -> None:
    with rejected(Rejection.ARTIFACT_TOO_LARGE):
        store.begin(KEY, DIGEST, ARTIFACT_BYTES_MAX + 1)
    assert tmp_names(store) == []
    with rejected(Rejection.MESSAGE_TOO_LARGE):
        store.begin(KEY, DIGEST, len(DATA))
        store.write(KEY, 0, b"x" * (CHUNK_BYTES_MAX + 1))


@pytest.mark.parametrize("key", ["", ".", "..", ".hidden", "a/b", "../escape", "x" * 201])
def test_an_upload_key_that_is_not_one_safe_name_is_malformed(store: ArtifactStore,
                                                              key: str) -> None:
    with rejected(Rejection.MALFORMED_FRAME):
        store.begin(key, DIGEST, len(DATA))


def test_a_write_or_finish_without_begin_is_refused(store: ArtifactStore) -> None:
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        store.write(KEY, 0, b"abc")
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        store.finish(KEY)
    with rejected(Rejection.MALFORMED_FRAME):
        store.begin(KEY, "sha256:nothex", 3)


def test_a_stored_file_altered_on_disk_is_detected_on_read(store: ArtifactStore) -> None:
    digest = store.put_bytes(DATA)
    path = store.path_for(digest)
    os.chmod(path, 0o644)
    raw = bytearray(path.read_bytes())
    raw[1234] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactCorrupt) as info:
        store.read_verified(digest)
    assert info.value.digest == digest and info.value.path == path
    with pytest.raises(ArtifactCorrupt):
        for _ in store.open_verified(digest, chunk_bytes=1000):
            pass
    with pytest.raises(KeyError):
        store.read_verified(sha256_digest(b"never stored"))


def test_put_bytes_handles_empty_and_multi_chunk_data(store: ArtifactStore) -> None:
    big = os.urandom(CHUNK_BYTES_MAX * 2 + 17)
    for data in (b"", big):
        digest = store.put_bytes(data)
        assert is_digest(digest) and digest == "sha256:" + hashlib.sha256(data).hexdigest()
        assert store.read_verified(digest) == data
    assert store.size(sha256_digest(b"")) == 0


def test_abandoned_uploads_are_swept_whole_and_live_ones_kept(store: ArtifactStore) -> None:
    store.begin("old", DIGEST, len(DATA))
    store.write("old", 0, DATA[:10])
    store.begin("live", DIGEST, len(DATA))
    (store.root / "tmp" / "stray").write_bytes(b"?")
    now_ms = 10 * ARTIFACT_TMP_AGE_MS_MAX
    old_s = (now_ms - ARTIFACT_TMP_AGE_MS_MAX - 1_000) / 1_000
    for name in ("old.part", "old.decl", "stray", "live.decl"):
        os.utime(store.root / "tmp" / name, (old_s, old_s))
    fresh_s = (now_ms - 1_000) / 1_000
    os.utime(store.root / "tmp" / "live.part", (fresh_s, fresh_s))
    assert store.sweep_tmp(now_ms) == ["old.decl", "old.part", "stray"]
    assert tmp_names(store) == ["live.decl", "live.part"], "a live upload is kept whole"
    with rejected(Rejection.CHUNK_OUT_OF_RANGE):
        store.write("old", 10, DATA[10:20])
    store.abandon("live")
    assert tmp_names(store) == []
