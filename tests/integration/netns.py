"""Network namespaces for integration tests: a private LAN of real coordinator and worker
processes, each in its own namespace, on which a test cuts links and delays packets.

Layout (a star around a bridge, like VMs on one switch):

    ns <prefix>-br:  bridge br0 with one port per node (p-<role>)
    ns <prefix>-<role>: lo up, eth0 (the veth peer of p-<role>) with 10.77.0.N/24

Only the namespaces made here are touched, only the private range 10.77.0.0/24 is used and
only on veths inside them; the test process itself stays in the root namespace, so every
process that talks to 10.77.x (the daemons, fleetctl) is started under `ip netns exec`.
Every command has a timeout; `Lan.destroy` kills what is left inside by pid and deletes
every namespace, and is safe to call twice or after a half-built `create`.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.harness import FAST_POLICY, PY, REPO, Cluster, Proc

SUBNET = "10.77.0"
PREFIX_LEN = 24
CMD_TIMEOUT_S = 20
# Variables that would make gRPC send our traffic anywhere but the namespace's own LAN.
PROXY_VARS = ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "no_proxy")


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here: the reason is the skip message."""


def ip_available() -> bool:
    return shutil.which("ip") is not None


def ensure_iproute2() -> str:
    """The `ip -V` line. When `ip` is missing, as root with CI=true, installs iproute2 with
    apt-get (the only install this helper ever does); otherwise raises NetnsUnavailable."""
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root (run the test as root, as CI does)")
    if not ip_available():
        if os.environ.get("CI") == "true" and shutil.which("apt-get"):
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            done = subprocess.run(["apt-get", "install", "-y", "iproute2"], env=env, capture_output=True,
                                  timeout=300)
            if done.returncode != 0:  # an image with empty package lists
                subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
                subprocess.run(["apt-get", "install", "-y", "iproute2"], env=env, capture_output=True,
                               timeout=300)
        if not ip_available():
            raise NetnsUnavailable("the `ip` command (iproute2) is not installed")
    done = subprocess.run(["ip", "-V"], capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    return (done.stdout or done.stderr).strip()


def run(*argv: str, check: bool = True, timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done


@dataclass
class Lan:
    """Namespaces `<prefix>-<role>` for the given roles, bridged; role i gets 10.77.0.(i+1)."""
    roles: tuple[str, ...]
    prefix: str = field(default_factory=lambda: f"fleet-t{os.getpid()}-{secrets.token_hex(3)}")
    made: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}-br"

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def addr(self, role: str) -> str:
        return f"{SUBNET}.{self.roles.index(role) + 1}"

    def exec_argv(self, role: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(role), *argv]

    def create(self) -> None:
        # The first namespace decides whether the test can run at all.
        first = run("ip", "netns", "add", self.bridge_ns, check=False)
        if first.returncode != 0:
            raise NetnsUnavailable(f"`ip netns add` failed: {first.stderr.strip()}")
        self.made.append(self.bridge_ns)
        probe = run("ip", "netns", "exec", self.bridge_ns, "true", check=False)
        if probe.returncode != 0:
            raise NetnsUnavailable(f"`ip netns exec` failed: {probe.stderr.strip()}")
        run("ip", "-n", self.bridge_ns, "link", "set", "lo", "up")
        run("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
        for role in self.roles:
            ns = self.ns(role)
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p-{role}",
                "netns", self.bridge_ns)
            run("ip", "-n", self.bridge_ns, "link", "set", f"p-{role}", "master", "br0")
            run("ip", "-n", self.bridge_ns, "link", "set", f"p-{role}", "up")
            run("ip", "-n", ns, "addr", "add", f"{self.addr(role)}/{PREFIX_LEN}", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")

    # ---- faults -------------------------------------------------------------------------

    def link(self, role: str, up: bool) -> None:
        """The node's own interface down (its cable pulled) or up again."""
        run("ip", "-n", self.ns(role), "link", "set", "eth0", "up" if up else "down")

    def delay(self, role: str, spec: tuple[str, ...] = ("200ms", "50ms")) -> bool:
        """netem delay on the node's eth0; False (with a note) when tc or netem is missing."""
        if shutil.which("tc") is None:
            self.notes.append("tc is not installed: the delay step was skipped")
            return False
        done = run(*self.exec_argv(role, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", *spec),
                   check=False)
        if done.returncode != 0:
            self.notes.append(f"tc netem unavailable ({done.stderr.strip()}): the delay step was skipped")
            return False
        return True

    def port(self, role: str, up: bool) -> None:
        """The node's port taken off the bridge (its frames go nowhere) or put back: the node's
        own interface, carrier and routes stay up, so its packets are lost and its connections
        hang (retransmitting) instead of failing. Not the port's link state: a carrier change
        goes through the kernel's link watch, which here sometimes held the node's queue for a
        further second after the port came back up."""
        if up:
            run("ip", "-n", self.bridge_ns, "link", "set", f"p-{role}", "master", "br0")
        else:
            run("ip", "-n", self.bridge_ns, "link", "set", f"p-{role}", "nomaster")

    def undelay(self, role: str) -> None:
        run(*self.exec_argv(role, "tc", "qdisc", "del", "dev", "eth0", "root"), check=False)

    # ---- teardown -----------------------------------------------------------------------

    def pids(self, ns: str) -> list[int]:
        done = run("ip", "netns", "pids", ns, check=False)
        return [int(p) for p in done.stdout.split() if p.isdigit()]

    def destroy(self) -> None:
        """Kill by pid whatever still runs inside our namespaces (only what our processes
        started), then delete them."""
        for ns in self.made:
            for pid in self.pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while any(self.pids(ns) for ns in self.made) and time.monotonic() < deadline:
            time.sleep(0.05)
        for ns in reversed(self.made):
            run("ip", "netns", "del", ns, check=False)
        self.made.clear()


class NetnsCluster(Cluster):
    """`Cluster` whose coordinator listens on 10.77.0.x inside its namespace and whose
    workers run in theirs; admin calls are `fleetctl` processes inside the coordinator's."""

    def __init__(self, root: Path, lan: Lan, coordinator_role: str) -> None:
        super().__init__(root)
        self.lan = lan
        self.coordinator_role = coordinator_role

    def env(self) -> dict[str, str]:
        env = super().env()
        for var in PROXY_VARS:
            env.pop(var, None)
            env.pop(var.upper(), None)
        return env

    def start_coordinator(self, *extra: str, wait: bool = True) -> Proc:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        addr_file = self.data_dir / "listen.addr"
        if addr_file.exists():
            addr_file.unlink()
        port = self.address.rsplit(":", 1)[1] if self.address else "0"
        log_path = self.root / "coordinator.log"
        argv = self.lan.exec_argv(self.coordinator_role, PY, "-m", "coordinator.main", "--data-dir",
                                  str(self.data_dir), "--listen", f"{self.lan.addr(self.coordinator_role)}:{port}",
                                  "--insecure", "--tick-ms", "100", *extra)
        with log_path.open("ab") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO)
        self.coordinator = Proc("coordinator", popen, log_path)
        if wait:
            deadline = time.monotonic() + 30
            while not addr_file.exists():
                if not self.coordinator.alive():
                    raise AssertionError(f"coordinator exited {popen.returncode}\n{self.coordinator.tail()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"coordinator did not listen within 30s\n{self.coordinator.tail()}")
                time.sleep(0.05)
            self.address = addr_file.read_text().strip()
        return self.coordinator

    def start_worker(self, worker_id: str, *, slots: int = 2, bench_root: Path | None = None, extra: tuple = (),
                     address: str | None = None, role: str | None = None) -> Proc:
        from tests.integration.harness import INTBENCH

        state = self.root / "workers" / worker_id
        state.mkdir(parents=True, exist_ok=True)
        log_path = self.root / f"worker-{worker_id}.log"
        argv = self.lan.exec_argv(role or worker_id, PY, "-m", "worker.main", "--coordinator", address or self.address,
                                  "--insecure", "--token-file", str(self.data_dir / "enroll.token"),
                                  "--worker-id", worker_id, "--slots", str(slots), "--state-dir", str(state),
                                  "--bench-root", str(bench_root or INTBENCH), *extra)
        with log_path.open("ab") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO)
        self.workers[worker_id] = Proc(f"worker {worker_id}", popen, log_path)
        return self.workers[worker_id]

    def fleetctl(self, *args: str, timeout: float = 30) -> str:
        argv = self.lan.exec_argv(self.coordinator_role, PY, "-m", "tools.fleetctl", "--coordinator", self.address,
                                  "--token-file", str(self.data_dir / "admin.token"), *args)
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env(), cwd=REPO, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"fleetctl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def submit(self, spec: dict, policy: dict | None = None) -> str:
        spec_path, policy_path = self.root / "spec.json", self.root / "policy.json"
        spec_path.write_text(json.dumps(spec))
        policy_path.write_text(json.dumps(policy or FAST_POLICY))
        return self.fleetctl("submit", str(spec_path), "--policy", str(policy_path)).strip().splitlines()[-1]

    def results(self, run_id: str) -> dict:
        return json.loads(self.fleetctl("results", run_id, "--json"))

    def status(self) -> dict:
        return json.loads(self.fleetctl("status", "--json"))
