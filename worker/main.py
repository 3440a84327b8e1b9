"""`fleet-worker`: the worker process, and `fleet-worker identity`.

Exit codes: 0 after a drain (SIGTERM or SIGINT: stop taking work, let running groups settle,
flush the outbox, say Goodbye); 2 when the operator must act on this machine (a bad flag, a
state directory in use or bound to another worker id); 77 when the coordinator refused this
worker for good (a bad token, a certificate of another worker, a stale incarnation, a
protocol too old to measure a run's environment) — the systemd unit does not restart on it
(RestartPreventExitStatus), and `--retry-refused` keeps retrying with backoff instead; 1 on
a storage failure or a bug (fail-stop: the outbox on disk is what survives); 128+N after a
second signal N. A run that refuses this worker (its files differ from the submitter's, or
the run is pinned to another build) does not end it: it stays connected for other runs, and
`fleet-worker identity --against RUN` prints the differences.

systemd (Type=notify): READY=1 after the first Welcome; STATUS= with the connection, busy
slots and outbox depth; WATCHDOG=1 at half of WATCHDOG_USEC while the event loop runs;
STOPPING=1 when a drain begins. Settings come from flags and `--config FILE` (worker/config.py);
`--print-config` prints the effective ones and exits 0.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog

from common.notify import Notifier
from common.tomlconfig import ConfigFileError
from worker.config import ConfigError, WorkerConfig, parse_worker_args, print_config

if TYPE_CHECKING:
    from worker.session import WorkerSession

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_OPERATOR = 2
EXIT_REFUSED = 77  # EX_NOPERM: the coordinator will not admit this worker; retrying cannot help
EXIT_DIFFERS = 1  # `identity --against`: this worker may not serve the run

log = structlog.get_logger("worker.main")
# Without a systemd watchdog the STATUS= line is still refreshed this often.
STATUS_EVERY_S = 5.0


def _say(message: str) -> None:
    print(f"fleet-worker: {message}", file=sys.stderr, flush=True)


def identity_main(argv: Sequence[str]) -> int:
    import argparse

    from worker.identity import worker_identity

    p = argparse.ArgumentParser(prog="fleet-worker identity",
                                description="print this machine's environment manifest and id as JSON")
    p.add_argument("--bench-root", required=True)
    p.add_argument("--command-path", metavar="PATH", help="PATH for subjects' commands")
    p.add_argument("--against", metavar="RUN", help="compare with what run RUN requires (asks the coordinator)")
    p.add_argument("--coordinator", default="127.0.0.1:7443", help="HOST:PORT, with --against")
    p.add_argument("--token-file", help="the enrollment token or this worker's credential file, with --against")
    p.add_argument("--tls-ca", help="CA certificate of a TLS coordinator, with --against")
    args = p.parse_args(list(argv))
    if not os.path.isdir(args.bench_root):
        _say(f"--bench-root {args.bench_root} is not a directory")
        return EXIT_OPERATOR
    manifest, env_id = worker_identity(os.path.abspath(args.bench_root), path=args.command_path)
    if not args.against:
        print(json.dumps({"environmentId": env_id, "manifest": manifest}, indent=2, sort_keys=True))
        return EXIT_OK
    return _identity_against(args, manifest)


def _identity_against(args: Any, manifest: dict[str, str]) -> int:
    """The differences a run would refuse this worker for, measured from this side exactly as
    a session would (common/identity.py): the run's reference keys, then its pin."""
    import grpc

    from common.fleetpb import coordinator_pb2, coordinator_pb2_grpc
    from common.identity import differences, pin_components
    from worker.identity import measure_keys

    if not args.token_file:
        _say("--against needs --token-file (the enrollment token or the worker credential)")
        return EXIT_OPERATOR
    try:
        token = open(args.token_file).read().strip()
    except OSError as e:
        _say(f"cannot read {args.token_file}: {e.strerror}")
        return EXIT_OPERATOR
    if args.tls_ca:
        channel = grpc.secure_channel(args.coordinator, grpc.ssl_channel_credentials(open(args.tls_ca, "rb").read()))
    else:
        channel = grpc.insecure_channel(args.coordinator)
    try:
        run = coordinator_pb2_grpc.CoordinatorStub(channel).DescribeRunEnvironment(
            coordinator_pb2.DescribeRunEnvironmentRequest(run_id=args.against),
            metadata=(("authorization", f"Bearer {token}"),), timeout=30)
    except grpc.RpcError as e:
        _say(f"{e.details()} ({e.code().name})")
        return EXIT_OPERATOR
    finally:
        channel.close()
    reference = {c.key: c.value for c in run.reference}
    measured = measure_keys([*reference, *run.worker_keys], os.path.abspath(args.bench_root), path=args.command_path)
    mine = pin_components(sorted(manifest.items()), run.environment_match, measured, run.worker_keys)
    pin = {c.key: c.value for c in run.pin}
    ref_diffs = differences(reference, measured)
    pin_diffs = differences(pin, mine, every_key=True) if pin else ()
    out = {"run": run.run_id, "serves": not ref_diffs and not pin_diffs,
           "reference": {"keys": len(reference), "differences": [list(d) for d in ref_diffs]},
           "pin": {"pinned_by": run.pinned_by or None, "differences": [list(d) for d in pin_diffs]}}
    print(json.dumps(out, indent=2, sort_keys=True))
    for what, diffs in (("the submitter's files", ref_diffs), (f"the pin of worker {run.pinned_by}", pin_diffs)):
        for key, want, got in diffs:
            _say(f"differs from {what}: {key}: run {want}, this worker {got}")
    if not ref_diffs and not pin_diffs:
        _say(f"this worker may serve run {run.run_id}" + ("" if pin else " (not pinned yet)"))
    return EXIT_OK if out["serves"] else EXIT_DIFFERS


