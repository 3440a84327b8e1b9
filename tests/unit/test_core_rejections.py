"""Every rejection the core can return leaves the state exactly as it was: each table row
builds a state with the `Core` harness, fingerprints it (durable fingerprint, a copy of the
soft state, the version), applies one bad command, and asserts the reason, a detail, no
effects, nothing to log, and an unchanged state; a meta-test checks that the table names
every `Rejection` that machine.py can return."""
from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from common.evidence import ArtifactRef, ArtifactUnavailable, Cleanup, Execution, Report, Status, Usage, Verification
from common.ids import AssignmentId, AttemptId, CellId, RunId, WorkerId, sha256_digest
from common.limits import ARTIFACTS_PER_REPORT_MAX, ID_CHARS_MAX, SCORE_ABS_MAX
from common.policy import ProviderLimit
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core.state import WorkerStatus
from coordinator.core import machine
from coordinator.core import order
from common.ids import run_id_for
from common.spec import parse_spec
from coordinator.core.effects import OutcomeKind
from coordinator.core.state import durable_fingerprint
from tests.unit.core_helpers import (
    ENV,
    ENV_FAILURE,
    EVIDENCE,
    EXPIRE_MS,
    OK,
    UNKNOWN,
    Core,
    artifact,
    make_policy,
    make_report,
    make_spec,
    pushes,
    spec_doc,
)

NO_RUN = RunId("run-0000000000000000")
STRANGER = WorkerId("w-stranger")


@dataclass(frozen=True)
class Case:
    id: str
    reason: Rejection
    build: Callable[[], tuple[Core, object]]


# --- builders of states -----------------------------------------------------------------------

def one_group(subjects: int = 2, **policy) -> tuple[Core, object]:
    """w1 holds the only group; returns the harness and the group's push."""
    k = Core(make_spec(tasks=1, subjects=subjects), make_policy(**policy))
    [push] = pushes(k.register("w1"))
    k.advance(10)
    return k, push


def two_workers() -> tuple[Core, object, object]:
    k = Core(make_spec(tasks=2, subjects=1))
    [p1] = pushes(k.register("w1"))
    [p2] = pushes(k.register("w2"))
    k.advance(10)
    return k, p1, p2


def superseded() -> tuple[Core, AttemptId, AttemptId]:
    """w1 expired; its group runs again on w2. Returns the old and the new attempt."""
    k = Core(make_spec(tasks=1, subjects=1))
    [old] = pushes(k.register("w1"))
    k.register("w2")
    k.clock(EXPIRE_MS, alive=("w2",))
    [new_aid] = k.held("w2")
    return k, old.cells[0].attempt_id, k.attempts_of(new_aid)[0]


def report_cmd(k: Core, tid: AttemptId, report: Report, **over) -> c.CellReported:
    a = k.attempt(tid)
    fields = dict(now_ms=k.now, worker_id=a.worker_id, attempt_id=tid, assignment_id=a.assignment_id,
                  generation=a.generation, report=report)
    fields.update(over)
    return c.CellReported(**fields)


def first_attempt(push) -> AttemptId:
    return push.cells[0].attempt_id


def with_report(report: Report, **policy) -> Callable[[], tuple[Core, object]]:
    def build():
        k, push = one_group(**policy)
        return k, report_cmd(k, first_attempt(push), report)
    return build


def register(wid: str = "w9", slots: int = 1, env: str = ENV, incarnation: int = 1, *, policy=None,
             cpu_millis: int = 0, memory_mb: int = 0) -> Callable[[], tuple[Core, object]]:
    def build():
        k = Core(policy=make_policy(**(policy or {})))
        return k, c.WorkerRegistered(k.now, WorkerId(wid), incarnation, slots, env,
                                     cpu_millis=cpu_millis, memory_mb=memory_mb)
    return build


def on_fresh_run(make: Callable[[Core], object]) -> Callable[[], tuple[Core, object]]:
    def build():
        k = Core()
        k.register("w1")
        return k, make(k)
    return build


