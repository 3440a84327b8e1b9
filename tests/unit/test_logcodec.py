"""The log record codec loses nothing and refuses bad input with one error type: Hypothesis
round-trips every durable command class through bytes, and table-driven cases feed it
malformed records (random bytes, truncations, no command, unknown fields and enums) and
commands the log cannot hold."""
from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.evidence import (
    ArtifactRef,
    ArtifactUnavailable,
    Cleanup,
    Execution,
    Report,
    Status,
    Usage,
    Verification,
)
from common.fleetpb import common_pb2, log_pb2
from common.ids import sha256_digest
from common.policy import Policy, parse_policy
from common.spec import parse_spec
from coordinator import logcodec
from coordinator.core import commands as c
from coordinator.logcodec import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    LogCodecError,
    decode_record,
    durable_command_classes,
    encode_record,
    report_from_proto,
    report_to_proto,
)

# ---- strategies -----------------------------------------------------------------------------

int64s = st.integers(INT64_MIN, INT64_MAX)
now_ms = st.integers(0, INT64_MAX) | int64s
# Ids are ordinary text on the wire: any UTF-8 (Hypothesis' text() never yields lone surrogates).
texts = st.text(max_size=24)
ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", fullmatch=True)
id_tuples = st.lists(texts, max_size=5).map(tuple)
digests = st.binary(max_size=8).map(sha256_digest) | texts


def _optional(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


finite_or_infinite = st.floats(allow_nan=False)
reports = st.builds(
    Report,
    status=st.sampled_from(Status),
    execution=st.sampled_from(Execution),
    verification=st.sampled_from(Verification),
    usage=st.sampled_from(Usage),
    cleanup=st.sampled_from(Cleanup),
    score=_optional(finite_or_infinite | st.just(0.0)),
    environment_failure=texts,
    input_tokens=_optional(int64s | st.just(0)),
    output_tokens=_optional(int64s),
    cached_tokens=_optional(int64s),
    cost_usd=_optional(finite_or_infinite | st.just(0.0)),
    started_ms=int64s,
    finished_ms=int64s,
    detail=texts,
    artifacts=st.lists(
        st.builds(ArtifactRef, name=texts, digest=digests, size_bytes=st.integers(0, UINT64_MAX)),
        max_size=3,
    ).map(tuple),
    unavailable=st.lists(st.builds(ArtifactUnavailable, name=texts, reason=texts), max_size=3).map(tuple),
)


@st.composite
def specs(draw: st.DrawFn):
    subjects = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    tasks = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    document = {
        "name": draw(texts),
        "benchmark": {"name": draw(texts.filter(bool)), "version": draw(texts)},
        "executor": {"kind": "command"},
        "subjects": [
            {"id": s, "command": "run-" + s,
             "credentials": draw(st.lists(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True),
                                          max_size=2, unique=True))}
            for s in subjects
        ],
        "tasks": [{"id": t, "input": draw(texts)} for t in tasks],
        "repetitions": draw(st.integers(1, 5)),
        "budget": {"timeoutSeconds": draw(st.integers(1, 3600))},
        "verifier": {"command": "verify", "timeoutSeconds": draw(st.integers(1, 600))},
        "execution": {"maxConcurrentTaskGroups": draw(st.integers(1, 64))},
    }
    return parse_spec(document)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    heartbeat = draw(st.integers(10, 60_000))
    suspect = draw(st.integers(2 * heartbeat, 2 * heartbeat + 100_000))
    expire = draw(st.integers(suspect + 1, suspect + 1_000_000))
    # Either of the backoff pair may fall back to its default (1 s, 60 s) and stay ordered.
    backoff = draw(st.integers(0, 60_000))
    document = {
        "heartbeatIntervalMs": heartbeat,
        "suspectAfterMs": suspect,
        "expireAfterMs": expire,
        "recoveryGraceMs": draw(st.integers(0, 3_600_000)),
        "retryBackoffMs": backoff,
        "retryBackoffMaxMs": draw(st.integers(max(backoff, 1_000), 1_000_000)),
        "maxAttemptsPerCell": draw(st.integers(1, 100)),
        "requiredEnvironmentId": draw(texts),
        "groupCpuMillis": draw(st.integers(0, 1 << 30)),
        "groupMemoryMb": draw(st.integers(0, 1 << 30)),
        "groupDeadlineMs": draw(st.integers(0, 30 * 24 * 3600_000)),
        "orderFrom": draw(texts.filter(lambda t: len(t) <= 200)),
        "streamEndGraceMs": draw(st.integers(0, 7 * 24 * 3600_000)),
    }
    # A policy document may leave any field at its default.
    keep = draw(st.lists(st.sampled_from(sorted(document)), unique=True))
    return parse_policy({k: v for k, v in document.items() if k in keep or k in
                         ("heartbeatIntervalMs", "suspectAfterMs", "expireAfterMs")})


