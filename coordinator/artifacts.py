"""Content-addressed artifact files: chunked, resumable uploads checked before acceptance.

Rules:
- A stored artifact is `root/sha256/<2 hex>/<62 hex>`, read-only, named by the SHA-256 of its
  bytes. It appears there only by an atomic rename after its length and digest were checked
  and its bytes fsynced, followed by an fsync of the directory: when `finish` returns, the
  artifact survives a crash, and only then may the core learn of the digest.
- An upload in progress is `root/tmp/<upload key>.part` (the bytes so far) beside
  `<upload key>.decl` (the declared digest and length). Everything lives on disk, nothing in
  memory, so a coordinator restart resumes an upload at the length of its `.part` file. A
  torn tail after a crash is caught by the digest check at `finish`, which then deletes the
  upload so the retry starts over.
- Every chunk is written at the committed offset and fsynced before its new offset is
  returned; a chunk elsewhere, or past the declared length, is rejected with nothing written.
- Reads re-hash: `open_verified` raises `ArtifactCorrupt` when the bytes no longer match.

Peer mistakes raise `UploadRejected` carrying a `Rejection` (kind 1 of the error kinds);
failures of the disk raise `StoreIOError` (kind 3, see coordinator/errors.py).
Calls for one upload key must come in order (they do: one worker's stream); calls for
different keys may run on different threads, since they share no state but the directory.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.durable import fsync_dir as _fsync_dir
from common.ids import DIGEST_PREFIX, Digest, is_digest
from common.limits import (
    ARTIFACT_BYTES_MAX,
    ARTIFACT_TMP_AGE_MS_MAX,
    CHUNK_BYTES_MAX,
    UPLOAD_KEY_CHARS_MAX,
)
from common.rejections import Rejection
from coordinator.errors import ArtifactCorrupt, StoreIOError

SHA256_DIR_NAME = "sha256"
TMP_DIR_NAME = "tmp"
PART_SUFFIX = ".part"
DECL_SUFFIX = ".decl"
# One path component that cannot be "." or "..", a hidden file, or hold a separator.
UPLOAD_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@+=-]*$")
STORED_FILE_MODE = 0o444
READ_CHUNK_BYTES = CHUNK_BYTES_MAX


class UploadRejected(Exception):
    """The peer's upload is refused; `reason` is the numbered rejection sent back to it."""

    def __init__(self, reason: Rejection, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason.name}: {detail}")