def _providers_contradict():
    doc = spec_doc(tasks=1, subjects=2)
    doc["subjects"][0]["provider"] = "alpha"
    spec = parse_spec(doc)
    policy = make_policy(providers=(ProviderLimit("beta", 4, ("s0",)),))
    k = Core(spec, make_policy(), submit=False)
    return k, c.RunSubmitted(k.now, run_id_for(spec.canonical, policy.canonical()), spec, policy, k.manifest,
                             k.worker_keys)


def _policy_maps_a_stranger():
    spec = make_spec(tasks=1, subjects=2)
    policy = make_policy(providers=(ProviderLimit("beta", 4, ("nobody",)),))
    k = Core(spec, make_policy(), submit=False)
    return k, c.RunSubmitted(k.now, run_id_for(spec.canonical, policy.canonical()), spec, policy, k.manifest,
                             k.worker_keys)


def _at_spend_cap(new_cap=None):
    def build():
        k, push = one_group(subjects=2, max_observed_cost_usd=0.015)
        for cell in push.cells:
            k.report(cell.attempt_id, OK)  # 0.01 each: the second reaches the cap
        assert k.run.paused and k.run.pause_reason.startswith("spend cap reached")
        return k, c.RunRecovered(k.now, k.run_id, new_cap)
    return build


# --- the cases --------------------------------------------------------------------------------

def _measured(**over):
    """A measurement by registered worker w1 of the run, with fields replaced by `over`."""
    def build():
        k = Core()
        k.auto_measure = False
        k.register("w1", incarnation=2)
        values = dict(worker_id=WorkerId("w1"), incarnation=2, run_id=k.run_id, measured=k.measurement("w1", k.run_id))
        values.update(over)
        return k, c.RunEnvironmentMeasured(k.now, **values)
    return build


def _measured_by_expired():
    k = Core()
    k.register("w1")
    k.disconnect("w1")
    k.tick(EXPIRE_MS)
    return k, c.RunEnvironmentMeasured(k.now, WorkerId("w1"), 1, k.run_id, k.measurement("w1", k.run_id))


def _unsorted_manifest():
    k = Core(submit=False)
    return k, c.RunSubmitted(k.now, k.run_id, k.spec, k.policy, (("b", "1"), ("a", "2")))


def _other_manifest():
    k = Core()
    return k, c.RunSubmitted(k.now, k.run_id, k.spec, k.policy, (("bench.file:solve.py", "digest-solve-2"),),
                             k.worker_keys)


def _pin_held():
    k = Core(make_spec(tasks=3, subjects=1))
    k.register("w1")
    k.report_all(k.held("w1")[0])  # one result selected in the pinned environment
    k.disconnect("w1")
    k.tick(EXPIRE_MS)
    assert k.worker("w1").status == WorkerStatus.EXPIRED and k.run.pinned_by == "w1"
    return k, c.RunPinReleased(k.now, k.run_id, WorkerId("w1"))


def _stale_incarnation():
    k = Core()
    k.register("w1", incarnation=5)
    return k, c.WorkerRegistered(k.now, WorkerId("w1"), 4, 1, ENV)


def _spec_conflict(other_spec: bool):
    def build():
        k = Core()
        k.register("w1")
        spec = make_spec(tasks=5) if other_spec else k.spec
        policy = k.policy if other_spec else make_policy(retry_backoff_ms=7, retry_backoff_max_ms=7)
        return k, c.RunSubmitted(k.now, k.run_id, spec, policy)
    return build


def _ordered_from(earlier: str, *, settle: bool = True, name: str = "toy", version: str = "1",
                  order: tuple | None = None):
    """A second run whose policy names `earlier` ("first": the harness's run, settled unless
    told otherwise) as the run to order its dispatch from."""
    def build():
        k = Core(make_spec(tasks=2, subjects=1))
        [p1] = pushes(k.register("w1"))
        if settle:
            k.report_all(p1.assignment_id)
            [p2] = k.held("w1")
            k.report_all(p2)
        doc = spec_doc(tasks=2, subjects=1, name=name)
        doc["benchmark"]["version"] = version
        spec = parse_spec(doc)
        policy = make_policy(order_from=k.run_id if earlier == "first" else earlier)
        return k, c.RunSubmitted(k.now, run_id_for(spec.canonical, policy.canonical()), spec, policy,
                                k.manifest, k.worker_keys, order=order)
    return build


