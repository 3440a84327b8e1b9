"""The Harbor executor: one cell attempt is one Harbor trial, run by runner.py (beside this file) in the
pinned Harbor environment's interpreter (a subprocess per attempt, its own process group).

Rules. The spec names the interpreter (`executor.python`: a venv dir or its python; relative
to fleet's root) or the default `.fleet/harbor-env` that `python -m worker.executor.harbor.install`
creates. The runner gets a JSON config: the task dir (`task.path` under the bench root), the
subject's agent (`agent` name, e.g. "oracle" or "nop", or `agentImportPath`), `model`,
`agentKwargs`, a trial name unique to the attempt, a trials dir per group under the worker's
scratch root, the environment (default: the namespace environment `harbor_nsenv`, which
needs no container engine; its private dir lives in the attempt's work dir and it hides the
bench root and the scratch root from the task) and the timeouts: the agent's is the spec's
`budget.timeoutSeconds`, the verifier's is `verifier.timeoutSeconds` (the spec's default
when absent), so Harbor's own limits agree with the coordinator's group deadline. Harbor's
retries, resume and job averaging are not used. The runner's environment is minimal (PATH,
locale, HOME and TMPDIR in the attempt dir) plus the subject's declared credentials only; no
credential is written to any file, and every artifact and string is scrubbed of their values.

A cancel (revoke, shutdown) or the attempt's own wall-clock bound (the budget, the verifier's
time and a fixed overhead for environment start and stop) sends SIGINT to the runner: Harbor
cancels the trial, stops its environment and writes result.json. After a bounded wait the
whole process group is killed; execution and cleanup are then UNKNOWN. What the result means
is classify.py's (pure). Cleanup is CONFIRMED only when the runner's process group is
gone, the environment's private dir is gone and the attempt's work dir is removed. The
trial's dir (result.json, trial.log, agent/ and verifier/ output) is moved beside the
runner's logs, outside the work dir, and every file becomes an artifact `trial/<path>`.

`harbor_manifest(bench_root, python)` measures what the worker's identity should add for a
harbor spec: Harbor's installed version, the interpreter's version and Harbor's checksum of
each task, plus digests of the runner and the namespace environment.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from common.evidence import ArtifactUnavailable, Cleanup, Execution, Report, Status, Usage, Verification
from common.limits import ARTIFACTS_PER_REPORT_MAX, ID_CHARS_MAX
from common.spec import VERIFIER_TIMEOUT_SECONDS_DEFAULT
from worker.executor.base import (
    AttemptDirs,
    CellJob,
    CellOutcome,
    LocalArtifact,
    Redactor,
    declared_credentials,
    now_ms,
    one_line,
    output_artifacts,
    remove_tree,
    safe_name,
    seal,
    wait_process,
)
from worker.executor.harbor.classify import Classified, classify, usage_of

FLEET_ROOT = Path(__file__).resolve().parents[3]
RUNNER = Path(__file__).resolve().with_name("runner.py")
# The Harbor interpreter's extra sys.path entry: it holds the namespace environment's package and
# nothing else, so that no module of fleet's can shadow one of Harbor's.
SYSPATH_DIR = Path(__file__).resolve().with_name("syspath")
NSENV_DIR = SYSPATH_DIR / "harbor_nsenv"
NSENV_IMPORT_PATH = "harbor_nsenv:NamespaceEnvironment"
DEFAULT_ENV_DIR = Path(".fleet") / "harbor-env"  # relative to fleet's root
HARBOR_VERSION = "0.25.0"  # what install.py installs
TRIALS_DIR_NAME = "harbor-trials"
EXEC_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOCALE = "C.UTF-8"
# SIGINT to SIGKILL: Harbor stops its environment on cancel; a container engine may need
# a few seconds for that, a namespace far less.
STOP_GRACE_S = 20
# Beyond the agent's and the verifier's time: environment start (and any Dockerfile steps),
# agent setup, log collection and stop. The coordinator's group deadline (twice the budget
# plus a minute) is longer still.
OVERHEAD_S = 120
GROUP_GONE_WAIT_S = 5
RESULT_BYTES_MAX = 16 << 20
MANIFEST_TIMEOUT_S = 300
LOG_NAMES = ("runner-config.json", "runner.stdout", "runner.stderr")


class SpecProblem(ValueError):
    """The cell's spec objects cannot be run by this executor (deterministic)."""