def _worker_only(cls: type) -> st.SearchStrategy:
    return st.builds(cls, now_ms=now_ms, worker_id=texts)


def _run_only(cls: type) -> st.SearchStrategy:
    return st.builds(cls, now_ms=now_ms, run_id=texts)


# A manifest as the core holds it: (key, value) pairs with distinct keys, sorted by key.
manifests = st.dictionaries(texts, texts, max_size=4).map(lambda d: tuple(sorted(d.items())))

STRATEGIES: dict[type, st.SearchStrategy] = {
    c.RunSubmitted: st.builds(c.RunSubmitted, now_ms=now_ms, run_id=texts, spec=specs(), policy=policies(),
                              manifest=manifests, worker_keys=id_tuples,
                              order=st.lists(st.integers(0, INT64_MAX), max_size=6).map(tuple)),
    c.WorkerRegistered: st.builds(
        c.WorkerRegistered, now_ms=now_ms, worker_id=texts, incarnation=int64s, slots=int64s,
        environment_id=texts, cpu_millis=int64s, memory_mb=int64s, owned=id_tuples, buffered=id_tuples,
        environment=manifests,
    ),
    c.RunEnvironmentMeasured: st.builds(c.RunEnvironmentMeasured, now_ms=now_ms, worker_id=texts, incarnation=int64s,
                                        run_id=texts, measured=manifests),
    c.RunPinReleased: st.builds(c.RunPinReleased, now_ms=now_ms, run_id=texts, worker_id=texts),
    c.CellReported: st.builds(
        c.CellReported, now_ms=now_ms, worker_id=texts, attempt_id=texts, assignment_id=texts,
        generation=int64s, report=reports,
    ),
    c.ArtifactStored: st.builds(c.ArtifactStored, now_ms=now_ms, digest=digests, size_bytes=int64s),
    c.GroupFinished: st.builds(c.GroupFinished, now_ms=now_ms, worker_id=texts, assignment_id=texts),
    c.RunPaused: _run_only(c.RunPaused),
    c.RunRecovered: st.builds(c.RunRecovered, now_ms=now_ms, run_id=texts,
                              max_observed_cost_usd=st.none() | st.floats(0, 1e9, allow_nan=False)),
    c.RunRepaired: st.builds(c.RunRepaired, now_ms=now_ms, run_id=texts, reason=texts),
    c.CellRetryGranted: st.builds(c.CellRetryGranted, now_ms=now_ms, run_id=texts, cell_id=texts),
    c.WorkerDrained: _worker_only(c.WorkerDrained),
    c.WorkerGone: _worker_only(c.WorkerGone),
    c.CoordinatorRecovered: st.builds(c.CoordinatorRecovered, now_ms=now_ms),
    c.CoordinatorStalled: st.builds(c.CoordinatorStalled, now_ms=now_ms, stalled_ms=st.integers(0, 1 << 40)),
    c.WorkerQuarantined: st.builds(c.WorkerQuarantined, now_ms=now_ms, worker_id=texts),
    c.WorkerProbed: st.builds(c.WorkerProbed, now_ms=now_ms, worker_id=texts),
    c.WorkerReleased: st.builds(c.WorkerReleased, now_ms=now_ms, worker_id=texts),
    c.WorkerDegraded: st.builds(c.WorkerDegraded, now_ms=now_ms, worker_id=texts, reason=texts),
    c.CoordinatorRestored: st.builds(c.CoordinatorRestored, now_ms=now_ms, backup_id=texts, epoch=texts),
    c.ResultOffered: st.builds(
        c.ResultOffered, now_ms=now_ms, worker_id=texts, attempt_id=texts, assignment_id=texts,
        generation=int64s, report=reports),
    c.WorkerSuspected: _worker_only(c.WorkerSuspected),
    c.WorkerResumed: _worker_only(c.WorkerResumed),
    c.WorkerExpired: _worker_only(c.WorkerExpired),
    c.TimeAdvanced: st.builds(c.TimeAdvanced, now_ms=now_ms),
    c.WorkerLost: _worker_only(c.WorkerLost),
}
DURABLE = durable_command_classes()
indexes = st.integers(0, UINT64_MAX)
any_command = st.one_of(*STRATEGIES.values())


