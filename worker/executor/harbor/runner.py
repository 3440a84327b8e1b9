"""The Harbor runner: runs ONE Harbor trial inside the Harbor environment's interpreter.

It imports only Harbor and the standard library (it is not run by fleet's interpreter and
imports nothing of fleet). Two commands:

    python runner.py run CONFIG.json
    python runner.py manifest BENCH_ROOT [TASK_PATH ...]

`run` reads the config the Harbor executor wrote (task path, trial name and dir, agent,
environment, timeouts), builds a `TrialConfig`, runs `Trial.create(config)` then
`trial.run()` with Harbor's own API (no Job: no retries, no resume, no averaging), and
prints one JSON line {"resultPath": ...} on stdout (also written to the config's
`outFile`). SIGINT or SIGTERM cancels the trial: Harbor records the cancellation, stops its
environment and still writes result.json. Exit codes:

    0    the trial ran; result.json holds what happened
    3    the trial could not be created (not known to be deterministic)
    78   a deterministic configuration defect: wrong Harbor version, unknown agent, an
         import path that does not import, an invalid task; the message is in outFile
    130  cancelled (result.json exists when the trial had started)
    1    the runner itself crashed

`manifest` prints {"harbor.version": ..., "harbor.task:<path>": <Harbor's task checksum>}
for the given task paths (default: every dir under BENCH_ROOT holding a task.toml).
"""
from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import os
import signal
import sys
import traceback
import warnings
from pathlib import Path

# This file sits in fleet's own package named harbor: no directory of fleet's may shadow the
# harbor package (the executor also starts it with -P).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_NOT_CREATED = 3
EXIT_CANCELLED = 130
EXIT_CONFIG = 78

# Exceptions Trial.create raises for a defect that every retry would meet again.
DETERMINISTIC_CREATE_ERRORS = {
    "ValidationError", "ValueError", "TypeError", "KeyError", "ImportError", "ModuleNotFoundError",
    "AttributeError", "FileNotFoundError", "NotADirectoryError", "TOMLDecodeError",
    "NamespaceEnvironmentUnsupported", "NotImplementedError",
}


def _write_out(path: str | None, doc: dict) -> None:
    text = json.dumps(doc, sort_keys=True)
    print(text, flush=True)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)


def harbor_version() -> str:
    return importlib.metadata.version("harbor")


def build_config(cfg: dict):
    from harbor.models.trial.config import (
        AgentConfig,
        EnvironmentConfig,
        TaskConfig,
        TrialConfig,
        VerifierConfig,
    )

    agent = cfg["agent"]
    env = cfg["environment"]
    return TrialConfig(
        task=TaskConfig(path=Path(cfg["taskPath"])),
        trial_name=cfg["trialName"],
        trials_dir=Path(cfg["trialsDir"]),
        agent=AgentConfig(
            name=agent.get("name"),
            import_path=agent.get("importPath"),
            model_name=agent.get("modelName"),
            kwargs=agent.get("kwargs") or {},
            override_timeout_sec=agent.get("timeoutSec"),
        ),
        environment=EnvironmentConfig(
            type=env.get("type"),
            import_path=env.get("importPath"),
            kwargs=env.get("kwargs") or {},
            delete=True,
        ),
        verifier=VerifierConfig(override_timeout_sec=cfg["verifier"].get("timeoutSec")),
    )


async def _run_trial(cfg: dict) -> int:
    out_file = cfg.get("outFile")
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    cancelled = False

    def _cancel() -> None:
        nonlocal cancelled
        if not cancelled:
            cancelled = True
            main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _cancel)

    from harbor.trial.trial import Trial

    try:
        config = build_config(cfg)
        trial = await Trial.create(config)
    except asyncio.CancelledError:
        _write_out(out_file, {"cancelled": True, "stage": "create"})
        return EXIT_CANCELLED
    except Exception as e:  # noqa: BLE001  (every failure is reported, with its class)
        name = type(e).__name__
        deterministic = name in DETERMINISTIC_CREATE_ERRORS
        _write_out(out_file, {"stage": "create", "exceptionType": name, "message": str(e)[:2000],
                              "deterministic": deterministic})
        traceback.print_exc()
        return EXIT_CONFIG if deterministic else EXIT_NOT_CREATED
    result_path = str(trial.paths.result_path)
    try:
        await trial.run()
    except asyncio.CancelledError:
        _write_out(out_file, {"cancelled": True, "stage": "run", "resultPath": result_path})
        return EXIT_CANCELLED
    _write_out(out_file, {"resultPath": result_path})
    return EXIT_OK


def run(config_path: str) -> int:
    with open(config_path) as f:
        cfg = json.load(f)
    for p in cfg.get("sysPath") or ():
        if p not in sys.path:
            sys.path.append(p)
    wanted = cfg.get("harborVersion")
    have = harbor_version()
    if wanted and wanted != have:
        _write_out(cfg.get("outFile"), {"stage": "version", "exceptionType": "HarborVersionMismatch",
                                        "message": f"harbor {have} is installed, the spec wants {wanted}",
                                        "deterministic": True})
        return EXIT_CONFIG
    try:
        return asyncio.run(_run_trial(cfg))
    except KeyboardInterrupt:
        return EXIT_CANCELLED


def manifest(bench_root: str, task_paths: list[str]) -> int:
    from harbor.models.task.task import Task

    root = Path(bench_root).resolve()
    if not task_paths:
        task_paths = sorted(p.parent.relative_to(root).as_posix() for p in root.rglob("task.toml"))
    doc = {"harbor.version": harbor_version(),
           "harbor.python": ".".join(str(v) for v in sys.version_info[:3])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Task.checksum announces its successor
        for rel in task_paths:
            try:
                doc[f"harbor.task:{rel}"] = Task(root / rel).checksum
            except Exception as e:  # noqa: BLE001  (an unreadable task is measured as such)
                doc[f"harbor.task:{rel}"] = f"invalid: {type(e).__name__}"
    print(json.dumps(doc, sort_keys=True))
    return EXIT_OK


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(argv) >= 2 and argv[0] == "run":
        return run(argv[1])
    if len(argv) >= 2 and argv[0] == "manifest":
        return manifest(argv[1], argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except KeyboardInterrupt:  # SIGINT before the trial's own handlers were installed
        sys.exit(EXIT_CANCELLED)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(EXIT_CRASH)
