"""The command executor: a subject and a verifier as processes, one attempt at a time.

Rules. The subject runs, then the verifier, both with the attempt's fresh work dir as cwd,
each in its own process group, with a minimal environment (PATH, locale, HOME = the work
dir, TMPDIR in the attempt dir, the FLEET_* variables) plus, for the subject only, its
declared credentials; nothing else of the worker's environment passes. Exit codes are
evidence: 0 completed, 75 (EX_TEMPFAIL) an infrastructure failure to retry, 78 (EX_CONFIG)
a deterministic environment failure, anything else a measured subject failure; a subject
timeout is a measured failure too, and the verifier still judges what was left. Exit 75
with a throttled.json in the output dir is the model provider refusing the subject (a rate
limit, an overload): a throttled report, never verified nor scored; the file beside any
other exit is only mentioned, and exit 75 without it is not guessed to be throttling. The
verdict is the verifier's last non-empty stdout line, a JSON object with a finite `score`.
A cancel kills both process groups at once and reports execution UNKNOWN.
"""
from __future__ import annotations

import asyncio
import enum
import json
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from common.evidence import Cleanup, Execution, Report, Status, Usage, Verification
from common.limits import (
    ARTIFACTS_PER_REPORT_MAX,
    ENVIRONMENT_FAILURE_LINE_CHARS_MAX,
    ID_CHARS_MAX,
    PROCESS_KILL_GRACE_MS,
    USAGE_FILE_BYTES_MAX,
    VERDICT_TAIL_BYTES_MAX,
)
from common.spec import VERIFIER_TIMEOUT_SECONDS_DEFAULT
from worker.executor.base import (
    AttemptDirs,
    CellJob,
    CellOutcome,
    THROTTLED_FILE,
    LocalArtifact,
    Redactor,
    copy_task_dir,
    declared_credentials,
    now_ms,
    one_line,
    output_artifacts,
    read_throttled,
    remove_tree,
    score_of,
    seal,
    usage_fields,
    wait_process,
)

# The PATH a subject's command is resolved with unless the worker's configuration names one.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOCALE = "C.UTF-8"
EX_TEMPFAIL = 75
EX_CONFIG = 78
USAGE_FILE = "usage.json"
LOG_NAMES = ("subject.stdout", "subject.stderr", "verifier.stdout", "verifier.stderr")

PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
PLACEHOLDERS = ("task.id", "task.input", "subject.id", "repetition", "bench_root")


class UnknownPlaceholder(ValueError):
    pass


def template_values(task: Mapping, subject_id: str, repetition: int, bench_root: Path) -> dict[str, str]:
    return {
        "task.id": str(task.get("id", "")),
        "task.input": str(task.get("input", "")),
        "subject.id": subject_id,
        "repetition": str(repetition),
        "bench_root": str(bench_root),
    }


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace every `{{name}}`; a name outside PLACEHOLDERS raises UnknownPlaceholder."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            raise UnknownPlaceholder(f"unknown placeholder {{{{{name}}}}} (known: {', '.join(PLACEHOLDERS)})")
        return values[name]

    return PLACEHOLDER.sub(one, text)


class Ended(enum.Enum):
    EXITED = "exited"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    SPAWN_FAILED = "spawn failed"  # exec refused the command: missing, not executable
    SETUP_FAILED = "setup failed"  # the attempt's own dirs or log files could not be made


@dataclass(frozen=True, slots=True)
class Ran:
    ended: Ended
    code: int | None = None  # the exit code; negative: killed by that signal
    error: str = ""  # why it could not start


@dataclass(slots=True)
class _Evidence:
    """What one attempt has established so far; turned into a Report once, at the end."""

    execution: Execution = Execution.UNKNOWN
    verification: Verification = Verification.NOT_RUN
    score: float | None = None
    environment_failure: str = ""
    usage: Usage = Usage.MISSING
    usage_fields: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    throttled: str = ""  # the provider's refusal, from throttled.json; redacted and bounded at the end
    retry_after_ms: int = 0


