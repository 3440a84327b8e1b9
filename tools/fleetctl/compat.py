"""Specs written for the single-host evaluator (`maka eval run experiment.json`, schema
`maka.eval.v1`): run them on fleet unchanged where their fields mean what fleet's fields mean,
or refuse them with one message that names every field fleet cannot honour.

Rules.
- A document is a single-host spec when it has `schemaVersion` (fleet's own specs never do).
  Anything else is left to common/spec.py and the coordinator, which name its defects.
- Conversion is a renaming, never a reinterpretation: `id` -> `name`, `benchmark.id` ->
  `benchmark.name`, `subjects[].config.{command,args}` -> `subjects[].{command,args}`, the
  fleet-named keys of `tasks[].config`, `budget` and `verifier` as they are, and an absent
  `execution` as the single-host default `{"maxConcurrentTaskGroups": 1}`. A field whose
  meaning fleet does not have (Maka subjects, mounts, an egress proxy, extra environment
  values, the protocol-v1 result frame, Pier, a relative timeout...) is unsupported, and so is
  a value that would change meaning on the way (a `{{placeholder}}` that the single-host
  evaluator leaves as text but fleet would substitute, or the reverse).
- External subjects with `"result": "exit-code"` convert: fleet's command executor also takes
  the exit code as the evidence of execution and the verifier's verdict as the score. Fleet
  gives exit 75 (retry) and 78 (environment failure) a meaning and reads `usage.json` when the
  subject writes one; a subject written for the single-host evaluator does neither.
- All problems are collected before anything is raised: `LegacySpecError.unsupported` lists
  every unsupported field by its JSON path, `missing` what fleet needs that the spec lacks.
- The converted document is then validated by common/spec.py like any fleet spec.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from common.spec import EXECUTOR_KINDS, KIND_FIELDS, KIND_REQUIRED, SpecError, parse_spec
from tools.fleetctl.client import CtlError

LEGACY_SCHEMA = "maka.eval.v1"
LEGACY_TOP = ("schemaVersion", "id", "benchmark", "executor", "execution", "subjects", "tasks", "repetitions",
              "budget", "verifier")
LEGACY_SUBJECT_KINDS = ("maka", "external")
LEGACY_PLACEHOLDERS = ("{{task.input}}", "{{task.id}}")  # what the single-host evaluator substitutes in args
PLACEHOLDER = re.compile(r"\{\{[^{}]*\}\}")  # what fleet's command executor would substitute
EXECUTION_DEFAULT = {"maxConcurrentTaskGroups": 1}  # the single-host evaluator's default
BUDGET_FIELDS = ("timeoutSeconds", "maxCostUsd")
EXECUTION_FIELDS = ("maxConcurrentTaskGroups",)

# Why a known single-host field has no fleet meaning; any other unknown field gets a generic reason.
REASONS = {
    "executor.config.mounts": "container mounts: a fleet worker runs cells in its own bench root",
    "executor.config.egressProxy": "the egress proxy and its audit are not part of fleet's executors",
    "executor.config.pythonPathEnv": "fleet's Harbor executor names its interpreter with `python`, not an "
                                     "environment variable",
    "budget.timeoutMultiplier": "fleet's budget is absolute seconds, budget.timeoutSeconds, not a multiple of the "
                                "task's own timeout",
    "verifier.reward": "the Harbor reward key: fleet's verifiers return a verdict with a score",
}


class LegacySpecError(SpecError):
    """A single-host spec that fleet cannot run unchanged; names every field at once."""

    def __init__(self, unsupported: list[str], reasons: dict[str, str] | None = None,
                 missing: list[str] | None = None) -> None:
        self.unsupported = list(unsupported)
        self.reasons = dict(reasons or {})
        self.missing = list(missing or [])
        parts = []
        if self.unsupported:
            parts.append(f"{len(self.unsupported)} unsupported field{'s' if len(self.unsupported) != 1 else ''}: "
                         + "; ".join(self._one(p) for p in self.unsupported))
        if self.missing:
            parts.append("missing for fleet: " + "; ".join(self._one(p) for p in self.missing))
        super().__init__("", f"this single-host evaluator spec ({LEGACY_SCHEMA}) cannot run on fleet unchanged: "
                             + " | ".join(parts))

    def _one(self, path: str) -> str:
        why = self.reasons.get(path)
        return f"{path} ({why})" if why else path


class _Problems:
    def __init__(self) -> None:
        self.unsupported: list[str] = []
        self.missing: list[str] = []
        self.reasons: dict[str, str] = {}
        self.default_why = "no fleet equivalent"

    def unsupported_field(self, path: str, why: str | None = None) -> None:
        if path not in self.reasons:
            self.unsupported.append(path)
            self.reasons[path] = REASONS.get(path) or why or self.default_why

    def missing_field(self, path: str, why: str) -> None:
        if path not in self.reasons:
            self.missing.append(path)
            self.reasons[path] = why

    def raise_if_any(self) -> None:
        if self.unsupported or self.missing:
            raise LegacySpecError(self.unsupported, self.reasons, self.missing)


def is_legacy(document: Any) -> bool:
    return isinstance(document, dict) and "schemaVersion" in document


def _object(value: Any, path: str, problems: _Problems) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.unsupported_field(path, f"must be an object, not {type(value).__name__}")
        return None
    return value


def _texts(value: Any, path: str, problems: _Problems) -> None:
    """A command or argument must mean the same text after fleet's substitution."""
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    for j, text in enumerate(values):
        if not isinstance(text, str):
            continue
        where = path if isinstance(value, str) else f"{path}[{j}]"
        for token in PLACEHOLDER.findall(text):
            if token == "{{task.cwd}}":
                why = f"{token}: fleet has no such placeholder (a fleet subject's cwd is its work dir)"
            elif isinstance(value, str):
                why = f"{token}: the single-host evaluator substitutes nothing in a command, fleet would"
            elif token not in LEGACY_PLACEHOLDERS:
                why = f"{token}: the single-host evaluator leaves it as text, fleet would substitute it"
            else:
                continue
            problems.unsupported_field(where, why)
            break