async def run_worker(config: WorkerConfig, *, install_signals: bool = True) -> int:
    """Open the state directory, measure the environment, and run the session to its end;
    returns the process exit code. Reusable from tests and `fleetctl local` (with
    `install_signals=False` when not on the main thread)."""
    from worker.identity import worker_identity
    from worker.outbox import Keeping, OutboxStorageError, StateError, WorkerState
    from worker.session import Ended, Refused, WorkerSession

    try:
        keeping = Keeping(ms=config.keep_reported_hours * 3600_000, bytes=config.keep_reported_mb << 20)
        state = await asyncio.to_thread(WorkerState.open, config.state_dir, worker_id=config.worker_id,
                                        keeping=keeping)
    except StateError as e:
        log.error("cannot open the state directory", problem=str(e))
        return EXIT_FAILURE if isinstance(e, OutboxStorageError) else EXIT_OPERATOR
    try:
        manifest, env_id = await asyncio.to_thread(worker_identity, config.bench_root, path=config.command_path)
        log.info("worker starting", incarnation=state.incarnation, slots=config.slots,
                 coordinator=config.coordinator, environment_id=env_id, tls=not config.plaintext,
                 outbox_depth=state.depth)
        session = WorkerSession(config, state, manifest=manifest, environment_id=env_id)
        if config.metrics_listen:
            from worker.metrics import serve as serve_metrics

            port = serve_metrics(config.metrics_listen, session, state)
            log.info("metrics listening", address=f"{config.metrics_listen.rpartition(':')[0]}:{port}")
        notifier = Notifier(config.notify)
        notifier.status("connecting to " + config.coordinator)
        received: list[int] = []
        if install_signals:
            loop = asyncio.get_running_loop()

            def on_signal(signum: int) -> None:
                received.append(signum)
                if len(received) == 1:
                    log.info("signal: draining", signal=signal.Signals(signum).name)
                    notifier.stopping("draining: " + session.status_line())
                    session.drain()
                else:
                    log.warning("second signal: stopping now", signal=signal.Signals(signum).name)
                    session.abort()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal, sig)
        # Owned here: cancelled and awaited in the finally below, whatever `run` raises.
        supervisor = asyncio.create_task(_supervise(notifier, session))
        try:
            ended = await session.run()
        except Refused as r:
            log.error(f"refused by the coordinator, not retrying: {r.code.name}: {r.details}",
                      status=r.code.name, details=r.details, exit_code=EXIT_REFUSED,
                      hint="fix the cause, or start with --retry-refused to keep retrying with backoff")
            return EXIT_REFUSED
        except ConfigError as e:
            log.error("configuration problem", problem=str(e))
            return EXIT_OPERATOR
        finally:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
            notifier.stopping()
            notifier.close()
        if ended is Ended.ABORTED:
            return 128 + (received[-1] if received else signal.SIGTERM)
        return EXIT_OK
    finally:
        state.close()


async def _supervise(notifier: Notifier, session: WorkerSession) -> None:
    """READY=1 at the first Welcome, then STATUS= (and WATCHDOG=1 when systemd asks)."""
    if not notifier.enabled:
        return
    await session.welcomed.wait()
    notifier.ready(session.status_line())
    interval = notifier.watchdog_interval_s
    period = min(interval, STATUS_EVERY_S) if interval else STATUS_EVERY_S
    stopping_sent = False
    while True:
        await asyncio.sleep(period)
        line = session.status_line()
        if session.draining and not stopping_sent:
            notifier.stopping(line)  # a drain asked by the coordinator, not by a signal
            stopping_sent = True
        if interval:
            notifier.watchdog(line)
        else:
            notifier.status(line)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not __debug__:
        _say("refusing to run under python -O: assertions are this program's invariant checks")
        return EXIT_OPERATOR
    if argv and argv[0] == "identity":
        return identity_main(argv[1:])
    try:
        config, resolved, show = parse_worker_args(argv, dict(os.environ), os.getpid())
    except ConfigFileError as e:
        _say(str(e))
        return EXIT_OPERATOR
    if show:
        sys.stdout.write(print_config(config, resolved))
        return EXIT_OK
    from worker.logging_setup import configure

    configure(config.worker_id, config.log_level)
    from worker.outbox import OutboxStorageError

    try:
        return asyncio.run(run_worker(config))
    except BaseException as exc:  # fail-stop: one line naming the storage failure, else the bug
        leaves = list(_leaves(exc))
        storage = [e for e in leaves if isinstance(e, OutboxStorageError)]
        if storage:
            log.error("storage failure: stopping", problem=str(storage[0]))
            return EXIT_FAILURE
        if isinstance(exc, KeyboardInterrupt):
            return 128 + signal.SIGINT
        log.exception("worker crashed")
        return EXIT_FAILURE


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


if __name__ == "__main__":
    sys.exit(main())
