"""The worker's one frozen configuration, built at the entry point from flags and environment.

Rules. Nothing else in the worker reads `os.environ`: the entry point takes one snapshot of
it here, and the session hands each subject only the credential names it declares, from that
snapshot. The snapshot is kept out of `repr`, so printing a config never prints a secret.
Validation errors name the flag and what to do (`ConfigError`); they are the operator's to
fix, and the entry point exits 2 on them. The worker-side limits that `common/limits.py`
does not hold yet are named here, unit last, with where their numbers come from.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from common.ids import WorkerId
from common.limits import ID_CHARS_MAX, SLOTS_PER_WORKER_MAX

# A drain waits this long for running groups by default: one typical cell budget (5 min).
DRAIN_TIMEOUT_S_DEFAULT = 300
# After the groups of a drain settle, the outbox gets this long to be acknowledged; a
# coordinator that is away longer gets the reports on the next start (the outbox keeps them).
DRAIN_FLUSH_TIMEOUT_S_DEFAULT = 60
# After a second signal, cancelled cells get this long to return their (unknown) outcomes:
# the executors' SIGTERM-to-SIGKILL grace (PROCESS_KILL_GRACE_MS, 2 s) plus a margin.
ABORT_GRACE_MS = 3_000
# A coordinator that accepted the stream but says nothing within this is treated as a cut;
# its own hello timeout is 30 s, so it has answered or closed well before.
WELCOME_TIMEOUT_MS = 45_000
# Chunks of one upload sent before the oldest is acknowledged: 8 MiB in flight per upload at
# CHUNK_BYTES_MAX, so a link with 50 ms RTT still moves ~160 MiB/s per upload.
UPLOAD_CHUNKS_IN_FLIGHT_MAX = 8
# An upload the coordinator keeps refusing (digest or length mismatch, bad offset) is
# restarted this many times; a local file that hashes wrong every time is dead-lettered.
UPLOAD_RESTARTS_MAX = 3
# A report refused for a missing artifact is re-uploaded and re-sent this many times.
REPORT_SENDS_MAX = 3
# Reports awaiting their acknowledgement at once on one stream (uploads are bounded
# separately by UPLOADS_IN_FLIGHT_MAX): enough to replay a long outbox in few round trips.
REPORTS_IN_FLIGHT_MAX = 64
# How long to wait before putting an outcome again into a full outbox.
OUTBOX_FULL_RETRY_MS = 1_000
# Hello lists the outbox's attempt ids up to this many characters (a full outbox of 100k ids
# would not fit one message); the replay sends every entry anyway.
HELLO_BUFFERED_IDS_CHARS_MAX = 1 << 20
# An Ack for Goodbye is waited for this long before the stream is closed anyway.
GOODBYE_ACK_TIMEOUT_MS = 2_000

PROTOCOL_VERSION = 1


class ConfigError(ValueError):
    """A flag or file the operator must fix; the message names it."""


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    coordinator: str  # HOST:PORT
    token_file: Path  # the enrollment token, used until the state dir holds a credential
    worker_id: WorkerId
    slots: int
    state_dir: Path
    bench_root: Path
    work_dir: Path
    cpu_millis: int
    memory_mb: int
    tls_ca: Path | None = None
    insecure: bool = False
    drain_timeout_s: int = DRAIN_TIMEOUT_S_DEFAULT
    flush_timeout_s: int = DRAIN_FLUSH_TIMEOUT_S_DEFAULT
    command_path: str | None = None  # PATH for the command executor; its default when None
    log_level: str = "info"
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def __post_init__(self) -> None:
        if not self.worker_id or len(self.worker_id) > ID_CHARS_MAX:
            raise ConfigError(f"--worker-id must be 1 to {ID_CHARS_MAX} characters")
        if not 1 <= self.slots <= SLOTS_PER_WORKER_MAX:
            raise ConfigError(f"--slots must be between 1 and {SLOTS_PER_WORKER_MAX}, got {self.slots}")
        if self.cpu_millis <= 0 or self.memory_mb <= 0:
            raise ConfigError("--cpu-millis and --memory-mb must be positive")
        if self.drain_timeout_s < 0 or self.flush_timeout_s < 0:
            raise ConfigError("--drain-timeout-s and --flush-timeout-s must not be negative")
        host, _port = split_host_port(self.coordinator)
        if self.tls_ca is None and not self.insecure and not is_loopback(host):
            raise ConfigError(
                f"--coordinator {self.coordinator} is not a loopback address: pass --tls-ca FILE "
                "to connect with TLS, or --insecure to send the worker's token in plaintext"
            )
        if not isinstance(self.environ, MappingProxyType):
            object.__setattr__(self, "environ", MappingProxyType(dict(self.environ)))

    @property
    def plaintext(self) -> bool:
        return self.tls_ca is None


def split_host_port(target: str) -> tuple[str, int]:
    """("host", port) of HOST:PORT or [V6]:PORT; ConfigError when it is neither."""
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--coordinator must be HOST:PORT, got {target!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def machine_cpu_millis() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus * 1000


def machine_memory_mb() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        return 1024


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--coordinator", required=True, metavar="HOST:PORT")
    p.add_argument("--token-file", required=True, type=Path, metavar="FILE",
                   help="enrollment token; replaced by the credential the coordinator issues")
    p.add_argument("--worker-id", required=True, metavar="ID")
    p.add_argument("--slots", required=True, type=_positive_int, metavar="N", help="task groups at once")
    p.add_argument("--state-dir", required=True, type=Path, metavar="DIR")
    p.add_argument("--bench-root", required=True, type=Path, metavar="DIR")
    p.add_argument("--work-dir", type=Path, metavar="DIR", help="scratch for attempts (default STATE/work)")
    p.add_argument("--cpu-millis", type=_positive_int, help="default: the CPUs this process may use")
    p.add_argument("--memory-mb", type=_positive_int, help="default: the machine's memory")
    p.add_argument("--tls-ca", type=Path, metavar="FILE", help="CA bundle: connect with TLS")
    p.add_argument("--insecure", action="store_true",
                   help="allow plaintext to a non-loopback coordinator")
    p.add_argument("--drain-timeout-s", type=_positive_int, default=DRAIN_TIMEOUT_S_DEFAULT,
                   help="on SIGTERM, how long running groups may finish")
    p.add_argument("--flush-timeout-s", type=_positive_int, default=DRAIN_FLUSH_TIMEOUT_S_DEFAULT,
                   help="on SIGTERM, how long the outbox may take to be acknowledged")
    p.add_argument("--command-path", metavar="PATH", help="PATH for subjects' commands")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> WorkerConfig:
    bench_root = Path(args.bench_root).resolve()
    if not bench_root.is_dir():
        raise ConfigError(f"--bench-root {args.bench_root} is not a directory")
    state_dir = Path(args.state_dir).resolve()
    tls_ca = Path(args.tls_ca).resolve() if args.tls_ca else None
    if tls_ca is not None and not tls_ca.is_file():
        raise ConfigError(f"--tls-ca {args.tls_ca} is not a readable file")
    return WorkerConfig(
        coordinator=args.coordinator,
        token_file=Path(args.token_file),
        worker_id=WorkerId(args.worker_id),
        slots=args.slots,
        state_dir=state_dir,
        bench_root=bench_root,
        work_dir=Path(args.work_dir).resolve() if args.work_dir else state_dir / "work",
        cpu_millis=args.cpu_millis or machine_cpu_millis(),
        memory_mb=args.memory_mb or machine_memory_mb(),
        tls_ca=tls_ca,
        insecure=args.insecure,
        drain_timeout_s=args.drain_timeout_s,
        flush_timeout_s=args.flush_timeout_s,
        command_path=args.command_path,
        log_level=args.log_level,
        environ=MappingProxyType(dict(environ)),
    )


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> WorkerConfig:
    """The config of `fleet-worker` run flags (without a subcommand)."""
    p = argparse.ArgumentParser(
        prog="fleet-worker", description="run task groups for a fleet coordinator",
        epilog="fleet-worker identity --bench-root DIR prints this machine's environment manifest "
               "and id as JSON. SIGTERM or SIGINT drains (exit 0); a second signal stops at once.")
    add_run_flags(p)
    return config_from_args(p.parse_args(list(argv)), environ)