class CommandExecutor:
    """Runs `executor.kind == "command"` cells. Stateless between cells: many run at once."""

    def __init__(self, *, path: str = DEFAULT_PATH, kill_grace_ms: int = PROCESS_KILL_GRACE_MS) -> None:
        self._path = path
        self._kill_grace_s = kill_grace_ms / 1000

    async def run(self, job: CellJob, cancel: asyncio.Event) -> CellOutcome:
        started = now_ms()
        ev = _Evidence()
        dirs = AttemptDirs.of(job.work_root, job.attempt_id)
        credentials, missing = declared_credentials(job)
        redactor = Redactor(credentials.values())
        if cancel.is_set():
            ev.notes.append("cancelled before the subject started")
            return await self._end(job, ev, dirs, redactor, started, created=False)
        if missing:
            ev.execution, ev.environment_failure = Execution.NOT_STARTED, missing
            return await self._end(job, ev, dirs, redactor, started, created=False)
        # Absolute, because the processes run in the work dir; not resolved, so a symlinked
        # bench root keeps the name the operator gave it.
        bench_root = Path(os.path.abspath(job.bench_root))
        values = template_values(job.task, job.subject_id, job.repetition, bench_root)
        try:
            subject_argv = [substitute(job.subject["command"], values)]
            subject_argv += [substitute(a, values) for a in job.subject.get("args", ())]
            verifier_argv = [substitute(job.verifier["command"], values)]
            verifier_argv += [substitute(a, values) for a in job.verifier.get("args", ())]
        except UnknownPlaceholder as e:
            ev.execution, ev.environment_failure = Execution.NOT_STARTED, one_line(str(e), ID_CHARS_MAX)
            return await self._end(job, ev, dirs, redactor, started, created=False)
        try:
            await asyncio.to_thread(dirs.create, with_tmp=True)
            failure = await asyncio.to_thread(copy_task_dir, job.bench_root, job.task, dirs.work)
        except OSError as e:
            # A full disk or an I/O error on the scratch dir: the environment's fault, not
            # known to be deterministic, so no environment_failure (that would pause the run).
            ev.execution = Execution.NOT_STARTED
            ev.notes.append(f"could not prepare the attempt dir: {e.strerror or e}")
            return await self._end(job, ev, dirs, redactor, started, created=True)
        if failure:
            ev.execution, ev.environment_failure = Execution.NOT_STARTED, failure
            return await self._end(job, ev, dirs, redactor, started, created=True)

        if cancel.is_set():  # revoked while the task dir was being copied
            return await self._cancelled(job, ev, dirs, redactor, started)
        base_env = self._base_env(job, dirs, bench_root)
        # A credential cannot override the base: a subject declaring HOME gets the work dir.
        ran = await self._process(subject_argv, dirs, {**credentials, **base_env}, "subject",
                                  job.subject_timeout_s, cancel)
        verify = self._judge_subject(ran, ev, dirs, job, redactor)
        if ran.ended not in (Ended.SPAWN_FAILED, Ended.SETUP_FAILED):
            self._read_usage(dirs.output / USAGE_FILE, ev)
        if ran.ended is Ended.CANCELLED:
            return await self._cancelled(job, ev, dirs, redactor, started)
        if verify:
            timeout_s = int(job.verifier.get("timeoutSeconds", VERIFIER_TIMEOUT_SECONDS_DEFAULT))
            vran = await self._process(verifier_argv, dirs, base_env, "verifier", timeout_s, cancel)
            if vran.ended is Ended.CANCELLED:
                return await self._cancelled(job, ev, dirs, redactor, started)
            self._judge_verifier(vran, ev, dirs, timeout_s)
        return await self._end(job, ev, dirs, redactor, started, created=True)

    # ---- processes ------------------------------------------------------------------------

    def _base_env(self, job: CellJob, dirs: AttemptDirs, bench_root: Path) -> dict[str, str]:
        return {
            "PATH": self._path,
            "LANG": LOCALE,
            "LC_ALL": LOCALE,
            "HOME": str(dirs.work),
            "TMPDIR": str(dirs.tmp),
            "FLEET_RUN_ID": job.run_id,
            "FLEET_TASK_ID": job.task_id,
            "FLEET_TASK_INPUT": str(job.task.get("input", "")),
            "FLEET_REPETITION": str(job.repetition),
            "FLEET_SUBJECT_ID": job.subject_id,
            "FLEET_CELL_ID": job.cell_id,
            "FLEET_ATTEMPT_ID": job.attempt_id,
            "FLEET_OUTPUT_DIR": str(dirs.output),
            "FLEET_BENCH_ROOT": str(bench_root),
        }

    def _resolve(self, command: str) -> str:
        """The program to exec. A bare name is looked up on the configured PATH (not the
        worker's), so that what runs here is what runs on every identical VM."""
        if "/" in command:
            return command
        for d in self._path.split(os.pathsep):
            candidate = os.path.join(d, command)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        return command  # exec reports it as not found

    async def _process(self, argv: list[str], dirs: AttemptDirs, env: dict[str, str], role: str,
                       timeout_s: float, cancel: asyncio.Event) -> Ran:
        try:
            # The subject may have removed its own cwd or the output dir; the verifier still
            # gets a (then empty) place to judge, and exec errors below are then the command's.
            dirs.work.mkdir(parents=True, exist_ok=True)
            dirs.output.mkdir(parents=True, exist_ok=True)
            out = open(dirs.artifacts / f"{role}.stdout", "wb")
        except OSError as e:
            return Ran(Ended.SETUP_FAILED, error=f"{e.strerror or e}")
        try:
            with out, open(dirs.artifacts / f"{role}.stderr", "wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    self._resolve(argv[0]), *argv[1:], cwd=dirs.work, env=env,
                    stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err,
                    start_new_session=True)
        except OSError as e:
            return Ran(Ended.SPAWN_FAILED, error=f"{argv[0]}: {e.strerror or e}")
        try:
            ended = await _wait(proc, cancel, timeout_s)
            if ended is Ended.TIMEOUT:
                _signal_group(proc.pid, signal.SIGTERM)
                if await _wait(proc, cancel, self._kill_grace_s) is not Ended.EXITED:
                    _signal_group(proc.pid, signal.SIGKILL)
            elif ended is Ended.CANCELLED:
                _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            return Ran(ended, code=proc.returncode)
        finally:
            # Whatever happened (also our own cancellation), nothing of this group outlives
            # the call: a child the subject left behind must not write into the next phase.
            _signal_group(proc.pid, signal.SIGKILL)

    # ---- judging --------------------------------------------------------------------------

    def _judge_subject(self, ran: Ran, ev: _Evidence, dirs: AttemptDirs, job: CellJob,
                       redactor: Redactor) -> bool:
        """Record the subject's evidence; True when the verifier should run."""
        if ran.ended is Ended.SPAWN_FAILED:
            ev.execution = Execution.NOT_STARTED
            ev.environment_failure = one_line(redactor.text(f"cannot start subject: {ran.error}"), ID_CHARS_MAX)
            return False
        if ran.ended is Ended.SETUP_FAILED:
            ev.execution = Execution.NOT_STARTED
            ev.notes.append(f"could not prepare the subject's run: {ran.error}")
            return False
        if ran.ended is Ended.CANCELLED:
            return False
        throttle = read_throttled(dirs.output / THROTTLED_FILE)
        if ran.ended is Ended.EXITED and ran.code == EX_TEMPFAIL and throttle is not None:
            # The subject ran and the provider refused it: neither a measurement nor the
            # subject's failure; the coordinator retries it after the Retry-After.
            ev.execution = Execution.SUBJECT_FAILED
            ev.throttled, ev.retry_after_ms = throttle.reason, throttle.retry_after_ms
            ev.notes.append(f"subject exit 75 with {THROTTLED_FILE}: throttled, verifier skipped")
            if throttle.note:
                ev.notes.append(throttle.note)
            return False
        if ran.ended is Ended.TIMEOUT:
            ev.execution = Execution.SUBJECT_FAILED
            ev.notes.append(f"timeout after {job.subject_timeout_s}s")
            verify = True
        else:
            assert ran.code is not None
            verify = self._judge_exit(ran.code, ev, dirs, redactor)
        if throttle is not None:
            ev.notes.append(f"{THROTTLED_FILE} ignored: only a subject that exits 75 is throttled")
        return verify

    def _judge_exit(self, code: int, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor) -> bool:
        """The evidence of the subject's exit code (not a throttled one); True to verify."""
        if code == 0:
            ev.execution = Execution.COMPLETED
            ev.notes.append("subject completed")
            return True
        if code == EX_TEMPFAIL:
            ev.execution = Execution.UNKNOWN
            ev.notes.append("subject exit 75 (EX_TEMPFAIL): infrastructure failure, verifier skipped")
            return False
        if code == EX_CONFIG:
            line = _last_line(dirs.artifacts / "subject.stderr") or "(nothing on stderr)"
            line = one_line(redactor.text(line), ENVIRONMENT_FAILURE_LINE_CHARS_MAX)
            ev.execution = Execution.NOT_STARTED
            ev.environment_failure = "EX_CONFIG: " + line
            ev.notes.append("subject exit 78 (EX_CONFIG)")
            return False
        ev.execution = Execution.SUBJECT_FAILED
        if code < 0:
            ev.notes.append(f"subject killed by signal {_signal_name(-code)}")
        else:
            ev.notes.append(f"subject exit code {code}")
        return True

    def _judge_verifier(self, ran: Ran, ev: _Evidence, dirs: AttemptDirs, timeout_s: int) -> None:
        ev.verification = Verification.INVALID
        if ran.ended is Ended.SPAWN_FAILED:
            # The worker cannot run the benchmark's verifier: every cell here would fail alike.
            ev.environment_failure = one_line(f"cannot start verifier: {ran.error}", ID_CHARS_MAX)
            ev.notes.append("verifier did not start")
            return
        if ran.ended is Ended.SETUP_FAILED:
            ev.notes.append(f"could not prepare the verifier's run: {ran.error}")
            return
        if ran.ended is Ended.TIMEOUT:
            ev.notes.append(f"verifier timeout after {timeout_s}s")
            return
        if ran.code == EX_TEMPFAIL:
            ev.notes.append("verifier infrastructure failure")
            return
        code = ran.code or 0
        if code > 0:
            ev.notes.append(f"verifier exit code {code}")
            return
        if code < 0:
            ev.notes.append(f"verifier killed by signal {_signal_name(-code)}")
            return
        line = _last_line(dirs.artifacts / "verifier.stdout")
        if not line:
            ev.notes.append("verifier printed no verdict")
            return
        try:
            verdict = json.loads(line)
        except ValueError:
            ev.notes.append("verifier's last line is not JSON")
            return
        if not isinstance(verdict, dict):
            ev.notes.append("verifier's verdict is not a JSON object")
            return
        score = score_of(verdict.get("score"))
        if score is None:
            ev.notes.append("verifier's verdict has no finite numeric score")
            return
        ev.verification, ev.score = Verification.VALID, score
        said = verdict.get("detail")
        ev.notes.append(f"score {score:g}" + (f" ({said})" if isinstance(said, str) and said else ""))

    def _read_usage(self, path: Path, ev: _Evidence) -> None:
        try:
            size = path.lstat().st_size
        except FileNotFoundError:
            return
        except OSError as e:
            ev.notes.append(f"usage.json unreadable: {e.strerror}")
            return
        if not path.is_file() or size > USAGE_FILE_BYTES_MAX:
            ev.notes.append("usage.json is not a small regular file")
            return
        try:
            value = json.loads(path.read_bytes())
        except (OSError, ValueError):
            ev.notes.append("usage.json unparseable")
            return
        ev.usage, ev.usage_fields, note = usage_fields(value)
        if note:
            ev.notes.append(note)

    # ---- the end of an attempt ------------------------------------------------------------

    async def _cancelled(self, job: CellJob, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor,
                         started: int) -> CellOutcome:
        ev.execution, ev.verification, ev.score = Execution.UNKNOWN, Verification.NOT_RUN, None
        ev.notes.append("cancelled")
        return await self._end(job, ev, dirs, redactor, started, created=True)

    async def _end(self, job: CellJob, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor,
                   started: int, *, created: bool) -> CellOutcome:
        # Removing a large work dir and scrubbing large logs would stall the session's loop
        # (heartbeats included), so they run in a thread.
        return await asyncio.to_thread(self._finish, job, ev, dirs, redactor, started, created=created)

    def _finish(self, job: CellJob, ev: _Evidence, dirs: AttemptDirs, redactor: Redactor,
                started: int, *, created: bool) -> CellOutcome:
        gone = remove_tree(dirs.work) & remove_tree(dirs.tmp)
        cleanup = Cleanup.CONFIRMED if gone else Cleanup.UNKNOWN
        if not gone:
            ev.notes.append("work dir could not be removed")
        files: list[LocalArtifact] = []
        unavailable = []
        if created and dirs.artifacts.is_dir():
            for name in LOG_NAMES:
                p = dirs.artifacts / name
                if p.is_file():
                    redactor.file(p)
                    files.append(LocalArtifact(name, p))
            outputs, unavailable = output_artifacts(dirs.output, ARTIFACTS_PER_REPORT_MAX - len(files), redactor)
            files += outputs
        report = Report(
            status=Status.UNSPECIFIED,
            execution=ev.execution,
            verification=ev.verification,
            usage=ev.usage,
            cleanup=cleanup,
            score=ev.score,
            environment_failure=one_line(redactor.text(ev.environment_failure), ID_CHARS_MAX),
            started_ms=started,
            finished_ms=now_ms(),
            detail=one_line(redactor.text("; ".join(ev.notes))),
            unavailable=tuple(unavailable),
            throttled=one_line(redactor.text(ev.throttled), ID_CHARS_MAX),
            retry_after_ms=ev.retry_after_ms,
            **ev.usage_fields,
        )
        return CellOutcome(seal(report), tuple(files))


async def _wait(proc: asyncio.subprocess.Process, cancel: asyncio.Event, timeout_s: float) -> Ended:
    """EXITED, CANCELLED or TIMEOUT (base.wait_process)."""
    return Ended(await wait_process(proc, cancel, timeout_s))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _last_line(path: Path) -> str:
    """The last non-empty line of a file, reading at most its last VERDICT_TAIL_BYTES_MAX."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - VERDICT_TAIL_BYTES_MAX))
            tail = f.read()
    except OSError:
        return ""
    for line in reversed(tail.decode("utf-8", errors="replace").splitlines()):
        if line.strip():
            return line.strip()
    return ""
