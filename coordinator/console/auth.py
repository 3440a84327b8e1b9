"""Who may see the console and who may act in it.

Two rights: a viewer reads every page; an admin also acts. The admin token is the Admin API's
own (TokenBook.check_admin, the same file fleetctl reads); the viewer token is a file of its
own beside it (`viewer.token`, created mode 0600 when missing, like the others), re-read on
SIGHUP. A browser logs in once with either token through the login form and gets a session:
a random id in an HttpOnly, SameSite=Strict cookie (Secure under TLS), kept in memory as its
hash, so a restart or a token rotation logs every browser out. A script may instead send the
token itself as `Authorization: Bearer TOKEN` on every request. Every state-changing request
of a cookie session carries the session's CSRF token (compared in constant time); a bearer
request needs none (a browser never adds that header by itself). Tokens are never logged; the
log names the right and the session's short id, never a secret.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from coordinator.auth import AuthError, TokenBook
from coordinator.console import limits

VIEWER_TOKEN_NAME = "viewer.token"
COOKIE_NAME = "fleet_console"
SESSION_BYTES = 32
VIEWER, ADMIN = "viewer", "admin"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: a right, how it proved it, and a name for the log (no secret)."""

    role: str  # VIEWER or ADMIN
    via: str  # "session" or "bearer"
    who: str  # e.g. "admin session 3f9a2c1b", "viewer bearer"
    csrf: str = ""  # the session's CSRF token ("" for a bearer request)

    @property
    def can_act(self) -> bool:
        return self.role == ADMIN


@dataclass(slots=True)
class _Session:
    role: str
    csrf: str
    expires_ms: int
    short: str


class ConsoleAuth:
    """Checks tokens and holds the login sessions; owned by the event loop (no locks)."""

    def __init__(self, tokens: TokenBook, viewer_token: str) -> None:
        self._tokens = tokens
        self._viewer = _hash(viewer_token)
        self._sessions: dict[str, _Session] = {}  # hash of the session id -> session

    def reload(self, viewer_token: str) -> None:
        """Token rotation (SIGHUP): the new viewer token, and every session ends."""
        self._viewer = _hash(viewer_token)
        self._sessions.clear()

    def role_of(self, token: str | None) -> str | None:
        """ADMIN, VIEWER, or None for anything else (a worker's credential too)."""
        if not token:
            return None
        try:
            self._tokens.check_admin(token)
            return ADMIN
        except AuthError:
            pass
        return VIEWER if hmac.compare_digest(_hash(token), self._viewer) else None

    def login(self, token: str, now_ms: int) -> tuple[str, Principal] | None:
        """A new session for a valid token: (session id for the cookie, principal)."""
        role = self.role_of(token.strip())
        if role is None:
            return None
        self._expire(now_ms)
        while len(self._sessions) >= limits.SESSIONS_MAX:  # the oldest goes first (dicts keep order)
            del self._sessions[next(iter(self._sessions))]
        sid = secrets.token_urlsafe(SESSION_BYTES)
        s = _Session(role, secrets.token_urlsafe(SESSION_BYTES), now_ms + limits.SESSION_TTL_MS, _hash(sid)[:8])
        self._sessions[_hash(sid)] = s
        return sid, Principal(role, "session", f"{role} session {s.short}", s.csrf)

    def logout(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(_hash(sid), None)

    def from_session(self, sid: str | None, now_ms: int) -> Principal | None:
        if not sid:
            return None
        s = self._sessions.get(_hash(sid))
        if s is None:
            return None
        if s.expires_ms <= now_ms:
            del self._sessions[_hash(sid)]
            return None
        return Principal(s.role, "session", f"{s.role} session {s.short}", s.csrf)

    def from_bearer(self, header: str | None) -> Principal | None:
        if not header or not header.startswith("Bearer "):
            return None
        role = self.role_of(header[len("Bearer "):].strip())
        return None if role is None else Principal(role, "bearer", f"{role} bearer")

    def csrf_ok(self, principal: Principal, given: str | None) -> bool:
        if principal.via == "bearer":
            return True
        return bool(given) and hmac.compare_digest(principal.csrf.encode(), (given or "").encode())

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    def _expire(self, now_ms: int) -> None:
        for key in [k for k, s in self._sessions.items() if s.expires_ms <= now_ms]:
            del self._sessions[key]


def viewer_token_path(admin_token_path: Path) -> Path:
    """The viewer token's file: beside the admin token's."""
    return Path(admin_token_path).parent / VIEWER_TOKEN_NAME