def _blocked():
    k, push = one_group(subjects=1)
    k.report(first_attempt(push), EVIDENCE["environment-failure"][0])
    return k


def _exhausted():
    k, push = one_group(subjects=1, max_attempts_per_cell=1)
    k.report(first_attempt(push), UNKNOWN)
    return k, push.cells[0].cell_id


def _worker_in(status: str) -> Core:
    k = Core(make_spec(tasks=1, subjects=1))
    k.register("w1")
    k.register("w2")
    if status == "expired":
        k.clock(EXPIRE_MS, alive=("w2",))
    elif status == "gone":
        k.gone("w1")
    elif status == "reconciling":
        k.coordinator_recovered()
    return k


def _report_artifact(size_delta: int, stored: bool):
    def build():
        k, push = one_group()
        ref, _ = artifact("stdout")
        if stored:
            k.store(ref)
        ref = replace(ref, size_bytes=ref.size_bytes + size_delta)
        return k, report_cmd(k, first_attempt(push), make_report(artifacts=(ref,)))
    return build


def _conflict_late():
    k, old, new = superseded()
    k.report(old, OK)
    return k, report_cmd(k, old, make_report(score=0.0))


def _conflict_authoritative():
    k, push = one_group()
    k.report(first_attempt(push), OK)
    return k, report_cmd(k, first_attempt(push), make_report(cost_usd=0.02))


def _conflict_after_selection():
    k, push = one_group(subjects=1)
    k.report(first_attempt(push), OK)  # selected, group released
    return k, report_cmd(k, first_attempt(push), UNKNOWN)


def _old_attempt_under_new_assignment():
    k, old, new = superseded()
    a = k.attempt(new)
    return k, report_cmd(k, old, OK, assignment_id=a.assignment_id, generation=a.generation,
                         worker_id=k.attempt(old).worker_id)


def _other_workers_attempt():
    k, p1, p2 = two_workers()
    return k, report_cmd(k, first_attempt(p2), OK, worker_id=WorkerId("w1"))


def _other_workers_group():
    k, p1, p2 = two_workers()
    return k, c.GroupFinished(k.now, WorkerId("w1"), p2.assignment_id)


def _grant_selected():
    k, push = one_group(subjects=1)
    k.report(first_attempt(push), OK)
    return k, c.CellRetryGranted(k.now, k.run_id, push.cells[0].cell_id)


def _grant_running():
    k, _ = _exhausted()
    [again] = pushes(k.grant(k.run.groups[0].cells[0]))
    return k, c.CellRetryGranted(k.now, k.run_id, again.cells[0].cell_id)


def _grant_attempts_left():
    k, push = one_group(subjects=1, retry_backoff_ms=1_000, retry_backoff_max_ms=1_000)
    k.report(first_attempt(push), UNKNOWN)  # waits in backoff, two attempts left
    return k, c.CellRetryGranted(k.now, k.run_id, push.cells[0].cell_id)


def _grant_never_run():
    k = Core()  # no worker: nothing ran yet
    return k, c.CellRetryGranted(k.now, k.run_id, k.run.groups[0].cells[0])


def _evidence(name: str, report: Report) -> Case:
    return Case(f"invalid evidence: {name}", Rejection.INVALID_EVIDENCE, with_report(report))


def _contradiction(name: str, report: Report, status: Status) -> Case:
    return Case(f"status contradicts evidence: {name}", Rejection.STATUS_CONTRADICTS_EVIDENCE,
                with_report(replace(report, status=status)))


DIGEST = sha256_digest(b"x")