# ---- round trips ----------------------------------------------------------------------------

def test_every_durable_command_has_a_strategy():
    assert set(STRATEGIES) == set(DURABLE), "add a strategy for each new durable command"
    assert not set(DURABLE) & set(c.SOFT_COMMANDS)


@pytest.mark.parametrize("cls", DURABLE, ids=lambda k: k.__name__)
@given(data=st.data(), index=indexes)
def test_round_trip(cls, data, index):
    cmd = data.draw(STRATEGIES[cls])
    encoded = encode_record(index, cmd)
    got_index, got = decode_record(encoded)
    assert got_index == index
    assert type(got) is cls
    assert got == cmd
    # Deterministic: the same command always yields the same bytes.
    assert encode_record(got_index, got) == encoded


@given(report=reports)
def test_report_helpers_round_trip(report):
    assert report_from_proto(report_to_proto(report)) == report


@pytest.mark.parametrize("field", ["score", "cost_usd", "input_tokens", "output_tokens", "cached_tokens"])
def test_unknown_stays_distinct_from_zero(field):
    base = Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.PARTIAL, Cleanup.CONFIRMED)
    unknown = replace(base, **{field: None})
    zero = replace(base, **{field: 0})
    for report in (unknown, zero):
        cmd = c.CellReported(1, "w", "a", "g", 1, report)
        assert decode_record(encode_record(1, cmd))[1].report == report
    assert not report_to_proto(unknown).HasField(field)
    assert report_to_proto(zero).HasField(field)
    assert getattr(report_from_proto(report_to_proto(unknown)), field) is None


def test_nan_score_survives_as_nan():
    report = Report(Status.INDETERMINATE, Execution.COMPLETED, Verification.VALID, Usage.MISSING,
                    Cleanup.CONFIRMED, score=math.nan)
    assert math.isnan(report_from_proto(report_to_proto(report)).score)


def test_spec_and_policy_travel_as_canonical_text():
    spec = parse_spec({
        "benchmark": {"name": "b"}, "executor": {"kind": "command"},
        "subjects": [{"id": "s", "command": "x"}], "tasks": [{"id": "t"}], "repetitions": 1,
        "budget": {"timeoutSeconds": 5}, "verifier": {"command": "v"},
        "execution": {"maxConcurrentTaskGroups": 1},
    })
    policy = Policy()
    record = log_pb2.LogRecord.FromString(encode_record(1, c.RunSubmitted(0, "run-x", spec, policy, order=())))
    assert record.run_submitted.spec == spec.canonical
    assert record.run_submitted.policy == policy.canonical()


def test_the_dispatch_order_is_logged_resolved_and_never_unresolved():
    spec = parse_spec({
        "benchmark": {"name": "b"}, "executor": {"kind": "command"},
        "subjects": [{"id": "s", "command": "x"}], "tasks": [{"id": "t"}, {"id": "u"}], "repetitions": 1,
        "budget": {"timeoutSeconds": 5}, "verifier": {"command": "v"},
        "execution": {"maxConcurrentTaskGroups": 1},
    })
    policy = Policy(order_from="run-earlier")
    cmd = c.RunSubmitted(0, "run-x", spec, policy, order=(1, 0))
    assert decode_record(encode_record(1, cmd)) == (1, cmd)
    with pytest.raises(LogCodecError, match="unresolved dispatch order"):
        encode_record(1, c.RunSubmitted(0, "run-x", spec, policy))


# ---- the schema mirrors the command classes -------------------------------------------------

@pytest.mark.parametrize("cls", DURABLE, ids=lambda k: k.__name__)
def test_log_message_has_exactly_the_command_fields(cls):
    message = getattr(log_pb2.LogRecord, cls.__name__, None)
    assert message is not None, f"protos/fleet/v1/log.proto: LogRecord has no message {cls.__name__}"
    proto_fields = {f.name for f in message.DESCRIPTOR.fields}
    class_fields = {f.name for f in fields(cls)} - {"now_ms"}
    assert proto_fields == class_fields


