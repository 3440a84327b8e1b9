"""`fleetctl local SPEC.json --workers N [--slots S] [--html FILE] [--console [HOST:PORT]]`: a whole
fleet here, one command.

Starts a coordinator with an embedded data dir (default `./.fleet/`), N worker processes and
the submission, all on 127.0.0.1 with generated tokens; shows live progress (a rich display
on a terminal, plain lines otherwise); prints the results at the end and, with --html, writes
the HTML report of `fleetctl report` before the coordinator stops. With --console, the coordinator
also serves its live web console (on 127.0.0.1, a free port unless given) and the command prints
its address and the token files to log in with; on a terminal it keeps the console up after the
run until Ctrl-C. Exit 0 only when every
cell has a selected result. Ctrl-C stops every process it started, by pid; running the same
command again resumes the same run (same spec and policy give the same run id) and selected
cells are never executed again.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError
from tools.fleetctl.compat import local_args
from tools.fleetctl.report_page import page_from_admin, write_page
from tools.fleetctl.submission import SubmissionError, submit_request
from tools.fleetctl.views import dispatch_order, print_results, results_json, status_json

POLL_S = 0.5
PLAIN_EVERY_S = 2.0
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 8


@dataclass
class Local:
    spec_path: Path
    workers: int
    slots: int
    data: Path
    bench_root: Path
    policy_path: Path | None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    address: str = ""
    console: str = ""  # HOST:PORT for the coordinator's --http-listen; empty: no console
    console_address: str = ""

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        repo = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def start(self) -> None:
        logs = self.data / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        coord_dir = self.data / "coordinator"
        coord_dir.mkdir(parents=True, exist_ok=True)
        addr = coord_dir / "listen.addr"
        http_addr = coord_dir / "http.addr"
        for stale in (addr, http_addr):
            if stale.exists():
                stale.unlink()
        console = ["--http-listen", self.console] if self.console else []
        self._spawn("coordinator", [sys.executable, "-m", "coordinator.main", "--data-dir", str(coord_dir),
                                    "--listen", "127.0.0.1:0", *console], logs / "coordinator.log")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not addr.exists() or (self.console and not http_addr.exists()):
            if self.procs["coordinator"].poll() is not None:
                raise RuntimeError(f"the coordinator exited; see {logs / 'coordinator.log'}:\n"
                                   + tail(logs / "coordinator.log"))
            if time.monotonic() > deadline:
                raise RuntimeError(f"the coordinator did not start within {START_TIMEOUT_S}s")
            time.sleep(0.05)
        self.address = addr.read_text().strip()
        if self.console:
            self.console_address = http_addr.read_text().strip()
        for i in range(1, self.workers + 1):
            wid = f"local-{i}"
            state = self.data / "workers" / wid
            state.mkdir(parents=True, exist_ok=True)
            self._spawn(wid, [sys.executable, "-m", "worker.main", "--coordinator", self.address,
                              "--token-file", str(coord_dir / "enroll.token"), "--worker-id", wid,
                              "--slots", str(self.slots), "--state-dir", str(state),
                              "--bench-root", str(self.bench_root)], logs / f"{wid}.log")

    def _spawn(self, name: str, argv: list[str], log: Path) -> None:
        out = log.open("ab")
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env(),
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        """Workers first (their outboxes are durable, a kill loses nothing), then the coordinator."""
        order = [n for n in self.procs if n != "coordinator"] + (["coordinator"] if "coordinator" in self.procs else [])
        for name in order:
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                if name != "coordinator":
                    p.send_signal(signal.SIGTERM)  # a second signal: stop now, not after a drain
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for name in order:
            p = self.procs[name]
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Progress:
    """Cells done of total, per-worker busy slots, retries, ETA."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.monotonic()
        self.first_done: tuple[float, int] | None = None

    def line(self, done: int, retries: int, incomplete: int, workers: list[dict], state: str) -> str:
        busy = " ".join(f"{w['worker_id']}:{w['busy_slots']}/{w['slots']}" for w in workers) or "no workers yet"
        return (f"{done}/{self.total} cells selected, {retries} retries, {incomplete} exhausted; "
                f"{busy}; {state}; ETA {self.eta(done)}")

    def eta(self, done: int) -> str:
        now = time.monotonic()
        if self.first_done is None:
            if done:
                self.first_done = (now, done)
            return "?"
        t0, d0 = self.first_done
        if done <= d0 or now <= t0:
            return "?"
        rate = (done - d0) / (now - t0)
        return f"{(self.total - done) / rate:.0f}s"