class ArtifactStore:
    """See the module docstring. `root` is normally `data_dir / "artifacts"`."""

    def __init__(self, root: Path) -> None:
        self._hashing: dict[str, tuple[int, Any]] = {}  # upload key -> (bytes hashed, sha256)
        self._root = Path(root)
        self._sha_dir = self._root / SHA256_DIR_NAME
        self._tmp_dir = self._root / TMP_DIR_NAME
        with _io("creating the artifact store", self._root):
            for d in (self._root, self._sha_dir, self._tmp_dir):
                if not d.is_dir():
                    d.mkdir(parents=True, exist_ok=True)
                    _fsync_dir(d.parent)

    @property
    def root(self) -> Path:
        return self._root

    # ---- stored artifacts ----------------------------------------------------------------

    def path_for(self, digest: str) -> Path:
        assert is_digest(digest), f"not a digest: {digest!r}"
        hexpart = digest[len(DIGEST_PREFIX):]
        return self._sha_dir / hexpart[:2] / hexpart[2:]

    def has(self, digest: str) -> bool:
        if not is_digest(digest):
            return False
        try:
            return stat.S_ISREG(os.stat(self.path_for(digest)).st_mode)
        except FileNotFoundError:
            return False

    def size(self, digest: str) -> int:
        """The stored length in bytes; KeyError when the store does not hold `digest`."""
        if not is_digest(digest):
            raise KeyError(digest)
        try:
            return os.stat(self.path_for(digest)).st_size
        except FileNotFoundError:
            raise KeyError(digest) from None

    def open_verified(self, digest: str, chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        """The stored bytes in chunks, re-hashed on the way: the last step raises
        `ArtifactCorrupt` if they no longer match, so act on the bytes only once the iterator
        is exhausted (or use `read_verified`). KeyError when the digest is not stored."""
        path = self.path_for(digest) if is_digest(digest) else None
        if path is None or not self.has(digest):
            raise KeyError(digest)
        h = hashlib.sha256()
        with _io("reading an artifact", path), open(path, "rb") as f:
            while chunk := f.read(chunk_bytes):
                h.update(chunk)
                yield chunk
        actual = DIGEST_PREFIX + h.hexdigest()
        if actual != digest:
            raise ArtifactCorrupt(f"artifact {digest} now hashes to {actual}", path, digest=digest)

    def read_verified(self, digest: str) -> bytes:
        return b"".join(self.open_verified(digest))

    def put_bytes(self, data: bytes) -> Digest:
        """Store `data` through the upload path (for tests and tools); returns its digest."""
        digest = Digest(DIGEST_PREFIX + hashlib.sha256(data).hexdigest())
        key = "put-" + digest[len(DIGEST_PREFIX):]
        offset = self.begin(key, digest, len(data))
        while offset < len(data):
            offset = self.write(key, offset, data[offset:offset + CHUNK_BYTES_MAX])
        self.finish(key)
        return digest

    # ---- uploads -------------------------------------------------------------------------

    def begin(self, upload_key: str, digest: str, total_length: int) -> int:
        """Start or resume an upload; returns the committed offset to continue from.

        0 for a new upload; the durable length so far when `.part` exists for the same
        declaration; `total_length` when the digest is already stored (short-circuit:
        `finish` then returns at once). A different declaration under the key starts over.
        """
        part, decl = self._tmp_paths(upload_key)
        if not is_digest(digest):
            raise UploadRejected(Rejection.MALFORMED_FRAME, f"not a sha256 digest: {digest!r}")
        if not isinstance(total_length, int) or total_length < 0:
            raise UploadRejected(Rejection.MALFORMED_FRAME, f"bad length {total_length!r}")
        if total_length > ARTIFACT_BYTES_MAX:
            raise UploadRejected(Rejection.ARTIFACT_TOO_LARGE,
                                 f"{total_length} bytes exceeds {ARTIFACT_BYTES_MAX}")
        declaration = f"{digest} {total_length}\n".encode()
        with _io("beginning an upload", part):
            if self.has(digest):
                stored = self.size(digest)
                if stored != total_length:
                    raise UploadRejected(Rejection.LENGTH_MISMATCH,
                                         f"{digest} is stored with {stored} bytes, declared "
                                         f"{total_length}")
                _unlink(part)
                _write_durably(decl, declaration)
                return total_length
            if _read_or_none(decl) == declaration and part.exists():
                committed = part.stat().st_size
                if committed <= total_length:
                    return committed
            # A new upload, a changed declaration, or a .part longer than declared.
            _unlink(part)
            _write_durably(decl, declaration)
            _write_durably(part, b"")
            _fsync_dir(self._tmp_dir)
            return 0

    def write(self, upload_key: str, offset: int, data: bytes) -> int:
        """Append `data` at `offset` (which must be the committed offset); fsync; new offset."""
        part, decl = self._tmp_paths(upload_key)
        digest, total_length = self._declaration(upload_key, decl)
        if len(data) > CHUNK_BYTES_MAX:
            raise UploadRejected(Rejection.MESSAGE_TOO_LARGE,
                                 f"chunk of {len(data)} bytes exceeds {CHUNK_BYTES_MAX}")
        with _io("writing an upload chunk", part):
            try:
                fd = os.open(part, os.O_WRONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                fd = None
            if fd is None:
                committed = total_length if self.has(digest) else None
                if committed is None:
                    raise UploadRejected(Rejection.CHUNK_OUT_OF_RANGE,
                                         f"upload {upload_key!r} has no bytes file: begin again")
                _check_chunk(upload_key, committed, offset, len(data), total_length)
                return committed
            try:
                committed = os.fstat(fd).st_size
                _check_chunk(upload_key, committed, offset, len(data), total_length)
                view = memoryview(data)
                at = offset
                while view:
                    n = os.pwrite(fd, view, at)
                    view = view[n:]
                    at += n
                os.fsync(fd)
                self._hash_forward(upload_key, offset, data)
                return at
            finally:
                os.close(fd)

    def _hash_forward(self, upload_key: str, offset: int, data: bytes) -> None:
        """Hash as the bytes arrive, so `finish` need not read the file back. Memory only: a
        resumed upload (a new process, or a chunk out of step) is hashed from disk instead."""
        if offset == 0:
            self._hashing[upload_key] = (0, hashlib.sha256())
        known = self._hashing.get(upload_key)
        if known is None or known[0] != offset:
            self._hashing.pop(upload_key, None)
            return
        known[1].update(data)
        self._hashing[upload_key] = (offset + len(data), known[1])

    def finish(self, upload_key: str) -> tuple[Digest, int]:
        """Check length and digest, then move the upload into place durably."""
        part, decl = self._tmp_paths(upload_key)
        digest, total_length = self._declaration(upload_key, decl)
        with _io("finishing an upload", part):
            if self.has(digest):
                # Short-circuited, or a crash after the rename and before the cleanup.
                self._discard(part, decl)
                return Digest(digest), self.size(digest)
            if not part.exists():
                raise UploadRejected(Rejection.CHUNK_OUT_OF_RANGE,
                                     f"upload {upload_key!r} has no bytes file: begin again")
            length = part.stat().st_size
            if length != total_length:
                if length > total_length:
                    self._discard(part, decl)
                raise UploadRejected(Rejection.LENGTH_MISMATCH,
                                     f"upload {upload_key!r} has {length} bytes, declared "
                                     f"{total_length}")
            hashed = self._hashing.pop(upload_key, None)
            if hashed is not None and hashed[0] == total_length:
                h = hashed[1]  # every byte was hashed on its way in, and fsynced by write()
            else:
                h = hashlib.sha256()
                with open(part, "rb") as f:
                    while chunk := f.read(READ_CHUNK_BYTES):
                        h.update(chunk)
                    os.fsync(f.fileno())
            actual = DIGEST_PREFIX + h.hexdigest()
            if actual != digest:
                self._discard(part, decl)
                raise UploadRejected(Rejection.DIGEST_MISMATCH,
                                     f"upload {upload_key!r} hashes to {actual}, declared "
                                     f"{digest}; start over")
            final = self.path_for(digest)
            if not final.parent.is_dir():
                final.parent.mkdir(exist_ok=True)
                _fsync_dir(self._sha_dir)
            os.chmod(part, STORED_FILE_MODE)
            os.replace(part, final)
            _fsync_dir(final.parent)
            self._discard(part, decl)
            return Digest(digest), total_length

    def abandon(self, upload_key: str) -> None:
        """Forget an upload in progress (its bytes and declaration)."""
        self._hashing.pop(upload_key, None)
        part, decl = self._tmp_paths(upload_key)
        with _io("abandoning an upload", part):
            self._discard(part, decl)

    def sweep_tmp(self, now_ms: int, age_ms_max: int = ARTIFACT_TMP_AGE_MS_MAX) -> list[str]:
        """Delete uploads (their `.part` and `.decl` together) and stray temp files not
        modified for `age_ms_max`; returns the file names deleted, sorted.

        `now_ms` is wall-clock milliseconds from the caller (file mtimes are wall clock)."""
        newest_ms: dict[str, int] = {}
        names: dict[str, list[str]] = {}
        with _io("sweeping abandoned uploads", self._tmp_dir):
            for entry in os.scandir(self._tmp_dir):
                try:
                    mtime_ms = entry.stat(follow_symlinks=False).st_mtime_ns // 1_000_000
                except FileNotFoundError:
                    continue
                stem = entry.name
                for suffix in (PART_SUFFIX, DECL_SUFFIX):
                    if stem.endswith(suffix):
                        stem = stem[:-len(suffix)]
                        break
                newest_ms[stem] = max(newest_ms.get(stem, mtime_ms), mtime_ms)
                names.setdefault(stem, []).append(entry.name)
            removed = sorted(name for stem, when in newest_ms.items()
                             if now_ms - when >= age_ms_max for name in names[stem])
            for name in removed:
                _unlink(self._tmp_dir / name)
            if removed:
                _fsync_dir(self._tmp_dir)
        return removed

    # ---- helpers -------------------------------------------------------------------------

    def _tmp_paths(self, upload_key: str) -> tuple[Path, Path]:
        if (not isinstance(upload_key, str) or len(upload_key) > UPLOAD_KEY_CHARS_MAX
                or not UPLOAD_KEY_PATTERN.match(upload_key)):
            raise UploadRejected(Rejection.MALFORMED_FRAME, f"bad upload key {upload_key!r}")
        return (self._tmp_dir / (upload_key + PART_SUFFIX),
                self._tmp_dir / (upload_key + DECL_SUFFIX))

    def _declaration(self, upload_key: str, decl: Path) -> tuple[str, int]:
        with _io("reading an upload declaration", decl):
            raw = _read_or_none(decl)
        parts = raw.decode("ascii", "replace").split() if raw is not None else []
        if len(parts) != 2 or not is_digest(parts[0]) or not parts[1].isdigit():
            raise UploadRejected(Rejection.CHUNK_OUT_OF_RANGE,
                                 f"no upload {upload_key!r} in progress: begin first")
        return parts[0], int(parts[1])

    def _discard(self, part: Path, decl: Path) -> None:
        _unlink(part)
        _unlink(decl)
        _fsync_dir(self._tmp_dir)


def _check_chunk(key: str, committed: int, offset: int, length: int, total: int) -> None:
    if offset != committed:
        raise UploadRejected(Rejection.CHUNK_OUT_OF_RANGE,
                             f"upload {key!r}: chunk at {offset}, committed offset is {committed}")
    if offset + length > total:
        raise UploadRejected(Rejection.CHUNK_OUT_OF_RANGE,
                             f"upload {key!r}: chunk ends at {offset + length}, past the "
                             f"declared length {total}")


class _io:
    """Turns an OSError into StoreIOError naming what was being done and where."""

    def __init__(self, what: str, path: Path) -> None:
        self._what = what
        self._path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, err: BaseException | None, tb: object) -> bool:
        if isinstance(err, OSError):
            raise StoreIOError(f"{self._what}: {err.strerror or err}", self._path,
                               errno=err.errno) from err
        return False


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write_durably(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


