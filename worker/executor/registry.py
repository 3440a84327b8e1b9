"""Which executor runs a spec's `executor.kind`. Apart from base.py, the contract every executor
imports, so that the contract imports none of them; each executor is imported only when its
kind is asked for (the Harbor one never on a worker that runs no Harbor spec)."""
from __future__ import annotations

from worker.executor.base import Executor


def executor_for(kind: str, *, path: str | None = None) -> Executor:
    """The executor of a spec's `executor.kind`. `path` is the PATH subjects' commands are
    resolved with (the worker's configuration); the default is the system's minimal one."""
    if kind == "command":
        from worker.executor.command import DEFAULT_PATH, CommandExecutor

        return CommandExecutor(path=path or DEFAULT_PATH)
    if kind == "python":
        from worker.executor.pyfunc import PythonExecutor

        return PythonExecutor()
    if kind == "harbor":
        from worker.executor.harbor import HarborExecutor

        return HarborExecutor()
    raise ValueError(f"no executor for kind {kind!r} on this worker (have: command, python, harbor)")