def _offered_before_measured():
    """A restore lost a reported attempt; its worker is back but has not measured the run."""
    from tests.unit.test_core_restore import _restored, _run_to_backup_and_on
    k, backup, after = _run_to_backup_and_on()
    r = _restored(k, backup)
    r.auto_measure = False
    r.register("w1", slots=2)
    o = after[0]
    return r, c.ResultOffered(r.now, o.worker_id, o.attempt_id, o.assignment_id, o.generation, o.report)


CASES: list[Case] = [
    # unknown things
    Case("pause an unknown run", Rejection.UNKNOWN_RUN, on_fresh_run(lambda k: c.RunPaused(k.now, NO_RUN))),
    Case("recover an unknown run", Rejection.UNKNOWN_RUN, on_fresh_run(lambda k: c.RunRecovered(k.now, NO_RUN))),
    Case("repair an unknown run", Rejection.UNKNOWN_RUN, on_fresh_run(lambda k: c.RunRepaired(k.now, NO_RUN, "x"))),
    Case("retry in an unknown run", Rejection.UNKNOWN_RUN,
         on_fresh_run(lambda k: c.CellRetryGranted(k.now, NO_RUN, k.run.groups[0].cells[0]))),
    Case("report from an unregistered worker", Rejection.UNKNOWN_WORKER,
         lambda: (lambda k, p: (k, report_cmd(k, first_attempt(p), OK, worker_id=STRANGER)))(*one_group())),
    Case("group finished by an unregistered worker", Rejection.UNKNOWN_WORKER,
         lambda: (lambda k, p: (k, c.GroupFinished(k.now, STRANGER, p.assignment_id)))(*one_group())),
    Case("heartbeat from an unregistered worker", Rejection.UNKNOWN_WORKER,
         on_fresh_run(lambda k: c.HeartbeatReceived(k.now, STRANGER))),
    Case("disconnect of an unregistered worker", Rejection.UNKNOWN_WORKER,
         on_fresh_run(lambda k: c.WorkerDisconnected(k.now, STRANGER))),
    Case("drain an unregistered worker", Rejection.UNKNOWN_WORKER,
         on_fresh_run(lambda k: c.WorkerDrained(k.now, STRANGER))),
    Case("unregistered worker gone", Rejection.UNKNOWN_WORKER, on_fresh_run(lambda k: c.WorkerGone(k.now, STRANGER))),
    Case("suspect an unregistered worker", Rejection.UNKNOWN_WORKER,
         on_fresh_run(lambda k: c.WorkerSuspected(k.now, STRANGER))),
    Case("resume an unregistered worker", Rejection.UNKNOWN_WORKER,
         on_fresh_run(lambda k: c.WorkerResumed(k.now, STRANGER))),
    Case("expire an unregistered worker", Rejection.UNKNOWN_WORKER,
         on_fresh_run(lambda k: c.WorkerExpired(k.now, STRANGER))),
    Case("finish an unknown assignment", Rejection.UNKNOWN_ASSIGNMENT,
         on_fresh_run(lambda k: c.GroupFinished(k.now, WorkerId("w1"), AssignmentId(f"{k.run_id}:t0/r1:g9")))),
    Case("report an attempt never dispatched", Rejection.UNKNOWN_ATTEMPT,
         lambda: (lambda k, p: (k, report_cmd(k, first_attempt(p), OK,
                                              attempt_id=AttemptId(first_attempt(p)[:-1] + "7"))))(*one_group())),
    Case("retry an unknown cell", Rejection.UNKNOWN_CELL,
         on_fresh_run(lambda k: c.CellRetryGranted(k.now, k.run_id, CellId("t9/r1/s0")))),
    # ownership and generations
    Case("report with a wrong generation", Rejection.GENERATION_MISMATCH,
         lambda: (lambda k, p: (k, report_cmd(k, first_attempt(p), OK, generation=2)))(*one_group())),
    Case("report under another assignment id", Rejection.GENERATION_MISMATCH,
         lambda: (lambda k, p: (k, report_cmd(k, first_attempt(p), OK,
                                              assignment_id=AssignmentId(p.assignment_id + "x"))))(*one_group())),
    Case("old attempt under the new assignment", Rejection.GENERATION_MISMATCH, _old_attempt_under_new_assignment),
    Case("report on another worker's attempt", Rejection.NOT_OWNER, _other_workers_attempt),
    Case("finish another worker's group", Rejection.NOT_OWNER, _other_workers_group),
    Case("different content, authoritative", Rejection.CONFLICTING_REPORT, _conflict_authoritative),
    Case("different content after selection", Rejection.CONFLICTING_REPORT, _conflict_after_selection),
    Case("different content for a late report", Rejection.CONFLICTING_REPORT, _conflict_late),
    # evidence
    Case("artifact not stored", Rejection.ARTIFACT_MISSING, _report_artifact(0, stored=False)),
    Case("invalid evidence: stored artifact of another size", Rejection.INVALID_EVIDENCE, _report_artifact(1, True)),
    _evidence("valid verification without a score", replace(OK, score=None)),
    _evidence("a score without valid verification",
              make_report(verification=Verification.INVALID, score=1.0)),
    _evidence("a NaN score", replace(OK, score=math.nan)),
    _evidence("an infinite score", replace(OK, score=math.inf)),
    _evidence("a score beyond the limit", replace(OK, score=SCORE_ABS_MAX * 2)),
    _evidence("negative input tokens", replace(OK, input_tokens=-1)),
    _evidence("negative cached tokens", replace(OK, cached_tokens=-5)),
    _evidence("a negative cost", replace(OK, cost_usd=-0.01)),
    _evidence("a NaN cost", replace(OK, cost_usd=math.nan)),
    _evidence("complete usage without a cost", replace(OK, cost_usd=None)),
    _evidence("unspecified status", replace(OK, status=Status.UNSPECIFIED)),
    _evidence("unspecified execution", replace(OK, execution=Execution.UNSPECIFIED)),
    _evidence("unspecified verification", replace(OK, verification=Verification.UNSPECIFIED)),
    _evidence("unspecified usage", replace(OK, usage=Usage.UNSPECIFIED)),
    _evidence("unspecified cleanup", replace(OK, cleanup=Cleanup.UNSPECIFIED)),
    _evidence("a bare int for an enum", replace(OK, execution=1)),
    _evidence("too many artifacts", replace(OK, unavailable=tuple(
        ArtifactUnavailable(f"a{i}", "none") for i in range(ARTIFACTS_PER_REPORT_MAX + 1)))),
    _evidence("an artifact name twice", replace(OK, artifacts=(ArtifactRef("log", DIGEST, 1),),
                                                 unavailable=(ArtifactUnavailable("log", "gone"),))),
    _evidence("an artifact without a name", replace(OK, artifacts=(ArtifactRef("", DIGEST, 1),))),
    _evidence("an artifact name too long", replace(OK, artifacts=(ArtifactRef("n" * (ID_CHARS_MAX + 1), DIGEST, 1),))),
    _evidence("a malformed digest", replace(OK, artifacts=(ArtifactRef("log", "sha256:abc", 1),))),
    _evidence("an uppercase digest", replace(OK, artifacts=(ArtifactRef("log", DIGEST.upper(), 1),))),
    _evidence("a negative artifact size", replace(OK, artifacts=(ArtifactRef("log", DIGEST, -1),))),
    _evidence("unavailable without a reason", replace(OK, unavailable=(ArtifactUnavailable("log", ""),))),
    _evidence("an environment failure reason too long",
              make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING,
                          environment_failure="x" * (ID_CHARS_MAX + 1))),
    _contradiction("completed over unknown execution", UNKNOWN, Status.COMPLETED),
    _contradiction("subject failed over a completed run", OK, Status.SUBJECT_FAILED),
    _contradiction("completed over an environment failure", EVIDENCE["environment-failure"][0], Status.COMPLETED),
    _contradiction("indeterminate over selectable evidence", OK, Status.INDETERMINATE),
    _contradiction("infra failed over unknown cleanup", EVIDENCE["unknown-cleanup"][0], Status.INFRA_FAILED),
    # admission
    Case("no environment identity", Rejection.ENVIRONMENT_MISMATCH, register(env="")),
    Case("a measurement from an older incarnation", Rejection.INCARNATION_STALE, _measured(incarnation=1)),
    Case("a measurement of an unknown run", Rejection.UNKNOWN_RUN, _measured(run_id="run-nope")),
    Case("a measurement by an unknown worker", Rejection.UNKNOWN_WORKER, _measured(worker_id=WorkerId("w9"))),
    Case("a measurement repeating a key", Rejection.MALFORMED_FRAME,
         _measured(measured=(("tool:solve", "1"), ("tool:solve", "2")))),
    Case("a measurement by an expired worker", Rejection.WORKER_NOT_ACTIVE, _measured_by_expired),
    Case("a manifest not sorted by key", Rejection.SPEC_INVALID, _unsorted_manifest),
    Case("same run id, other manifest", Rejection.SPEC_CONFLICT, _other_manifest),
    Case("a pin release a selected result depends on", Rejection.RUN_PIN_HELD, _pin_held),
    Case("zero slots", Rejection.CAPACITY_INVALID, register(slots=0)),
    Case("too many slots", Rejection.CAPACITY_INVALID, register(slots=1025)),
    Case("cpu below the reservation", Rejection.CAPACITY_INVALID,
         register(slots=2, policy=dict(group_cpu_millis=500), cpu_millis=999)),
    Case("memory below the reservation", Rejection.CAPACITY_INVALID,
         register(slots=1, policy=dict(group_memory_mb=2048), memory_mb=2047)),
    Case("an older incarnation", Rejection.INCARNATION_STALE, _stale_incarnation),
    Case("empty worker id", Rejection.MALFORMED_FRAME, register(wid="")),
    Case("worker id too long", Rejection.MALFORMED_FRAME, register(wid="w" * (ID_CHARS_MAX + 1))),
    Case("artifact with a malformed digest", Rejection.MALFORMED_FRAME,
         on_fresh_run(lambda k: c.ArtifactStored(k.now, "md5:abc", 3))),
    Case("artifact with a negative size", Rejection.MALFORMED_FRAME,
         on_fresh_run(lambda k: c.ArtifactStored(k.now, DIGEST, -1))),
    # runs
    Case("same run id, other spec", Rejection.SPEC_CONFLICT, _spec_conflict(other_spec=True)),
    Case("same run id, other policy", Rejection.SPEC_CONFLICT, _spec_conflict(other_spec=False)),
    Case("order from an unknown run", Rejection.UNKNOWN_RUN, _ordered_from(NO_RUN)),
    Case("order from a run in progress", Rejection.ORDER_RUN_IN_PROGRESS, _ordered_from("first", settle=False)),
    Case("order from another benchmark", Rejection.ORDER_RUN_OTHER_BENCHMARK, _ordered_from("first", name="other")),
    Case("order from another benchmark version", Rejection.ORDER_RUN_OTHER_BENCHMARK,
         _ordered_from("first", version="2")),
    Case("a logged order that is not a permutation", Rejection.SPEC_INVALID,
         _ordered_from("first", order=(0, 0))),
    Case("repair with another reason", Rejection.REPAIR_REASON_MISMATCH,
         lambda: (lambda k: (k, c.RunRepaired(k.now, k.run_id, ENV_FAILURE + "!")))(_blocked())),
    Case("subject's provider in the spec contradicts the policy", Rejection.PROVIDERS_INVALID, _providers_contradict),
    Case("policy maps a subject the spec lacks", Rejection.PROVIDERS_INVALID, _policy_maps_a_stranger),
    Case("recover at the spend cap without a new cap", Rejection.SPEND_CAP_REACHED, _at_spend_cap()),
    Case("recover at the spend cap with a cap below the cost", Rejection.SPEND_CAP_REACHED, _at_spend_cap(0.012)),
    Case("recover with a negative cap", Rejection.SPEC_INVALID, _at_spend_cap(-1.0)),
    Case("recover with a cap that is not a number", Rejection.SPEC_INVALID, _at_spend_cap(math.nan)),
    Case("release a worker that is not quarantined", Rejection.WORKER_NOT_QUARANTINED,
         on_fresh_run(lambda k: c.WorkerReleased(k.now, WorkerId("w1")))),
    Case("a result offered after a restore before the worker measured the run", Rejection.NOT_YET_MEASURED,
         _offered_before_measured),
    Case("a stall of negative length", Rejection.MALFORMED_FRAME,
         on_fresh_run(lambda k: c.CoordinatorStalled(k.now, -1))),
    Case("recover a run that is not paused", Rejection.RUN_NOT_PAUSED,
         on_fresh_run(lambda k: c.RunRecovered(k.now, k.run_id))),
    Case("repair a run that is not blocked", Rejection.RUN_NOT_BLOCKED,
         on_fresh_run(lambda k: c.RunRepaired(k.now, k.run_id, ENV_FAILURE))),
    Case("retry a selected cell", Rejection.CELL_NOT_INCOMPLETE, _grant_selected),
    Case("retry a running cell", Rejection.CELL_NOT_INCOMPLETE, _grant_running),
    Case("retry a cell with attempts left", Rejection.CELL_NOT_INCOMPLETE, _grant_attempts_left),
    Case("retry a cell never run", Rejection.CELL_NOT_INCOMPLETE, _grant_never_run),
    # workers that may not act
    Case("heartbeat from an expired worker", Rejection.WORKER_NOT_ACTIVE,
         lambda: (lambda k: (k, c.HeartbeatReceived(k.now, WorkerId("w1"))))(_worker_in("expired"))),
    Case("heartbeat from a gone worker", Rejection.WORKER_NOT_ACTIVE,
         lambda: (lambda k: (k, c.HeartbeatReceived(k.now, WorkerId("w1"))))(_worker_in("gone"))),
    Case("heartbeat before hello after a restart", Rejection.WORKER_NOT_ACTIVE,
         lambda: (lambda k: (k, c.HeartbeatReceived(k.now, WorkerId("w1"))))(_worker_in("reconciling"))),
    Case("drain a gone worker", Rejection.WORKER_NOT_ACTIVE,
         lambda: (lambda k: (k, c.WorkerDrained(k.now, WorkerId("w1"))))(_worker_in("gone"))),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c_.reason.name}: {c_.id}" for c_ in CASES])
