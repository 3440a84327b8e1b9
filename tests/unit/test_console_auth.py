"""The console's rights (coordinator/console/auth.py) against a real TokenBook in a temp dir:
the admin token acts, the viewer token reads, anything else (a worker's or enrollment token, a
wrong or empty one) is nobody; sessions expire, end on logout and on a token reload, are
bounded in number; a session's CSRF token is required and compared exactly, a bearer request
needs none."""
from __future__ import annotations

from pathlib import Path

from coordinator.auth import TokenBook
from coordinator.console import limits
from coordinator.console.auth import ADMIN, VIEWER, ConsoleAuth, viewer_token_path


def make(tmp_path: Path) -> ConsoleAuth:
    return ConsoleAuth(TokenBook(tmp_path, "admin-secret", "enroll-secret"), "viewer-secret")


def test_tokens_and_their_rights(tmp_path: Path) -> None:
    auth = make(tmp_path)
    assert auth.role_of("admin-secret") == ADMIN and auth.role_of("viewer-secret") == VIEWER
    for nobody in ("enroll-secret", "", None, "admin-secret2", "viewer"):
        assert auth.role_of(nobody) is None, nobody
    p = auth.from_bearer("Bearer viewer-secret")
    assert p is not None and p.role == VIEWER and not p.can_act and p.via == "bearer"
    assert auth.from_bearer("Bearer admin-secret").can_act
    assert auth.from_bearer("Basic admin-secret") is None and auth.from_bearer(None) is None
    assert auth.csrf_ok(p, None)  # a bearer request is not a browser's ambient credential
    assert viewer_token_path(tmp_path / "admin.token") == tmp_path / "viewer.token"


def test_sessions_csrf_expiry_logout_and_reload(tmp_path: Path) -> None:
    auth = make(tmp_path)
    assert auth.login("wrong", 0) is None
    sid, p = auth.login(" admin-secret \n", 1_000)
    assert p.role == ADMIN and p.via == "session" and p.who.startswith("admin session ")
    assert "admin-secret" not in p.who and sid not in p.who
    same = auth.from_session(sid, 2_000)
    assert same is not None and same.csrf == p.csrf and auth.csrf_ok(same, p.csrf)
    assert not auth.csrf_ok(same, "") and not auth.csrf_ok(same, None) and not auth.csrf_ok(same, p.csrf + "x")
    assert auth.from_session("forged", 2_000) is None and auth.from_session(None, 2_000) is None
    assert auth.from_session(sid, 1_000 + limits.SESSION_TTL_MS) is None  # expired, and forgotten
    assert auth.from_session(sid, 2_000) is None

    sid2, _ = auth.login("viewer-secret", 0)
    auth.logout(sid2)
    assert auth.from_session(sid2, 1) is None
    sid3, _ = auth.login("viewer-secret", 0)
    auth.reload("new-viewer")
    assert auth.from_session(sid3, 1) is None  # a rotation logs every browser out
    assert auth.role_of("viewer-secret") is None and auth.role_of("new-viewer") == VIEWER


def test_sessions_are_bounded(tmp_path: Path) -> None:
    auth = make(tmp_path)
    first, _ = auth.login("viewer-secret", 0)
    for _ in range(limits.SESSIONS_MAX):
        auth.login("viewer-secret", 0)
    assert auth.sessions == limits.SESSIONS_MAX
    assert auth.from_session(first, 1) is None  # the oldest went first