def harbor_python(executor: Mapping) -> Path:
    """The Harbor interpreter a spec's executor object names (or the default env's)."""
    given = executor.get("python")
    if given is None:
        p = FLEET_ROOT / DEFAULT_ENV_DIR
    elif isinstance(given, str) and given:
        p = Path(given)
        p = p if p.is_absolute() else FLEET_ROOT / p
    else:
        raise SpecProblem("executor.python must be a non-empty path")
    return p / "bin" / "python" if p.is_dir() else p


def environment_config(executor: Mapping, *, base_dir: Path, hide: Iterable[Path]) -> dict[str, Any]:
    """The runner's environment object from `executor.environment`: absent or "namespace" is
    the namespace environment; another string is a Harbor environment type ("docker"); an
    object gives {"type"} or {"importPath"} and optional {"kwargs"}."""
    raw = executor.get("environment", "namespace")
    if raw in ("namespace", "nsenv", None):
        raw = {"importPath": NSENV_IMPORT_PATH}
    elif isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, Mapping):
        raise SpecProblem("executor.environment must be a string or an object")
    unknown = set(raw) - {"type", "importPath", "kwargs"}
    if unknown:
        raise SpecProblem(f"executor.environment has unknown fields: {', '.join(sorted(unknown))}")
    kwargs = raw.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise SpecProblem("executor.environment.kwargs must be an object")
    kind, import_path = raw.get("type"), raw.get("importPath")
    if (kind is None) == (import_path is None):
        raise SpecProblem("executor.environment needs exactly one of type and importPath")
    for name, value in (("type", kind), ("importPath", import_path)):
        if value is not None and (not isinstance(value, str) or not value):
            raise SpecProblem(f"executor.environment.{name} must be a non-empty string")
    kwargs = dict(kwargs)
    if import_path == NSENV_IMPORT_PATH:
        # Where the environment lives and what it hides are this worker's, not the spec's.
        kwargs["base_dir"] = str(base_dir)
        kwargs["hide_paths"] = sorted({*map(str, kwargs.get("hide_paths") or ()), *map(str, hide)})
    return {"type": kind, "importPath": import_path, "kwargs": kwargs}


