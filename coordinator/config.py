"""The coordinator's one frozen configuration: built at the entry point from flags, a TOML file
(`--config`) and an environment snapshot; nothing else in the coordinator reads `os.environ`.

Precedence, lowest first: the defaults of `SETTINGS`, the environment (systemd's
`$STATE_DIRECTORY` for `data_dir`; `admin.token`, `enroll.token` and `tls.key` in
`$CREDENTIALS_DIRECTORY`, when present, for the token files and the TLS key), the file, the flags. A problem is a `ConfigFileError` that names
the file and line, or the flag, and the reason; the entry point exits 2 on it. Settings
name token files, never hold tokens, so `--print-config` cannot print a secret.
"""
from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common import limits
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

PROGRAM = "fleet-coordinator"
# The `tick_ms` setting's default: the actor's liveness and deadline check interval.
TICK_MS_DEFAULT = 200
LOG_LEVELS = ("debug", "info", "warning", "error")
ADMIN_TOKEN_NAME = "admin.token"
ENROLL_TOKEN_NAME = "enroll.token"
VIEWER_TOKEN_NAME = "viewer.token"
TLS_KEY_NAME = "tls.key"

SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", PATH, "State: write-ahead log, snapshots, artifacts, tokens, credentials.json.",
            required=True, default_text="`$STATE_DIRECTORY` under systemd, else required", metavar="DIR"),
    Setting("listen", STRING, "HOST:PORT of the gRPC server; port 0 picks one (written to DATA_DIR/listen.addr).",
            default="127.0.0.1:7443", metavar="HOST:PORT"),
    Setting("admin_token_file", PATH, "The admin token (fleetctl); re-read on SIGHUP.",
            default_text="`$CREDENTIALS_DIRECTORY/admin.token` if present, else DATA_DIR/admin.token "
                         "(created, mode 0600, when missing)", metavar="FILE"),
    Setting("enroll_token_file", PATH, "The fleet's enrollment token, presented by a worker at its first session; re-read on SIGHUP.",
            default_text="`$CREDENTIALS_DIRECTORY/enroll.token` if present, else DATA_DIR/enroll.token "
                         "(created, mode 0600, when missing)", metavar="FILE"),
    Setting("tls_cert", PATH, "Server certificate chain (PEM); with tls_key, serve TLS.", metavar="FILE"),
    Setting("tls_key", PATH, "Private key of tls_cert (PEM).", metavar="FILE",
            default_text="`$CREDENTIALS_DIRECTORY/tls.key` if present, else unset"),
    Setting("tls_client_ca", PATH, "CA bundle (PEM) for client certificates: when set, every client must present "
            "one, and a worker's must name its id as the URI SAN fleet-worker://ID.", metavar="FILE"),
    Setting("insecure", BOOLEAN, "Allow plaintext on a non-loopback address.", default=False),
    Setting("map_size_mb", INTEGER, "Ceiling of the LMDB map, grown on demand up to this.",
            default=limits.STORE_MAP_BYTES_MAX >> 20, minimum=1, metavar="MB"),
    Setting("snapshot_every", INTEGER, "Log records between snapshots.", default=limits.SNAPSHOT_EVERY_RECORDS,
            minimum=1, metavar="N"),
    Setting("tick_ms", INTEGER, "Liveness and deadline check interval.", default=TICK_MS_DEFAULT, minimum=1,
            metavar="MS"),
    Setting("gc_full_every_s", INTEGER, "Seconds between full passes of the garbage collector over the frozen "
            "long-lived state, for cycles that became garbage after they were frozen (coordinator/collector.py); "
            "each stalls the coordinator for a walk of its whole heap. 0: never.",
            default=limits.GC_FULL_EVERY_MS // 1000, minimum=0, metavar="S"),
    Setting("log_level", STRING, "Log level of the JSON log on stderr.", default="info", choices=LOG_LEVELS),
    Setting("metrics_listen", STRING, "HOST:PORT of the Prometheus metrics endpoint; empty: no endpoint.",
            default="", metavar="HOST:PORT"),
    Setting("http_listen", STRING, "HOST:PORT of the live web console (coordinator/console/; port 0 picks one, "
            "written to DATA_DIR/http.addr); empty: no console. TLS with tls_cert and tls_key as the gRPC port; "
            "plaintext off loopback needs insecure.", default="", metavar="HOST:PORT"),
    Setting("viewer_token_file", PATH, "The console's read-only viewer token; re-read on SIGHUP.",
            default_text="viewer.token beside the admin token file (created, mode 0600, when missing)",
            metavar="FILE"),
)