def convert_legacy(document: Any) -> dict:
    """The fleet spec (a dict common/spec.py accepts) for a single-host spec, or
    LegacySpecError naming every field that does not convert."""
    if not isinstance(document, dict):
        raise SpecError("spec", f"must be an object, not {type(document).__name__}")
    p = _Problems()
    if document.get("schemaVersion") != LEGACY_SCHEMA:
        p.unsupported_field("schemaVersion", f"{json.dumps(document.get('schemaVersion'))} is not {LEGACY_SCHEMA!r}")
    for key in document:
        if key not in LEGACY_TOP:
            p.unsupported_field(key, f"not a field of {LEGACY_SCHEMA} specs")
    out: dict[str, Any] = {}
    if "id" in document:
        out["name"] = document["id"]

    bench = _object(document.get("benchmark"), "benchmark", p)
    if bench is None and "benchmark" not in document:
        p.missing_field("benchmark", "fleet needs the benchmark's name")
    if bench is not None:
        b: dict[str, Any] = {}
        for key, value in bench.items():
            if key == "id":
                b["name"] = value
            elif key == "version":
                b["version"] = value
            elif key == "config":
                for ck in (_object(value, "benchmark.config", p) or {}):
                    p.unsupported_field(f"benchmark.config.{ck}", "fleet's benchmark is its bench root; it has no "
                                                                  "configuration object")
            else:
                p.unsupported_field(f"benchmark.{key}")
        out["benchmark"] = b

    executor = _object(document.get("executor"), "executor", p) or {}
    kind = executor.get("kind")
    if "executor" not in document or "kind" not in executor:
        p.missing_field("executor.kind", f"one of {', '.join(EXECUTOR_KINDS)}")
    elif kind not in EXECUTOR_KINDS:
        p.unsupported_field("executor.kind", f"{json.dumps(kind)}: fleet runs only {', '.join(EXECUTOR_KINDS)} "
                                             "executors")
    fields = KIND_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        p.default_why = "no fleet equivalent under an executor kind fleet does not run"
    ex_out: dict[str, Any] = {"kind": kind}
    for key, value in executor.items():
        if key == "kind":
            continue
        if key != "config":
            p.unsupported_field(f"executor.{key}")
            continue
        for ck, cv in (_object(value, "executor.config", p) or {}).items():
            if kind == "harbor" and ck == "frameworkVersion":
                ex_out["harborVersion"] = cv
            elif fields is not None and ck in fields["executor"] - {"kind"}:
                ex_out[ck] = cv
            else:
                p.unsupported_field(f"executor.config.{ck}", f"not a setting of fleet's {kind} executor"
                                    if fields is not None else None)
    out["executor"] = ex_out

    if "execution" in document:
        execution = _object(document["execution"], "execution", p) or {}
        for key in execution:
            if key not in EXECUTION_FIELDS:
                p.unsupported_field(f"execution.{key}")
        out["execution"] = {k: v for k, v in execution.items() if k in EXECUTION_FIELDS}
    else:
        out["execution"] = dict(EXECUTION_DEFAULT)

    out["subjects"] = _subjects(document.get("subjects"), kind, fields, p)
    out["tasks"] = _tasks(document.get("tasks"), kind, fields, p)
    if "repetitions" in document:
        out["repetitions"] = document["repetitions"]
    else:
        p.missing_field("repetitions", "the number of repetitions")

    budget = _object(document.get("budget"), "budget", p)
    if budget is None and "budget" not in document:
        p.missing_field("budget.timeoutSeconds", "fleet needs the subject timeout in seconds")
    if budget is not None:
        for key in budget:
            if key not in BUDGET_FIELDS:
                p.unsupported_field(f"budget.{key}", "not a field of fleet's budget (timeoutSeconds, maxCostUsd)")
        if "timeoutSeconds" not in budget:
            p.missing_field("budget.timeoutSeconds", "fleet needs the subject timeout in seconds")
        out["budget"] = {k: v for k, v in budget.items() if k in BUDGET_FIELDS}

    verifier = _object(document.get("verifier"), "verifier", p)
    if verifier is not None:
        v_out = {}
        for key, value in verifier.items():
            if fields is not None and key in fields["verifier"]:
                v_out[key] = value
                if key in ("command", "args"):
                    _texts(value, f"verifier.{key}", p)
            else:
                p.unsupported_field(f"verifier.{key}", f"not a field of fleet's {kind} verifier"
                                    if fields is not None else None)
        if fields is not None:
            for key in sorted(KIND_REQUIRED[kind]["verifier"] - set(verifier)):
                p.missing_field(f"verifier.{key}", f"fleet's {kind} verifier needs it")
        out["verifier"] = v_out
    elif "verifier" not in document:
        p.missing_field("verifier", "fleet needs a verifier")
    p.raise_if_any()
    return out


