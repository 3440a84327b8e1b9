"""The experiment spec: frozen JSON, validated with errors that name the exact field.

camelCase as in the single-host evaluator. A spec is parsed once, at submission; what the
core needs is typed here, and the canonical JSON text travels with it so that workers and
executors read their own fields from the same frozen bytes. No I/O here: callers read files.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from common.fastpickle import fast_pickle
from common.ids import (
    CellId,
    GroupId,
    SubjectId,
    TaskId,
    cell_id_for,
    group_id_for,
)
from common.limits import CELLS_PER_RUN_MAX, ID_CHARS_MAX

EXECUTOR_KINDS = ("command", "python", "harbor")
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CREDENTIAL_NAME_PATTERN = re.compile(r"^[A-Z_][A-Z0-9_]*$")

TOP_FIELDS = {"name", "description", "benchmark", "executor", "subjects", "tasks",
              "repetitions", "budget", "verifier", "execution"}
BENCHMARK_FIELDS = {"name", "version", "scoreRange"}
BUDGET_FIELDS = {"timeoutSeconds", "maxCostUsd"}
EXECUTION_FIELDS = {"maxConcurrentTaskGroups"}
# Per executor kind: the fields of the executor object, of a subject, of the verifier, of a task.
KIND_FIELDS: dict[str, dict[str, set[str]]] = {
    "command": {
        "executor": {"kind"},
        "subject": {"id", "command", "args", "credentials", "description", "provider"},
        "verifier": {"command", "args", "timeoutSeconds"},
        "task": {"id", "input", "dir", "metadata"},
    },
    "python": {
        "executor": {"kind"},
        "subject": {"id", "callable", "params", "credentials", "description", "provider"},
        "verifier": {"callable", "params", "timeoutSeconds"},
        "task": {"id", "input", "dir", "metadata"},
    },
    "harbor": {
        "executor": {"kind", "environment", "harborVersion", "python"},
        "subject": {"id", "agent", "agentImportPath", "model", "agentKwargs", "credentials",
                    "description", "provider"},
        "verifier": {"timeoutSeconds"},
        "task": {"id", "path", "metadata"},
    },
}
KIND_REQUIRED: dict[str, dict[str, set[str]]] = {
    "command": {"subject": {"id", "command"}, "verifier": {"command"}, "task": {"id"}},
    "python": {"subject": {"id", "callable"}, "verifier": {"callable"}, "task": {"id"}},
    "harbor": {"subject": {"id"}, "verifier": set(), "task": {"id", "path"}},
}
VERIFIER_TIMEOUT_SECONDS_DEFAULT = 60
SUBJECT_TIMEOUT_SECONDS_MAX = 7 * 24 * 3600


class SpecError(ValueError):
    """A spec that does not parse or validate; `path` is a JSON path like `subjects[2].id`."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


@fast_pickle
@dataclass(frozen=True, slots=True)
class Task:
    id: TaskId
    input: str = ""
    dir: str = ""


@fast_pickle
@dataclass(frozen=True, slots=True)
class Subject:
    id: SubjectId
    credentials: tuple[str, ...] = ()
    # The model provider (and key) the subject's requests go to, e.g. "openai" or
    # "openai.team-b": cells of subjects naming one provider share its fleet-wide limit
    # (policy `providers`). Empty: the policy may map the subject; else it shares "default".
    provider: str = ""