@dataclass(frozen=True, slots=True)
class Config:
    data_dir: Path
    listen: str = "127.0.0.1:7443"
    admin_token_file: Path | None = None  # None: DATA_DIR/admin.token, created when missing
    enroll_token_file: Path | None = None  # None: DATA_DIR/enroll.token, created when missing
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure: bool = False
    map_size_mb: int = limits.STORE_MAP_BYTES_MAX >> 20
    snapshot_every: int = limits.SNAPSHOT_EVERY_RECORDS
    tick_ms: int = TICK_MS_DEFAULT
    gc_full_every_s: int = limits.GC_FULL_EVERY_MS // 1000
    log_level: str = "info"
    tls_client_ca: Path | None = None
    metrics_listen: str = ""
    http_listen: str = ""
    viewer_token_file: Path | None = None  # None: viewer.token beside the admin token, created when missing
    # From the environment only (systemd), never from the file or flags.
    notify: NotifySettings = field(default_factory=NotifySettings)

    @property
    def admin_token_path(self) -> Path:
        return self.admin_token_file or self.data_dir / ADMIN_TOKEN_NAME

    @property
    def enroll_token_path(self) -> Path:
        return self.enroll_token_file or self.data_dir / ENROLL_TOKEN_NAME

    @property
    def viewer_token_path(self) -> Path:
        return self.viewer_token_file or self.admin_token_path.parent / VIEWER_TOKEN_NAME


def split_host_port(target: str) -> tuple[str, int] | None:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host.strip("[]"), int(port)


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def environment_layer(environ: Mapping[str, str]) -> Layer:
    """What systemd's environment supplies: the state directory and loaded credentials."""
    values: dict[str, object] = {}
    state = environ.get("STATE_DIRECTORY", "").split(":")[0]
    if state:
        values["data_dir"] = Path(state)
    creds = environ.get("CREDENTIALS_DIRECTORY", "")
    if creds:
        for key, name in (("admin_token_file", ADMIN_TOKEN_NAME), ("enroll_token_file", ENROLL_TOKEN_NAME),
                          ("tls_key", TLS_KEY_NAME)):
            if (Path(creds) / name).is_file():
                values[key] = Path(creds) / name
    return Layer("environment", values)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROGRAM, description="The fleet coordinator daemon.",
        epilog="Settings come from --config FILE (TOML, keys as in docs/configuration.md), overridden by flags. "
               "SIGTERM drains and exits 0; SIGHUP re-reads the token files.")
    ap.add_argument("--config", type=Path, metavar="FILE", help="TOML configuration file")
    ap.add_argument("--print-config", action="store_true",
                    help="print the effective configuration as TOML and exit (token files by path only)")
    add_flags(ap, SETTINGS)
    return ap


def resolve_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Resolved:
    layers = [environment_layer(environ)]
    if args.config is not None:
        layers.append(load_file(args.config, SETTINGS, program=PROGRAM))
    layers.append(flags_layer(args, SETTINGS))
    return resolve(SETTINGS, *layers)


