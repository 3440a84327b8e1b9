"""The experiment spec and the run policy refuse what they cannot freeze and freeze the rest
stably: table-driven documents, each with one defect, must fail with a SpecError naming the
exact JSON path; valid documents must parse to the same canonical JSON and run id whatever
their key order, and a golden run id pins the canonical form."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from common import limits
from common.ids import run_id_for
from common.policy import ADDED_LATER, Policy, group_deadline_for, parse_canonical_policy, parse_policy, parse_policy_text
from common.spec import SpecError, canonical_json, parse_spec, parse_spec_text

BASE: dict[str, Any] = {
    "name": "toy",
    "benchmark": {"name": "toybench", "version": "1.2"},
    "executor": {"kind": "command"},
    "subjects": [{"id": "alpha", "command": "solve", "args": ["--fast"], "credentials": ["API_KEY"]},
                 {"id": "beta", "command": "solve"}],
    "tasks": [{"id": "add", "input": "1+1", "dir": "tasks/add"}, {"id": "answer42", "metadata": {"k": 1}}],
    "repetitions": 2,
    "budget": {"timeoutSeconds": 30, "maxCostUsd": 1.5},
    "verifier": {"command": "check", "args": ["--strict"], "timeoutSeconds": 7},
    "execution": {"maxConcurrentTaskGroups": 3},
}

PYTHON = {**BASE, "executor": {"kind": "python"},
          "subjects": [{"id": "alpha", "callable": "pkg.mod:solve", "params": {"x": 1}}],
          "verifier": {"callable": "pkg.mod:verify"}}
HARBOR = {**BASE, "executor": {"kind": "harbor", "environment": "docker", "harborVersion": "0.1"},
          "subjects": [{"id": "alpha", "agent": "oracle", "model": "m"}],
          "tasks": [{"id": "add", "path": "tasks/add"}],
          "verifier": {"timeoutSeconds": 60}}


def edit(doc: dict[str, Any], path: str, value: Any = None, *, delete: bool = False) -> dict[str, Any]:
    """A deep copy of `doc` with the dotted path (list indexes as numbers) set or deleted."""
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = out
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key: Any = int(last) if isinstance(node, list) else last
    if delete:
        del node[key]
    else:
        node[key] = value
    return out


def spec_error(document: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(document)
    return info.value


# --- spec: one defect each, named by its JSON path --------------------------------------------

SPEC_DEFECTS = [
    # id, document, path, words in the message
    ("unknown top-level field", edit(BASE, "colour", "red"), "colour", "unknown field"),
    ("unknown benchmark field", edit(BASE, "benchmark.owner", "x"), "benchmark.owner", "unknown field"),
    ("unknown executor field", edit(BASE, "executor.image", "x"), "executor.image", "unknown field"),
    ("unknown subject field", edit(BASE, "subjects.1.model", "m"), "subjects[1].model", "unknown field"),
    ("unknown task field", edit(BASE, "tasks.0.prompt", "p"), "tasks[0].prompt", "unknown field"),
    ("unknown budget field", edit(BASE, "budget.maxTokens", 5), "budget.maxTokens", "unknown field"),
    ("unknown verifier field", edit(BASE, "verifier.image", "x"), "verifier.image", "unknown field"),
    ("unknown execution field", edit(BASE, "execution.maxWorkers", 2), "execution.maxWorkers", "unknown field"),
    ("harbor field in a command spec", edit(BASE, "subjects.0.agent", "a"), "subjects[0].agent", "unknown field"),
    ("duplicate task id", edit(BASE, "tasks.1.id", "add"), "tasks[1].id", "duplicate task id 'add' (also tasks[0])"),
    ("duplicate subject id", edit(BASE, "subjects.1.id", "alpha"), "subjects[1].id",
     "duplicate subject id 'alpha' (also subjects[0])"),
    ("zero repetitions", edit(BASE, "repetitions", 0), "repetitions", "between 1 and"),
    ("negative repetitions", edit(BASE, "repetitions", -2), "repetitions", "between 1 and"),
    ("boolean repetitions", edit(BASE, "repetitions", True), "repetitions", "integer"),
    ("string repetitions", edit(BASE, "repetitions", "2"), "repetitions", "integer"),
    ("float repetitions", edit(BASE, "repetitions", 2.0), "repetitions", "integer"),
    ("cap below 1", edit(BASE, "execution.maxConcurrentTaskGroups", 0), "execution.maxConcurrentTaskGroups",
     "between 1 and"),
    ("cap missing", edit(BASE, "execution.maxConcurrentTaskGroups", delete=True),
     "execution.maxConcurrentTaskGroups", "is required"),
    ("missing executor", edit(BASE, "executor", delete=True), "executor", "is required"),
    ("missing executor kind", edit(BASE, "executor.kind", delete=True), "executor.kind", "is required"),
    ("unknown executor kind", edit(BASE, "executor.kind", "slurm"), "executor.kind", "is not one of"),
    ("executor not an object", edit(BASE, "executor", "command"), "executor", "must be an object"),
    ("missing tasks", edit(BASE, "tasks", delete=True), "tasks", "is required"),
    ("empty tasks", edit(BASE, "tasks", []), "tasks", "non-empty list"),
    ("empty subjects", edit(BASE, "subjects", []), "subjects", "non-empty list"),
    ("subject without its command", edit(BASE, "subjects.1.command", delete=True), "subjects[1].command",
     "is required"),
    ("subject not an object", edit(BASE, "subjects.0", "alpha"), "subjects[0]", "must be an object"),
    ("task id with a space", edit(BASE, "tasks.0.id", "a b"), "tasks[0].id", "is not an id"),
    ("task id empty", edit(BASE, "tasks.0.id", ""), "tasks[0].id", "non-empty string"),
    ("task id too long", edit(BASE, "tasks.0.id", "t" * (limits.ID_CHARS_MAX + 1)), "tasks[0].id", "is not an id"),
    ("credential not a variable name", edit(BASE, "subjects.0.credentials", ["API_KEY", "api-key"]),
     "subjects[0].credentials[1]", "environment variable"),
    ("args not strings", edit(BASE, "subjects.0.args", ["--n", 3]), "subjects[0].args", "list of strings"),
    ("absolute task dir", edit(BASE, "tasks.0.dir", "/etc"), "tasks[0].dir", "relative path"),
    ("task dir escaping the root", edit(BASE, "tasks.0.dir", "tasks/../../x"), "tasks[0].dir", "relative path"),
    ("task metadata not an object", edit(BASE, "tasks.1.metadata", [1]), "tasks[1].metadata", "must be an object"),
    ("zero timeout", edit(BASE, "budget.timeoutSeconds", 0), "budget.timeoutSeconds", "between 1 and"),
    ("negative cost budget", edit(BASE, "budget.maxCostUsd", -1), "budget.maxCostUsd", "non-negative"),
    ("verifier timeout zero", edit(BASE, "verifier.timeoutSeconds", 0), "verifier.timeoutSeconds", "between 1"),
    ("verifier without its command", edit(BASE, "verifier.command", delete=True), "verifier.command", "is required"),
    ("benchmark without a name", edit(BASE, "benchmark.name", delete=True), "benchmark.name", "is required"),
    ("python callable without a function", edit(PYTHON, "subjects.0.callable", "pkg.mod"),
     "subjects[0].callable", "module:function"),
    ("python verifier callable malformed", edit(PYTHON, "verifier.callable", "pkg:1x"), "verifier.callable",
     "module:function"),
    ("harbor task without a path", edit(HARBOR, "tasks.0.path", delete=True), "tasks[0].path", "is required"),
    ("harbor task path absolute", edit(HARBOR, "tasks.0.path", "/abs"), "tasks[0].path", "relative path"),
    ("too many cells", edit(edit(BASE, "repetitions", 1_000_000), "tasks", [{"id": "a"}, {"id": "b"}, {"id": "c"}]),
     "", "exceed the limit"),
    ("not an object", ["spec"], "spec", "must be an object"),
    ("score range not a pair", edit(BASE, "benchmark.scoreRange", [0]), "benchmark.scoreRange", "[low, high]"),
    ("score range not a list", edit(BASE, "benchmark.scoreRange", "0-1"), "benchmark.scoreRange", "[low, high]"),
    ("score range bound a string", edit(BASE, "benchmark.scoreRange", [0, "1"]), "benchmark.scoreRange[1]",
     "finite number"),
    ("score range bound a bool", edit(BASE, "benchmark.scoreRange", [False, 1]), "benchmark.scoreRange[0]",
     "finite number"),
    ("score range bound infinite", edit(BASE, "benchmark.scoreRange", [0, float("inf")]),
     "benchmark.scoreRange[1]", "finite number"),
    ("score range empty", edit(BASE, "benchmark.scoreRange", [1, 1]), "benchmark.scoreRange", "below high"),
    ("score range reversed", edit(BASE, "benchmark.scoreRange", [1, 0]), "benchmark.scoreRange", "below high"),
]


@pytest.mark.parametrize("document, path, words", [pytest.param(d, p, w, id=i) for i, d, p, w in SPEC_DEFECTS])
def test_a_spec_defect_is_named_by_its_json_path(document, path, words):
    error = spec_error(document)
    assert error.path == path
    assert words in error.message
    assert str(error) == (f"{path}: {error.message}" if path else error.message)


def test_spec_text_that_is_not_json_is_a_spec_error_without_a_path():
    with pytest.raises(SpecError) as info:
        parse_spec_text("{not json")
    assert info.value.path == "" and "not JSON" in info.value.message
    with pytest.raises(SpecError):
        parse_spec_text(b"\xff\xfe")


@pytest.mark.parametrize("document, kind", [
    pytest.param(BASE, "command", id="command"),
    pytest.param(PYTHON, "python", id="python"),
    pytest.param(HARBOR, "harbor", id="harbor"),
])
def test_valid_specs_of_every_executor_kind_parse(document, kind):
    spec = parse_spec(document)
    assert spec.executor_kind == kind
    assert spec.document() == document
    assert spec.subject_timeout_ms == 30_000


def test_the_parsed_spec_types_what_the_core_needs():
    spec = parse_spec(BASE)
    assert spec.benchmark_name == "toybench" and spec.benchmark_version == "1.2"
    assert [t.id for t in spec.tasks] == ["add", "answer42"] and spec.tasks[0].dir == "tasks/add"
    assert spec.subjects[0].credentials == ("API_KEY",) and spec.subjects[1].credentials == ()
    assert (spec.repetitions, spec.max_concurrent_groups) == (2, 3)
    assert (spec.subject_timeout_ms, spec.verifier_timeout_ms) == (30_000, 7_000)
    assert (spec.group_count, spec.cell_count) == (4, 8)
    # Groups are numbered task-major.
    assert [spec.group_key(i) for i in range(4)] == [("add", 1), ("add", 2), ("answer42", 1), ("answer42", 2)]
    assert spec.group_id(3) == "answer42/r2"
    assert spec.cell_ids(1) == ("add/r2/alpha", "add/r2/beta")


def test_a_declared_score_range_is_typed_and_an_absent_one_changes_nothing():
    assert parse_spec(BASE).score_range is None
    assert "scoreRange" not in parse_spec(BASE).canonical, "specs without it keep their canonical text and run id"
    spec = parse_spec(edit(BASE, "benchmark.scoreRange", [-1, 2.5]))
    assert spec.score_range == (-1.0, 2.5) and spec.document()["benchmark"]["scoreRange"] == [-1, 2.5]


def test_the_verifier_timeout_has_a_default():
    spec = parse_spec(edit(BASE, "verifier.timeoutSeconds", delete=True))
    assert spec.verifier_timeout_ms == 60_000


# --- canonical JSON and run ids ---------------------------------------------------------------

def reordered(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


def test_canonical_json_ignores_key_order_and_whitespace():
    a = parse_spec(BASE)
    b = parse_spec(reordered(BASE))
    c_ = parse_spec_text(json.dumps(BASE, indent=4))
    assert a.canonical == b.canonical == c_.canonical
    assert a.canonical == canonical_json(BASE)
    assert ": " not in a.canonical and ", " not in a.canonical
    assert list(json.loads(a.canonical)) == sorted(BASE)
    assert parse_spec(json.loads(a.canonical)).canonical == a.canonical, "canonical form is a fixed point"


def test_canonical_json_keeps_unicode_and_list_order():
    doc = edit(BASE, "tasks.0.input", "caf\u00e9 \u2713")
    spec = parse_spec(doc)
    assert "caf\u00e9 \u2713" in spec.canonical
    swapped = edit(BASE, "tasks", list(reversed(BASE["tasks"])))
    assert parse_spec(swapped).canonical != parse_spec(BASE).canonical, "task order is part of the spec"


def test_run_ids_are_stable_and_name_exactly_what_is_frozen():
    spec = parse_spec(BASE)
    policy = parse_policy({})
    rid = run_id_for(spec.canonical, policy.canonical())
    assert rid == run_id_for(parse_spec(reordered(BASE)).canonical, parse_policy(policy.document()).canonical())
    assert rid == run_id_for(spec.canonical, Policy().canonical()), "defaults spelt out or left out: one run"
    assert rid != run_id_for(parse_spec(edit(BASE, "repetitions", 3)).canonical, policy.canonical())
    assert rid != run_id_for(spec.canonical, parse_policy({"maxAttemptsPerCell": 4}).canonical())
    assert rid.startswith("run-") and len(rid) == len("run-") + 16


GOLDEN_POLICY = {
    "heartbeatIntervalMs": 1000, "suspectAfterMs": 3500, "expireAfterMs": 15000, "recoveryGraceMs": 30000,
    "retryBackoffMs": 1000, "retryBackoffMaxMs": 60000, "maxAttemptsPerCell": 3, "requiredEnvironmentId": "env-1",
    "groupCpuMillis": 500, "groupMemoryMb": 256, "groupDeadlineMs": 0,
}


def test_a_golden_run_id_pins_the_canonical_form():
    # If this changes, every existing run id changes: a format break, not a refactor.
    spec = parse_spec(BASE)
    policy = parse_policy(GOLDEN_POLICY)
    assert policy.canonical() == canonical_json(GOLDEN_POLICY)
    assert run_id_for(spec.canonical, policy.canonical()) == "run-7be546427135fb2e"


# --- policy -----------------------------------------------------------------------------------

def policy_error(document: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_policy(document)
    return info.value


POLICY_DEFECTS = [
    ("unknown field", {"heartbeatMs": 100}, "policy.heartbeatMs", "unknown field"),
    ("snake case field", {"max_attempts_per_cell": 2}, "policy.max_attempts_per_cell", "unknown field"),
    ("zero attempts", {"maxAttemptsPerCell": 0}, "policy.maxAttemptsPerCell", "between 1 and"),
    ("attempts over the limit", {"maxAttemptsPerCell": limits.ATTEMPTS_PER_CELL_MAX + 1},
     "policy.maxAttemptsPerCell", "between"),
    ("boolean attempts", {"maxAttemptsPerCell": True}, "policy.maxAttemptsPerCell", "integer"),
    ("float grace", {"recoveryGraceMs": 1.5}, "policy.recoveryGraceMs", "integer"),
    ("heartbeat too fast", {"heartbeatIntervalMs": limits.HEARTBEAT_INTERVAL_MS_MIN - 1},
     "policy.heartbeatIntervalMs", "between"),
    ("negative reservation", {"groupCpuMillis": -1}, "policy.groupCpuMillis", "between"),
    ("environment not a string", {"requiredEnvironmentId": 7}, "policy.requiredEnvironmentId", "string"),
    ("suspicion under two heartbeats", {"heartbeatIntervalMs": 1000, "suspectAfterMs": 1999},
     "policy.suspectAfterMs", "two heartbeat intervals"),
    ("expiry not after suspicion", {"suspectAfterMs": 5000, "expireAfterMs": 5000},
     "policy.expireAfterMs", "exceed suspectAfterMs"),
    ("expiry before suspicion", {"suspectAfterMs": 5000, "expireAfterMs": 4000},
     "policy.expireAfterMs", "exceed suspectAfterMs"),
    ("backoff cap below backoff", {"retryBackoffMs": 2000, "retryBackoffMaxMs": 1000},
     "policy.retryBackoffMaxMs", "at least retryBackoffMs"),
    ("not an object", [1], "policy", "must be an object"),
]


@pytest.mark.parametrize("document, path, words", [pytest.param(d, p, w, id=i) for i, d, p, w in POLICY_DEFECTS])
def test_a_policy_defect_is_named_by_its_path(document, path, words):
    error = policy_error(document)
    assert error.path == path
    assert words in error.message


def test_policy_text_defaults_and_bad_json():
    assert parse_policy_text("") == Policy() == parse_policy({})
    assert parse_policy_text(b"{}") == Policy()
    with pytest.raises(SpecError) as info:
        parse_policy_text("{")
    assert info.value.path == "policy"


@pytest.mark.parametrize("document", [
    pytest.param({"heartbeatIntervalMs": 1000, "suspectAfterMs": 2000, "expireAfterMs": 2001}, id="tightest timings"),
    pytest.param({"retryBackoffMs": 0, "retryBackoffMaxMs": 0}, id="no backoff"),
    pytest.param({"maxAttemptsPerCell": limits.ATTEMPTS_PER_CELL_MAX}, id="most attempts"),
    pytest.param(GOLDEN_POLICY, id="every field"),
])
def test_valid_policies_round_trip_through_their_document(document):
    policy = parse_policy(document)
    assert parse_policy(policy.document()) == policy
    assert set(policy.document()) == set(GOLDEN_POLICY)
    assert json.loads(policy.canonical()) == policy.document()


@pytest.mark.parametrize("failed, expected", [
    pytest.param(0, 0, id="no failure yet"),
    pytest.param(1, 100, id="first retry"),
    pytest.param(2, 200, id="second doubles"),
    pytest.param(3, 400, id="third doubles again"),
    pytest.param(5, 1000, id="capped"),
    pytest.param(10_000, 1000, id="no overflow"),
])
def test_backoff_is_exponential_and_capped(failed, expected):
    assert Policy(retry_backoff_ms=100, retry_backoff_max_ms=1000).backoff_ms(failed) == expected


def test_the_group_deadline_is_explicit_or_derived_from_the_budget():
    spec = parse_spec(BASE)
    assert group_deadline_for(spec, Policy(group_deadline_ms=1234)) == 1234
    derived = limits.GROUP_DEADLINE_FACTOR * (30_000 + 7_000) + limits.GROUP_DEADLINE_SLACK_MS
    assert group_deadline_for(spec, Policy()) == derived


def test_a_canonical_text_means_what_it_meant_when_written_whatever_today_s_defaults():
    # A log record leaves out a later field at its ADDED_LATER value; a policy away from that
    # value, today's default for new runs included, writes the field out, and reads back exact.
    assert parse_canonical_policy("{}").stream_end_grace_ms == ADDED_LATER["stream_end_grace_ms"] == 1_500
    for grace in (3_000, 1_500, 0):
        policy = Policy(stream_end_grace_ms=grace)
        assert ("streamEndGraceMs" in policy.canonical()) == (grace != 1_500)
        assert parse_canonical_policy(policy.canonical()) == policy
    # The values an absent field means are fixed for ever: changing one changes stored records.
    assert ADDED_LATER == {"environment_match": "worker", "order_from": "", "stream_end_grace_ms": 1_500,
                           "providers": (), "max_throttled_attempts_per_cell": 20, "max_observed_cost_usd": 0.0,
                           "quarantine_after_failures": 5, "quarantine_backoff_ms": 60_000}


def test_providers_parse_sorted_and_read_back_from_their_canonical_text():
    policy = parse_policy({"providers": {"zeta": {}, "fake": {"maxConcurrentCells": 6, "subjects": ["a", "b"]}},
                           "maxThrottledAttemptsPerCell": 3, "maxObservedCostUsd": 2})
    assert [p.name for p in policy.providers] == ["fake", "zeta"]
    assert policy.provider_limit("fake").max_concurrent_cells == 6
    assert policy.provider_limit("zeta").max_concurrent_cells == 0
    assert policy.max_observed_cost_usd == 2.0
    assert parse_canonical_policy(policy.canonical()) == policy
    assert "providers" not in Policy().canonical() and "maxObservedCostUsd" not in Policy().canonical()


@pytest.mark.parametrize("document, path", [
    pytest.param({"providers": []}, "policy.providers", id="not an object"),
    pytest.param({"providers": {"bad name": {}}}, "policy.providers.bad name", id="bad name"),
    pytest.param({"providers": {"p": {"maxConcurrentCells": 0}}}, "policy.providers.p.maxConcurrentCells", id="zero"),
    pytest.param({"providers": {"p": {"maxCells": 3}}}, "policy.providers.p.maxCells", id="unknown field"),
    pytest.param({"providers": {"p": {"subjects": ["a"]}, "q": {"subjects": ["a"]}}}, "policy.providers.q.subjects",
                 id="subject mapped twice"),
    pytest.param({"maxObservedCostUsd": -1}, "policy.maxObservedCostUsd", id="negative cap"),
    pytest.param({"maxObservedCostUsd": True}, "policy.maxObservedCostUsd", id="boolean cap"),
    pytest.param({"maxThrottledAttemptsPerCell": 0}, "policy.maxThrottledAttemptsPerCell", id="no throttled attempts"),
])
def test_a_bad_provider_policy_names_its_field(document, path):
    with pytest.raises(SpecError) as e:
        parse_policy(document)
    assert e.value.path == path