def test_log_oneof_covers_exactly_the_durable_commands():
    oneof = log_pb2.LogRecord.DESCRIPTOR.oneofs_by_name["command"]
    expected = {logcodec._snake(k.__name__): k.__name__ for k in DURABLE}
    assert {f.name: f.message_type.name for f in oneof.fields} == expected


def test_report_message_mirrors_the_report_dataclass():
    assert {f.name for f in common_pb2.Report.DESCRIPTOR.fields} == {f.name for f in fields(Report)}
    assert {f.name for f in common_pb2.ArtifactRef.DESCRIPTOR.fields} == {f.name for f in fields(ArtifactRef)}
    assert ({f.name for f in common_pb2.ArtifactUnavailable.DESCRIPTOR.fields}
            == {f.name for f in fields(ArtifactUnavailable)})
    optional = {f.name for f in common_pb2.Report.DESCRIPTOR.fields if f.has_presence}
    assert optional == {"score", "input_tokens", "output_tokens", "cached_tokens", "cost_usd"}


# ---- malformed input ------------------------------------------------------------------------

def _decode_or_refuse(data: bytes) -> None:
    """Decoding yields a command or LogCodecError; any other exception fails the test."""
    try:
        index, cmd = decode_record(data)
    except LogCodecError:
        return
    assert isinstance(index, int) and type(cmd) in DURABLE


@settings(max_examples=500)
@given(data=st.binary(max_size=200))
def test_random_bytes_decode_or_raise_log_codec_error(data):
    _decode_or_refuse(data)


@given(cmd=any_command, index=indexes, data=st.data())
def test_truncated_records_decode_or_raise_log_codec_error(cmd, index, data):
    encoded = encode_record(index, cmd)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    _decode_or_refuse(encoded[:cut])


def test_truncation_inside_a_field_is_refused():
    encoded = encode_record(7, c.WorkerGone(1, "worker-with-a-long-name"))
    with pytest.raises(LogCodecError, match="not a log record"):
        decode_record(encoded[:-3])


@given(field_text=st.text(max_size=40), which=st.sampled_from(["spec", "policy"]))
def test_garbage_spec_or_policy_text_is_refused(field_text, which):
    record = log_pb2.LogRecord(index=1, now_ms=1)
    setattr(record.run_submitted, which, field_text)
    _decode_or_refuse(record.SerializeToString())


@pytest.mark.parametrize("data, message", [
    (b"", "holds no command"),
    (log_pb2.LogRecord(index=5, now_ms=9).SerializeToString(), "record 5 holds no command"),
    (b"\xff\xff\xff", "not a log record"),
    (log_pb2.LogRecord(index=1).SerializeToString() + b"\xf8\x07\x01", "does not know"),
], ids=["empty", "no-command", "garbage", "unknown-field"])
def test_malformed_records_are_refused(data, message):
    with pytest.raises(LogCodecError, match=message):
        decode_record(data)


def test_unknown_field_inside_a_nested_message_is_refused():
    report = Report(Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN,
                    Cleanup.UNKNOWN)
    record = log_pb2.LogRecord.FromString(encode_record(2, c.CellReported(1, "w", "a", "g", 1, report)))
    record.cell_reported.report.artifacts.add(name="x")
    data = record.SerializeToString()
    # Append field 99 (varint) to the artifact message by rebuilding it with raw bytes.
    artifact = record.cell_reported.report.artifacts[0]
    artifact.MergeFromString(b"\x98\x06\x01")
    with pytest.raises(LogCodecError, match=r"record.cell_reported.report.artifacts\[0\]"):
        decode_record(record.SerializeToString())
    assert decode_record(data)[1].report.artifacts[0].name == "x"


@pytest.mark.parametrize("field, enum_name", [("status", "Status"), ("execution", "Execution"),
                                              ("verification", "Verification"), ("usage", "Usage"),
                                              ("cleanup", "Cleanup")])
def test_unknown_enum_number_is_refused(field, enum_name):
    record = log_pb2.LogRecord(index=3, now_ms=1)
    record.cell_reported.report.CopyFrom(report_to_proto(Report(
        Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.MISSING, Cleanup.CONFIRMED, score=1.0)))
    setattr(record.cell_reported.report, field, 99)
    with pytest.raises(LogCodecError, match=f"report.{field}: 99 is not a known {enum_name}"):
        decode_record(record.SerializeToString())