def _subjects(raw: Any, kind: Any, fields: dict | None, p: _Problems) -> list:
    if not isinstance(raw, list):
        if raw is None:
            p.missing_field("subjects", "at least one subject")
        else:
            p.unsupported_field("subjects", "must be a list")
        return []
    out = []
    for i, s in enumerate(raw):
        path = f"subjects[{i}]"
        s = _object(s, path, p)
        if s is None:
            continue
        so: dict[str, Any] = {}
        for key, value in s.items():
            if key in ("id", "credentials"):
                so[key] = value
            elif key == "kind":
                if value == "maka":
                    p.unsupported_field(f"{path}.kind", "Maka subjects run through the Runtime Host, which fleet "
                                                        "workers do not have")
                elif value not in LEGACY_SUBJECT_KINDS:
                    p.unsupported_field(f"{path}.kind", f"{json.dumps(value)} is not a subject kind")
            elif key == "config":
                _subject_config(_object(value, f"{path}.config", p) or {}, so, path, kind, fields, s, p)
            else:
                p.unsupported_field(f"{path}.{key}")
        if fields is not None and s.get("kind") != "maka":
            for key in sorted(KIND_REQUIRED[kind]["subject"] - set(so)):
                p.missing_field(f"{path}.config.{key}" if key != "id" else f"{path}.id",
                                f"fleet's {kind} subjects need it")
        out.append(so)
    return out


def _subject_config(config: dict, so: dict, path: str, kind: Any, fields: dict | None, subject: dict,
                    p: _Problems) -> None:
    declared = subject.get("credentials") if isinstance(subject.get("credentials"), list) else []
    if kind == "command" and subject.get("kind") == "external" and "result" not in config and "command" in config:
        p.unsupported_field(f"{path}.config.result", "absent means protocol-v1, the bundled relay wrapper's "
                                                     "result frame; fleet's command executor takes exit codes, a "
                                                     "verifier verdict and usage.json: set \"exit-code\" if the "
                                                     "subject needs no result frame")
    for key, value in config.items():
        where = f"{path}.config.{key}"
        if key == "result" and kind == "command":
            if value != "exit-code":
                p.unsupported_field(where, f"{json.dumps(value)}: only the exit-code contract has a fleet "
                                           "equivalent")
        elif key == "environment" and kind == "command":
            for name in (_object(value, where, p) or {}):
                p.unsupported_field(f"{where}.{name}", "fleet passes a subject no environment values beyond its "
                                                       "declared credentials")
        elif key == "credentialEnvironment" and kind == "command":
            for target, source in (_object(value, where, p) or {}).items():
                if target != source or source not in declared:
                    p.unsupported_field(f"{where}.{target}", "fleet passes each declared credential under its own "
                                                             "name only")
        elif fields is not None and key in fields["subject"] - {"id", "credentials"}:
            so[key] = value
            if key in ("command", "args"):
                _texts(value, where, p)
        elif kind == "harbor" and key in ("command", "args"):
            p.unsupported_field(where, "fleet's Harbor subjects are agents (agent, model), not relay commands")
        else:
            p.unsupported_field(where, f"not a field of fleet's {kind} subjects" if fields is not None else None)


