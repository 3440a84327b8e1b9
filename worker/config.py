"""The worker's one frozen configuration, built at the entry point from flags, a TOML file
(`--config`) and the environment.

Rules. Nothing else in the worker reads `os.environ`: the entry point takes one snapshot of
it here, and the session hands each subject only the credential names it declares, from that
snapshot. The snapshot is kept out of `repr` and out of `--print-config`, so printing a
config never prints a secret; settings name token files, never hold tokens. Precedence,
lowest first: the defaults of `SETTINGS`, the environment (systemd's `$STATE_DIRECTORY` for
`state_dir`; `enroll.token` and `tls.key` in `$CREDENTIALS_DIRECTORY`, when present, for
`token_file` and `tls_key`), the file, the flags.
Validation errors name the file and line, or the flag, and what to do (`ConfigError`); they
are the operator's to fix, and the entry point exits 2 on them. The worker-side limits that
`common/limits.py` does not hold yet are named here, unit last, with where their numbers
come from.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from common.fleetpb import common_pb2
from common.ids import WorkerId
from common.limits import ID_CHARS_MAX, SLOTS_PER_WORKER_MAX
from common.notify import NotifySettings, settings_from_environ
from common.tomlconfig import (
    BOOLEAN,
    INTEGER,
    PATH,
    STRING,
    ConfigFileError,
    Layer,
    Resolved,
    Setting,
    add_flags,
    flags_layer,
    load_file,
    render_toml,
    resolve,
)

# What the outbox keeps of acknowledged reports (common/limits.py KEPT_REPORTS_*): three days, 1 GiB.
KEEP_REPORTED_HOURS_DEFAULT = 72
KEEP_REPORTED_MB_DEFAULT = 1024
# A cell's report and artifacts, and the executor's scratch, need room on the state dir's file
# system; below this much free space the worker starts no new cell and says so (a full disk that
# failed every attempt at once exhausted a run in seconds).
MIN_FREE_MB_DEFAULT = 64
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
# While the state dir's disk is full, how often a waiting cell or outcome looks for room again.
ROOM_RECHECK_MS = 500
# Hello lists the outbox's attempt ids up to this many characters (a full outbox of 100k ids
# would not fit one message); the replay sends every entry anyway.
HELLO_BUFFERED_IDS_CHARS_MAX = 1 << 20
# An Ack for Goodbye is waited for this long before the stream is closed anyway.
GOODBYE_ACK_TIMEOUT_MS = 2_000

# Runs offered on one stream and waiting to be measured; an offer past it comes again with
# the next heartbeat.
RUN_OFFERS_QUEUED_MAX = 64
# The protocol's revisions are protos/fleet/v1/common.proto `ProtocolRevision`. This worker
# speaks 6 (which implies 2 to 5): it finishes an assignment without GroupFinished once a
# coordinator of 5 acknowledged all its cells, and resends what an overloaded coordinator
# refused OVERLOADED (as it resends STORAGE_FULL, which an older coordinator answers instead).
PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_OVERLOADED
# A coordinator whose Welcome says this or more takes ReportBatch.
REPORT_BATCH_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_REPORT_BATCH
# A coordinator whose Welcome says this or more releases an assignment at the commit of its last
# cell report: an assignment whose every cell was acknowledged ACCEPTED or DUPLICATE is over.
COMPLETION_BY_REPORTS_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_COMPLETION_BY_REPORTS


PROGRAM = "fleet-worker"
ENROLL_TOKEN_NAME = "enroll.token"
TLS_KEY_NAME = "tls.key"
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ConfigFileError):
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
    tls_cert: Path | None = None  # client certificate (mTLS), naming fleet-worker://WORKER_ID
    tls_key: Path | None = None
    metrics_listen: str = ""
    retry_refused: bool = False  # keep reconnecting with backoff after a permanent refusal
    notify: NotifySettings = field(default_factory=NotifySettings)  # from the environment only
    # Acknowledged reports kept to offer again to a coordinator restored from a backup.
    keep_reported_hours: int = KEEP_REPORTED_HOURS_DEFAULT
    keep_reported_mb: int = KEEP_REPORTED_MB_DEFAULT
    # Below this much free space in the state dir's file system no new cell starts.
    min_free_mb: int = MIN_FREE_MB_DEFAULT

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
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("--tls-cert and --tls-key (tls_cert, tls_key) go together: give both, or neither")
        if self.tls_cert is not None and self.tls_ca is None:
            raise ConfigError("a client certificate (--tls-cert) is sent over TLS only: give --tls-ca too")
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


SETTINGS: tuple[Setting, ...] = (
    Setting("coordinator", STRING, "HOST:PORT of the coordinator.", required=True, metavar="HOST:PORT"),
    Setting("token_file", PATH, "The enrollment token, used until the state dir holds this worker's credential; "
            "re-read before each connection until then.", required=True,
            default_text="`$CREDENTIALS_DIRECTORY/enroll.token` under systemd, else required", metavar="FILE"),
    Setting("worker_id", STRING, "This worker's id; with mTLS its certificate names it as fleet-worker://ID.",
            required=True, metavar="ID"),
    Setting("slots", INTEGER, "Task groups at once.", required=True, minimum=1, maximum=SLOTS_PER_WORKER_MAX,
            metavar="N"),
    Setting("state_dir", PATH, "Outbox, credential, assignments (LMDB); one worker id per state dir.",
            required=True, default_text="`$STATE_DIRECTORY` under systemd, else required", metavar="DIR"),
    Setting("bench_root", PATH, "The benchmark's files, as on every VM.", required=True, metavar="DIR"),
    Setting("work_dir", PATH, "Scratch for attempts.", default_text="STATE_DIR/work", metavar="DIR"),
    Setting("cpu_millis", INTEGER, "CPU offered, in thousandths of a CPU.", minimum=1,
            default_text="the CPUs this process may use", metavar="N"),
    Setting("memory_mb", INTEGER, "Memory offered.", minimum=1, default_text="the machine's memory", metavar="MB"),
    Setting("tls_ca", PATH, "CA bundle (PEM): connect with TLS, verifying the coordinator against it.",
            metavar="FILE"),
    Setting("tls_cert", PATH, "Client certificate chain (PEM) for a coordinator that requires one (mTLS).",
            metavar="FILE"),
    Setting("tls_key", PATH, "Private key of tls_cert (PEM).", metavar="FILE",
            default_text="`$CREDENTIALS_DIRECTORY/tls.key` if present, else unset"),
    Setting("insecure", BOOLEAN, "Allow plaintext to a non-loopback coordinator (sends the token in clear).",
            default=False),
    Setting("drain_timeout_s", INTEGER, "On SIGTERM, how long running groups may finish.",
            default=DRAIN_TIMEOUT_S_DEFAULT, minimum=0, metavar="S"),
    Setting("flush_timeout_s", INTEGER, "On SIGTERM, how long the outbox may take to be acknowledged.",
            default=DRAIN_FLUSH_TIMEOUT_S_DEFAULT, minimum=0, metavar="S"),
    Setting("command_path", STRING, "PATH for subjects' commands.", default_text="the executor's minimal PATH",
            metavar="PATH"),
    Setting("log_level", STRING, "Log level of the JSON log on stderr.", default="info", choices=LOG_LEVELS),
    Setting("metrics_listen", STRING, "HOST:PORT of the Prometheus metrics endpoint; empty: no endpoint.",
            default="", metavar="HOST:PORT"),
    Setting("keep_reported_hours", INTEGER, "How long reports the coordinator acknowledged are kept (with their "
            "artifacts), to offer again to a coordinator restored from a backup; 0 keeps none.",
            default=KEEP_REPORTED_HOURS_DEFAULT, minimum=0, metavar="H"),
    Setting("keep_reported_mb", INTEGER, "At most this much of acknowledged reports and their artifacts is kept "
            "(the oldest go first).", default=KEEP_REPORTED_MB_DEFAULT, minimum=0, metavar="MB"),
    Setting("min_free_mb", INTEGER, "Start no new cell while the state dir's file system has less free space than "
            "this (a cell whose result could not be kept); resume when it has.", default=MIN_FREE_MB_DEFAULT,
            minimum=0, metavar="MB"),
    Setting("retry_refused", BOOLEAN, "Keep reconnecting with backoff when the coordinator refuses this worker "
            "for good (bad token, stale incarnation, old protocol) instead of exiting 77.", default=False),
)


def environment_layer(environ: Mapping[str, str]) -> Layer:
    """What systemd's environment supplies: the state directory and loaded credentials."""
    values: dict[str, object] = {}
    state = environ.get("STATE_DIRECTORY", "").split(":")[0]
    if state:
        values["state_dir"] = Path(state)
    creds = environ.get("CREDENTIALS_DIRECTORY", "")
    for key, name in (("token_file", ENROLL_TOKEN_NAME), ("tls_key", TLS_KEY_NAME)):
        if creds and (Path(creds) / name).is_file():
            values[key] = Path(creds) / name
    return Layer("environment", values)


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML configuration file")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective configuration as TOML and exit (token files by path only)")
    add_flags(p, SETTINGS)


