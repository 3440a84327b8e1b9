"""`fleet-coordinator`: the daemon. Flags become one frozen Config; nothing else reads the
environment. Start-up order: lock and open the store, recover (snapshot + log replay),
start the actor, apply the recovery command, then serve. SIGTERM: health NOT_SERVING, stop
accepting sessions, drain the actor, write a snapshot, exit 0.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from common import limits
from common.fleetpb import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from coordinator.actor import TICK_MS_DEFAULT, Actor, Request, recover_with_time
from coordinator.artifacts import ArtifactStore
from coordinator.auth import TokenBook, ensure_token_file, read_token_file
from coordinator.core import commands as c
from coordinator.errors import StorageError, exit_code_for, fail_stop_line
from coordinator.metrics import SAMPLE_EVERY_S, Metrics
from coordinator.metrics import sample as sample_metrics
from coordinator.servicer import AdminServicer, CoordinatorServicer, Hub
from coordinator.store import Store

log = structlog.get_logger("fleet.coordinator")
SHUTDOWN_GRACE_S = 3.0


@dataclass(frozen=True, slots=True)
class Config:
    data_dir: Path
    listen: str
    admin_token_file: Path | None
    enroll_token_file: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    insecure: bool
    map_size_mb: int
    snapshot_every: int
    tick_ms: int
    log_level: str
    metrics_listen: str = ""


def grpc_options() -> list[tuple[str, int]]:
    """Spelled out from the named limits, not left to library defaults (both sides)."""
    return [
        ("grpc.max_send_message_length", limits.MESSAGE_BYTES_MAX),
        ("grpc.max_receive_message_length", limits.MESSAGE_BYTES_MAX),
        ("grpc.keepalive_time_ms", limits.KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", limits.KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", limits.KEEPALIVE_TIME_MS // 2),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_args(argv: list[str] | None) -> Config:
    ap = argparse.ArgumentParser(prog="fleet-coordinator", description="The fleet coordinator daemon.")
    ap.add_argument("--data-dir", type=Path, required=True, help="state: log, snapshots, artifacts, tokens")
    ap.add_argument("--listen", default="127.0.0.1:7443", help="HOST:PORT (port 0 picks one; see DATA_DIR/listen.addr)")
    ap.add_argument("--admin-token-file", type=Path, help="default DATA_DIR/admin.token, created when missing")
    ap.add_argument("--enroll-token-file", type=Path, help="default DATA_DIR/enroll.token, created when missing")
    ap.add_argument("--tls-cert", type=Path)
    ap.add_argument("--tls-key", type=Path)
    ap.add_argument("--insecure", action="store_true", help="allow plaintext on a non-loopback address")
    ap.add_argument("--map-size-mb", type=int, default=limits.STORE_MAP_BYTES_MAX >> 20,
                    help="ceiling of the LMDB map (grown on demand up to this)")
    ap.add_argument("--snapshot-every", type=int, default=limits.SNAPSHOT_EVERY_RECORDS, help="records between snapshots")
    ap.add_argument("--tick-ms", type=int, default=TICK_MS_DEFAULT, help="liveness and deadline check interval")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    ap.add_argument("--metrics-listen", default="", help="HOST:PORT for a Prometheus endpoint (off when empty)")
    a = ap.parse_args(argv)
    if bool(a.tls_cert) != bool(a.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    if not a.tls_cert and not a.insecure and not is_loopback(a.listen):
        ap.error(f"refusing plaintext on {a.listen}: give --tls-cert/--tls-key, or --insecure to accept the risk")
    return Config(a.data_dir, a.listen, a.admin_token_file, a.enroll_token_file, a.tls_cert, a.tls_key, a.insecure,
                  a.map_size_mb, a.snapshot_every, a.tick_ms, a.log_level, a.metrics_listen)


def setup_logging(level: str) -> None:
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def load_tokens(cfg: Config) -> tuple[str, str]:
    out = []
    for given, default in ((cfg.admin_token_file, "admin.token"), (cfg.enroll_token_file, "enroll.token")):
        if given is not None:
            out.append(read_token_file(given))
        else:
            path = cfg.data_dir / default
            token, created = ensure_token_file(path)
            if created:
                log.info("token_created", path=str(path), mode="0600")
            out.append(token)
    return out[0], out[1]


async def serve(cfg: Config, store: Store) -> int:
    loop = asyncio.get_running_loop()
    state, index, last_now_ms = recover_with_time(store)
    admin_token, enroll_token = load_tokens(cfg)
    tokens = TokenBook(cfg.data_dir, admin_token, enroll_token)
    artifacts = ArtifactStore(cfg.data_dir / "artifacts")
    swept = artifacts.sweep_tmp(time.time_ns() // 1_000_000)
    if swept:
        log.info("artifact_tmp_swept", files=len(swept))
    hub = Hub()
    metrics = Metrics()
    hub.on_event.append(lambda e, _at: metrics.event(e.event, e.detail))

    def on_commit(records: int, seconds: float) -> None:
        metrics.commit_batch.observe(records)
        metrics.commit_latency.observe(seconds)

    actor = Actor(store, state, index, deliver=lambda batch: loop.call_soon_threadsafe(hub.on_batch, batch),
                  tick_ms=cfg.tick_ms, on_commit=on_commit, last_now_ms=last_now_ms)
    actor.start()
    actor.submit(Request(make=lambda now: c.CoordinatorRecovered(now)))

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    server = grpc.aio.server(options=grpc_options())
    incarnation = time.time_ns() // 1_000_000
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(
        CoordinatorServicer(actor, hub, tokens, artifacts, incarnation, metrics), server)
    admin_pb2_grpc.add_AdminServicer_to_server(AdminServicer(actor, hub, tokens, artifacts), server)
    health_servicer = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name,
             admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
             health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    if cfg.tls_cert:
        creds = grpc.ssl_server_credentials([(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())])
        port = server.add_secure_port(cfg.listen, creds)
    else:
        port = server.add_insecure_port(cfg.listen)
    if port == 0:
        print(f"fleet-coordinator: cannot listen on {cfg.listen}", file=sys.stderr)
        return 2
    await server.start()
    host = cfg.listen.rsplit(":", 1)[0]
    address = f"{host}:{port}"
    (cfg.data_dir / "listen.addr").write_text(address + "\n")
    for name in names[:2] + ("",):
        await _set_health(health_servicer, name, health_pb2.HealthCheckResponse.SERVING)
    log.info("listening", address=address, tls=bool(cfg.tls_cert), data_dir=str(cfg.data_dir),
             admin_token_file=str(cfg.admin_token_file or cfg.data_dir / "admin.token"),
             enroll_token_file=str(cfg.enroll_token_file or cfg.data_dir / "enroll.token"))

    sampler = None
    if cfg.metrics_listen:
        metrics_port = metrics.serve(cfg.metrics_listen)
        log.info("metrics_listening", address=f"{cfg.metrics_listen.rpartition(':')[0]}:{metrics_port}")
        sampler = asyncio.create_task(_sample_metrics(actor, hub, metrics))

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: _reload_tokens(cfg, tokens))
    await stop.wait()
    log.info("shutting_down")
    for name in names[:2] + ("",):
        await _set_health(health_servicer, name, health_pb2.HealthCheckResponse.NOT_SERVING)
    if sampler is not None:
        sampler.cancel()
    await server.stop(SHUTDOWN_GRACE_S)
    await asyncio.to_thread(actor.stop)
    log.info("stopped", last_index=store.last_index)
    return 0


async def _sample_metrics(actor: Actor, hub: Hub, metrics: Metrics) -> None:
    """Refresh the state gauges from a read-only query on the actor thread."""
    from coordinator.servicer import submit

    while True:
        s = await submit(actor, query=sample_metrics)
        metrics.apply(s, len(hub.sessions))
        await asyncio.sleep(SAMPLE_EVERY_S)


async def _set_health(servicer: object, name: str, status: int) -> None:
    result = servicer.set(name, status)  # type: ignore[attr-defined]
    if asyncio.iscoroutine(result):
        await result


def _reload_tokens(cfg: Config, tokens: TokenBook) -> None:
    try:
        tokens.reload(*load_tokens(cfg))
        log.info("tokens_reloaded")
    except (OSError, ValueError) as e:
        log.error("tokens_reload_failed", error=str(e))


def main(argv: list[str] | None = None) -> int:
    if not __debug__:
        print("fleet-coordinator: refusing to run under python -O: assertions are its invariant checks",
              file=sys.stderr)
        return 2
    cfg = parse_args(argv)
    setup_logging(cfg.log_level)
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        store = Store.open(cfg.data_dir, map_size_bytes=min(limits.STORE_MAP_BYTES_DEFAULT, cfg.map_size_mb << 20),
                           map_size_bytes_max=cfg.map_size_mb << 20, snapshot_every=cfg.snapshot_every)
    except StorageError as e:
        print(fail_stop_line(e), file=sys.stderr)
        return exit_code_for(e)
    try:
        return asyncio.run(serve(cfg, store))
    except StorageError as e:
        print(fail_stop_line(e), file=sys.stderr)
        return exit_code_for(e)
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
