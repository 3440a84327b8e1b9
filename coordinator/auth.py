"""Tokens: the admin token, the fleet's enrollment token, and per-worker credentials.

A worker's first session presents the enrollment token (what configuration management puts
on every VM); the coordinator answers with a credential bound to that worker id, and from
then on only that credential opens a session as that id. Tokens are read from files, kept
only as SHA-256 hashes, compared in constant time and never logged. Worker credentials are
persisted (hashed) before the worker learns its credential, so a coordinator restart never
forgets an enrollment: each enrollment is one line appended to `DATA_DIR/credentials.log`
and fsynced (enrollments that arrive together share one fsync); at start the log is folded
into `DATA_DIR/credentials.json` (written atomically) and emptied. Rewriting the whole book
per enrollment cost O(workers) each: 10,000 workers enrolling at once spent minutes in it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from common.durable import fsync_dir

TOKEN_BYTES = 32
CREDENTIALS_FILE = "credentials.json"
CREDENTIALS_LOG = "credentials.log"
# A worker's client certificate names its id as this URI in its subjectAltName (the CN is
# not read): fleet-worker://w17. One such URI per certificate.
WORKER_URI_PREFIX = "fleet-worker://"


class AuthError(Exception):
    """`code` is 'unauthenticated' (no or wrong token) or 'permission_denied' (a valid
    credential used where it does not apply)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def read_token_file(path: Path) -> str:
    text = Path(path).read_text().strip()
    if not text:
        raise ValueError(f"token file {path} is empty")
    return text


