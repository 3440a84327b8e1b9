"""The systemd units in tools/systemd pass `systemd-analyze verify` (in a temporary root with
stub binaries) and keep their hardening, and the real daemons speak sd_notify as the units
expect: READY=1, STATUS=, WATCHDOG=1 and STOPPING=1 read from a real AF_UNIX datagram socket
given as NOTIFY_SOCKET to real coordinator and worker processes on loopback; the coordinator
also completes a run under the kernel's W^X lock (what MemoryDenyWriteExecute=yes imposes)."""
from __future__ import annotations

import array
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2
from tests.integration.harness import PY, REPO, Cluster, Proc, intbench_spec
from worker.config import DRAIN_FLUSH_TIMEOUT_S_DEFAULT, DRAIN_TIMEOUT_S_DEFAULT

UNITS_DIR = REPO / "tools" / "systemd"
UNITS = ("fleet-coordinator.service", "fleet-worker.service", "fleet-worker@.service")
HARBOR_DROP_IN = UNITS_DIR / "fleet-worker-harbor.conf"
HOST_UNITS = Path("/usr/lib/systemd/system")


# ---- systemd-analyze ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def analyze() -> str:
    """The systemd-analyze binary; installed from Debian's `systemd` package only when root
    and allowed (CI=true or FLEET_INSTALL_SYSTEMD=1), else the test is skipped, saying so."""
    found = shutil.which("systemd-analyze")
    if found is None and os.geteuid() == 0 and (os.environ.get("CI") == "true"
                                                 or os.environ.get("FLEET_INSTALL_SYSTEMD") == "1"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600, check=False)
        done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "systemd"], env=env,
                              capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, f"apt-get install systemd failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian package `systemd`); as root, set "
                    "FLEET_INSTALL_SYSTEMD=1 (or CI=true) to let this test install it")
    if not HOST_UNITS.is_dir():
        pytest.skip(f"{HOST_UNITS} is missing: verify needs systemd's own units (sysinit.target...)")
    return found


def exec_paths(unit_text: str) -> list[str]:
    """The binaries of every Exec*= line (after systemd's -@:+! prefixes)."""
    out = []
    for m in re.finditer(r"^Exec\w+=\s*(\S+)", unit_text, re.M):
        out.append(m.group(1).lstrip("-@:+!|"))
    return out


def make_root(tmp: Path, units: dict[str, str], drop_ins: dict[str, str] | None = None) -> Path:
    """A root for `systemd-analyze --root`: the host's systemd units (for sysinit.target and
    the rest), our units, and an executable stub at each Exec path (verify insists)."""
    root = tmp / "root"
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    etc = root / "etc/systemd/system"
    etc.mkdir(parents=True)
    for name, text in units.items():
        (etc / name).write_text(text)
        for binary in exec_paths(text):
            stub = root / binary.lstrip("/")
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text("#!/bin/sh\nexit 0\n")
            stub.chmod(0o755)
    for rel, text in (drop_ins or {}).items():
        (etc / rel).parent.mkdir(parents=True, exist_ok=True)
        (etc / rel).write_text(text)
    return root


