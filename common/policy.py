"""The run policy: timing, retries, admission. Frozen with the spec; part of the run id.

camelCase JSON like the spec; every field has a default from common.limits, so `{}` is a
valid policy. Unknown fields are refused, not ignored: a misspelt grace must not silently
become the default.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from common import limits
from common.spec import ID_PATTERN, ExperimentSpec, SpecError, canonical_json


ENVIRONMENT_MATCHES = ("worker", "cell")
# What a field added after the first release means when a policy's canonical text (a log
# record, the input of a run id) leaves it out. Fixed for ever once released: a new default for
# new runs goes to common.limits, and a policy at it then writes the field out.
ADDED_LATER: dict[str, Any] = {"environment_match": "worker", "order_from": "",
                               "stream_end_grace_ms": 1_500, "providers": (),
                               "max_throttled_attempts_per_cell": 20,
                               "max_observed_cost_usd": 0.0, "quarantine_after_failures": 5,
                               "quarantine_backoff_ms": 60_000}  # name -> its value when absent
# Defaults a field had in earlier releases. A run frozen under one of them is the same run as
# the same document submitted today, at today's default: resubmitting it resumes the run with
# the policy it was frozen with (`Policy.resumes`), instead of refusing it as another policy.
FORMER_DEFAULTS: dict[str, tuple[Any, ...]] = {"stream_end_grace_ms": (3_000,)}


@dataclass(frozen=True, slots=True)
class ProviderLimit:
    """`providers.NAME` of a policy: a model provider (or one key of it) the run's subjects use."""

    name: str
    # Cells running at once against the provider, across every worker and every run on the
    # coordinator; 0: not declared (the core finds it from throttling, coordinator/core/providers.py).
    max_concurrent_cells: int = 0
    subjects: tuple[str, ...] = ()  # subjects mapped to it here, for a spec that does not name it

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.max_concurrent_cells:
            out["maxConcurrentCells"] = self.max_concurrent_cells
        if self.subjects:
            out["subjects"] = list(self.subjects)
        return out


