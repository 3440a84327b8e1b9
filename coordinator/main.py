"""`fleet-coordinator`: the daemon. Flags, a TOML file (`--config`) and the environment become
one frozen Config (coordinator/config.py); nothing else reads the environment. Start-up
order: lock and open the store, recover (snapshot + log replay), start the actor, apply and
commit the recovery command, bind, then tell systemd READY=1. While serving: a STATUS= line
and, when systemd asks for one, WATCHDOG=1 at half its interval, each only after a query
answered by the actor thread (a wedged actor stops the pings, and systemd restarts us).
SIGHUP re-reads the token files. SIGTERM: STOPPING=1, health NOT_SERVING, stop accepting
sessions, drain the actor, write a snapshot, exit 0.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Sequence

import grpc
import structlog

from common import limits
from common.fleetpb import admin_pb2, admin_pb2_grpc, coordinator_pb2
from common.notify import Notifier
from coordinator.actor import Actor
from coordinator.admin_service import AdminServicer
from coordinator.artifacts import ArtifactStore
from coordinator.collector import Collector
from coordinator.backup import BackupError, backup_to_take_up
from coordinator.auth import TokenBook, ensure_token_file, read_token_file
from coordinator.config import Config, ConfigFileError, is_loopback, parse, print_config
from coordinator.core import commands as c
from coordinator.core.state import State, WorkerStatus
from coordinator.edge import Hub, submit
from coordinator.errors import StorageError, exit_code_for, fail_stop_line
from coordinator.metrics import SAMPLE_EVERY_S, Metrics
from coordinator.metrics import sample as sample_metrics
from coordinator.recovery import recover_with_time
from coordinator.store import Store
from coordinator.worker_service import CoordinatorServicer, add_coordinator_to_server

log = structlog.get_logger("fleet.coordinator")
SHUTDOWN_GRACE_S = 3.0
# Without a systemd watchdog the STATUS= line is still refreshed this often.
STATUS_EVERY_S = 5.0
EXIT_CONFIG = 2

__all__ = ["Config", "is_loopback", "main", "serve"]


def grpc_options() -> list[tuple[str, int]]:
    """Spelled out from the named limits, not left to library defaults (both sides).

    Every answer fits MESSAGE_BYTES_MAX (results and attempts come in pages); the one request
    that may be larger is a SubmitRun of a spec up to SPEC_BYTES_MAX. gRPC has one receive
    limit per server, so worker frames are held to MESSAGE_BYTES_MAX by the session servicer.
    """
    return [
        ("grpc.max_send_message_length", limits.MESSAGE_BYTES_MAX),
        ("grpc.max_receive_message_length", limits.ADMIN_REQUEST_BYTES_MAX),
        # The server's own pings: the liveness of idle protocol-4 sessions (common/limits.py).
        ("grpc.keepalive_time_ms", limits.SERVER_KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", limits.SERVER_KEEPALIVE_TIMEOUT_MS),
        # gRPC core's own deadline for a ping's ack (1 minute by default) must not be longer.
        ("grpc.http2.ping_timeout_ms", limits.SERVER_KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # The least interval of the workers' pings (every KEEPALIVE_TIME_MS) accepted without
        # data: gRPC core's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS.
        ("grpc.http2.min_ping_interval_without_data_ms", limits.KEEPALIVE_TIME_MS // 2),
        # Thousands of sessions opened at once wait here until the event loop requests them.
        ("grpc.server.max_pending_requests", limits.SERVER_PENDING_CALLS_MAX),
        ("grpc.server.max_pending_requests_hard_limit", limits.SERVER_PENDING_CALLS_HARD_MAX),
    ]


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
    for given, default in ((cfg.admin_token_file, cfg.admin_token_path), (cfg.enroll_token_file, cfg.enroll_token_path)):
        if given is not None:
            out.append(read_token_file(given))
        else:
            token, created = ensure_token_file(default)
            if created:
                log.info("token_created", path=str(default), mode="0600")
            out.append(token)
    return out[0], out[1]


def server_credentials(cfg: Config) -> grpc.ServerCredentials:
    """TLS; with `tls_client_ca`, every client must present a certificate from that CA (gRPC
    cannot ask for one without requiring it), and worker sessions check the id it names."""
    assert cfg.tls_cert is not None and cfg.tls_key is not None
    pair = [(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())]
    if cfg.tls_client_ca is not None:
        return grpc.ssl_server_credentials(pair, root_certificates=cfg.tls_client_ca.read_bytes(),
                                           require_client_auth=True)
    return grpc.ssl_server_credentials(pair)


def status_counts(state: State) -> tuple[int, int, int]:
    """(runs, runs with groups still to settle, active workers): a query on the actor thread."""
    open_runs = sum(1 for r in state.runs.values() if r.settled_groups < len(r.groups))
    active = sum(1 for w in state.workers.values() if w.status == WorkerStatus.ACTIVE)
    return len(state.runs), open_runs, active


async def status_line(actor: Actor, hub: Hub) -> str:
    runs, open_runs, active = await submit(actor, query=status_counts)
    return (f"serving {runs} run{'s' if runs != 1 else ''} ({open_runs} open), {active} worker"
            f"{'s' if active != 1 else ''} active, {len(hub.sessions)} connected")


async def _supervise(notifier: Notifier, actor: Actor, hub: Hub) -> None:
    """STATUS= and WATCHDOG=1, each sent only after the actor answered a query."""
    interval = notifier.watchdog_interval_s
    period = min(interval, STATUS_EVERY_S) if interval else STATUS_EVERY_S
    while True:
        await asyncio.sleep(period)
        try:
            line = await status_line(actor, hub)
        except Exception as e:  # an overloaded actor: this ping is skipped, the next may go
            log.warning("status_query_failed", error=str(e))
            continue
        if interval:
            notifier.watchdog(line)
        else:
            notifier.status(line)


async def serve(cfg: Config, store: Store) -> int:
    loop = asyncio.get_running_loop()
    notifier = Notifier(cfg.notify)
    try:
        return await _serve(cfg, store, notifier, loop)
    finally:
        notifier.close()


async def _serve(cfg: Config, store: Store, notifier: Notifier, loop: asyncio.AbstractEventLoop) -> int:
    notifier.status("recovering: replaying the log")
    state, index, last_now_ms = recover_with_time(store)
    try:
        restored_from = backup_to_take_up(cfg.data_dir, state.restored_backups)
    except BackupError as e:
        print(f"fleet-coordinator: {e}", file=sys.stderr)
        return EXIT_CONFIG
    admin_token, enroll_token = load_tokens(cfg)
    tokens = TokenBook(cfg.data_dir, admin_token, enroll_token)
    artifacts = ArtifactStore(cfg.data_dir / "artifacts")
    swept = artifacts.sweep_tmp(time.time_ns() // 1_000_000)
    if swept:
        log.info("artifact_tmp_swept", files=len(swept))
    metrics = Metrics()
    hub = Hub(metrics)
    hub.on_events.append(metrics.events)

    def on_commit(records: int, seconds: float) -> None:
        metrics.commit_batch.observe(records)
        metrics.commit_latency.observe(seconds)

    actor = Actor(store, state, index, deliver=lambda batch: loop.call_soon_threadsafe(hub.on_batch, batch),
                  tick_ms=cfg.tick_ms, on_commit=on_commit, last_now_ms=last_now_ms)
    actor.start()
    # Committed before READY=1: "ready" means recovered, on disk, and bound.
    await submit(actor, make=lambda now: c.CoordinatorRecovered(now))
    if restored_from is not None:
        # Started on a backup: the log's tail after it is lost. A new epoch keeps the ids issued
        # from now on apart from those issued after the backup; the workers offer back the results.
        epoch = secrets.token_hex(4)
        await submit(actor, make=lambda now: c.CoordinatorRestored(now, restored_from, epoch))
        log.warning("coordinator_restored", backup_id=restored_from, epoch=epoch,
                    detail="started on a backup: dispatch waits for the workers to offer the results they kept")

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    server = grpc.aio.server(options=grpc_options())
    incarnation = time.time_ns() // 1_000_000
    add_coordinator_to_server(CoordinatorServicer(actor, hub, tokens, artifacts, incarnation, metrics,
                                                  client_identity=cfg.tls_client_ca is not None), server)
    admin_servicer = AdminServicer(actor, hub, tokens, artifacts, store=store, data_dir=cfg.data_dir,
                                   incarnation=incarnation)
    admin_pb2_grpc.add_AdminServicer_to_server(admin_servicer, server)
    health_servicer = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name,
             admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
             health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    try:
        if cfg.tls_cert:
            port = server.add_secure_port(cfg.listen, server_credentials(cfg))
        else:
            port = server.add_insecure_port(cfg.listen)
    except RuntimeError as e:  # grpc raises instead of returning 0 in some versions
        port, bind_error = 0, str(e)
    else:
        bind_error = ""
    if port == 0:
        print(f"fleet-coordinator: cannot listen on {cfg.listen}{': ' + bind_error if bind_error else ''}",
              file=sys.stderr)
        await asyncio.to_thread(actor.stop)
        return EXIT_CONFIG
    await server.start()
    host = cfg.listen.rsplit(":", 1)[0]
    address = f"{host}:{port}"
    # Written whole, then renamed: a reader that sees the file sees the address (it read an
    # empty one under load when the file was written in place).
    partial = cfg.data_dir / "listen.addr.partial"
    partial.write_text(address + "\n")
    os.replace(partial, cfg.data_dir / "listen.addr")
    for name in names[:2] + ("",):
        await _set_health(health_servicer, name, health_pb2.HealthCheckResponse.SERVING)
    log.info("listening", address=address, tls=bool(cfg.tls_cert), client_certs=cfg.tls_client_ca is not None,
             data_dir=str(cfg.data_dir), admin_token_file=str(cfg.admin_token_path),
             enroll_token_file=str(cfg.enroll_token_path), notify=notifier.enabled,
             watchdog_interval_s=notifier.watchdog_interval_s)

    console = None
    if cfg.http_listen:  # the live console (coordinator/console/), in this event loop
        from coordinator.console.server import start_console

        console = await start_console(cfg, admin_servicer, tokens, admin_token, incarnation)

    collector = Collector(full_every_s=cfg.gc_full_every_s,
                          on_pause=lambda generation, s: metrics.gc_pause.labels(str(generation)).observe(s))
    collector.install()
    async with asyncio.TaskGroup() as tg:
        collecting = tg.create_task(collector.run())
        sampler = None
        if cfg.metrics_listen:
            metrics_port = metrics.serve(cfg.metrics_listen)
            log.info("metrics_listening", address=f"{cfg.metrics_listen.rpartition(':')[0]}:{metrics_port}")
            sampler = tg.create_task(_sample_metrics(actor, hub, metrics))
        supervisor = tg.create_task(_supervise(notifier, actor, hub)) if notifier.enabled else None
        beating = tg.create_task(_beat(actor, health_servicer, names[:2] + ("",)))
        feeding = tg.create_task(console.feed.run()) if console is not None else None
        notifier.ready(await status_line(actor, hub))

        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: _reload_tokens(cfg, tokens, notifier, console))
        await stop.wait()
        notifier.stopping("stopping: draining sessions and the actor")
        log.info("shutting_down")
        for task in (sampler, supervisor, collecting, beating, feeding):
            if task is not None:
                task.cancel()
    for name in names[:2] + ("",):
        await _set_health(health_servicer, name, health_pb2.HealthCheckResponse.NOT_SERVING)
    if console is not None:
        await console.stop()
    await server.stop(SHUTDOWN_GRACE_S)
    await asyncio.to_thread(actor.stop)
    collector.uninstall()
    log.info("stopped", last_index=store.last_index)
    return 0


async def _beat(actor: Actor, health_servicer: object, services: tuple[str, ...]) -> None:
    """Tell the actor the event loop runs: while it does not (blocked), the actor withholds the
    clock's ticks, and when it runs again the gap is a logged CoordinatorStalled. And health
    follows the disk: NOT_SERVING while the actor serves reads only (a full disk)."""
    from grpc_health.v1 import health_pb2

    read_only = ""
    while True:
        actor.loop_beat()
        if actor.read_only != read_only:
            read_only = actor.read_only
            state = health_pb2.HealthCheckResponse.NOT_SERVING if read_only else health_pb2.HealthCheckResponse.SERVING
            for name in services:
                await _set_health(health_servicer, name, state)
        await asyncio.sleep(limits.LOOP_BEAT_MS / 1000)


async def _sample_metrics(actor: Actor, hub: Hub, metrics: Metrics) -> None:
    """Refresh the state gauges from a read-only query on the actor thread."""
    while True:
        try:
            s = await submit(actor, query=sample_metrics)
        except Exception as e:  # an overloaded actor: keep the last sample, serving matters more
            log.warning("metrics_sample_failed", error=str(e))
        else:
            metrics.apply(s, len(hub.sessions))
        await asyncio.sleep(SAMPLE_EVERY_S)


async def _set_health(servicer: object, name: str, status: int) -> None:
    result = servicer.set(name, status)  # type: ignore[attr-defined]
    if asyncio.iscoroutine(result):
        await result


def _reload_tokens(cfg: Config, tokens: TokenBook, notifier: Notifier, console: object = None) -> None:
    """SIGHUP: the token files again; a failure keeps the tokens in force and says why."""
    try:
        admin_token, enroll_token = load_tokens(cfg)
        tokens.reload(admin_token, enroll_token)
        if console is not None:  # its viewer token too; every console session ends
            from coordinator.console.server import load_viewer_token

            console.reload(admin_token, load_viewer_token(cfg))  # type: ignore[attr-defined]
    except (OSError, ValueError) as e:
        log.error("tokens_reload_failed", error=str(e))
        notifier.status(f"token reload failed, old tokens kept: {e}")
        return
    log.info("tokens_reloaded", admin_token_file=str(cfg.admin_token_path),
             enroll_token_file=str(cfg.enroll_token_path))


# glibc's malloc serves a block this large or larger with its own mmap, returned to the system
# when freed. Left to itself it raises that threshold to the largest block freed so far (up to
# 32 MiB), and then keeps the freed 1 MiB snapshot parts of a recovery in its heap: a million-cell
# recovery peaked at 1,966 MB of RSS with it, 1,810 MB with the threshold fixed (docs/benchmarks.md).
MMAP_THRESHOLD_BYTES = 256 << 10
_M_MMAP_THRESHOLD = -3  # mallopt(3)


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold (see MMAP_THRESHOLD_BYTES); False where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    if not __debug__:
        print("fleet-coordinator: refusing to run under python -O: assertions are its invariant checks",
              file=sys.stderr)
        return EXIT_CONFIG
    environ = dict(os.environ)  # the one read of the environment
    fix_mmap_threshold()
    try:
        cfg, resolved, show = parse(argv, environ, os.getpid())
    except ConfigFileError as e:
        print(f"fleet-coordinator: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if show:
        sys.stdout.write(print_config(cfg, resolved))
        return 0
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
