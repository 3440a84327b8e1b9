"""What every executor shares: the job it is given, the outcome it returns, and the helpers
that keep the evidence honest.

Rules. An executor runs one cell attempt and returns a Report whose status is the one
`expected_status` derives from its evidence; a report that breaks the evidence rules is our
bug and crashes (`seal`). Each attempt gets a fresh directory under the worker's scratch
root: `work/` (the cwd, deleted by the executor, cleanup CONFIRMED only when it is really
gone), `tmp/`, and `artifacts/` (logs and `artifacts/output/`, left for the session to
upload and delete). Credentials reach the subject only; their values are scrubbed from
every artifact file and every string of the report. Usage is what the subject reported,
never an invented zero.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol

from common.evidence import ArtifactUnavailable, Report, Usage, evidence_problem, expected_status
from common.limits import (
    ARTIFACT_BYTES_MAX,
    ID_CHARS_MAX,
    REDACT_CHUNK_BYTES,
    REPORT_DETAIL_CHARS_MAX,
    RETRY_AFTER_MS_MAX,
    SCORE_ABS_MAX,
    USAGE_FILE_BYTES_MAX,
)

# Token counts travel as int64 on the wire; anything near that is not a real count.
TOKENS_MAX = 1 << 62
REDACTED = "[redacted]"


@dataclass(frozen=True, slots=True)
class CellJob:
    run_id: str
    assignment_id: str
    attempt_id: str
    cell_id: str
    task_id: str
    repetition: int
    subject_id: str
    task: Mapping  # the task's JSON object from the spec ({"id", "input", "dir", ...})
    subject: Mapping  # the subject's JSON object
    verifier: Mapping  # the spec's verifier object
    executor: Mapping  # the spec's executor object
    subject_timeout_s: int  # spec.budget.timeoutSeconds
    bench_root: Path
    work_root: Path  # the worker's scratch dir; each attempt gets a fresh dir below it
    credentials: Mapping[str, str]  # only the names the subject declares, from the worker's env


@dataclass(frozen=True, slots=True)
class LocalArtifact:
    """A file for the session to upload; the session computes its digest."""

    name: str
    path: Path


@dataclass(frozen=True, slots=True)
class CellOutcome:
    report: Report  # artifacts=(): the session fills digests; `unavailable` may be set
    files: tuple[LocalArtifact, ...]


class CancelEvent(asyncio.Event):
    """The cancel of a group's cells: an `asyncio.Event` that also runs callbacks when set, so
    that an executor can wait for its cell or the cancel on one future, without a task parked
    in `wait()` per wait (a task, its cancel and asyncio.wait's own future cost more than a
    no-op cell). Callbacks run on the event loop, in `set`, once each."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []

    def set(self) -> None:
        super().set()
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Run `fn` when the event is set (at once if it is already set)."""
        if self.is_set():
            fn()
        else:
            self._callbacks.append(fn)

    def remove_callback(self, fn: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._callbacks.remove(fn)


class Executor(Protocol):
    async def run(self, job: CellJob, cancel: asyncio.Event) -> CellOutcome: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---- the report ---------------------------------------------------------------------------


def seal(report: Report) -> Report:
    """Give the report the status its evidence implies, and crash if the evidence is malformed."""
    report = dataclasses.replace(report, status=expected_status(report))
    problem = evidence_problem(report)
    if problem or report.status != expected_status(report):
        raise AssertionError(f"executor built a malformed report ({problem or 'status mismatch'}): {report!r}")
    return report


def one_line(text: str, limit: int = REPORT_DETAIL_CHARS_MAX) -> str:
    """A single line of at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def usage_fields(value: Any) -> tuple[Usage, dict[str, Any], str]:
    """(usage, Report fields, note) from a subject's usage object.

    All of inputTokens, outputTokens and costUsd valid: COMPLETE; some: PARTIAL; none: MISSING.
    Invalid values are dropped with a note, never replaced by zero."""
    if not isinstance(value, dict):
        return Usage.MISSING, {}, f"usage is not an object ({type(value).__name__})"
    fields: dict[str, Any] = {}
    bad: list[str] = []
    for key, attr in (("inputTokens", "input_tokens"), ("outputTokens", "output_tokens"),
                      ("cachedTokens", "cached_tokens")):
        if key in value:
            v = value[key]
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= TOKENS_MAX:
                fields[attr] = v
            else:
                bad.append(key)
    if "costUsd" in value:
        v = value["costUsd"]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
            fields["cost_usd"] = float(v)
        else:
            bad.append("costUsd")
    core = sum(attr in fields for attr in ("input_tokens", "output_tokens", "cost_usd"))
    if core == 3:
        usage = Usage.COMPLETE
    elif fields:
        usage = Usage.PARTIAL
    else:
        usage = Usage.MISSING
    note = f"usage fields ignored as invalid: {', '.join(bad)}" if bad else ""
    if usage == Usage.MISSING and not note:
        note = "usage reported no known field"
    return usage, fields, note