def _tasks(raw: Any, kind: Any, fields: dict | None, p: _Problems) -> list:
    if not isinstance(raw, list):
        if raw is None:
            p.missing_field("tasks", "at least one task")
        else:
            p.unsupported_field("tasks", "must be a list")
        return []
    out = []
    for i, t in enumerate(raw):
        path = f"tasks[{i}]"
        t = _object(t, path, p)
        if t is None:
            continue
        to: dict[str, Any] = {}
        for key, value in t.items():
            if key == "id" or (key == "input" and (fields is None or "input" in fields["task"])):
                to[key] = value
            elif key == "input":
                p.unsupported_field(f"{path}.input", f"fleet's {kind} tasks take their instruction from the task "
                                                     "directory (config.harbor.path)")
            elif key == "config":
                for ck, cv in (_object(value, f"{path}.config", p) or {}).items():
                    if kind == "harbor" and ck == "harbor" and isinstance(cv, dict) and set(cv) == {"path"}:
                        to["path"] = cv["path"]
                    elif fields is not None and ck in fields["task"] - {"id", "input"}:
                        to[ck] = cv
                    else:
                        p.unsupported_field(f"{path}.config.{ck}", f"not a field of fleet's {kind} tasks"
                                            if fields is not None else None)
            else:
                p.unsupported_field(f"{path}.{key}")
        if fields is not None:
            for key in sorted(KIND_REQUIRED[kind]["task"] - set(to)):
                p.missing_field(f"{path}.config.{key}" if key != "id" else f"{path}.id", f"fleet's {kind} tasks "
                                                                                          "need it")
        out.append(to)
    return out


def load_spec_text(text: str) -> str:
    """The spec text to submit. A single-host spec becomes the canonical JSON of its fleet
    conversion (or raises LegacySpecError naming every unsupported field, or SpecError when
    the converted spec is invalid); anything else is returned unchanged for the coordinator
    to validate, so its refusals read as they always have."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return text
    if not is_legacy(document):
        return text
    try:
        parse_spec(document)
        return text
    except SpecError:
        pass
    converted = convert_legacy(document)
    try:
        return parse_spec(converted).canonical
    except SpecError as e:
        raise SpecError(e.path, f"{e.message} (in the fleet spec converted from this {LEGACY_SCHEMA} spec)") from None


# ---- fleetctl glue -------------------------------------------------------------------------

def spec_text_for_fleetctl(text: str, source: Path) -> str:
    """`load_spec_text` for fleetctl: a refusal is a CtlError, a conversion is said on stderr."""
    try:
        out = load_spec_text(text)
    except SpecError as e:
        raise CtlError(f"{source}: {e}") from None
    if out is not text:
        print(f"fleetctl: {source} is a single-host evaluator spec ({LEGACY_SCHEMA}); submitting its fleet "
              "conversion", file=sys.stderr)
    return out


def local_args(spec: Path, data_dir: Path | None, bench_root: Path | None,
               policy: Path | None) -> tuple[Path, Path | None, Path | None]:
    """For `fleetctl local`: a single-host spec is converted into DATA_DIR/converted-spec.json
    and run from there, with the bench root and policy still found beside the original."""
    try:
        text = spec.read_text()
    except OSError:
        return spec, bench_root, policy  # run_local names the read error
    out = spec_text_for_fleetctl(text, spec)
    if out is text:
        return spec, bench_root, policy
    data = (data_dir or Path(".fleet")).resolve()
    data.mkdir(parents=True, exist_ok=True)
    target = data / "converted-spec.json"
    target.write_text(json.dumps(json.loads(out), indent=1, sort_keys=True) + "\n")
    beside = spec.resolve().parent
    if policy is None and (beside / "policy.json").exists():
        policy = beside / "policy.json"
    return target, bench_root or beside, policy


__all__ = ["LegacySpecError", "convert_legacy", "is_legacy", "load_spec_text"]