def run_local(spec_path: Path, workers: int, slots: int, data: Path | None, bench_root: Path | None,
              policy_path: Path | None, *, printer: Any = None, html: Path | None = None,
              order_from: str = "", console: str = "") -> int:
    spec_path = spec_path.resolve()
    try:
        spec_text = spec_path.read_text()
    except OSError as e:
        raise CtlError(f"cannot read {spec_path}: {e.strerror}") from None
    if policy_path is None and (spec_path.parent / "policy.json").exists():
        policy_path = spec_path.parent / "policy.json"
    policy_text = policy_path.read_text() if policy_path else "{}"
    local = Local(spec_path, workers, slots, (data or Path(".fleet")).resolve(),
                  (bench_root or spec_path.parent).resolve(), policy_path, console=console)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        local.start()
        admin = Admin(local.address, (local.data / "coordinator" / "admin.token").read_text().strip())
        try:
            req = submit_request(spec_text, policy_text, local.bench_root, order_from=order_from)
        except SubmissionError as e:
            raise CtlError(str(e)) from None
        resp = admin.call("SubmitRun", req)
        run_id = resp.run_id
        say = printer or (lambda text: print(text, file=sys.stderr, flush=True))
        say(f"fleet local: run {run_id} ({'new' if resp.created else 'resumed'}) on {workers} workers x {slots} "
            f"slots at {local.address}; data in {local.data}")
        if local.console_address:
            coord = local.data / "coordinator"
            say(f"fleet local: console at http://{local.console_address}/runs/{run_id} (log in with the token in "
                f"{coord / 'admin.token'} to act, or {coord / 'viewer.token'} to look)")
        results = watch(admin, run_id, local, say)
        print_results(results)
        status = status_json(admin.call("GetStatus", admin_pb2.GetStatusRequest(run_id=run_id)))
        print(f"dispatch order: {dispatch_order(status, run_id)['text']}")
        if html is not None:  # the same page as `fleetctl report RUN --html FILE`, while the coordinator is up
            page, results, timeline = page_from_admin(admin, run_id)
            write_page(html, page, results, timeline)
        if local.console_address and sys.stdin.isatty():
            say(f"fleet local: the run is over; the console stays up at http://{local.console_address}/ until Ctrl-C")
            while "coordinator" not in local.dead():
                time.sleep(POLL_S)
        return 0 if results["summary"]["state"] == "complete" else 3
    except KeyboardInterrupt:
        print("\nfleet local: interrupted; stopping. Run the same command again to resume.", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
        local.stop()


def watch(admin: Any, run_id: str, local: Local, say: Any) -> dict:
    """Poll the run's status (counts only, cheap for the coordinator) until it settles; then
    fetch the results once."""
    from tools.fleetctl.pages import results_whole

    def poll() -> tuple[dict, dict]:
        status = status_json(admin.call("GetStatus", admin_pb2.GetStatusRequest(run_id=run_id)))
        return status["runs"][0], status

    run, status = poll()
    progress = Progress(run["cells_total"])
    live = None
    if sys.stderr.isatty():
        try:
            from rich.console import Console
            from rich.live import Live

            live = Live(console=Console(stderr=True), refresh_per_second=4, transient=True)
            live.start()
        except ImportError:
            live = None
    last_plain = 0.0
    last_line = ""
    try:
        while True:
            run, status = poll()
            state = run["state"]
            line = progress.line(run["cells_selected"], run["retries"], run["cells_exhausted"], status["workers"], state)
            if live is not None:
                live.update(_panel(line, run, status))
            elif line != last_line and time.monotonic() - last_plain >= PLAIN_EVERY_S or state in ("complete", "incomplete"):
                say(line)
                last_plain, last_line = time.monotonic(), line
            if state in ("complete", "incomplete"):
                return results_json(results_whole(admin, run_id))
            if state == "blocked":
                say(f"fleet local: run blocked by an environment failure: {run['blocked_reason']}; "
                    f"fix it, then: fleetctl --coordinator {local.address} --token-file "
                    f"{local.data / 'coordinator' / 'admin.token'} repair {run_id} '<reason>'")
            dead = local.dead()
            if "coordinator" in dead:
                raise RuntimeError("the coordinator exited:\n" + tail(local.data / "logs" / "coordinator.log"))
            if len(dead) == len(local.procs) - 1:
                name = dead[0]
                raise RuntimeError(f"every worker exited; {name} said:\n" + tail(local.data / "logs" / f"{name}.log", 5))
            time.sleep(POLL_S)
    finally:
        if live is not None:
            live.stop()


def _panel(line: str, run: dict, status: dict) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    done, total = run["cells_selected"], run["cells_total"]
    table = Table.grid(padding=(0, 1))
    table.add_row(ProgressBar(total=max(1, total), completed=done, width=40), f"{done}/{total}")
    table.add_row("", line)
    for w in status["workers"]:
        table.add_row(w["worker_id"], f"{'█' * w['busy_slots']}{'·' * (w['slots'] - w['busy_slots'])} {w['status']}")
    return table


def run(args: Any) -> int:
    """`fleetctl local SPEC --workers N [--slots S] [--data-dir D] [--bench-root B] [--policy P] [--html F]`."""
    if args.workers < 1 or args.slots < 1:
        raise CtlError("--workers and --slots must be at least 1")
    # A single-host evaluator spec runs as its fleet conversion.
    args.spec, args.bench_root, args.policy = local_args(args.spec, args.data_dir, args.bench_root, args.policy)
    html = args.html.resolve() if args.html else None
    if html is not None and not html.parent.is_dir():
        raise CtlError(f"--html {args.html}: no directory {html.parent}")
    try:
        return run_local(args.spec, args.workers, args.slots, args.data_dir, args.bench_root, args.policy, html=html,
                         order_from=args.order_from or "", console=getattr(args, "console", None) or "")
    except RuntimeError as e:
        raise CtlError(str(e)) from None
