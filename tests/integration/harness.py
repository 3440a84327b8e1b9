"""Helpers for integration tests: real coordinator and worker processes on 127.0.0.1.

Every process is started by pid and stopped by that pid (kill -9 where a test wants a crash,
SIGTERM otherwise); every wait is bounded and fails with the tail of the process's log.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin
from tools.fleetctl.views import results_json, status_json
from tools.fleetctl.pages import results_whole

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
INTBENCH = REPO / "tests" / "fixtures" / "intbench"
FAST_POLICY = {"heartbeatIntervalMs": 200, "suspectAfterMs": 1_000, "expireAfterMs": 3_000,
               "recoveryGraceMs": 4_000, "retryBackoffMs": 100, "retryBackoffMaxMs": 500,
               "maxAttemptsPerCell": 3}


def intbench_spec(groups: int, subjects: tuple[str, ...] = ("good", "bad"), *, cap: int = 100,
                  timeout_s: int = 20) -> dict:
    return {
        "benchmark": {"name": "intbench", "version": "1"},
        "executor": {"kind": "command"},
        "subjects": [{"id": s, "command": "sh", "args": ["{{bench_root}}/subject.sh", s, "{{task.input}}"]}
                     for s in subjects],
        "tasks": [{"id": f"t{i:03d}", "input": str(i)} for i in range(groups)],
        "repetitions": 1,
        "budget": {"timeoutSeconds": timeout_s},
        "verifier": {"command": "sh", "args": ["{{bench_root}}/verify.sh", "{{task.input}}"], "timeoutSeconds": 10},
        "execution": {"maxConcurrentTaskGroups": cap},
    }


def expected_score(task_input: int, subject: str) -> float:
    return 0.0 if subject == "bad" and task_input % 3 == 0 else 1.0


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(10)

    def term(self, timeout_s: float = 20) -> int:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(10)
            raise AssertionError(f"{self.name} did not stop on SIGTERM within {timeout_s}s\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return f"--- {self.name} log ---\n" + "\n".join(text[-lines:])


@dataclass
class Cluster:
    root: Path
    coordinator: Proc | None = None
    workers: dict[str, Proc] = field(default_factory=dict)
    address: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.root / "coordinator"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO)
        env.update(self.extra_env)
        return env

    def start_coordinator(self, *extra: str, wait: bool = True) -> Proc:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        addr_file = self.data_dir / "listen.addr"
        if addr_file.exists():
            addr_file.unlink()
        port = self.address.rsplit(":", 1)[1] if self.address else "0"
        log_path = self.root / "coordinator.log"
        log = log_path.open("ab")
        popen = subprocess.Popen([PY, "-m", "coordinator.main", "--data-dir", str(self.data_dir),
                                  "--listen", f"127.0.0.1:{port}", "--tick-ms", "100", *extra],
                                 stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO)
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

    def start_worker(self, worker_id: str, *, slots: int = 2, bench_root: Path = INTBENCH, extra: tuple = (),
                     address: str | None = None) -> Proc:
        state = self.root / "workers" / worker_id
        state.mkdir(parents=True, exist_ok=True)
        log_path = self.root / f"worker-{worker_id}.log"
        log = log_path.open("ab")
        popen = subprocess.Popen([PY, "-m", "worker.main", "--coordinator", address or self.address,
                                  "--token-file", str(self.data_dir / "enroll.token"), "--worker-id", worker_id,
                                  "--slots", str(slots), "--state-dir", str(state), "--bench-root", str(bench_root),
                                  *extra], stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO)
        self.workers[worker_id] = Proc(f"worker {worker_id}", popen, log_path)
        return self.workers[worker_id]

    def admin(self) -> Admin:
        return Admin(self.address, (self.data_dir / "admin.token").read_text().strip())

    def submit(self, spec: dict, policy: dict | None = None, *, bench_root: Path | None = None) -> str:
        """Freeze a run; with `bench_root`, with the submitter's manifest measured there, as
        `fleetctl submit --bench-root` does."""
        admin = self.admin()
        try:
            spec_json, policy_json = json.dumps(spec), json.dumps(policy or FAST_POLICY)
            if bench_root is None:
                req = admin_pb2.SubmitRunRequest(spec_json=spec_json, policy_json=policy_json)
            else:
                from tools.fleetctl.submission import submit_request

                req = submit_request(spec_json, policy_json, bench_root)
            resp = admin.call("SubmitRun", req)
            return resp.run_id
        finally:
            admin.close()

    def results(self, run_id: str) -> dict:
        admin = self.admin()
        try:
            return results_json(results_whole(admin, run_id))
        finally:
            admin.close()

    def status(self) -> dict:
        admin = self.admin()
        try:
            return status_json(admin.call("GetStatus", admin_pb2.GetStatusRequest()))
        finally:
            admin.close()

    def wait_settled(self, run_id: str, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        last: dict = {}
        while time.monotonic() < deadline:
            try:
                last = self.results(run_id)
            except Exception:  # the coordinator may be restarting in a crash test
                time.sleep(0.2)
                continue
            if last["summary"]["state"] in ("complete", "incomplete"):
                return last
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} did not settle within {timeout_s}s: {last.get('summary')}\n"
                             + self.tails())

    def tails(self) -> str:
        procs = ([self.coordinator] if self.coordinator else []) + list(self.workers.values())
        return "\n".join(p.tail() for p in procs)

    def stop_all(self) -> None:
        for p in list(self.workers.values()):
            if p.alive():
                try:
                    p.term(15)
                except AssertionError:
                    pass
        if self.coordinator is not None and self.coordinator.alive():
            try:
                self.coordinator.term(15)
            except AssertionError:
                pass
