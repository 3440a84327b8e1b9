"""The console's HTTP surface against a real coordinator and worker on 127.0.0.1, without a
browser: an unauthenticated request sees only the login page; the login form sets an HttpOnly,
SameSite=Strict cookie; a viewer reads and cannot act; an admin's action needs the CSRF token
and this origin, goes through the Admin RPC (the run really pauses) and is logged with who did
it; server-sent events resume after a reconnect from Last-Event-ID with nothing lost, and a
page is told to resync when its last event is from another coordinator process; TLS serves the
console with the gRPC port's certificate and the cookie is Secure; plaintext off loopback is
refused unless --insecure."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import ssl
import time
from pathlib import Path

import pytest

from coordinator import config as cc
from tests.integration.consolekit import Events, Http, attr, start_console_coordinator
from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def tokens(c: Cluster) -> tuple[str, str]:
    return ((c.data_dir / "admin.token").read_text().strip(), (c.data_dir / "viewer.token").read_text().strip())


def wait_for(what: str, check, timeout_s: float = 30, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_rights_login_csrf_and_actions_through_the_admin_rpc(cluster: Cluster) -> None:
    address = start_console_coordinator(cluster)
    admin_token, viewer_token = tokens(cluster)
    run_id = cluster.submit(intbench_spec(3), FAST_POLICY)

    anon = Http(address)
    for path in ("/", f"/runs/{run_id}", f"/runs/{run_id}/cells/t000/r1/good", "/api/status", "/events"):
        r = anon.get(path)
        assert r.status == 401, (path, r.status)
        assert run_id not in r.text.replace(f"value=\"/runs/{run_id}", ""), f"{path} shows the run unauthenticated"
        if path in ("/", f"/runs/{run_id}"):
            assert 'id="login-form"' in r.text and 'data-run-id' not in r.text
    assert anon.post(f"/runs/{run_id}/pause", {"csrf": "x"}).status == 401
    r = anon.post("/login", {"token": "not-a-token", "next": "/"})
    assert r.status == 401 and 'id="login-error"' in r.text and not anon.cookie
    # A worker's enrollment token is no console token either.
    r = anon.post("/login", {"token": (cluster.data_dir / "enroll.token").read_text().strip(), "next": "/"})
    assert r.status == 401

    r = Http(address).post("/login", {"token": viewer_token, "next": "/"}, headers={"Origin": "http://evil.example"})
    assert r.status == 403 and "set-cookie" not in r.headers  # no login from another site's form
    viewer = Http(address)
    r = viewer.login(viewer_token)
    cookie = next(c for c in viewer.set_cookies if c.startswith("fleet_console="))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie and "Secure" not in cookie
    page = viewer.get("/")
    assert page.status == 200 and run_id in page.text and attr(page.text, "role", "data-role") == "viewer"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    run_page = viewer.get(f"/runs/{run_id}").text
    assert 'id="run-actions"' not in run_page and 'id="bulk-form"' not in run_page  # no action for a viewer
    csrf = viewer.csrf("/")  # the viewer's own session token (its logout form): still not enough to act
    r = viewer.post(f"/runs/{run_id}/pause", {"csrf": csrf})
    assert r.status == 403 and 'id="refused"' in r.text and "viewer cannot act" in r.text
    assert cluster.status()["runs"][0]["state"] != "paused"

    admin = Http(address)
    admin.login(admin_token)
    assert attr(admin.get("/").text, "role", "data-role") == "admin"
    r = admin.post(f"/runs/{run_id}/pause", {"csrf": "forged"})
    assert r.status == 403 and "CSRF" in r.text
    csrf = admin.csrf(f"/runs/{run_id}")
    r = admin.post(f"/runs/{run_id}/pause", {"csrf": csrf}, headers={"Origin": "http://evil.example"})
    assert r.status == 403 and "another origin" in r.text
    assert cluster.status()["runs"][0]["state"] != "paused"
    r = admin.post(f"/runs/{run_id}/pause", {"csrf": csrf}, headers={"Origin": f"http://{address}"})
    assert r.status == 200 and attr(r.text, "action-result", "data-outcome") == "accepted", r.text[-800:]
    assert cluster.status()["runs"][0]["state"] == "paused"
    r = admin.post(f"/runs/{run_id}/recover", {"csrf": csrf})
    assert r.status == 200 and attr(r.text, "action-result", "data-outcome") == "accepted"
    # The coordinator's refusal is shown as it is: a drain of a worker that does not exist.
    r = admin.post("/workers/nobody/drain", {"csrf": csrf})
    assert r.status == 409 and "refused" in r.text

    bearer = Http(address, bearer=admin_token)
    progress = bearer.get(f"/runs/{run_id}?fragment=progress")  # the cheap live part: the run's status only
    assert progress.status == 200 and progress.text.startswith('<div id="live-progress" data-seq="')
    assert attr(progress.text, "progress", "data-total") == "6" and len(progress.body) < 2_000
    heavy = bearer.get(f"/runs/{run_id}?fragment=1")
    assert heavy.status == 200 and heavy.text.startswith('<div id="live" data-seq="') and "matrix" in heavy.text
    assert bearer.get("/runs/no-such-run").status == 404
    status = json.loads(bearer.get("/api/status").body)
    assert status["runs"][0]["run_id"] == run_id and status["runs"][0]["state"] != "paused"
    assert Http(address, bearer="wrong").get("/api/status").status == 401

    # Logged with who did it, refusals too; no token in the log.
    log = (cluster.root / "coordinator.log").read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    acts = [e for e in lines if e.get("event") == "console_action"]
    assert any(e["action"] == "pause" and e["who"].startswith("admin session ") and e["outcome"] == "accepted"
               for e in acts), acts
    refused = [e for e in lines if e.get("event") == "console_action_refused"]
    assert any(e["who"].startswith("viewer session ") and e["action"] == "pause" for e in refused), refused
    assert admin_token not in log and viewer_token not in log

    # Bad input is refused with its reason, nothing done.
    r = admin.post(f"/runs/{run_id}/retry/plan", {"csrf": csrf, "state": "incomplete", "reason": "bogus"})
    assert r.status == 400 and "unknown incomplete reason 'bogus'" in r.text
    r = admin.post(f"/runs/{run_id}/retry/confirm", {"csrf": csrf, "plan": "made-up"})
    assert r.status == 409 and "no such bulk retry plan" in r.text
    r = admin.post(f"/runs/{run_id}/repair", {"csrf": csrf})
    assert r.status == 400 and "blocked reason" in r.text
    assert admin.get(f"/runs/{run_id}?page=-1").status == 400

    # Logging out ends the session (the viewer's goes on).
    assert admin.post("/logout", {"csrf": csrf}).status == 303
    assert admin.get("/").status == 401 and viewer.get("/").status == 200

    # A rotated viewer token (SIGHUP) ends the viewer's session; the new token logs in.
    (cluster.data_dir / "viewer.token").write_text("rotated-viewer-token\n")
    os.kill(cluster.coordinator.pid, signal.SIGHUP)
    wait_for("the old viewer session to end", lambda: viewer.get("/").status == 401, timeout_s=10)
    Http(address).login("rotated-viewer-token")


def test_events_resume_after_a_reconnect_and_resync_across_processes(cluster: Cluster) -> None:
    address = start_console_coordinator(cluster)
    admin_token, _ = tokens(cluster)
    client = Http(address, bearer=admin_token)
    steady = Events(client)  # held open throughout: what a page that never disconnected sees
    assert steady.status == 200
    steady.read(lambda evs: evs[-1][1] == "hello")
    first = Events(client)
    first.read(lambda evs: evs[-1][1] == "hello")

    run_id = cluster.submit(intbench_spec(6, ("medium", "good")), FAST_POLICY)
    cluster.start_worker("w1", slots=2)
    got = first.read(lambda evs: sum(1 for e in evs if e[1] == "fleet" and e[2]["event"] == "cell_selected") >= 2)
    last_seen = [e for e in got if e[1] == "fleet"][-1][0]
    first.close()  # the browser loses its connection here; the run goes on
    settled_results = cluster.wait_settled(run_id, 60)

    # A cell's artifact, downloaded whole (the bytes its digest names) and shown inline.
    art = next(a for c in settled_results["cells"] for a in c["artifacts"] if a["name"] == "subject.stdout")
    got = client.get(f"/artifacts/{art['digest']}?name=../../{art['name']}&download=1")
    assert got.status == 200 and "sha256:" + hashlib.sha256(got.body).hexdigest() == art["digest"]
    assert got.headers["content-disposition"] == 'attachment; filename="subject.stdout"'
    shown = client.get(f"/artifacts/{art['digest']}?name={art['name']}")
    assert shown.status == 200 and 'id="artifact-text"' in shown.text and "answered" in shown.text
    assert client.get("/artifacts/sha256:" + "0" * 64).status == 404
    settled = steady.read(lambda evs: any(e[1] == "fleet" and e[2]["event"] == "run_settled" for e in evs))
    steady_ids = list(dict.fromkeys(e[0] for e in settled if e[1] == "fleet"))  # one id a message
    assert last_seen in steady_ids

    resumed = Events(client, last_event_id=last_seen)
    back = resumed.read(lambda evs: any(e[1] == "fleet" and e[2]["event"] == "run_settled" for e in evs))
    resumed_ids = list(dict.fromkeys(e[0] for e in back if e[1] == "fleet"))
    # Exactly the events after the last one seen, in order: none lost, none twice.
    assert resumed_ids == steady_ids[steady_ids.index(last_seen) + 1:steady_ids.index(resumed_ids[-1]) + 1]
    assert not any(e[1] == "resync" for e in back)
    resumed.close()
    steady.close()

    # After a restart the ids name another process: the page is told to read itself again.
    cluster.coordinator.term(20)
    address = start_console_coordinator(cluster)
    client = Http(address, bearer=admin_token)
    again = Events(client, last_event_id=last_seen)
    evs = again.read(lambda evs: any(e[1] == "resync" for e in evs))
    assert any("restarted" in e[2].get("detail", "") for e in evs if e[1] == "resync")
    again.close()
    assert Events(Http(address)).status == 401


def test_plaintext_console_off_loopback_is_refused_unless_insecure(tmp_path: Path) -> None:
    base = ["--data-dir", str(tmp_path)]
    with pytest.raises(cc.ConfigFileError, match="refusing a plaintext console on 0.0.0.0:8080"):
        cc.parse([*base, "--http-listen", "0.0.0.0:8080"], {}, 1)
    with pytest.raises(cc.ConfigFileError, match="must be HOST:PORT"):
        cc.parse([*base, "--http-listen", "8080"], {}, 1)
    with pytest.raises(cc.ConfigFileError, match="not a readable file"):
        cc.parse([*base, "--http-listen", "127.0.0.1:0", "--viewer-token-file", str(tmp_path / "none")], {}, 1)
    cfg = cc.parse([*base, "--listen", "0.0.0.0:7443", "--http-listen", "0.0.0.0:8080", "--insecure"], {}, 1)[0]
    assert cfg.http_listen == "0.0.0.0:8080" and cfg.viewer_token_path == tmp_path / "viewer.token"
    assert cc.parse(base, {}, 1)[0].http_listen == ""  # off by default


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl CLI makes the certificates")
def test_console_serves_tls_with_the_grpc_ports_certificate(tmp_path: Path) -> None:
    from tests.integration.test_tls import Pki, TlsCluster

    pki = Pki(tmp_path / "pki")
    cert, key = pki.issue("server", "localhost", "DNS:localhost,IP:127.0.0.1", "serverAuth")
    c = TlsCluster(tmp_path / "c")
    c.pki = pki
    try:
        address = start_console_coordinator(c, "--tls-cert", str(cert), "--tls-key", str(key))
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        browser = Http(address, tls=ctx)
        assert browser.get("/").status == 401
        browser.login((c.data_dir / "viewer.token").read_text().strip())
        assert any("Secure" in s for s in browser.set_cookies if s.startswith("fleet_console="))
        assert browser.get("/").status == 200
        with pytest.raises(ssl.SSLError):  # a client that does not trust the CA: the certificate is verified
            Http(address, tls=ssl.create_default_context()).get("/")
    finally:
        c.stop_all()
