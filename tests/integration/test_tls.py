"""TLS, mutual TLS and token rotation between real coordinator and worker processes on
127.0.0.1, with a CA and certificates made in the test by the openssl CLI: a TLS run
completes, a worker without a client certificate or with another worker's is refused, and
SIGHUP makes a replaced admin token (and a rewritten enrollment token file) take effect."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2
from tests.integration.harness import INTBENCH, PY, REPO, Cluster, Proc, intbench_spec
from tools.fleetctl.client import Admin, CtlError

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl CLI makes the certificates")


class Pki:
    """A CA and certificates signed by it (EC P-256, valid one day), as PEM files in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ca = root / "ca.pem"
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-keyout", str(root / "ca.key"), "-out", str(self.ca), "-days", "1",
                      "-subj", "/CN=fleet test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def _openssl(self, *args: str) -> None:
        done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"

    def issue(self, name: str, cn: str, san: str, usage: str) -> tuple[Path, Path]:
        key, csr, cert = (self.root / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
        ext = self.root / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}")
        self._openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.root / "ca.key"),
                      "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))
        return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.server = p.issue("server", "localhost", "DNS:localhost,IP:127.0.0.1", "serverAuth")
    p.w1 = p.issue("w1", "w1", "URI:fleet-worker://w1", "clientAuth")
    # A CN that says w2 does not make a w2 certificate: only the URI SAN names a worker.
    p.w1_cn_w2 = p.issue("w1cn", "w2", "URI:fleet-worker://w1", "clientAuth")
    p.ops = p.issue("ops", "ops", "URI:fleet-admin://ops", "clientAuth")
    return p


class TlsCluster(Cluster):
    """The harness cluster, with its admin client speaking TLS (and mTLS when given a cert)."""

    pki: Pki
    client: tuple[Path, Path] | None = None

    def admin(self) -> Admin:
        cert, key = self.client or (None, None)
        return Admin(self.address, (self.data_dir / "admin.token").read_text().strip(), self.pki.ca, cert, key)


@pytest.fixture
def cluster(tmp_path: Path, pki: Pki):
    c = TlsCluster(tmp_path)
    c.pki = pki
    yield c
    c.stop_all()


def server_flags(pki: Pki, *, client_ca: bool) -> list[str]:
    cert, key = pki.server
    return ["--tls-cert", str(cert), "--tls-key", str(key), *(["--tls-client-ca", str(pki.ca)] if client_ca else [])]


def worker_flags(pki: Pki, client: tuple[Path, Path] | None = None) -> tuple[str, ...]:
    flags = ["--tls-ca", str(pki.ca)]
    if client is not None:
        flags += ["--tls-cert", str(client[0]), "--tls-key", str(client[1])]
    return tuple(flags)


def log_lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_for(predicate, what: str, timeout_s: float, tails) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{tails()}"
        time.sleep(0.1)


def run_to_completion(cluster: Cluster, groups: int = 4) -> dict:
    run_id = cluster.submit(intbench_spec(groups, ("good",), cap=4))
    results = cluster.wait_settled(run_id, 60)
    assert results["summary"]["state"] == "complete", results["summary"]
    return results


def test_a_run_completes_over_tls_and_plaintext_is_refused(cluster: TlsCluster, pki: Pki) -> None:
    cluster.start_coordinator(*server_flags(pki, client_ca=False))
    cluster.start_worker("w1", slots=2, extra=worker_flags(pki))
    results = run_to_completion(cluster)
    assert {c["worker_id"] for c in results["cells"]} == {"w1"}
    assert any('"listening"' in line and '"tls": true' in line
               for line in cluster.coordinator.log_path.read_text().splitlines())
    # A plaintext client cannot speak to the TLS port.
    plain = Admin(cluster.address, (cluster.data_dir / "admin.token").read_text().strip())
    try:
        with pytest.raises(CtlError, match="unreachable"):
            plain.call("GetStatus", admin_pb2.GetStatusRequest(), timeout=5)
    finally:
        plain.close()


def test_mutual_tls_admits_the_named_worker_and_refuses_one_without_a_certificate(cluster: TlsCluster,
                                                                                  pki: Pki) -> None:
    cluster.client = pki.ops
    cluster.start_coordinator(*server_flags(pki, client_ca=True))
    bare = cluster.start_worker("w9", slots=1, extra=worker_flags(pki))  # TLS, but no client certificate
    cluster.start_worker("w1", slots=2, extra=worker_flags(pki, pki.w1))
    results = run_to_completion(cluster)
    assert {c["worker_id"] for c in results["cells"]} == {"w1"}
    # The handshake itself fails for w9: it never opened a session, and keeps retrying
    # (for all it can tell, the coordinator is unreachable), doing no work.
    assert bare.alive()
    assert {w["worker_id"] for w in cluster.status()["workers"]} == {"w1"}
    opened = [r.get("worker_id") for r in log_lines(cluster.coordinator.log_path) if r.get("event") == "session_open"]
    assert "w9" not in opened and "w1" in opened
    wait_for(lambda: any(r.get("event") == "stream ended" and "UNAVAILABLE" in r.get("cause", "")
                         for r in log_lines(bare.log_path)), "w9's failed handshake", 20, cluster.tails)
    # fleetctl without a client certificate cannot reach the admin API either.
    token = (cluster.data_dir / "admin.token").read_text().strip()
    anonymous = Admin(cluster.address, token, pki.ca)
    try:
        with pytest.raises(CtlError, match="unreachable"):
            anonymous.call("GetStatus", admin_pb2.GetStatusRequest(), timeout=5)
    finally:
        anonymous.close()