def verify(analyze: str, root: Path, units: list[str]) -> list[str]:
    """Problems verify reports about our units: a failing exit, or any line naming one (an
    unknown key or a bad value is only a warning, with exit 0)."""
    done = subprocess.run([analyze, "verify", f"--root={root}", "--man=no", *units], capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    ours = [line for line in lines if "fleet-" in line]
    if done.returncode != 0:
        return ours or lines or [f"exit {done.returncode}"]
    return ours


def exposure(analyze: str, root: Path, unit: str) -> float:
    done = subprocess.run([analyze, "security", "--offline=yes", f"--root={root}", "--no-pager", unit],
                          capture_output=True, text=True, timeout=120)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    if m is None:
        pytest.skip(f"systemd-analyze security --offline is not available here: {done.stderr.strip()[:200]}")
    return float(m.group(1))


def our_units() -> dict[str, str]:
    return {name: (UNITS_DIR / name).read_text() for name in UNITS}


def test_every_unit_passes_systemd_analyze_verify(analyze: str, tmp_path: Path) -> None:
    root = make_root(tmp_path, our_units(), {"fleet-worker.service.d/harbor.conf": HARBOR_DROP_IN.read_text()})
    assert verify(analyze, root, ["fleet-coordinator.service", "fleet-worker.service", "fleet-worker@w1.service",
                                  "fleet-worker@w-17.service"]) == []


def test_the_verify_check_fails_on_broken_units(analyze: str, tmp_path: Path) -> None:
    units = our_units()
    broken = units["fleet-coordinator.service"].replace("ProtectSystem=strict", "ProtectSystem=strictly")
    broken = broken.replace("LockPersonality=yes", "LockPersonality=yes\nLockPersonalities=yes")
    problems = verify(analyze, make_root(tmp_path / "a", {"fleet-coordinator.service": broken}),
                      ["fleet-coordinator.service"])
    assert any("protect system" in p.lower() for p in problems), problems
    assert any("LockPersonalities" in p for p in problems), problems
    root = make_root(tmp_path / "b", {"fleet-worker.service": units["fleet-worker.service"]})
    (root / "opt/fleet/venv/bin/fleet-worker").unlink()
    assert any("not executable" in p for p in verify(analyze, root, ["fleet-worker.service"]))


def test_exposure_ratings_stay_low(analyze: str, tmp_path: Path) -> None:
    plain = make_root(tmp_path / "plain", our_units())
    assert exposure(analyze, plain, "fleet-coordinator.service") <= 2.0
    assert exposure(analyze, plain, "fleet-worker.service") <= 2.5
    assert exposure(analyze, plain, "fleet-worker@w1.service") <= 2.5
    harbor = make_root(tmp_path / "harbor", our_units(),
                       {"fleet-worker.service.d/harbor.conf": HARBOR_DROP_IN.read_text()})
    assert exposure(analyze, harbor, "fleet-worker.service") <= 5.0


# ---- what the units say ------------------------------------------------------------------------

def service_section(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize("name", UNITS)
def test_each_unit_notifies_restarts_and_is_hardened(name: str) -> None:
    s = service_section((UNITS_DIR / name).read_text())
    one = {k: v[-1] for k, v in s.items()}
    for key, want in (("Type", "notify"), ("NotifyAccess", "main"), ("Restart", "on-failure"),
                      ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"),
                      ("ProtectHome", "yes"), ("ProtectKernelTunables", "yes"), ("LockPersonality", "yes"),
                      ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"), ("CapabilityBoundingSet", ""),
                      ):
        assert one.get(key) == want, f"{name}: {key}={one.get(key)!r}, want {want!r}"
    # Exit codes restarting cannot fix: a bad configuration (2) and, for a worker, a
    # permanent refusal by the coordinator (77, worker/main.py EXIT_REFUSED).
    from worker.main import EXIT_OPERATOR, EXIT_REFUSED

    want_codes = {str(EXIT_OPERATOR)} | ({str(EXIT_REFUSED)} if name.startswith("fleet-worker") else set())
    assert set(one.get("RestartPreventExitStatus", "").split()) == want_codes, name
    assert re.fullmatch(r"\d+(s|min)", one["WatchdogSec"]), one["WatchdogSec"]
    assert one["StateDirectory"].startswith("fleet")
    assert "ReadWritePaths" not in s, "only the state dir is writable"
    exec_start = one["ExecStart"]
    assert re.search(r"--config /etc/fleet/\w+\.toml", exec_start), exec_start
    assert not re.search(r"token|secret|password|key", exec_start, re.I), f"a secret on the command line: {exec_start}"
    assert "Environment" not in s, "no secrets in the unit itself"
    coordinator = name == "fleet-coordinator.service"
    assert one["MemoryDenyWriteExecute"] == ("yes" if coordinator else "no")
    credentials = [v.split(":", 1)[0] for v in s.get("LoadCredential", [])]
    if coordinator:
        assert credentials == ["tls.key"] and one["ExecReload"] == "/bin/kill -HUP $MAINPID"
    else:
        assert credentials == ["enroll.token"] and one["EnvironmentFile"].startswith("-/etc/fleet/")
        assert one["KillMode"] == "mixed", "SIGTERM to the worker only: it drains its subjects itself"
        assert int(one["TimeoutStopSec"].removesuffix("min")) * 60 > DRAIN_TIMEOUT_S_DEFAULT + DRAIN_FLUSH_TIMEOUT_S_DEFAULT


def test_the_template_names_the_worker_and_its_state_by_instance() -> None:
    s = service_section((UNITS_DIR / "fleet-worker@.service").read_text())
    assert s["ExecStart"][-1].endswith("--worker-id %i") and s["StateDirectory"] == ["fleet-worker/%i"]
    plain = (UNITS_DIR / "fleet-worker.service").read_text()
    templated = (UNITS_DIR / "fleet-worker@.service").read_text()
    assert service_section(plain).keys() == service_section(templated).keys(), "the two worker units agree"


def test_the_credential_names_are_the_ones_the_daemons_look_for() -> None:
    from coordinator.config import TLS_KEY_NAME, environment_layer
    from worker.config import ENROLL_TOKEN_NAME
    from worker.config import environment_layer as worker_layer

    assert TLS_KEY_NAME == "tls.key" and ENROLL_TOKEN_NAME == "enroll.token"
    d = Path(tempfile.mkdtemp(prefix="creds-"))
    try:
        for name in ("tls.key", "enroll.token"):
            (d / name).write_text("x")
        env = {"CREDENTIALS_DIRECTORY": str(d), "STATE_DIRECTORY": "/var/lib/fleet"}
        assert environment_layer(env).values["tls_key"] == d / "tls.key"
        assert worker_layer(env).values["token_file"] == d / "enroll.token"
    finally:
        shutil.rmtree(d)


# ---- the scheduled backup: fleet-backup.service and fleet-backup.timer ---------------------------

BACKUP_UNITS = ("fleet-backup.service", "fleet-backup.timer")


def backup_drop_in() -> str:
    """The coordinator's drop-in for the backup root, as tools/systemd/README.md gives it."""
    readme = (UNITS_DIR / "README.md").read_text()
    m = re.search(r"fleet-coordinator\.service\.d/backup\.conf`:\n\n```\n(.*?)```", readme, re.S)
    assert m, "tools/systemd/README.md gives the coordinator's backup drop-in"
    return m.group(1)


def backup_units() -> dict[str, str]:
    return {**our_units(), **{name: (UNITS_DIR / name).read_text() for name in BACKUP_UNITS}}


def unit_section(text: str, name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == f"[{name}]":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_the_backup_units_pass_systemd_analyze_verify(analyze: str, tmp_path: Path) -> None:
    root = make_root(tmp_path, backup_units(), {"fleet-coordinator.service.d/backup.conf": backup_drop_in()})
    assert verify(analyze, root, ["fleet-backup.service", "fleet-backup.timer", "fleet-coordinator.service"]) == []
    assert exposure(analyze, root, "fleet-backup.service") <= 2.0
    assert exposure(analyze, root, "fleet-coordinator.service") <= 2.0, "the drop-in keeps the coordinator's rating"


def test_the_verify_check_fails_on_broken_backup_units(analyze: str, tmp_path: Path) -> None:
    units = backup_units()
    timer = units["fleet-backup.timer"].replace("Persistent=true", "Persistant=true")
    service = units["fleet-backup.service"].replace("Type=oneshot", "Type=oneshoot")
    problems = verify(analyze, make_root(tmp_path, {**units, "fleet-backup.timer": timer,
                                                    "fleet-backup.service": service}),
                      ["fleet-backup.service", "fleet-backup.timer"])
    assert any("Persistant" in p for p in problems), problems
    assert any("oneshoot" in p for p in problems), problems


def test_the_backup_unit_runs_fleetctl_backup_into_its_writable_root_hardened_like_the_coordinator() -> None:
    text = (UNITS_DIR / "fleet-backup.service").read_text()
    s = service_section(text)
    one = {k: v[-1] for k, v in s.items()}
    coordinator = service_section((UNITS_DIR / "fleet-coordinator.service").read_text())
    assert one["Type"] == "oneshot" and "Restart" not in s
    hardening = ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateUsers",
                 "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
                 "ProtectClock", "ProtectHostname", "ProtectProc", "RestrictAddressFamilies", "RestrictNamespaces",
                 "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality", "MemoryDenyWriteExecute",
                 "SystemCallArchitectures", "SystemCallErrorNumber", "CapabilityBoundingSet", "AmbientCapabilities",
                 "DynamicUser", "UMask")
    for key in hardening:
        assert s.get(key) == coordinator.get(key), f"{key}={s.get(key)!r}; the coordinator: {coordinator.get(key)!r}"
    assert s["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    # The coordinator's own dynamic user (DynamicUser=yes, no User=: named after its unit).
    assert "User" not in coordinator and one["User"] == one["Group"] == "fleet-coordinator"
    assert s["LoadCredential"] == ["admin.token:/var/lib/fleet/admin.token"]
    assert "Environment" not in s and "EnvironmentFile" not in s, "no secrets in the unit itself"

    from tools.fleetctl.cli import build_parser
    from tools.fleetctl.commands.backup import BACKUP_TIMEOUT_S

    argv = one["ExecStart"].split()
    assert argv[0] == "/opt/fleet/venv/bin/fleetctl"
    args = build_parser().parse_args(argv[1:])
    assert (args.cmd, args.dest, args.keep) == ("backup", None, 14)
    assert str(args.token_file) == "%d/admin.token", "the token by its credential path, never on the command line"
    root = args.into
    assert s["ReadWritePaths"] == [root] == ["/var/backups/fleet"], "only the backup root is writable"
    assert one["ExecStartPre"] == f"+/usr/bin/install -d -m 0700 -o fleet-coordinator -g fleet-coordinator {root}"
    assert int(one["TimeoutStartSec"].removesuffix("min")) * 60 > BACKUP_TIMEOUT_S, "the unit outwaits fleetctl"
    assert unit_section(text, "Unit")["After"] == ["fleet-coordinator.service"]
    assert "[Install]" not in text, "started by its timer, not enabled itself"
    drop_in = unit_section(backup_drop_in(), "Service")
    assert drop_in == {"ReadWritePaths": [f"-{root}"]}, "the coordinator may write the backup root, nothing more"


def test_the_backup_timer_is_persistent_randomised_and_starts_the_backup() -> None:
    text = (UNITS_DIR / "fleet-backup.timer").read_text()
    t = {k: v[-1] for k, v in unit_section(text, "Timer").items()}
    assert t["OnCalendar"] in ("daily", "hourly") and t["Persistent"] == "true"
    assert re.fullmatch(r"\d+(s|min|h)", t["RandomizedDelaySec"]), t
    assert t.get("Unit", "fleet-backup.service") == "fleet-backup.service"
    assert unit_section(text, "Install")["WantedBy"] == ["timers.target"]


# ---- sd_notify from real processes -------------------------------------------------------------

@dataclass(frozen=True)
class Message:
    pid: int  # the sender, from SCM_CREDENTIALS, as systemd checks for NotifyAccess=main
    fields: dict[str, str]
    at: float


class FakeNotifySocket:
    """A real AF_UNIX datagram socket in a short temporary dir, read by a thread."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fn-", dir="/tmp")  # AF_UNIX paths stop at 108 bytes
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages: list[Message] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        ucred = struct.calcsize("3i")
        while not self._stop.is_set():
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(4096, socket.CMSG_SPACE(ucred))
            except TimeoutError:
                continue
            except OSError:
                return
            pid = 0
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = array.array("i", payload[:ucred])[0]
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            with self._lock:
                self.messages.append(Message(pid, fields, time.monotonic()))

    def having(self, key: str) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if key in m.fields]

    def wait(self, key: str, count: int = 1, timeout_s: float = 30, tails: Callable[[], str] = str) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        while len(self.having(key)) < count:
            assert time.monotonic() < deadline, (f"{count} {key}= messages not received within {timeout_s}s; "
                                                 f"got {[m.fields for m in self.messages]}\n{tails()}")
            time.sleep(0.05)
        return self.having(key)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify_socket() -> Iterator[FakeNotifySocket]:
    s = FakeNotifySocket()
    yield s
    s.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


WATCHDOG_USEC = 400_000  # pings every 0.2 s


def test_the_coordinator_notifies_ready_after_bind_status_watchdog_and_stopping(
        cluster: Cluster, notify_socket: FakeNotifySocket) -> None:
    cluster.extra_env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    proc = cluster.start_coordinator(wait=False)
    ready = notify_socket.wait("READY", tails=cluster.tails)[0]
    assert ready.pid == proc.pid and ready.fields["MAINPID"] == str(proc.pid)
    assert ready.fields["STATUS"].startswith("serving 0 runs"), ready.fields
    # Ready means bound and answering.
    cluster.address = (cluster.data_dir / "listen.addr").read_text().strip()
    assert cluster.status()["workers"] == []
    statuses = [m.fields["STATUS"] for m in notify_socket.having("STATUS")]
    assert statuses[0].startswith("recovering"), statuses
    cluster.submit(intbench_spec(2, ("good",)))
    pings = notify_socket.wait("WATCHDOG", count=4, timeout_s=10, tails=cluster.tails)
    assert all(m.pid == proc.pid for m in pings), "only the main process notifies"
    assert pings[-1].fields["STATUS"].startswith("serving 1 run (1 open), 0 workers active")
    gaps = [b.at - a.at for a, b in zip(pings, pings[1:])]
    assert max(gaps) < WATCHDOG_USEC / 1e6, f"pings must come within the watchdog interval: {gaps}"
    assert proc.term(20) == 0
    stopping = notify_socket.wait("STOPPING", tails=cluster.tails)
    assert stopping[0].pid == proc.pid and stopping[0].at > ready.at


def test_without_a_watchdog_the_coordinator_sends_no_pings(cluster: Cluster,
                                                           notify_socket: FakeNotifySocket) -> None:
    cluster.extra_env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": "400000", "WATCHDOG_PID": "1"}
    proc = cluster.start_coordinator()
    notify_socket.wait("READY", tails=cluster.tails)
    time.sleep(1.0)
    assert notify_socket.having("WATCHDOG") == [], "a watchdog meant for another pid is not ours"
    assert proc.term(20) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_worker_is_ready_only_after_its_first_welcome(cluster: Cluster, notify_socket: FakeNotifySocket) -> None:
    # The worker starts first, towards a port where no coordinator listens yet.
    cluster.address = f"127.0.0.1:{free_port()}"
    cluster.data_dir.mkdir(parents=True)
    from coordinator.auth import ensure_token_file

    ensure_token_file(cluster.data_dir / "enroll.token")
    cluster.extra_env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    worker = cluster.start_worker("w1", slots=2)
    connecting = notify_socket.wait("STATUS", timeout_s=30, tails=cluster.tails)[0]
    assert connecting.pid == worker.pid and connecting.fields["STATUS"] == f"connecting to {cluster.address}"
    time.sleep(1.5)
    assert notify_socket.having("READY") == [] and notify_socket.having("WATCHDOG") == []
    cluster.extra_env = {}
    cluster.start_coordinator()
    ready = notify_socket.wait("READY", timeout_s=30, tails=cluster.tails)[0]
    assert ready.pid == worker.pid and ready.fields["MAINPID"] == str(worker.pid)
    assert ready.fields["STATUS"] == "connected, 0/2 slots busy, outbox 0"
    opened = [line for line in cluster.coordinator.log_path.read_text().splitlines() if '"session_open"' in line]
    assert opened, "READY=1 came after the coordinator's welcome"
    run_id = cluster.submit(intbench_spec(3, ("good",), cap=2))
    cluster.wait_settled(run_id, 60)
    pings = notify_socket.wait("WATCHDOG", count=4, timeout_s=10, tails=cluster.tails)
    assert all(m.pid == worker.pid for m in pings)
    assert re.fullmatch(r"connected, [0-2]/2 slots busy, outbox \d+", pings[-1].fields["STATUS"])
    assert worker.term(30) == 0
    stopping = notify_socket.wait("STOPPING", tails=cluster.tails)
    assert stopping[0].pid == worker.pid and stopping[0].fields["STATUS"].startswith("draining")


# ---- MemoryDenyWriteExecute=yes ------------------------------------------------------------------

# prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN) (Linux 6.3+) before exec: the kernel's own
# form of what MemoryDenyWriteExecute=yes imposes (no mapping both writable and executable,
# none made executable later); it is inherited across fork and exec.
MDWE_EXEC = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit(77)
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_the_coordinator_completes_a_run_under_memory_deny_write_execute(cluster: Cluster) -> None:
    probe = subprocess.run([PY, "-c", MDWE_EXEC, PY, "-c",
                            "import ctypes, mmap; print(ctypes.CDLL(None).prctl(66, 0, 0, 0, 0))\n"
                            "try:\n    mmap.mmap(-1, 4096, prot=7)\nexcept PermissionError:\n    print('denied')"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode == 77:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
    assert probe.stdout.split() == ["1", "denied"], probe
    cluster.data_dir.mkdir(parents=True)
    log_path = cluster.root / "coordinator.log"
    popen = subprocess.Popen([PY, "-c", MDWE_EXEC, PY, "-m", "coordinator.main", "--data-dir", str(cluster.data_dir),
                              "--listen", "127.0.0.1:0", "--tick-ms", "100", "--metrics-listen", "127.0.0.1:0"],
                             stdout=log_path.open("ab"), stderr=subprocess.STDOUT, env=cluster.env(), cwd=REPO)
    cluster.coordinator = Proc("coordinator", popen, log_path)
    deadline = time.monotonic() + 30
    while not (cluster.data_dir / "listen.addr").exists():
        assert popen.poll() is None and time.monotonic() < deadline, cluster.tails()
        time.sleep(0.05)
    cluster.address = (cluster.data_dir / "listen.addr").read_text().strip()
    cluster.start_worker("w1", slots=2)
    run_id = cluster.submit(intbench_spec(6, ("good", "bad"), cap=2))
    results = cluster.wait_settled(run_id, 60)
    assert results["summary"]["state"] == "complete" and results["summary"]["selected"] == 12
    admin = cluster.admin()
    try:
        digest = results["cells"][0]["artifacts"][0]["digest"]
        chunks = list(admin.stub.GetArtifact(admin_pb2.GetArtifactRequest(digest=digest), metadata=admin.metadata,
                                             timeout=10))
        assert chunks
    finally:
        admin.close()
    os.kill(popen.pid, signal.SIGHUP)  # the reload path too
    while '"tokens_reloaded"' not in log_path.read_text():
        assert popen.poll() is None and time.monotonic() < deadline + 60, cluster.tails()
        time.sleep(0.05)
    assert cluster.coordinator.term(20) == 0, cluster.tails()