@dataclass(frozen=True, slots=True)
class ExperimentSpec:
    canonical: str  # sorted-key JSON text of the whole spec: what is frozen and hashed
    executor_kind: str
    benchmark_name: str
    benchmark_version: str
    tasks: tuple[Task, ...]
    subjects: tuple[Subject, ...]
    repetitions: int
    max_concurrent_groups: int
    subject_timeout_ms: int
    verifier_timeout_ms: int
    # benchmark.scoreRange: every score lies in [low, high]; None when the spec does not say.
    score_range: tuple[float, float] | None = None

    @property
    def group_count(self) -> int:
        return len(self.tasks) * self.repetitions

    @property
    def cell_count(self) -> int:
        return self.group_count * len(self.subjects)

    def group_key(self, index: int) -> tuple[TaskId, int]:
        """Groups are numbered task-major: index = task_index * repetitions + (rep - 1)."""
        task = self.tasks[index // self.repetitions]
        return task.id, index % self.repetitions + 1

    def group_id(self, index: int) -> GroupId:
        task, rep = self.group_key(index)
        return group_id_for(task, rep)

    def cell_ids(self, index: int) -> tuple[CellId, ...]:
        task, rep = self.group_key(index)
        return tuple(cell_id_for(task, rep, s.id) for s in self.subjects)

    def document(self) -> dict[str, Any]:
        return json.loads(self.canonical)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(path, f"must be an object, not {type(value).__name__}")
    return value


def _fields(value: dict[str, Any], path: str, allowed: set[str], required: set[str]) -> None:
    for key in value:
        if key not in allowed:
            raise SpecError(f"{path}.{key}" if path else key,
                            f"unknown field (allowed: {', '.join(sorted(allowed))})")
    for key in sorted(required):
        if key not in value:
            raise SpecError(f"{path}.{key}" if path else key, "is required")


def _str(value: Any, path: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty):
        raise SpecError(path, "must be a non-empty string")
    return value


def _int(value: Any, path: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"must be an integer, not {json.dumps(value)}")
    if not minimum <= value <= maximum:
        raise SpecError(path, f"must be between {minimum} and {maximum}, not {value}")
    return value


def _id(value: Any, path: str) -> str:
    text = _str(value, path)
    if len(text) > ID_CHARS_MAX or not ID_PATTERN.match(text):
        raise SpecError(path, f"{text!r} is not an id (letters, digits, '.', '_', '-')")
    return text


def _str_list(value: Any, path: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(path, "must be a list of strings")
    return value


def parse_spec_text(text: str | bytes) -> ExperimentSpec:
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SpecError("", f"not JSON: {e}") from None
    return parse_spec(document)


def parse_spec(document: Any) -> ExperimentSpec:
    doc = _obj(document, "spec")
    _fields(doc, "", TOP_FIELDS, {"benchmark", "executor", "subjects", "tasks", "repetitions",
                                  "budget", "verifier", "execution"})
    executor = _obj(doc["executor"], "executor")
    if "kind" not in executor:
        raise SpecError("executor.kind", f"is required (one of {', '.join(EXECUTOR_KINDS)})")
    kind = executor["kind"]
    if kind not in EXECUTOR_KINDS:
        raise SpecError("executor.kind", f"{kind!r} is not one of {', '.join(EXECUTOR_KINDS)}")
    table, required = KIND_FIELDS[kind], KIND_REQUIRED[kind]
    _fields(executor, "executor", table["executor"], {"kind"})

    benchmark = _obj(doc["benchmark"], "benchmark")
    _fields(benchmark, "benchmark", BENCHMARK_FIELDS, {"name"})
    bench_name = _str(benchmark["name"], "benchmark.name")
    bench_version = _str(benchmark.get("version", ""), "benchmark.version", allow_empty=True)
    score_range = _score_range(benchmark["scoreRange"]) if "scoreRange" in benchmark else None

    subjects_raw = doc["subjects"]
    if not isinstance(subjects_raw, list) or not subjects_raw:
        raise SpecError("subjects", "must be a non-empty list")
    subjects: list[Subject] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(subjects_raw):
        path = f"subjects[{i}]"
        s = _obj(raw, path)
        _fields(s, path, table["subject"], required["subject"])
        sid = _id(s["id"], f"{path}.id")
        if sid in seen:
            raise SpecError(f"{path}.id", f"duplicate subject id {sid!r} (also subjects[{seen[sid]}])")
        seen[sid] = i
        creds = tuple(_str_list(s.get("credentials", []), f"{path}.credentials"))
        for j, name in enumerate(creds):
            if not CREDENTIAL_NAME_PATTERN.match(name):
                raise SpecError(f"{path}.credentials[{j}]", f"{name!r} is not an environment variable name")
        if "command" in s:
            _str(s["command"], f"{path}.command")
        if "args" in s:
            _str_list(s["args"], f"{path}.args")
        if "callable" in s:
            _callable(s["callable"], f"{path}.callable")
        provider = _id(s["provider"], f"{path}.provider") if "provider" in s else ""
        subjects.append(Subject(SubjectId(sid), creds, provider))

    tasks_raw = doc["tasks"]
    if not isinstance(tasks_raw, list) or not tasks_raw:
        raise SpecError("tasks", "must be a non-empty list")
    tasks: list[Task] = []
    seen = {}
    for i, raw in enumerate(tasks_raw):
        path = f"tasks[{i}]"
        t = _obj(raw, path)
        _fields(t, path, table["task"], required["task"])
        tid = _id(t["id"], f"{path}.id")
        if tid in seen:
            raise SpecError(f"{path}.id", f"duplicate task id {tid!r} (also tasks[{seen[tid]}])")
        seen[tid] = i
        task_input = _str(t.get("input", ""), f"{path}.input", allow_empty=True)
        task_dir = _relative_path(t.get("dir", ""), f"{path}.dir")
        if "path" in t:
            _relative_path(t["path"], f"{path}.path")
        if "metadata" in t:
            _obj(t["metadata"], f"{path}.metadata")
        tasks.append(Task(TaskId(tid), task_input, task_dir))

    repetitions = _int(doc["repetitions"], "repetitions", 1, 1_000_000)
    budget = _obj(doc["budget"], "budget")
    _fields(budget, "budget", BUDGET_FIELDS, {"timeoutSeconds"})
    timeout_s = _int(budget["timeoutSeconds"], "budget.timeoutSeconds", 1, SUBJECT_TIMEOUT_SECONDS_MAX)
    if "maxCostUsd" in budget:
        cost = budget["maxCostUsd"]
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
            raise SpecError("budget.maxCostUsd", "must be a non-negative number")

    verifier = _obj(doc["verifier"], "verifier")
    _fields(verifier, "verifier", table["verifier"], required["verifier"])
    if "command" in verifier:
        _str(verifier["command"], "verifier.command")
    if "args" in verifier:
        _str_list(verifier["args"], "verifier.args")
    if "callable" in verifier:
        _callable(verifier["callable"], "verifier.callable")
    verifier_s = _int(verifier.get("timeoutSeconds", VERIFIER_TIMEOUT_SECONDS_DEFAULT),
                      "verifier.timeoutSeconds", 1, SUBJECT_TIMEOUT_SECONDS_MAX)

    execution = _obj(doc["execution"], "execution")
    _fields(execution, "execution", EXECUTION_FIELDS, {"maxConcurrentTaskGroups"})
    cap = _int(execution["maxConcurrentTaskGroups"], "execution.maxConcurrentTaskGroups", 1, 1_000_000)

    cells = len(tasks) * repetitions * len(subjects)
    if cells > CELLS_PER_RUN_MAX:
        raise SpecError("", f"{cells} cells exceed the limit of {CELLS_PER_RUN_MAX} per run")
    return ExperimentSpec(
        canonical=canonical_json(doc),
        executor_kind=kind,
        benchmark_name=bench_name,
        benchmark_version=bench_version,
        tasks=tuple(tasks),
        subjects=tuple(subjects),
        repetitions=repetitions,
        max_concurrent_groups=cap,
        subject_timeout_ms=timeout_s * 1000,
        verifier_timeout_ms=verifier_s * 1000,
        score_range=score_range,
    )


def _score_range(value: Any, path: str = "benchmark.scoreRange") -> tuple[float, float]:
    """`[low, high]`: two finite numbers, low below high (a pass rate is [0, 1] by definition)."""
    if not isinstance(value, list) or len(value) != 2:
        raise SpecError(path, f"must be a list [low, high] of two numbers, not {json.dumps(value)}")
    for i, bound in enumerate(value):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            raise SpecError(f"{path}[{i}]", f"must be a finite number, not {json.dumps(bound)}")
    low, high = float(value[0]), float(value[1])
    if not low < high:
        raise SpecError(path, f"low ({value[0]}) must be below high ({value[1]})")
    return low, high


def _callable(value: Any, path: str) -> str:
    text = _str(value, path)
    module, sep, func = text.partition(":")
    if not sep or not module or not func.isidentifier():
        raise SpecError(path, f"{text!r} is not 'module:function'")
    return text


def _relative_path(value: Any, path: str) -> str:
    text = _str(value, path, allow_empty=True)
    if text.startswith("/") or ".." in text.split("/"):
        raise SpecError(path, f"{text!r} must be a relative path inside the bench root")
    return text