@pytest.mark.parametrize("cert_name", ["w1", "w1_cn_w2"])
def test_a_certificate_for_w1_cannot_open_a_session_as_w2(cluster: TlsCluster, pki: Pki, cert_name: str) -> None:
    cluster.client = pki.ops
    cluster.start_coordinator(*server_flags(pki, client_ca=True))
    impostor = cluster.start_worker("w2", slots=1, extra=worker_flags(pki, getattr(pki, cert_name)))
    try:
        code = impostor.popen.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the impostor was not refused for good\n{cluster.tails()}") from None
    assert code == 77, cluster.tails()  # EXIT_REFUSED: not restarted by systemd
    errors = [r for r in log_lines(impostor.log_path) if r.get("level") == "error"]
    assert errors and "PERMISSION_DENIED" in errors[0]["event"] and "IDENTITY_MISMATCH" in errors[0]["event"]
    assert "the client certificate is worker w1's, the session claims 'w2'" in errors[0]["event"]
    refused = [r for r in log_lines(cluster.coordinator.log_path) if r.get("event") == "session_refused"]
    assert refused and refused[0]["worker_id"] == "w2" and "worker w1's" in refused[0]["reason"]
    assert cluster.status()["workers"] == [], "no registration happened"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sighup_rotates_the_admin_token_and_a_worker_rereads_its_token_file(cluster: TlsCluster,
                                                                            pki: Pki) -> None:
    cluster.start_coordinator(*server_flags(pki, client_ca=False))
    old = (cluster.data_dir / "admin.token").read_text().strip()
    status = admin_pb2.GetStatusRequest()
    first = Admin(cluster.address, old, pki.ca)
    first.call("GetStatus", status)
    new = "rotated-" + os.urandom(16).hex()
    replacement = cluster.data_dir / "admin.token.new"
    replacement.write_text(new + "\n")
    os.replace(replacement, cluster.data_dir / "admin.token")  # atomically, as an operator should
    os.kill(cluster.coordinator.pid, signal.SIGHUP)
    wait_for(lambda: '"tokens_reloaded"' in cluster.coordinator.log_path.read_text(), "the reload", 10,
             cluster.tails)
    with pytest.raises(CtlError, match="UNAUTHENTICATED"):
        first.call("GetStatus", status)  # the same channel, the old token: refused from now on
    second = Admin(cluster.address, new, pki.ca)
    assert second.call("GetStatus", status) is not None
    first.close()
    second.close()

    # The enrollment token rotates the same way, and a worker that has not enrolled yet
    # reads its token file again before each connection attempt.
    enroll = cluster.data_dir / "enroll.token"
    enroll.write_text("enroll-" + os.urandom(16).hex() + "\n")
    os.kill(cluster.coordinator.pid, signal.SIGHUP)
    wait_for(lambda: cluster.coordinator.log_path.read_text().count('"tokens_reloaded"') == 2, "the second reload",
             10, cluster.tails)
    token_file = cluster.root / "w1.token"
    token_file.write_text("a stale token\n")
    port = free_port()
    state = cluster.root / "workers" / "w1"
    state.mkdir(parents=True)
    log_path = cluster.root / "worker-w1.log"
    # Nothing listens on `port` yet: the worker retries; meanwhile its token file is fixed
    # and a second coordinator (the same data dir after a stop) comes up on that port.
    argv = [PY, "-m", "worker.main", "--coordinator", f"127.0.0.1:{port}", "--token-file", token_file,
            "--worker-id", "w1", "--slots", "1", "--state-dir", state, "--bench-root", INTBENCH, "--tls-ca", pki.ca]
    popen = subprocess.Popen([str(a) for a in argv], stdout=log_path.open("ab"), stderr=subprocess.STDOUT,
                             env=cluster.env(), cwd=REPO)
    cluster.workers["w1"] = Proc("worker w1", popen, log_path)
    wait_for(lambda: "reconnecting" in log_path.read_text(), "the worker's first failed attempt", 20,
             cluster.tails)
    token_file.write_text(enroll.read_text())
    assert cluster.coordinator.term(20) == 0
    cluster.address = f"127.0.0.1:{port}"
    cluster.start_coordinator(*server_flags(pki, client_ca=False))
    wait_for(lambda: any(r.get("event") == "session_open" and r.get("worker_id") == "w1"
                         for r in log_lines(cluster.coordinator.log_path)), "w1's session", 30, cluster.tails)
    assert any(r.get("event") == "token file changed; using the new token" for r in log_lines(log_path))
    assert popen.poll() is None, "the stale token was never presented, so the worker was never refused"


def test_the_identity_check_reads_only_the_fleet_worker_uri() -> None:
    from coordinator.auth import certificate_identity_problem

    ok = {"peer_uri": [b"fleet-worker://w1"], "x509_common_name": [b"w2"]}
    assert certificate_identity_problem(ok, "w1") == ""
    assert "worker w1's" in certificate_identity_problem(ok, "w2")
    assert "names no worker" in certificate_identity_problem({"x509_common_name": [b"w1"]}, "w1")
    two = {"peer_uri": [b"fleet-worker://w1", b"fleet-worker://w2"]}
    assert "several workers" in certificate_identity_problem(two, "w1")
    other = {"x509_subject_alternative_name": [b"spiffe://fleet/w1", b"fleet-worker://w1"]}
    assert certificate_identity_problem(other, "w1") == ""