@dataclass(frozen=True, slots=True)
class Policy:
    heartbeat_interval_ms: int = limits.HEARTBEAT_INTERVAL_MS_DEFAULT
    suspect_after_ms: int = limits.SUSPECT_AFTER_MS_DEFAULT
    expire_after_ms: int = limits.EXPIRE_AFTER_MS_DEFAULT
    recovery_grace_ms: int = limits.RECOVERY_GRACE_MS_DEFAULT
    retry_backoff_ms: int = limits.RETRY_BACKOFF_MS_DEFAULT
    retry_backoff_max_ms: int = limits.RETRY_BACKOFF_MAX_MS_DEFAULT
    max_attempts_per_cell: int = limits.MAX_ATTEMPTS_PER_CELL_DEFAULT
    required_environment_id: str = ""  # empty: the first admitted worker pins it for the run
    group_cpu_millis: int = 0  # reservation of one group, all its subjects and verification
    group_memory_mb: int = 0
    group_deadline_ms: int = 0  # 0: derived from the spec's budget (see group_deadline_for)
    # "worker": workers must match the whole environment id (same build everywhere);
    # "cell": only the cell environment (common/identity.py), for a fleet in several languages.
    environment_match: str = "worker"
    # A settled run of the same benchmark whose observed group durations order this run's
    # dispatch, longest first (coordinator/core/order.py); "" dispatches in spec order.
    order_from: str = ""
    # A worker whose stream ended (closed or reset by its side) while it was live gets this
    # long to come back before its groups are redispatched; silence keeps the suspicion and
    # expiry above. 0: a stream end is treated like silence.
    stream_end_grace_ms: int = limits.STREAM_END_GRACE_MS_DEFAULT
    # Model providers by name, sorted: their fleet-wide limits and the subjects mapped to them.
    providers: tuple[ProviderLimit, ...] = ()
    # A cell whose attempts the provider throttled this often is incomplete ("provider throttled").
    max_throttled_attempts_per_cell: int = limits.MAX_THROTTLED_ATTEMPTS_PER_CELL_DEFAULT
    # The run pauses when its known observed cost reaches this many dollars; 0: no cap.
    max_observed_cost_usd: float = 0.0
    # A worker whose infrastructure failures reach this many in a row while other workers'
    # attempts succeed is quarantined (no new work; those attempts do not count); 0: never.
    quarantine_after_failures: int = limits.QUARANTINE_AFTER_FAILURES_DEFAULT
    # How long a quarantined worker waits before it is probed with one group; doubles for each
    # quarantine in a row, up to limits.QUARANTINE_BACKOFF_MAX_MS.
    quarantine_backoff_ms: int = limits.QUARANTINE_BACKOFF_MS_DEFAULT

    def canonical(self) -> str:
        return canonical_json(self.document())

    def document(self) -> dict[str, Any]:
        # Fields added after the first release are left out at their default, so that adding
        # a field never changes the id of a run that does not use it.
        out = {_camel(f.name): getattr(self, f.name) for f in fields(self)
               if f.name not in ADDED_LATER or getattr(self, f.name) != ADDED_LATER[f.name]}
        if "providers" in out:
            out["providers"] = {p.name: p.document() for p in self.providers}
        return out

    def provider_limit(self, name: str) -> ProviderLimit | None:
        for p in self.providers:
            if p.name == name:
                return p
        return None

    def resumes(self, frozen: Policy) -> bool:
        """Whether this policy, just parsed from a resubmitted document, names the run frozen
        with `frozen`: equal, except fields where each is at a default of some release."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(frozen, f.name)
            if mine != theirs:
                defaults = (f.default, *FORMER_DEFAULTS.get(f.name, ()))
                if mine not in defaults or theirs not in defaults:
                    return False
        return True

    def differences(self, other: Policy) -> list[str]:
        """The camelCase names of the fields where the two policies differ."""
        return [_camel(f.name) for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]

    def backoff_ms(self, failed_dispatches: int) -> int:
        """Exponential from retry_backoff_ms, capped; 0 before the first failure."""
        if failed_dispatches <= 0:
            return 0
        return min(self.retry_backoff_max_ms, self.retry_backoff_ms << min(failed_dispatches - 1, 30))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


_BOUNDS: dict[str, tuple[int, int]] = {
    "heartbeat_interval_ms": (limits.HEARTBEAT_INTERVAL_MS_MIN, limits.HEARTBEAT_INTERVAL_MS_MAX),
    "suspect_after_ms": (1, 24 * 3600_000),
    "expire_after_ms": (1, 7 * 24 * 3600_000),
    "recovery_grace_ms": (0, 7 * 24 * 3600_000),
    "retry_backoff_ms": (0, 24 * 3600_000),
    "retry_backoff_max_ms": (0, 7 * 24 * 3600_000),
    "max_attempts_per_cell": (1, limits.ATTEMPTS_PER_CELL_MAX),
    "group_cpu_millis": (0, 1 << 30),
    "group_memory_mb": (0, 1 << 30),
    "group_deadline_ms": (0, 30 * 24 * 3600_000),
    "stream_end_grace_ms": (0, 7 * 24 * 3600_000),
    "max_throttled_attempts_per_cell": (1, limits.MAX_THROTTLED_ATTEMPTS_PER_CELL_MAX),
    "quarantine_after_failures": (0, 10_000),
    "quarantine_backoff_ms": (0, limits.QUARANTINE_BACKOFF_MAX_MS),
}
COST_USD_MAX = 1e9
PROVIDER_FIELDS = {"maxConcurrentCells", "subjects"}


def _document(text: str | bytes) -> Any:
    try:
        return json.loads(text) if text else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SpecError("policy", f"not JSON: {e}") from None


def parse_policy_text(text: str | bytes) -> Policy:
    return parse_policy(_document(text))


def parse_canonical_policy(text: str | bytes) -> Policy:
    """A policy's canonical text (`Policy.canonical`), as a log record keeps it: a field it
    leaves out has its ADDED_LATER value, whatever today's default for new runs is."""
    document = _document(text)
    policy = parse_policy(document)
    absent = {name: value for name, value in ADDED_LATER.items() if _camel(name) not in document}
    return replace(policy, **absent) if absent else policy