def config_from(r: Resolved, environ: Mapping[str, str], pid: int) -> Config:
    """The checked Config; ConfigFileError naming the setting's origin otherwise."""
    v = r.values
    if split_host_port(v["listen"]) is None:
        raise r.error("listen", f"must be HOST:PORT, got {v['listen']!r}")
    if v["metrics_listen"] and split_host_port(v["metrics_listen"]) is None:
        raise r.error("metrics_listen", f"must be HOST:PORT or empty, got {v['metrics_listen']!r}")
    if v["http_listen"] and split_host_port(v["http_listen"]) is None:
        raise r.error("http_listen", f"must be HOST:PORT or empty, got {v['http_listen']!r}")
    if bool(v["tls_cert"]) != bool(v["tls_key"]):
        given = "tls_cert" if v["tls_cert"] else "tls_key"
        raise r.error(given, "tls_cert and tls_key go together: give both, or neither")
    if v["tls_client_ca"] and not v["tls_cert"]:
        raise r.error("tls_client_ca", "client certificates need TLS: give tls_cert and tls_key too")
    for key in ("tls_cert", "tls_key", "tls_client_ca"):
        if v[key] is not None and not Path(v[key]).is_file():
            raise r.error(key, f"{v[key]} is not a readable file")
    for key in ("admin_token_file", "enroll_token_file", "viewer_token_file"):
        if r.origin[key] is not None and not Path(v[key]).is_file():
            raise r.error(key, f"{v[key]} is not a readable file (only the default paths in DATA_DIR are "
                               "created when missing)")
    if not v["tls_cert"] and not v["insecure"] and not is_loopback(v["listen"]):
        raise r.error("listen", f"refusing plaintext on {v['listen']}: give tls_cert and tls_key, "
                                "or insecure = true (--insecure) to accept the risk")
    if v["http_listen"] and not v["tls_cert"] and not v["insecure"] and not is_loopback(v["http_listen"]):
        raise r.error("http_listen", f"refusing a plaintext console on {v['http_listen']}: give tls_cert and "
                                     "tls_key, or insecure = true (--insecure) to accept the risk")
    return Config(
        data_dir=Path(v["data_dir"]), listen=v["listen"], admin_token_file=v["admin_token_file"],
        enroll_token_file=v["enroll_token_file"], tls_cert=v["tls_cert"], tls_key=v["tls_key"],
        insecure=v["insecure"], map_size_mb=v["map_size_mb"], snapshot_every=v["snapshot_every"],
        tick_ms=v["tick_ms"], gc_full_every_s=v["gc_full_every_s"], log_level=v["log_level"], tls_client_ca=v["tls_client_ca"],
        metrics_listen=v["metrics_listen"], http_listen=v["http_listen"], viewer_token_file=v["viewer_token_file"],
        notify=settings_from_environ(environ, pid))


def parse(argv: Sequence[str] | None, environ: Mapping[str, str], pid: int) -> tuple[Config, Resolved, bool]:
    """(config, how each setting was resolved, whether --print-config was asked). Raises
    ConfigFileError; argparse exits 2 on a malformed flag itself."""
    args = build_parser().parse_args(None if argv is None else list(argv))
    r = resolve_args(args, environ)
    return config_from(r, environ, pid), r, bool(args.print_config)


def print_config(cfg: Config, r: Resolved) -> str:
    """The effective configuration as TOML that loads back to the same Config."""
    values = {s.key: r.values[s.key] for s in SETTINGS}
    notes = {key: f"from {r.source(key)}" for key in values if r.origin[key] is not None}
    notes["admin_token_file"] = notes.get("admin_token_file") or (
        f"{cfg.admin_token_path} (DATA_DIR/admin.token, created when missing)")
    notes["enroll_token_file"] = notes.get("enroll_token_file") or (
        f"{cfg.enroll_token_path} (DATA_DIR/enroll.token, created when missing)")
    watchdog = f"{cfg.notify.watchdog_usec // 1000} ms" if cfg.notify.watchdog_usec else "off"
    header = (f"{PROGRAM}: effective configuration (defaults < environment < file < flags).\n"
              f"Not settings, from the environment: NOTIFY_SOCKET {'set' if cfg.notify.socket else 'unset'}, "
              f"watchdog {watchdog}.")
    return render_toml(SETTINGS, values, header=header, notes=notes)


__all__ = ["SETTINGS", "Config", "ConfigFileError", "build_parser", "is_loopback", "parse", "print_config"]