def test_corrupt_spec_text_is_refused():
    record = log_pb2.LogRecord(index=4, now_ms=1)
    record.run_submitted.spec = "{"
    record.run_submitted.policy = "{}"
    with pytest.raises(LogCodecError, match="spec does not parse"):
        decode_record(record.SerializeToString())


def test_non_bytes_are_refused():
    with pytest.raises(LogCodecError):
        decode_record("not bytes")  # type: ignore[arg-type]


# ---- commands the log cannot hold -----------------------------------------------------------

_REPORT = Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE,
                 Cleanup.CONFIRMED, score=1.0, cost_usd=0.5)


@pytest.mark.parametrize("index, cmd, message", [
    (1, c.HeartbeatReceived(1, "w"), "not a durable command"),
    (1, c.ClockTicked(1), "not a durable command"),
    (1, object(), "not a durable command"),
    (-1, c.TimeAdvanced(1), "index: -1 is out of range"),
    (UINT64_MAX + 1, c.TimeAdvanced(1), "index"),
    (1, c.TimeAdvanced(INT64_MAX + 1), "TimeAdvanced.now_ms"),
    (1, c.TimeAdvanced(1.5), "expected an integer"),  # type: ignore[arg-type]
    (1, c.WorkerRegistered(1, "w", True, 1, "e"), "incarnation: expected an integer"),  # type: ignore[arg-type]
    (1, c.WorkerRegistered(1, "w", 1, "4", "e"), "slots: expected an integer"),  # type: ignore[arg-type]
    (1, c.WorkerRegistered(1, "w", 1, 1, "e", owned="abc"), "owned: expected a tuple"),  # type: ignore[arg-type]
    (1, c.WorkerGone(1, "\udc80"), "UTF-8"),
    (1, c.WorkerGone(1, None), "expected a string"),  # type: ignore[arg-type]
    (1, c.GroupFinished(1, "w", "a", 1), "unstarted: expected a bool"),  # type: ignore[arg-type]
    (1, c.CellReported(1, "w", "a", "g", 1 << 70, _REPORT), "generation"),
    (1, c.CellReported(1, "w", "a", "g", 1, "report"), "expected a Report"),  # type: ignore[arg-type]
    (1, c.CellReported(1, "w", "a", "g", 1, replace(_REPORT, status=99)), "report.status"),  # type: ignore[arg-type]
    (1, c.CellReported(1, "w", "a", "g", 1, replace(_REPORT, input_tokens=1 << 64)), "input_tokens"),
    (1, c.CellReported(1, "w", "a", "g", 1, replace(_REPORT, score="1")), "report.score"),  # type: ignore[arg-type]
    (1, c.CellReported(1, "w", "a", "g", 1, replace(_REPORT, score=10**400)), "does not fit a double"),
    (1, c.CellReported(1, "w", "a", "g", 1, replace(
        _REPORT, artifacts=(ArtifactRef("a", sha256_digest(b""), -1),))), "size_bytes"),
    (1, c.CellReported(1, "w", "a", "g", 1, replace(_REPORT, artifacts=("x",))), "ArtifactRef"),  # type: ignore[arg-type]
    (1, c.RunSubmitted(1, "r", "spec", Policy()), "expected an ExperimentSpec"),  # type: ignore[arg-type]
], ids=lambda v: None)
def test_commands_the_log_cannot_hold_are_refused(index, cmd, message):
    with pytest.raises(LogCodecError, match=message):
        encode_record(index, cmd)


def test_a_policy_that_would_not_replay_is_refused():
    spec = parse_spec({
        "benchmark": {"name": "b"}, "executor": {"kind": "command"},
        "subjects": [{"id": "s", "command": "x"}], "tasks": [{"id": "t"}], "repetitions": 1,
        "budget": {"timeoutSeconds": 5}, "verifier": {"command": "v"},
        "execution": {"maxConcurrentTaskGroups": 1},
    })
    # A policy built around the parser, violating its relations, would not replay.
    with pytest.raises(LogCodecError, match="policy"):
        encode_record(1, c.RunSubmitted(1, "r", spec, Policy(suspect_after_ms=1)))
    forged = replace(spec, repetitions=7)  # canonical text says 1
    with pytest.raises(LogCodecError, match="does not parse back"):
        encode_record(1, c.RunSubmitted(1, "r", forged, Policy()))