def parse_policy(document: Any) -> Policy:
    if not isinstance(document, dict):
        raise SpecError("policy", "must be an object")
    by_camel = {_camel(f.name): f.name for f in fields(Policy)}
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key not in by_camel:
            raise SpecError(f"policy.{key}", f"unknown field (allowed: {', '.join(sorted(by_camel))})")
        name = by_camel[key]
        if name == "required_environment_id":
            if not isinstance(value, str):
                raise SpecError(f"policy.{key}", "must be a string")
        elif name == "order_from":
            if not isinstance(value, str) or len(value) > limits.ID_CHARS_MAX:
                raise SpecError(f"policy.{key}", f"must be a run id (a string of at most {limits.ID_CHARS_MAX} characters)")
        elif name == "providers":
            value = _providers(value, f"policy.{key}")
        elif name == "max_observed_cost_usd":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= COST_USD_MAX:
                raise SpecError(f"policy.{key}", f"must be a number of dollars between 0 and {COST_USD_MAX:g} (0: no cap)")
            value = float(value)
        elif name == "environment_match":
            if value not in ENVIRONMENT_MATCHES:
                raise SpecError(f"policy.{key}", f"must be one of {', '.join(ENVIRONMENT_MATCHES)}")
        else:
            lo, hi = _BOUNDS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise SpecError(f"policy.{key}", f"must be an integer between {lo} and {hi}")
        values[name] = value
    policy = Policy(**values)
    if policy.suspect_after_ms < 2 * policy.heartbeat_interval_ms:
        raise SpecError("policy.suspectAfterMs", "must be at least two heartbeat intervals")
    if policy.expire_after_ms <= policy.suspect_after_ms:
        raise SpecError("policy.expireAfterMs", "must exceed suspectAfterMs")
    if policy.retry_backoff_max_ms < policy.retry_backoff_ms:
        raise SpecError("policy.retryBackoffMaxMs", "must be at least retryBackoffMs")
    return policy


def _providers(value: Any, path: str) -> tuple[ProviderLimit, ...]:
    if not isinstance(value, dict):
        raise SpecError(path, 'must be an object of providers by name, e.g. {"openai": {"maxConcurrentCells": 8}}')
    if len(value) > limits.PROVIDERS_PER_RUN_MAX:
        raise SpecError(path, f"at most {limits.PROVIDERS_PER_RUN_MAX} providers")
    out = []
    mapped: dict[str, str] = {}
    for name in sorted(value):
        where = f"{path}.{name}"
        if len(name) > limits.ID_CHARS_MAX or not ID_PATTERN.match(name):
            raise SpecError(where, f"{name!r} is not a provider name (letters, digits, '.', '_', '-')")
        body = value[name]
        if not isinstance(body, dict):
            raise SpecError(where, "must be an object")
        unknown = sorted(set(body) - PROVIDER_FIELDS)
        if unknown:
            raise SpecError(f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(PROVIDER_FIELDS))})")
        cells = body.get("maxConcurrentCells", 0)
        if isinstance(cells, bool) or not isinstance(cells, int) or not 1 <= cells <= limits.PROVIDER_CELLS_MAX:
            if "maxConcurrentCells" in body:
                raise SpecError(f"{where}.maxConcurrentCells", f"must be an integer between 1 and {limits.PROVIDER_CELLS_MAX}")
        subjects = body.get("subjects", [])
        if not isinstance(subjects, list) or not all(isinstance(s, str) and ID_PATTERN.match(s) for s in subjects):
            raise SpecError(f"{where}.subjects", "must be a list of subject ids")
        for s in subjects:
            if s in mapped:
                raise SpecError(f"{where}.subjects", f"subject {s!r} is also mapped to provider {mapped[s]!r}")
            mapped[s] = name
        out.append(ProviderLimit(name, cells, tuple(subjects)))
    return tuple(out)


def group_deadline_for(spec: ExperimentSpec, policy: Policy) -> int:
    """How long one dispatch of a group may take before the coordinator takes it back.

    All subjects of a group start together, so the group needs one subject budget plus one
    verification, with room for setup and cleanup.
    """
    if policy.group_deadline_ms:
        return policy.group_deadline_ms
    work_ms = spec.subject_timeout_ms + spec.verifier_timeout_ms
    return limits.GROUP_DEADLINE_FACTOR * work_ms + limits.GROUP_DEADLINE_SLACK_MS