def score_of(value: Any) -> float | None:
    """A finite score within the evidence bounds, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        score = float(value)
    except OverflowError:
        return None
    if not math.isfinite(score) or abs(score) > SCORE_ABS_MAX:
        return None
    return score


# ---- throttling ----------------------------------------------------------------------------

# The file a subject leaves in its output dir, beside the throttled exit (command: 75; python:
# an InfrastructureError), when the model provider refused its request (docs/configuration.md).
THROTTLED_FILE = "throttled.json"
# Like usage.json, it holds a few short fields; anything bigger is not a throttled file.
THROTTLED_FILE_BYTES_MAX = USAGE_FILE_BYTES_MAX


@dataclass(frozen=True, slots=True)
class Throttle:
    """What a subject's throttled.json said: the reason for Report.throttled (not yet redacted
    or bounded: the executor does both, as for every subject string), the Retry-After, and a
    note for the detail when the file or a field of it was malformed (empty when not)."""

    reason: str
    retry_after_ms: int
    note: str


def read_throttled(path: Path) -> Throttle | None:
    """The subject's throttled.json at `path`, or None when there is none.

    {"provider": str, "retryAfterSeconds": number, "message": str}, each optional. A file
    that is there but malformed still reads as throttled (the subject said so by leaving
    it): the reason says only that a provider throttled, the Retry-After is 0 (the
    coordinator's default applies) and the note says what was wrong. A Retry-After outside
    [0, RETRY_AFTER_MS_MAX] is clamped, with a note."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as e:
        return Throttle("provider throttled", 0, f"{THROTTLED_FILE} unreadable: {e.strerror or e}")
    if not stat.S_ISREG(st.st_mode) or st.st_size > THROTTLED_FILE_BYTES_MAX:
        return Throttle("provider throttled", 0, f"{THROTTLED_FILE} malformed: not a small regular file")
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return Throttle("provider throttled", 0, f"{THROTTLED_FILE} malformed: not JSON")
    if not isinstance(value, dict):
        return Throttle("provider throttled", 0, f"{THROTTLED_FILE} malformed: not a JSON object")
    bad = [key for key in ("provider", "message") if not isinstance(value.get(key, ""), str)]
    provider = value.get("provider", "") if "provider" not in bad else ""
    message = value.get("message", "") if "message" not in bad else ""
    retry_after_ms = 0
    clamped = ""
    if "retryAfterSeconds" in value:
        seconds = value["retryAfterSeconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            bad.append("retryAfterSeconds")
        else:
            wanted = seconds * 1000
            retry_after_ms = int(min(max(wanted, 0), RETRY_AFTER_MS_MAX))
            if wanted != retry_after_ms and not 0 <= wanted <= RETRY_AFTER_MS_MAX:
                clamped = f"retryAfterSeconds {seconds:g} clamped to {retry_after_ms / 1000:g}s"
    who = " ".join(provider.split())
    reason = f"provider {who} throttled" if who else "provider throttled"
    if message.strip():
        reason += ": " + message
    notes = [f"{THROTTLED_FILE} malformed: fields ignored as invalid: {', '.join(bad)}"] if bad else []
    if clamped:
        notes.append(clamped)
    return Throttle(reason, retry_after_ms, "; ".join(notes))


# ---- credentials --------------------------------------------------------------------------


def declared_credentials(job: CellJob) -> tuple[dict[str, str], str]:
    """The subject's declared credentials from the job, or an environment failure naming the
    first one this worker does not have. Names the subject did not declare are dropped."""
    declared = job.subject.get("credentials") or ()
    env: dict[str, str] = {}
    for name in declared:
        if name not in job.credentials:
            return {}, f"credential {name} is not set on this worker"
        env[name] = job.credentials[name]
    return env, ""


class Redactor:
    """Replaces every credential value with a marker, in strings and (streaming) in files."""

    __slots__ = ("_secrets", "_secret_bytes", "_keep")

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._secret_bytes = [s.encode() for s in self._secrets]
        self._keep = max((len(b) for b in self._secret_bytes), default=1) - 1

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        for s in self._secrets:
            value = value.replace(s, REDACTED)
        return value

    def _bytes(self, data: bytes) -> bytes:
        for s in self._secret_bytes:
            data = data.replace(s, REDACTED.encode())
        return data

    def file(self, path: Path) -> bool:
        """Scrub one file in place (via a temporary file and a rename); True when it changed.

        A match can straddle two chunks, so the last len(longest secret) - 1 bytes of each
        redacted buffer are carried into the next: any occurrence not yet replaced must end
        beyond the buffer, so it starts inside the carried tail."""
        if not self._secrets:
            return False
        tmp = path.with_name(path.name + ".redact-tmp")
        changed = False
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            carry = b""
            while True:
                chunk = src.read(REDACT_CHUNK_BYTES)
                buf = carry + chunk
                cleaned = self._bytes(buf)
                changed = changed or cleaned != buf
                if not chunk:
                    dst.write(cleaned)
                    break
                if self._keep and len(cleaned) > self._keep:
                    dst.write(cleaned[: -self._keep])
                    carry = cleaned[-self._keep:]
                elif self._keep:
                    carry = cleaned
                else:
                    dst.write(cleaned)
                    carry = b""
        if changed:
            os.replace(tmp, path)
        else:
            tmp.unlink()
        return changed

    def tree(self, root: Path) -> None:
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                p = Path(dirpath, name)
                if stat.S_ISREG(p.lstat().st_mode):
                    self.file(p)


# ---- the attempt's directories ------------------------------------------------------------


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(attempt_id: str) -> str:
    """A directory name for an attempt id (which holds ':' and '/'): readable, bounded and,
    thanks to the digest suffix, distinct for distinct ids."""
    readable = _UNSAFE.sub("_", attempt_id)[:100]
    return f"{readable}-{hashlib.sha256(attempt_id.encode()).hexdigest()[:12]}"


# The executor and then the session ask for each attempt's dir once each; more than the cells
# of every slot running at once, so the session's ask always finds the executor's answer.
ATTEMPT_DIRS_CACHED_MAX = 1024


@functools.lru_cache(maxsize=ATTEMPT_DIRS_CACHED_MAX)
def _attempt_root(work_root: Path, attempt_id: str) -> Path:
    return work_root / safe_name(attempt_id)


@dataclass(frozen=True, slots=True)
class AttemptDirs:
    """An attempt's scratch dirs under `root`. The others are derived when asked for: a cell
    that makes no directory (most python cells) should not pay for building five paths."""

    root: Path

    @classmethod
    def of(cls, work_root: Path, attempt_id: str) -> AttemptDirs:
        return cls(_attempt_root(work_root, attempt_id))

    @property
    def work(self) -> Path:  # the cwd and HOME; deleted by the executor
        return self.root / "work"

    @property
    def tmp(self) -> Path:  # TMPDIR; deleted by the executor
        return self.root / "tmp"

    @property
    def artifacts(self) -> Path:  # logs; left for the session
        return self.root / "artifacts"

    @property
    def output(self) -> Path:  # FLEET_OUTPUT_DIR, below artifacts; every file becomes an artifact
        return self.root / "artifacts" / "output"

    def create(self, *, with_tmp: bool) -> None:
        """Fresh directories; a leftover from an earlier life of this worker is removed first."""
        if os.path.lexists(self.root):
            remove_tree(self.root)
        self.root.mkdir(parents=True)
        self.work.mkdir()
        if with_tmp:
            self.tmp.mkdir()
        self.output.mkdir(parents=True)


def copy_task_dir(bench_root: Path, task: Mapping, work: Path) -> str:
    """Copy the task's `dir` into the work dir; an environment failure reason, or ""."""
    rel = task.get("dir") or ""
    if not rel:
        return ""
    root = bench_root.resolve()
    src = (root / rel).resolve()
    if not src.is_relative_to(root):
        return f"task dir {rel!r} leaves the bench root"
    if not src.is_dir():
        return f"task dir {rel!r} not found under the bench root"
    shutil.copytree(src, work, symlinks=True, dirs_exist_ok=True)
    return ""


def remove_tree(path: Path) -> bool:
    """Delete a tree, making read-only directories writable on the way; True when it is gone."""

    def _retry(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=_retry)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    return not os.path.lexists(path)


def output_artifacts(output: Path, room: int, redactor: Redactor) -> tuple[list[LocalArtifact], list[ArtifactUnavailable]]:
    """Every regular file under the output dir as `output/<relpath>`, at most `room` entries.

    Symlinks are not followed (a link to a worker file must not upload it) and files larger
    than an artifact may be are recorded as unavailable, with the reason."""
    files: list[LocalArtifact] = []
    missing: list[ArtifactUnavailable] = []
    entries: list[tuple[str, Path]] = []
    for dirpath, dirs, names in os.walk(output):
        # os.walk lists a symlink to a directory among the directories and does not enter
        # it; it is reported like any other link.
        links = [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]
        dirs[:] = sorted(d for d in dirs if d not in links)
        for name in sorted(names + links):
            p = Path(dirpath, name)
            entries.append((p.relative_to(output).as_posix(), p))
    entries.sort()
    keep = len(entries) if len(entries) <= room else max(room - 1, 0)
    overflow = len(entries) - keep
    for rel, p in entries[:keep]:
        name = "output/" + rel
        if len(name) > ID_CHARS_MAX:
            name = f"output/{rel[: ID_CHARS_MAX - 30]}…{hashlib.sha256(rel.encode()).hexdigest()[:12]}"
            missing.append(ArtifactUnavailable(name, "path too long for an artifact name"))
            continue
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            missing.append(ArtifactUnavailable(name, "a symbolic link; links are not followed"))
        elif not stat.S_ISREG(st.st_mode):
            missing.append(ArtifactUnavailable(name, "not a regular file"))
        elif st.st_size > ARTIFACT_BYTES_MAX:
            missing.append(ArtifactUnavailable(name, f"{st.st_size} bytes exceed the artifact limit of {ARTIFACT_BYTES_MAX}"))
        else:
            if redactor:
                redactor.file(p)
            files.append(LocalArtifact(name, p))
    if overflow:
        missing.append(ArtifactUnavailable("output/…", f"{overflow} more output files beyond the limit of artifacts per report"))
    return files, missing


async def wait_process(proc: asyncio.subprocess.Process, cancel: asyncio.Event, timeout_s: float) -> str:
    """"exited", "cancelled" or "timeout", whichever comes first; a cancel wins a tie (the
    group was revoked: whatever the process did, the attempt is not to be trusted)."""
    exited = asyncio.ensure_future(proc.wait())
    cancelled = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait((exited, cancelled), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        exited.cancel()
        cancelled.cancel()
    if cancel.is_set():
        return "cancelled"
    if proc.returncode is not None:
        return "exited"
    return "timeout"