# ---- real logs ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_a_simulated_runs_log_survives_the_codec_and_replays(seed):
    """The commands the real core logs in a seeded simulation (real specs, reports, derived
    decisions) go through bytes and replay to the same durable state."""
    from coordinator.core import new_state, step
    from coordinator.core.state import durable_fingerprint
    from tools.sim.simulation import Simulation

    sim = Simulation(seed, check=False)
    sim.run()
    assert sim.log, "the simulation logged nothing"
    state = new_state()
    for index, cmd in enumerate(sim.log, start=1):
        got_index, got = decode_record(encode_record(index, cmd))
        assert (got_index, got) == (index, cmd)
        state, _ = step(state, got)
    assert durable_fingerprint(state) == durable_fingerprint(sim.state)


# ---- encode once: a CellReported record from the worker's own Report message ------------------

@settings(max_examples=300)
@given(report=reports, index=indexes, now=now_ms, worker=texts, attempt=texts, assignment=texts,
       generation=int64s)
def test_a_cell_reported_record_from_the_wire_report_is_the_encoded_one(report, index, now, worker, attempt,
                                                                        assignment, generation):
    """encode_cell_reported copies the message the report was decoded from: the same bytes as
    encode_record, and they replay to the same command."""
    wire = common_pb2.Report.FromString(report_to_proto(report).SerializeToString())  # as received
    decoded = report_from_proto(wire)
    cmd = c.CellReported(now, worker, attempt, assignment, generation, decoded)
    fast = logcodec.encode_cell_reported(index, cmd, wire)
    assert fast == encode_record(index, cmd)
    got_index, got = decode_record(fast)
    assert got_index == index
    if report.score is None or not math.isnan(report.score):
        assert got == cmd


def test_a_wire_report_with_fields_this_version_does_not_know_is_logged_without_them():
    """A newer worker's extra fields are dropped from the record, as decoding the frame dropped
    them; otherwise the record would be refused at recovery (unknown fields)."""
    wire = report_to_proto(_REPORT)
    wire.artifacts.add(name="out", digest=sha256_digest(b"x"), size_bytes=1)
    wire.MergeFromString(b"\x98\x06\x01")  # field 99, varint 1: unknown here
    wire.artifacts[0].MergeFromString(b"\x98\x06\x01")
    cmd = c.CellReported(5, "w", "a", "g", 2, report_from_proto(wire))
    fast = logcodec.encode_cell_reported(7, cmd, wire)
    assert fast == encode_record(7, cmd)
    assert decode_record(fast) == (7, cmd)
    assert wire.ByteSize() > common_pb2.Report.FromString(report_to_proto(cmd.report).SerializeToString()).ByteSize()


@pytest.mark.parametrize("cmd, wire, message", [
    (c.GroupFinished(1, "w", "g"), report_to_proto(_REPORT), "takes a CellReported"),
    (c.CellReported(1, "w", "a", "g", 1, _REPORT), _REPORT, "expected a fleet.v1.Report"),
    (c.CellReported(1, "w", "a", "g", 1 << 70, _REPORT), report_to_proto(_REPORT), "CellReported"),
    (c.CellReported(1, "w", 7, "g", 1, _REPORT), report_to_proto(_REPORT), "CellReported"),  # type: ignore[arg-type]
])
def test_encode_cell_reported_refuses_what_the_log_cannot_hold(cmd, wire, message):
    with pytest.raises(LogCodecError, match=message):
        logcodec.encode_cell_reported(1, cmd, wire)


@pytest.mark.parametrize("field", ["status", "execution", "verification", "usage", "cleanup"])
def test_a_frame_report_with_a_required_enum_at_zero_or_unknown_is_a_malformed_frame(field):
    from common.rejections import Rejection
    from coordinator.codec import FrameError, decode_report

    good = common_pb2.Report(status=common_pb2.STATUS_COMPLETED, execution=common_pb2.EXECUTION_COMPLETED,
                             verification=common_pb2.VERIFICATION_VALID, usage=common_pb2.USAGE_COMPLETE,
                             cleanup=common_pb2.CLEANUP_CONFIRMED, score=1.0, cost_usd=0.0)
    assert decode_report(good).score == 1.0
    for number, words in ((0, f"misses its required field {field}"), (99, "does not decode")):
        msg = common_pb2.Report()
        msg.CopyFrom(good)
        setattr(msg, field, number)
        with pytest.raises(FrameError) as e:
            decode_report(msg)
        assert e.value.rejection == Rejection.MALFORMED_FRAME and words in e.value.detail