def agent_config(subject: Mapping, timeout_s: int) -> dict[str, Any]:
    name, import_path = subject.get("agent"), subject.get("agentImportPath")
    if name is None and import_path is None:
        raise SpecProblem(f"subject {subject.get('id')!r} names neither agent nor agentImportPath")
    for field, value in (("agent", name), ("agentImportPath", import_path), ("model", subject.get("model"))):
        if value is not None and (not isinstance(value, str) or not value):
            raise SpecProblem(f"subject.{field} must be a non-empty string")
    kwargs = subject.get("agentKwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise SpecProblem("subject.agentKwargs must be an object")
    return {"name": name, "importPath": import_path, "modelName": subject.get("model"),
            "kwargs": dict(kwargs), "timeoutSec": timeout_s}


def task_dir(bench_root: Path, task: Mapping) -> Path:
    rel = task.get("path")
    if not isinstance(rel, str) or not rel:
        raise SpecProblem("task.path is required for a harbor task")
    root = bench_root.resolve()
    p = (root / rel).resolve()
    if not p.is_relative_to(root):
        raise SpecProblem(f"task path {rel!r} leaves the bench root")
    if not (p / "task.toml").is_file():
        raise SpecProblem(f"harbor task {rel!r} not found under the bench root (no task.toml)")
    return p


@dataclasses.dataclass(slots=True)
class _Ran:
    exit: int | None = None
    cancelled: bool = False  # SIGINT was sent (cancel or wall-clock bound)
    killed: bool = False  # the group had to be killed
    group_gone: bool = True
    notes: list[str] = dataclasses.field(default_factory=list)


class HarborExecutor:
    """Runs `executor.kind == "harbor"` cells. Stateless between cells: many run at once."""

    def __init__(self, *, stop_grace_s: float = STOP_GRACE_S, overhead_s: float = OVERHEAD_S) -> None:
        self._stop_grace_s = stop_grace_s
        self._overhead_s = overhead_s

    async def run(self, job: CellJob, cancel: asyncio.Event) -> CellOutcome:
        started = now_ms()
        dirs = AttemptDirs.of(job.work_root, job.attempt_id)
        credentials, missing = declared_credentials(job)
        redactor = Redactor(credentials.values())
        if cancel.is_set():
            return self._early(started, Execution.UNKNOWN, "", "cancelled before the trial started")
        if missing:
            return self._early(started, Execution.NOT_STARTED, missing, "")
        bench_root = Path(os.path.abspath(job.bench_root))
        verifier_s = int(job.verifier.get("timeoutSeconds", VERIFIER_TIMEOUT_SECONDS_DEFAULT))
        trials_dir = job.work_root / TRIALS_DIR_NAME / safe_name(job.assignment_id)
        trial_name = safe_name(job.attempt_id)
        try:
            python = harbor_python(job.executor)
            version = job.executor.get("harborVersion")
            if version is not None and (not isinstance(version, str) or not version):
                raise SpecProblem("executor.harborVersion must be a non-empty string")
            config = {
                "taskPath": str(task_dir(bench_root, job.task)),
                "trialName": trial_name,
                "trialsDir": str(trials_dir),
                "agent": agent_config(job.subject, job.subject_timeout_s),
                "environment": environment_config(job.executor, base_dir=dirs.work / "nsenv",
                                                  hide=(bench_root, Path(os.path.abspath(job.work_root)))),
                "verifier": {"timeoutSec": verifier_s},
                "harborVersion": version,
                "outFile": str(dirs.tmp / "runner-out.json"),
                # The namespace environment, then the bench root (for agentImportPath agents
                # the benchmark ships), after Harbor's own paths.
                "sysPath": [str(SYSPATH_DIR), str(bench_root)],
            }
        except SpecProblem as e:
            return self._early(started, Execution.NOT_STARTED, one_line(redactor.text(str(e)), ID_CHARS_MAX), "")
        if not (python.is_file() and os.access(python, os.X_OK)):
            return self._early(started, Execution.NOT_STARTED,
                               one_line(f"no Harbor interpreter at {python} (python -m worker.executor.harbor.install)", ID_CHARS_MAX),
                               "")
        try:
            await asyncio.to_thread(self._prepare, dirs, trials_dir, config)
        except OSError as e:
            # A full disk or an I/O error on the scratch dir: not known to be deterministic.
            return await self._end(job, dirs, trials_dir / trial_name, redactor, started,
                                   Classified(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.UNKNOWN,
                                              Cleanup.CONFIRMED, None, "",
                                              f"could not prepare the attempt dir: {e.strerror or e}"),
                                   _Ran(), None)
        if cancel.is_set():
            return await self._end(job, dirs, trials_dir / trial_name, redactor, started,
                                   Classified(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN,
                                              Cleanup.CONFIRMED, None, "", "cancelled before the trial started"),
                                   _Ran(), None)
        env = {"PATH": EXEC_PATH, "LANG": LOCALE, "LC_ALL": LOCALE, "HOME": str(dirs.tmp),
               "TMPDIR": str(dirs.tmp), "PYTHONDONTWRITEBYTECODE": "1", "HARBOR_TELEMETRY": "0"}
        # A credential cannot override the base: a subject declaring HOME gets the attempt's.
        env = {**credentials, **env}
        bound_s = job.subject_timeout_s + verifier_s + self._overhead_s
        ran = await self._run_runner(python, dirs, env, cancel, bound_s)
        result, runner_out, notes = await asyncio.to_thread(
            _read_outputs, trials_dir / trial_name / "result.json", dirs.tmp / "runner-out.json")
        ran.notes += notes
        verdict = classify(result, runner_exit=ran.exit, killed=ran.killed,
                           runner_error=runner_out if isinstance(runner_out, Mapping) else None)
        if ran.cancelled and verdict.execution != Execution.UNKNOWN:
            # Revoked or over its bound: whatever Harbor wrote, this attempt is not a result
            # (not even a throttled one: the cancel, not the provider, ended it).
            verdict = verdict._replace(execution=Execution.UNKNOWN, verification=Verification.NOT_RUN, score=None,
                                       throttled="", retry_after_ms=0)
        return await self._end(job, dirs, trials_dir / trial_name, redactor, started, verdict, ran, result)

    # ---- the runner ------------------------------------------------------------------------

    @staticmethod
    def _prepare(dirs: AttemptDirs, trials_dir: Path, config: dict) -> None:
        dirs.create(with_tmp=True)
        trials_dir.mkdir(parents=True, exist_ok=True)
        trial = trials_dir / config["trialName"]
        if os.path.lexists(trial):
            remove_tree(trial)  # a leftover of an earlier life of this worker
        (dirs.artifacts / "runner-config.json").write_text(json.dumps(config, indent=2, sort_keys=True))

    async def _run_runner(self, python: Path, dirs: AttemptDirs, env: dict[str, str], cancel: asyncio.Event,
                          bound_s: float) -> _Ran:
        ran = _Ran()
        try:
            with open(dirs.artifacts / "runner.stdout", "wb") as out, open(dirs.artifacts / "runner.stderr", "wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    str(python), "-P", str(RUNNER), "run", str(dirs.artifacts / "runner-config.json"),
                    cwd=dirs.work, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err,
                    start_new_session=True)
        except OSError as e:
            ran.notes.append(f"cannot start the Harbor runner: {e.strerror or e}")
            return ran
        try:
            ended = await wait_process(proc, cancel, bound_s)
            if ended != "exited":
                ran.cancelled = True
                ran.notes.append("revoked: trial cancelled" if ended == "cancelled"
                                 else f"trial exceeded its bound of {bound_s:g}s: cancelled")
                _signal(proc.pid, signal.SIGINT, group=False)
                try:
                    await asyncio.wait_for(proc.wait(), self._stop_grace_s)
                except asyncio.TimeoutError:
                    ran.killed = True
                    ran.notes.append(f"runner still running {self._stop_grace_s:g}s after SIGINT: killed")
                    _signal(proc.pid, signal.SIGKILL, group=True)
            await proc.wait()
            ran.exit = proc.returncode
        finally:
            # Nothing of the runner's group outlives the attempt (the namespace holder is in
            # it; the kernel then ends every process of the namespace).
            _signal(proc.pid, signal.SIGKILL, group=True)
            if proc.returncode is None:
                await proc.wait()
            ran.group_gone = await _group_gone(proc.pid, GROUP_GONE_WAIT_S)
        return ran

    # ---- the report ------------------------------------------------------------------------

    def _early(self, started: int, execution: Execution, environment_failure: str, detail: str) -> CellOutcome:
        """A report for an attempt that made nothing on disk."""
        report = Report(Status.UNSPECIFIED, execution, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.CONFIRMED,
                        environment_failure=environment_failure, started_ms=started, finished_ms=now_ms(),
                        detail=one_line(detail or environment_failure))
        return CellOutcome(seal(report), ())

    async def _end(self, job: CellJob, dirs: AttemptDirs, trial: Path, redactor: Redactor, started: int,
                   verdict: Classified, ran: _Ran, result: Mapping | None) -> CellOutcome:
        # Moving and scrubbing a large trial dir would stall the session's loop: a thread.
        return await asyncio.to_thread(self._finish, job, dirs, trial, redactor, started, verdict, ran, result)

    def _finish(self, job: CellJob, dirs: AttemptDirs, trial: Path, redactor: Redactor, started: int,
                verdict: Classified, ran: _Ran, result: Mapping | None) -> CellOutcome:
        notes = [verdict.detail, *ran.notes]
        cleanup = verdict.cleanup
        if not ran.group_gone:
            cleanup = Cleanup.UNKNOWN
            notes.append("runner's process group still alive")
        env_dir = dirs.work / "nsenv"
        if os.path.lexists(env_dir):
            # The environment's stop removes its dir: one still there was not stopped.
            cleanup = Cleanup.UNKNOWN
            notes.append("the environment's dir was left behind")
        kept = dirs.artifacts / "trial"
        if os.path.isdir(trial) and not os.path.islink(trial):
            try:
                os.replace(trial, kept)
            except OSError as e:
                notes.append(f"trial dir not kept: {e.strerror or e}")
                remove_tree(trial)
        try:
            os.rmdir(trial.parent)  # the group's trials dir, once its last trial has left
        except OSError:
            pass
        if not (remove_tree(dirs.work) & remove_tree(dirs.tmp)):
            cleanup = Cleanup.UNKNOWN
            notes.append("work dir could not be removed")
        files: list[LocalArtifact] = []
        for name in LOG_NAMES:
            p = dirs.artifacts / name
            if p.is_file():
                redactor.file(p)
                files.append(LocalArtifact(name, p))
        unavailable: list[ArtifactUnavailable] = []
        if kept.is_dir():
            outputs, missing = output_artifacts(kept, ARTIFACTS_PER_REPORT_MAX - len(files), redactor)
            files += [LocalArtifact("trial/" + a.name.removeprefix("output/"), a.path) for a in outputs]
            unavailable = [ArtifactUnavailable("trial/" + u.name.removeprefix("output/"), u.reason) for u in missing]
        elif result is None:
            unavailable.append(ArtifactUnavailable("trial/result.json", "the trial wrote no result"))
        _, usage_fields = usage_of(result)
        usage = verdict.usage
        report = Report(
            status=Status.UNSPECIFIED,
            execution=verdict.execution,
            verification=verdict.verification,
            usage=usage,
            cleanup=cleanup,
            score=verdict.score,
            environment_failure=one_line(redactor.text(verdict.environment_failure), ID_CHARS_MAX),
            started_ms=started,
            finished_ms=now_ms(),
            detail=one_line(redactor.text("; ".join(n for n in notes if n))),
            unavailable=tuple(unavailable),
            throttled=one_line(redactor.text(verdict.throttled), ID_CHARS_MAX),
            retry_after_ms=verdict.retry_after_ms,
            **usage_fields,
        )
        return CellOutcome(seal(report), tuple(files))


def _read_outputs(result_path: Path, out_path: Path) -> tuple[dict | None, dict | None, list[str]]:
    notes: list[str] = []

    def load(p: Path, what: str) -> dict | None:
        try:
            if p.stat().st_size > RESULT_BYTES_MAX:
                notes.append(f"{what} larger than {RESULT_BYTES_MAX} bytes")
                return None
            value = json.loads(p.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            notes.append(f"{what} unreadable")
            return None
        if not isinstance(value, dict):
            notes.append(f"{what} is not an object")
            return None
        return value

    return load(result_path, "result.json"), load(out_path, "runner output"), notes


def _signal(pid: int, sig: signal.Signals, *, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _group_gone(pgid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


# ---- identity -------------------------------------------------------------------------------


def _digest_file(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _digest_sources(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + _digest_file(p).encode() + b"\n")
    return h.hexdigest()


def harbor_manifest(bench_root: Path, python: Path, task_paths: Iterable[str] | None = None) -> dict[str, str]:
    """What a worker measures for harbor specs: Harbor's installed version and interpreter
    version, Harbor's own checksum of each task (every dir under the bench root holding a
    task.toml unless `task_paths` names them), and digests of the runner and the namespace
    environment. Measured by the Harbor interpreter itself (`runner.py manifest`),
    which reads the tasks but runs nothing of them. An interpreter that is missing or fails
    is recorded as such, never guessed."""
    m: dict[str, str] = {"harbor.runner": _digest_file(RUNNER), "harbor.nsenv": _digest_sources(NSENV_DIR)}
    python = Path(python)
    if not (python.is_file() and os.access(python, os.X_OK)):
        m["harbor.version"] = "missing"
        return dict(sorted(m.items()))
    argv = [str(python), "-P", str(RUNNER), "manifest", str(Path(os.path.abspath(bench_root))), *(task_paths or ())]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=MANIFEST_TIMEOUT_S, check=False,
                              env={"PATH": EXEC_PATH, "LANG": LOCALE, "HOME": "/nonexistent",
                                   "PYTHONDONTWRITEBYTECODE": "1", "HARBOR_TELEMETRY": "0"})
        lines = done.stdout.strip().splitlines()
        measured = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        measured = None
    if not isinstance(measured, dict):
        m["harbor.version"] = "unmeasurable"
        return dict(sorted(m.items()))
    m.update({str(k): str(v) for k, v in measured.items()})
    return dict(sorted(m.items()))