def test_a_rejected_command_changes_nothing(case: Case):
    k, command = case.build()
    fingerprint = durable_fingerprint(k.state)
    soft = copy.deepcopy(k.state.soft)
    version = k.state.version
    t = k.apply(command)
    assert t.outcome.kind == OutcomeKind.REJECTED, t.outcome
    assert t.outcome.rejection == case.reason, t.outcome
    assert t.outcome.detail, "a rejection says what is wrong"
    assert t.effects == ()
    assert t.durable == ()
    assert durable_fingerprint(k.state) == fingerprint
    assert k.state.soft == soft
    assert k.state.version == version
    k.assert_replays()


def test_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


def test_the_table_covers_every_rejection_the_core_returns():
    source = Path(machine.__file__).read_text() + Path(order.__file__).read_text()
    returned = set(re.findall(r"rejected\(\s*Rejection\.([A-Z_]+)", source))
    assert returned, "the pattern no longer finds the core's rejections"
    covered = {case.reason.name for case in CASES}
    assert returned - covered == set(), "rejections without a test"
    assert covered - returned == set(), "tests for rejections the core never returns"


def test_the_evidence_table_has_several_cases_per_evidence_rejection():
    counts = {r: sum(1 for case in CASES if case.reason == r) for r in
              (Rejection.INVALID_EVIDENCE, Rejection.STATUS_CONTRADICTS_EVIDENCE)}
    assert counts[Rejection.INVALID_EVIDENCE] >= 10 and counts[Rejection.STATUS_CONTRADICTS_EVIDENCE] >= 3