def ensure_token_file(path: Path) -> tuple[str, bool]:
    """Read the token at `path`, creating it (mode 0600) when it does not exist."""
    path = Path(path)
    if path.exists():
        return read_token_file(path), False
    token = secrets.token_urlsafe(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token, True


def bearer(metadata: tuple | list | None) -> tuple[str | None, str | None]:
    """(token, claimed worker id) from call metadata."""
    token = worker_id = None
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            token = value[len("Bearer "):].strip()
        elif key == "x-fleet-worker-id" and isinstance(value, str):
            worker_id = value
    return token, worker_id


def certificate_identity_problem(auth_context: dict, claimed: str | None) -> str:
    """Why a session claiming `claimed` may not use the client certificate of this call
    (from grpc's auth_context), or '' when the certificate names exactly that worker."""
    uris = auth_context.get("peer_uri") or auth_context.get("x509_subject_alternative_name") or []
    named = sorted({u.decode(errors="replace")[len(WORKER_URI_PREFIX):] for u in uris
                    if u.decode(errors="replace").startswith(WORKER_URI_PREFIX)})
    if not named:
        return (f"the client certificate names no worker (it needs the subjectAltName URI "
                f"{WORKER_URI_PREFIX}ID); the session claims {claimed!r}")
    if len(named) > 1:
        return f"the client certificate names several workers ({', '.join(named)}); it must name one"
    if named[0] != claimed:
        return f"the client certificate is worker {named[0]}'s, the session claims {claimed!r}"
    return ""


@dataclass(frozen=True, slots=True)
class SessionGrant:
    worker_id: str
    new_credential: str  # non-empty only at first enrollment


class TokenBook:
    def __init__(self, data_dir: Path, admin_token: str, enroll_token: str) -> None:
        self._path = Path(data_dir) / CREDENTIALS_FILE
        self._log_path = Path(data_dir) / CREDENTIALS_LOG
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()  # one fsync of the log at a time; the others wait and share it
        self._admin = _hash(admin_token)
        self._enroll = _hash(enroll_token)
        self._workers: dict[str, str] = {}
        if self._path.exists():
            data = json.loads(self._path.read_text())
            self._workers = {str(k): str(v) for k, v in data.get("workers", {}).items()}
        if self._log_path.exists():
            for line in self._log_path.read_bytes().split(b"\n"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn last line: an enrollment never confirmed to its worker
                self._workers[str(entry["w"])] = str(entry["h"])
            self._persist()
        # Emptied: everything it held is in the book now. O_APPEND, created 0600, its name durable.
        fd = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._log = os.fdopen(fd, "ab")
        os.fsync(fd)
        fsync_dir(self._log_path.parent)
        self._written = self._synced = 0

    def reload(self, admin_token: str, enroll_token: str) -> None:
        """Token rotation without a restart (SIGHUP)."""
        with self._lock:
            self._admin = _hash(admin_token)
            self._enroll = _hash(enroll_token)

    def check_admin(self, token: str | None) -> None:
        if not token:
            raise AuthError("unauthenticated", "no bearer token: pass the admin token (--token-file)")
        h = _hash(token)
        if hmac.compare_digest(h, self._admin):
            return
        with self._lock:
            is_worker = any(hmac.compare_digest(h, v) for v in self._workers.values()) or hmac.compare_digest(h, self._enroll)
        if is_worker:
            raise AuthError("permission_denied", "a worker or enrollment token cannot use the admin API")
        raise AuthError("unauthenticated", "the token is not the admin token")

    def check_any(self, token: str | None) -> None:
        """Read-only calls a worker makes outside its session (`fleet-worker identity
        --against`): the admin token, the enrollment token or any worker credential."""
        if not token:
            raise AuthError("unauthenticated", "no bearer token: pass the enrollment token or the worker credential")
        h = _hash(token)
        with self._lock:
            known = (hmac.compare_digest(h, self._admin) or hmac.compare_digest(h, self._enroll)
                     or any(hmac.compare_digest(h, v) for v in self._workers.values()))
        if not known:
            raise AuthError("unauthenticated", "the token is not one this coordinator issued")

    def open_session(self, token: str | None, worker_id: str | None) -> SessionGrant:
        if not token:
            raise AuthError("unauthenticated", "no bearer token: pass the enrollment token or the worker credential")
        if not worker_id:
            raise AuthError("unauthenticated", "no x-fleet-worker-id metadata")
        h = _hash(token)
        with self._lock:
            known = self._workers.get(worker_id)
            if known is not None and hmac.compare_digest(h, known):
                return SessionGrant(worker_id, "")
            if hmac.compare_digest(h, self._enroll):
                if known is not None:
                    raise AuthError("permission_denied",
                                    f"worker {worker_id} is already enrolled: present its credential "
                                    "(kept in its state dir), or enroll under a new worker id")
                # Persisted by `commit_enrollment` once registration is accepted: a worker
                # refused for its environment must be able to enroll again after a fix.
                return SessionGrant(worker_id, secrets.token_urlsafe(TOKEN_BYTES))
            if hmac.compare_digest(h, self._admin):
                raise AuthError("permission_denied", "the admin token cannot open a worker session")
            if any(hmac.compare_digest(h, v) for v in self._workers.values()):
                raise AuthError("permission_denied", f"this credential belongs to another worker, not {worker_id}")
        raise AuthError("unauthenticated", f"the token is neither the enrollment token nor {worker_id}'s credential")

    def commit_enrollment(self, worker_id: str, credential: str) -> None:
        """Bind `credential` to `worker_id` durably, before the worker is told it."""
        line = json.dumps({"w": worker_id, "h": _hash(credential)}).encode() + b"\n"
        with self._lock:
            if worker_id in self._workers:
                raise AuthError("permission_denied", f"worker {worker_id} enrolled twice at once")
            self._workers[worker_id] = _hash(credential)
            self._log.write(line)
            self._log.flush()  # to the kernel; durable with the fsync below
            self._written += 1
            mine = self._written
        with self._sync_lock:
            if self._synced >= mine:
                return  # another caller's fsync covered this line
            with self._lock:
                upto = self._written
            os.fsync(self._log.fileno())
            self._synced = upto

    def close(self) -> None:
        self._log.close()

    def _persist(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"workers": self._workers}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        fsync_dir(self._path.parent)