def resolve_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Resolved:
    layers = [environment_layer(environ)]
    if args.config is not None:
        layers.append(load_file(args.config, SETTINGS, program=PROGRAM))
    layers.append(flags_layer(args, SETTINGS))
    return resolve(SETTINGS, *layers)


def config_from(r: Resolved, environ: Mapping[str, str], pid: int) -> WorkerConfig:
    v = r.values
    try:
        split_host_port(v["coordinator"])
    except ConfigError as e:
        raise r.error("coordinator", e.reason) from None
    if v["metrics_listen"]:
        try:
            split_host_port(v["metrics_listen"])
        except ConfigError:
            raise r.error("metrics_listen", f"must be HOST:PORT or empty, got {v['metrics_listen']!r}") from None
    if not v["worker_id"] or len(v["worker_id"]) > ID_CHARS_MAX:
        raise r.error("worker_id", f"must be 1 to {ID_CHARS_MAX} characters")
    bench_root = Path(v["bench_root"]).resolve()
    if not bench_root.is_dir():
        raise r.error("bench_root", f"{v['bench_root']} is not a directory")
    for key in ("tls_ca", "tls_cert", "tls_key"):
        if v[key] is not None and not Path(v[key]).is_file():
            raise r.error(key, f"{v[key]} is not a readable file")
    if (v["tls_cert"] is None) != (v["tls_key"] is None):
        given = "tls_cert" if v["tls_cert"] is not None else "tls_key"
        raise r.error(given, "tls_cert and tls_key go together: give both, or neither")
    if v["tls_cert"] is not None and v["tls_ca"] is None:
        raise r.error("tls_cert", "a client certificate is sent over TLS only: give tls_ca (--tls-ca) too")
    if v["tls_ca"] is None and not v["insecure"] and not is_loopback(split_host_port(v["coordinator"])[0]):
        raise r.error("coordinator", f"{v['coordinator']} is not a loopback address: give tls_ca (--tls-ca FILE) "
                                     "to connect with TLS, or insecure = true (--insecure) to send the worker's "
                                     "token in plaintext")
    state_dir = Path(v["state_dir"]).resolve()
    return WorkerConfig(
        coordinator=v["coordinator"],
        token_file=Path(v["token_file"]).absolute(),
        worker_id=WorkerId(v["worker_id"]),
        slots=v["slots"],
        state_dir=state_dir,
        bench_root=bench_root,
        work_dir=Path(v["work_dir"]).resolve() if v["work_dir"] else state_dir / "work",
        cpu_millis=v["cpu_millis"] or machine_cpu_millis(),
        memory_mb=v["memory_mb"] or machine_memory_mb(),
        tls_ca=Path(v["tls_ca"]).resolve() if v["tls_ca"] else None,
        tls_cert=Path(v["tls_cert"]).resolve() if v["tls_cert"] else None,
        tls_key=Path(v["tls_key"]).resolve() if v["tls_key"] else None,
        insecure=v["insecure"],
        drain_timeout_s=v["drain_timeout_s"],
        flush_timeout_s=v["flush_timeout_s"],
        command_path=v["command_path"],
        log_level=v["log_level"],
        metrics_listen=v["metrics_listen"],
        retry_refused=v["retry_refused"],
        keep_reported_hours=v["keep_reported_hours"],
        keep_reported_mb=v["keep_reported_mb"],
        min_free_mb=v["min_free_mb"],
        environ=MappingProxyType(dict(environ)),
        notify=settings_from_environ(environ, pid),
    )


def parse_worker_args(argv: Sequence[str], environ: Mapping[str, str], pid: int = 0,
                      ) -> tuple[WorkerConfig, Resolved, bool]:
    """(config, how each setting was resolved, whether --print-config was asked)."""
    p = argparse.ArgumentParser(
        prog=PROGRAM, description="run task groups for a fleet coordinator",
        epilog="Settings come from --config FILE (TOML, keys as in docs/configuration.md), overridden by flags. "
               "fleet-worker identity --bench-root DIR prints this machine's environment manifest "
               "and id as JSON. SIGTERM or SIGINT drains (exit 0); a second signal stops at once.")
    add_run_flags(p)
    args = p.parse_args(list(argv))
    r = resolve_args(args, environ)
    return config_from(r, environ, pid or os.getpid()), r, bool(args.print_config)


def print_config(config: WorkerConfig, r: Resolved) -> str:
    """The effective configuration as TOML that loads back to the same WorkerConfig (the
    environment snapshot is not a setting and is never printed)."""
    values = {s.key: r.values[s.key] for s in SETTINGS}
    values.update(token_file=config.token_file, state_dir=config.state_dir, bench_root=config.bench_root,
                  work_dir=config.work_dir, cpu_millis=config.cpu_millis, memory_mb=config.memory_mb,
                  tls_ca=config.tls_ca, tls_cert=config.tls_cert, tls_key=config.tls_key)
    notes = {key: f"from {r.source(key)}" for key in values if r.origin[key] is not None}
    for key, what in (("work_dir", "STATE_DIR/work"), ("cpu_millis", "measured"), ("memory_mb", "measured")):
        notes.setdefault(key, what)
    watchdog = f"{config.notify.watchdog_usec // 1000} ms" if config.notify.watchdog_usec else "off"
    header = (f"{PROGRAM}: effective configuration (defaults < environment < file < flags).\n"
              f"Not settings, from the environment: NOTIFY_SOCKET {'set' if config.notify.socket else 'unset'}, "
              f"watchdog {watchdog}; subjects' declared credentials.")
    return render_toml(SETTINGS, values, header=header, notes=notes)
