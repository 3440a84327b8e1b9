"""Goal: every kind of bad input from a worker or an operator gets a typed refusal while the
coordinator keeps serving with its state unchanged; method: a real coordinator process per
test, a raw session client (tests/integration/rawclient.py) that plays a misbehaving worker
with hand-made frames, `status`/`results` JSON compared before and after, and then a
well-behaved session (or submission) that must still be served in the same test."""
from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from common import limits
from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2
from tests.integration import rawclient as rc
from tests.integration.harness import INTBENCH, Cluster, intbench_spec

pytestmark = pytest.mark.timeout(60)

# Liveness far beyond a test's length, so no suspicion or expiry changes state mid-test.
SLOW_POLICY = {"heartbeatIntervalMs": 1_000, "suspectAfterMs": 60_000, "expireAfterMs": 120_000,
               "recoveryGraceMs": 120_000}
GROUPS = 3
ACCEPTED = common_pb2.ACK_OUTCOME_ACCEPTED
DUPLICATE = common_pb2.ACK_OUTCOME_DUPLICATE
REJECTED = common_pb2.ACK_OUTCOME_REJECTED


def reason(name: str) -> int:
    return common_pb2.RejectionReason.Value(f"REJECTION_REASON_{name}")


def reason_name(number: int) -> str:
    return common_pb2.RejectionReason.Name(number).removeprefix("REJECTION_REASON_")


# ---- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture
def cluster(tmp_path: Path):
    cl = Cluster(tmp_path)
    cl.start_coordinator()
    try:
        yield cl
        assert cl.coordinator.alive(), f"the coordinator died\n{cl.tails()}"
    finally:
        cl.stop_all()


@pytest.fixture
def sessions():
    opened: list[rc.RawSession] = []
    yield opened
    for s in opened:
        s.close()


def enroll_token(cl: Cluster) -> str:
    return (cl.data_dir / "enroll.token").read_text().strip()


def admin_token(cl: Cluster) -> str:
    return (cl.data_dir / "admin.token").read_text().strip()


def raw(cl: Cluster, sessions: list, token: str | None, worker_id: str | None) -> rc.RawSession:
    s = rc.RawSession(cl.address, rc.worker_metadata(token, worker_id))
    sessions.append(s)
    return s


def worker(cl: Cluster, sessions: list, worker_id: str, *, pushes: int = 1, **hello_kw) -> rc.RawSession:
    """An enrolled, registered raw worker that has received `pushes` assignment pushes."""
    s = raw(cl, sessions, enroll_token(cl), worker_id)
    welcome = s.open(rc.hello(worker_id, **hello_kw))
    assert welcome.worker_credential, "first enrollment must issue a credential"
    if pushes:
        s.push(pushes)
    return s


def submit(cl: Cluster, groups: int = GROUPS, policy: dict | None = None) -> str:
    return cl.submit(intbench_spec(groups), policy or SLOW_POLICY)


def snapshot(cl: Cluster, *run_ids: str) -> dict:
    """What `fleetctl status` and `fleetctl results` show, minus the clock-driven fields."""
    status = cl.status()
    for w in status["workers"]:
        w.pop("last_heartbeat_age_ms")
        if w["refusal"]:
            w["refusal"].pop("age_ms")
    for r in status["runs"]:
        r["environment"].pop("pinned_age_ms")
    return {"status": status, "results": {r: cl.results(r) for r in run_ids}}


def assert_unchanged(cl: Cluster, before: dict, *run_ids: str) -> None:
    after = snapshot(cl, *run_ids)
    assert after == before, ("state changed after refused input:\nbefore "
                             + json.dumps(before, indent=1) + "\nafter " + json.dumps(after, indent=1))


def assert_rejected(ack, name: str, seq: int | None = None) -> None:
    assert ack.outcome == REJECTED, f"expected REJECTED {name}, got {ack}"
    assert reason_name(ack.rejection) == name, f"expected {name}, got {reason_name(ack.rejection)}: {ack.detail}"
    assert ack.detail, "a rejection says why"
    if seq is not None:
        assert ack.seq == seq


def report_all(s: rc.RawSession, push) -> None:
    for i in range(len(push.cells)):
        ack = s.ack(s.report(push, i))
        assert ack.outcome == ACCEPTED, ack


def assert_serves(cl: Cluster, sessions: list, run_id: str, worker_id: str = "well-behaved",
                  **hello_kw) -> None:
    """A new, correct worker is welcomed, gets a group, and its reports are selected."""
    s = worker(cl, sessions, worker_id, **hello_kw)
    push = s.pushes[0]
    assert push.run_id == run_id
    report_all(s, push)
    cells = {c["cell_id"]: c for c in cl.results(run_id)["cells"]}
    for ca in push.cells:
        got = cells[ca.cell_id]
        assert got["state"] == "selected" and got["worker_id"] == worker_id and got["score"] == 1.0, got


def assert_aborted(s: rc.RawSession, code: grpc.StatusCode, name: str) -> list:
    got_code, details, frames = s.closed()
    assert got_code == code, f"expected {code.name}, got {got_code.name}: {details}"
    assert details.startswith(name), f"details {details!r} do not start with {name}"
    return frames


def admin_error(cl: Cluster, token: str | None, name: str, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        rc.admin_call(cl.address, token, name, request)
    return info.value


# ---- malformed frames ------------------------------------------------------------------------

@pytest.mark.parametrize("first", [
    pytest.param(coordinator_pb2.WorkerFrame(seq=1, heartbeat=coordinator_pb2.Heartbeat()), id="heartbeat-first"),
    pytest.param(rc.hello("w-bad", seq=2), id="hello-with-seq-2"),
    pytest.param(coordinator_pb2.WorkerFrame(seq=1), id="no-body"),
])
def test_first_frame_must_be_hello_with_seq_1(cluster, sessions, first):
    run_id = submit(cluster)
    before = snapshot(cluster, run_id)
    s = raw(cluster, sessions, enroll_token(cluster), "w-bad")
    s.send(first)
    frames = assert_aborted(s, grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_FRAME")
    assert frames == [], "nothing (no welcome, no push) before the refusal"
    assert_unchanged(cluster, before, run_id)
    # The refused worker id never enrolled: it can still enroll with a proper hello.
    assert_serves(cluster, sessions, run_id, worker_id="w-bad")


@pytest.mark.parametrize("body, name", [
    pytest.param({"hello": rc.hello("w1").hello}, "MALFORMED_FRAME", id="second-hello"),
    pytest.param({}, "MALFORMED_FRAME", id="no-body"),
    pytest.param({"group_finished": coordinator_pb2.GroupFinished(assignment_id="")}, "MALFORMED_FRAME",
                 id="group-finished-without-id"),
    pytest.param({"group_finished": coordinator_pb2.GroupFinished(assignment_id="no-such-assignment")},
                 "UNKNOWN_ASSIGNMENT", id="group-finished-unknown"),
])
def test_malformed_later_frame_is_acked_rejected(cluster, sessions, body, name):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    before = snapshot(cluster, run_id)
    seq = s.send_body(**body)
    assert_rejected(s.ack(seq), name, seq)
    assert_unchanged(cluster, before, run_id)
    report_all(s, s.pushes[0])  # the same session is still served
    assert_serves(cluster, sessions, run_id)


def bad_reports(push) -> dict:
    """name -> (CellReport keyword overrides for RawSession.report, expected rejection)."""
    cell = push.cells[0]
    return {
        "unspecified-enums": ({"report": common_pb2.Report()}, "MALFORMED_FRAME"),
        "unknown-enum-number": ({"report": rc.good_report(status=99)}, "MALFORMED_FRAME"),
        "empty-attempt-id": ({"attempt_id": ""}, "MALFORMED_FRAME"),
        "empty-assignment-id": ({"assignment_id": ""}, "MALFORMED_FRAME"),
        "unknown-attempt": ({"attempt_id": cell.attempt_id.rsplit(":a", 1)[0] + ":a99"}, "UNKNOWN_ATTEMPT"),
        "other-generation": ({"generation": push.generation + 1}, "GENERATION_MISMATCH"),
        "other-assignment": ({"assignment_id": push.assignment_id.rsplit(":g", 1)[0] + ":g7"},
                             "GENERATION_MISMATCH"),
        "status-contradicts-evidence": ({"report": rc.good_report(status=common_pb2.STATUS_SUBJECT_FAILED)},
                                        "STATUS_CONTRADICTS_EVIDENCE"),
        "infra-failed-but-selectable": ({"report": rc.good_report(status=common_pb2.STATUS_INFRA_FAILED)},
                                        "STATUS_CONTRADICTS_EVIDENCE"),
        "score-without-verification": ({"report": rc.good_report(
            status=common_pb2.STATUS_INDETERMINATE, verification=common_pb2.VERIFICATION_INVALID)},
            "INVALID_EVIDENCE"),
        "negative-tokens": ({"report": rc.good_report(input_tokens=-1)}, "INVALID_EVIDENCE"),
        "unstored-artifact": ({"report": rc.good_report(artifacts=[common_pb2.ArtifactRef(
            name="stdout.log", digest=rc.digest_of(b"never uploaded"), size_bytes=14)])}, "ARTIFACT_MISSING"),
    }


@pytest.mark.parametrize("case", [
    "unspecified-enums", "unknown-enum-number", "empty-attempt-id", "empty-assignment-id", "unknown-attempt", "other-generation",
    "other-assignment", "status-contradicts-evidence", "infra-failed-but-selectable",
    "score-without-verification", "negative-tokens", "unstored-artifact",
])
def test_bad_cell_report_is_rejected_and_changes_nothing(cluster, sessions, case):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    push = s.pushes[0]
    overrides, name = bad_reports(push)[case]
    before = snapshot(cluster, run_id)
    seq = s.report(push, 0, **overrides)
    ack = s.ack(seq)
    assert ack.outcome == REJECTED, ack
    assert_unchanged(cluster, before, run_id)
    # The refusal was not a verdict on the attempt: the right report is still accepted.
    report_all(s, push)
    assert_serves(cluster, sessions, run_id)
    assert_rejected(ack, name, seq)


def test_conflicting_report_for_a_reported_attempt(cluster, sessions):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    push = s.pushes[0]
    assert s.ack(s.report(push, 0)).outcome == ACCEPTED
    assert s.ack(s.report(push, 0)).outcome == DUPLICATE, "the identical report resent is acked again"
    before = snapshot(cluster, run_id)
    seq = s.report(push, 0, rc.good_report(score=0.5))
    assert_rejected(s.ack(seq), "CONFLICTING_REPORT", seq)
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id)


# ---- frames out of order ---------------------------------------------------------------------

def test_seq_that_skips_is_out_of_order_and_the_expected_seq_still_works(cluster, sessions):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    push = s.pushes[0]
    before = snapshot(cluster, run_id)
    expected = s.seq + 1  # the hello and the run measurement took the first seqs
    frame = coordinator_pb2.WorkerFrame(seq=expected + 1, cell_report=coordinator_pb2.CellReport(
        run_id=run_id, attempt_id=push.cells[0].attempt_id, assignment_id=push.assignment_id,
        generation=push.generation, report=rc.good_report()))
    s.send(frame)
    assert_rejected(s.ack(expected + 1), "OUT_OF_ORDER", expected + 1)
    assert_unchanged(cluster, before, run_id)
    s.seq = expected - 1  # the coordinator still expects `expected`
    assert s.ack(s.report(push, 0)).outcome == ACCEPTED
    # A resend of an already used seq is out of order too.
    s.send(frame.__class__(seq=expected, cell_report=frame.cell_report))
    assert_rejected(s.ack(expected), "OUT_OF_ORDER", expected)
    s.seq = expected
    assert s.ack(s.report(push, 1)).outcome == ACCEPTED
    assert_serves(cluster, sessions, run_id)


# ---- uploads -----------------------------------------------------------------------------------

@pytest.mark.parametrize("digest", [
    pytest.param("md5:" + "0" * 32, id="other-algorithm"),
    pytest.param("sha256:abc", id="short"),
    pytest.param("sha256:" + "A" * 64, id="uppercase"),
    pytest.param("sha256:" + "g" * 64, id="not-hex"),
    pytest.param("0" * 64, id="no-prefix"),
    pytest.param("", id="empty"),
])
def test_upload_with_a_malformed_digest(cluster, sessions, digest):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    attempt = s.pushes[0].cells[0].attempt_id
    before = snapshot(cluster, run_id)
    seq = s.chunk(attempt, digest, 3, 0, b"abc", last=True)
    assert_rejected(s.ack(seq), "MALFORMED_FRAME", seq)
    assert_unchanged(cluster, before, run_id)
    assert s.upload(attempt, b"abc").outcome == ACCEPTED
    assert_serves(cluster, sessions, run_id)


def test_wrong_digest_is_refused_and_a_report_citing_it_is_artifact_missing(cluster, sessions):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    push = s.pushes[0]
    attempt = push.cells[0].attempt_id
    data, claimed = b"the real bytes", rc.digest_of(b"other bytes")
    before = snapshot(cluster, run_id)
    ack = s.upload(attempt, data, digest=claimed)
    assert_rejected(ack, "DIGEST_MISMATCH")
    assert not (cluster.data_dir / "artifacts" / "sha256" / claimed[7:9] / claimed[9:]).exists()
    ref = common_pb2.ArtifactRef(name="out.txt", digest=claimed, size_bytes=len(data))
    seq = s.report(push, 0, rc.good_report(artifacts=[ref]))
    assert_rejected(s.ack(seq), "ARTIFACT_MISSING", seq)
    assert_unchanged(cluster, before, run_id)
    # The honest upload and report go through on the same session.
    good = s.upload(attempt, data)
    assert good.outcome == ACCEPTED and good.committed_offset == len(data), good
    ref = common_pb2.ArtifactRef(name="out.txt", digest=rc.digest_of(data), size_bytes=len(data))
    assert s.ack(s.report(push, 0, rc.good_report(artifacts=[ref]))).outcome == ACCEPTED
    cell = next(c for c in cluster.results(run_id)["cells"] if c["cell_id"] == push.cells[0].cell_id)
    assert cell["artifacts"] == [{"name": "out.txt", "digest": rc.digest_of(data), "size_bytes": len(data)}]
    assert_serves(cluster, sessions, run_id)


def chunk_cases(data: bytes) -> dict:
    """name -> ((offset, data, last) chunks before the bad one, the bad one, rejection, the
    committed offset the refusal must name)."""
    n = len(data)
    return {
        "past-declared-length": ([], (0, data + b"extra", False), "CHUNK_OUT_OF_RANGE", 0),
        "past-length-after-a-chunk": ([(0, data[:4], False)], (4, data[4:] + b"x", True), "CHUNK_OUT_OF_RANGE", 4),
        "not-at-committed-offset": ([(0, data[:4], False)], (6, data[6:], False), "CHUNK_OUT_OF_RANGE", 4),
        "behind-committed-offset": ([(0, data[:4], False)], (2, data[2:], False), "CHUNK_OUT_OF_RANGE", 4),
        # A short last chunk is written, then the length check refuses the upload: resumable.
        "short-last-chunk": ([], (0, data[:n - 1], True), "LENGTH_MISMATCH", n - 1),
    }


@pytest.mark.parametrize("case", ["past-declared-length", "past-length-after-a-chunk", "not-at-committed-offset",
                                  "behind-committed-offset", "short-last-chunk"])
def test_chunk_out_of_range(cluster, sessions, case):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    attempt = s.pushes[0].cells[0].attempt_id
    data = b"0123456789"
    digest = rc.digest_of(data)
    good_chunks, bad, name, committed = chunk_cases(data)[case]
    before = snapshot(cluster, run_id)
    for offset, part, last in good_chunks:
        ack = s.ack(s.chunk(attempt, digest, len(data), offset, part, last=last))
        assert ack.outcome == ACCEPTED and ack.committed_offset == offset + len(part), ack
    offset, part, last = bad
    seq = s.chunk(attempt, digest, len(data), offset, part, last=last)
    ack = s.ack(seq)
    assert_rejected(ack, name, seq)
    assert ack.committed_offset == committed, "the refusal says where the upload may resume"
    assert_unchanged(cluster, before, run_id)
    # Resume from the committed offset the refusal named.
    ack = s.ack(s.chunk(attempt, digest, len(data), ack.committed_offset, data[ack.committed_offset:], last=True))
    assert ack.outcome == ACCEPTED and ack.committed_offset == len(data), ack
    assert_serves(cluster, sessions, run_id)


@pytest.mark.parametrize("total, data, name", [
    pytest.param(limits.CHUNK_BYTES_MAX + 1, b"x" * (limits.CHUNK_BYTES_MAX + 1), "MESSAGE_TOO_LARGE",
                 id="chunk-over-CHUNK_BYTES_MAX"),
    pytest.param(limits.ARTIFACT_BYTES_MAX + 1, b"x", "ARTIFACT_TOO_LARGE", id="artifact-over-ARTIFACT_BYTES_MAX"),
])
def test_upload_over_a_size_limit(cluster, sessions, total, data, name):
    run_id = submit(cluster)
    s = worker(cluster, sessions, "w1")
    attempt = s.pushes[0].cells[0].attempt_id
    before = snapshot(cluster, run_id)
    seq = s.chunk(attempt, rc.digest_of(b"whatever"), total, 0, data)
    assert_rejected(s.ack(seq), name, seq)
    assert_unchanged(cluster, before, run_id)
    assert s.upload(attempt, b"fine").outcome == ACCEPTED
    assert_serves(cluster, sessions, run_id)


@pytest.mark.parametrize("whose, name", [("other-worker", "NOT_OWNER"), ("never-dispatched", "UNKNOWN_ATTEMPT")])
def test_upload_for_an_attempt_not_ours(cluster, sessions, whose, name):
    run_id = submit(cluster, groups=GROUPS + 1)
    a = worker(cluster, sessions, "w-a")
    b = worker(cluster, sessions, "w-b")
    a_attempt = a.pushes[0].cells[0].attempt_id
    attempt = a_attempt if whose == "other-worker" else a_attempt.rsplit(":a", 1)[0] + ":a42"
    before = snapshot(cluster, run_id)
    data = b"b's bytes for a's attempt"
    seq = b.chunk(attempt, rc.digest_of(data), len(data), 0, data, last=True)
    assert_rejected(b.ack(seq), name, seq)
    if whose == "other-worker":
        # Nor may B report on A's attempt.
        seq = b.report(a.pushes[0], 0)
        assert_rejected(b.ack(seq), "NOT_OWNER", seq)
    assert_unchanged(cluster, before, run_id)
    assert a.upload(a_attempt, data).outcome == ACCEPTED
    assert_serves(cluster, sessions, run_id)
    report_all(a, a.pushes[0])
    report_all(b, b.pushes[0])


# ---- oversized messages ------------------------------------------------------------------------

def test_oversized_first_frame_is_resource_exhausted(cluster, sessions):
    run_id = submit(cluster)
    before = snapshot(cluster, run_id)
    s = raw(cluster, sessions, enroll_token(cluster), "w-big")
    s.send(rc.hello("w-big", software_version="v" * (limits.MESSAGE_BYTES_MAX + 1)))
    code, details, frames = s.closed()
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert frames == []
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id, worker_id="w-big")


def test_oversized_frame_mid_session_cuts_only_that_session(cluster, sessions):
    run_id = submit(cluster, groups=GROUPS + 1)
    other = worker(cluster, sessions, "w-other")
    big = worker(cluster, sessions, "w-big")
    attempt = big.pushes[0].cells[0].attempt_id
    before = snapshot(cluster, run_id)
    data = b"x" * (limits.MESSAGE_BYTES_MAX + 1024)
    big.chunk(attempt, rc.digest_of(data), len(data), 0, data, last=True)
    code, details, _ = big.closed()
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    after = snapshot(cluster, run_id)
    # The cut stream's worker is no longer heard from (soft liveness); nothing else moved.
    for snap in (before, after):
        for w in snap["status"]["workers"]:
            if w["worker_id"] == "w-big":
                w.pop("status")
    assert after == before
    # The other session, opened before, is still served; and a new one too.
    report_all(other, other.pushes[0])
    assert_serves(cluster, sessions, run_id)


# ---- identity and tokens -------------------------------------------------------------------

def test_hello_claiming_another_worker_id_is_identity_mismatch(cluster, sessions):
    run_id = submit(cluster)
    a = worker(cluster, sessions, "w-a")
    before = snapshot(cluster, run_id)
    # Authenticated as w-b (enrollment), says w-a in its hello.
    s = raw(cluster, sessions, enroll_token(cluster), "w-b")
    s.send(rc.hello("w-a"))
    assert assert_aborted(s, grpc.StatusCode.PERMISSION_DENIED, "IDENTITY_MISMATCH") == []
    # Authenticated as w-a with its own credential, says w-b.
    s = raw(cluster, sessions, a.welcome.worker_credential, "w-a")
    s.send(rc.hello("w-b"))
    assert assert_aborted(s, grpc.StatusCode.PERMISSION_DENIED, "IDENTITY_MISMATCH") == []
    assert_unchanged(cluster, before, run_id)
    report_all(a, a.pushes[0])
    assert_serves(cluster, sessions, run_id, worker_id="w-b")


def test_another_workers_credential_is_permission_denied(cluster, sessions):
    run_id = submit(cluster)
    a = worker(cluster, sessions, "w-a")
    credential = a.welcome.worker_credential
    before = snapshot(cluster, run_id)
    for claimed in ("w-b", "w-new"):
        s = raw(cluster, sessions, credential, claimed)
        s.send(rc.hello(claimed))
        assert assert_aborted(s, grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED") == []
    # Once enrolled, the enrollment token no longer opens a session as w-a.
    s = raw(cluster, sessions, enroll_token(cluster), "w-a")
    s.send(rc.hello("w-a", incarnation=2))
    assert assert_aborted(s, grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED") == []
    # Nor does the admin token open a worker session.
    s = raw(cluster, sessions, admin_token(cluster), "w-c")
    s.send(rc.hello("w-c"))
    assert assert_aborted(s, grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED") == []
    assert_unchanged(cluster, before, run_id)
    report_all(a, a.pushes[0])
    assert_serves(cluster, sessions, run_id, worker_id="w-b")


@pytest.mark.parametrize("token, worker_id", [
    pytest.param(None, "w1", id="no-token"),
    pytest.param("not-a-token", "w1", id="wrong-token"),
    pytest.param("", "w1", id="empty-token"),
    pytest.param("ENROLL", None, id="no-worker-id"),
])
def test_session_without_a_valid_token_is_unauthenticated(cluster, sessions, token, worker_id):
    run_id = submit(cluster)
    before = snapshot(cluster, run_id)
    s = raw(cluster, sessions, enroll_token(cluster) if token == "ENROLL" else token, worker_id)
    s.send(rc.hello("w1"))
    assert assert_aborted(s, grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED") == []
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id, worker_id="w1")


@pytest.mark.parametrize("which, code, name", [
    ("enrollment", grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    ("worker-credential", grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    ("none", grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
    ("wrong", grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
])
def test_admin_call_without_the_admin_token(cluster, sessions, which, code, name):
    run_id = submit(cluster)
    a = worker(cluster, sessions, "w-a")
    token = {"enrollment": enroll_token(cluster), "worker-credential": a.welcome.worker_credential,
             "none": None, "wrong": "nope"}[which]
    before = snapshot(cluster, run_id)
    calls = [
        ("GetStatus", admin_pb2.GetStatusRequest()),
        ("GetResults", admin_pb2.GetResultsRequest(run_id=run_id)),
        ("PauseRun", admin_pb2.PauseRunRequest(run_id=run_id)),
        ("DrainWorker", admin_pb2.DrainWorkerRequest(worker_id="w-a")),
        ("SubmitRun", admin_pb2.SubmitRunRequest(spec_json=json.dumps(intbench_spec(5)))),
    ]
    for method, request in calls:
        err = admin_error(cluster, token, method, request)
        assert err.code() == code, (method, err.code(), err.details())
        assert err.details().startswith(name), (method, err.details())
    # A server stream is refused on its first read.
    err = admin_error(cluster, token, "GetArtifact", admin_pb2.GetArtifactRequest(digest=rc.digest_of(b"")))
    assert err.code() == code and err.details().startswith(name)
    assert_unchanged(cluster, before, run_id)
    report_all(a, a.pushes[0])
    assert_serves(cluster, sessions, run_id)


# ---- admission ---------------------------------------------------------------------------------

def test_a_worker_whose_files_differ_from_the_submitters_is_refused_before_any_push(cluster, sessions):
    from worker.identity import measure_keys

    run_id = cluster.submit(intbench_spec(GROUPS), SLOW_POLICY, bench_root=INTBENCH)
    before = snapshot(cluster, run_id)["results"][run_id]["cells"]  # a new worker adds slots offered
    s = raw(cluster, sessions, enroll_token(cluster), "w-env")
    s.measurements = {"bench.file:subject.sh": "0" * 64}  # another build of the subject
    s.open(rc.hello("w-env"))
    frames = s.quiet(1.0)
    refused = [f.run_refused for f in frames if f.WhichOneof("body") == "run_refused"]
    assert refused and refused[0].run_id == run_id, frames
    assert "bench.file:subject.sh" in [d.key for d in refused[0].differences]
    assert s.pushes == [], "a refused worker gets no work"
    assert snapshot(cluster, run_id)["results"][run_id]["cells"] == before
    status = {w["worker_id"]: w for w in cluster.status()["workers"]}
    assert status["w-env"]["refusal"]["run_id"] == run_id and status["w-env"]["status"] == "active"
    # A worker that measures what the submitter measured is served.
    good = raw(cluster, sessions, enroll_token(cluster), "w-good")
    offered = None
    good.auto_measure = False
    good.open(rc.hello("w-good"))
    while offered is None:
        frame = good.recv(waiting_for="the run offer")
        if frame.WhichOneof("body") == "run_offer":
            offered = frame.run_offer
    measured = measure_keys(offered.keys, INTBENCH)
    ack = good.ack(good.send_body(run_environment=coordinator_pb2.RunEnvironment(
        run_id=run_id, components=[common_pb2.EnvironmentComponent(key=k, value=v) for k, v in measured.items()])))
    assert ack.outcome == ACCEPTED, ack
    push = good.push(1)[0]
    report_all(good, push)


def test_a_worker_of_another_build_than_the_pinned_one_is_refused_by_the_run(cluster, sessions):
    run_id = submit(cluster)
    first = worker(cluster, sessions, "w-first", environment_id="env-a")
    before = snapshot(cluster, run_id)["results"][run_id]["cells"]
    s = raw(cluster, sessions, enroll_token(cluster), "w-second")
    s.open(rc.hello("w-second", environment_id="env-b"))
    frames = s.quiet(1.0)
    refused = [f.run_refused for f in frames if f.WhichOneof("body") == "run_refused"]
    assert refused and "pinned by worker w-first" in refused[0].reason, frames
    assert ("rawclient", "env-a", "env-b") in [(d.key, d.run_value, d.worker_value) for d in refused[0].differences]
    assert s.pushes == []
    assert snapshot(cluster, run_id)["results"][run_id]["cells"] == before
    report_all(first, first.pushes[0])
    assert_serves(cluster, sessions, run_id, worker_id="w-third", environment_id="env-a")


@pytest.mark.parametrize("hello_kw, name", [
    pytest.param({"slots": 0}, "CAPACITY_INVALID", id="zero-slots"),
    pytest.param({"slots": limits.SLOTS_PER_WORKER_MAX + 1}, "CAPACITY_INVALID", id="too-many-slots"),
    pytest.param({"environment_id": ""}, "ENVIRONMENT_MISMATCH", id="no-environment-id"),
])
def test_registration_refused(cluster, sessions, hello_kw, name):
    run_id = submit(cluster)
    before = snapshot(cluster, run_id)
    s = raw(cluster, sessions, enroll_token(cluster), "w-x")
    s.send(rc.hello("w-x", **hello_kw))
    assert assert_aborted(s, grpc.StatusCode.FAILED_PRECONDITION, name) == []
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id, worker_id="w-x")


def test_stale_incarnation_is_refused(cluster, sessions):
    run_id = submit(cluster)
    a = worker(cluster, sessions, "w-a", incarnation=5)
    before = snapshot(cluster, run_id)
    s = raw(cluster, sessions, a.welcome.worker_credential, "w-a")
    s.send(rc.hello("w-a", incarnation=4))
    assert assert_aborted(s, grpc.StatusCode.FAILED_PRECONDITION, "INCARNATION_STALE") == []
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id)


@pytest.mark.parametrize("hello_kw, name", [
    pytest.param({"incarnation": 4}, "INCARNATION_STALE", id="stale-incarnation"),
    pytest.param({"incarnation": 6, "slots": 0}, "CAPACITY_INVALID", id="bad-capacity"),
])
def test_refused_registration_leaves_the_live_session_alone(cluster, sessions, hello_kw, name):
    run_id = submit(cluster)
    a = worker(cluster, sessions, "w-a", incarnation=5)
    s = raw(cluster, sessions, a.welcome.worker_credential, "w-a")
    s.send(rc.hello("w-a", **hello_kw))
    assert assert_aborted(s, grpc.StatusCode.FAILED_PRECONDITION, name) == []
    report_all(a, a.pushes[0])  # raises SessionClosed when the refusal cut the live session
    assert_serves(cluster, sessions, run_id)


def test_a_hello_delayed_past_a_newer_stream_is_session_stale_and_changes_nothing(cluster, sessions):
    """A 1 s blip under load: the Hello of stream 2, written into a connection that died, is
    retransmitted after the worker's stream 3 was welcomed and given a group. Reconciled, its
    owned list (from before that push) would hand the running group on: the worker would run
    it twice. It is refused instead; the live session keeps its group and its reports count."""
    run_id = submit(cluster)
    live = worker(cluster, sessions, "w-a", incarnation=5, stream=3)
    before = snapshot(cluster, run_id)
    for stream in (2, 3):  # older than the live stream, and the live stream's own number again
        late = raw(cluster, sessions, live.welcome.worker_credential, "w-a")
        late.send(rc.hello("w-a", incarnation=5, stream=stream))
        assert assert_aborted(late, grpc.StatusCode.ABORTED, "SESSION_STALE") == []
    assert_unchanged(cluster, before, run_id)
    report_all(live, live.pushes[0])  # raises SessionClosed had the stale Hello replaced it
    cells = {c["cell_id"]: c for c in cluster.results(run_id)["cells"]}
    assert all(cells[c.cell_id]["state"] == "selected" for c in live.pushes[0].cells)
    assert not [e for e in cluster.status()["workers"] if e["worker_id"] == "w-a" and e["status"] != "active"]
    # A newer stream of the same process, and any stream of a newer process, still replace it.
    newer = raw(cluster, sessions, live.welcome.worker_credential, "w-a")
    newer.open(rc.hello("w-a", incarnation=5, stream=4))
    restarted = raw(cluster, sessions, live.welcome.worker_credential, "w-a")
    restarted.open(rc.hello("w-a", incarnation=6, stream=1))
    assert_serves(cluster, sessions, run_id)


def test_replaced_session_ends_promptly(cluster, sessions):
    run_id = submit(cluster)
    old = worker(cluster, sessions, "w-a", incarnation=5)
    new = raw(cluster, sessions, old.welcome.worker_credential, "w-a")
    new.open(rc.hello("w-a", incarnation=6, owned_assignment_ids=[old.pushes[0].assignment_id]))
    # The old stream is cut by the coordinator; it must end without the old process speaking.
    code, details, _ = old.closed(timeout=3)
    assert code is not None
    report_all(new, old.pushes[0])
    assert_serves(cluster, sessions, run_id)


# ---- submissions -------------------------------------------------------------------------------

def submit_request(spec_json: str, policy_json: str = json.dumps(SLOW_POLICY), run_id: str | None = None):
    req = admin_pb2.SubmitRunRequest(spec_json=spec_json, policy_json=policy_json)
    if run_id is not None:
        req.run_id = run_id
    return req


@pytest.mark.parametrize("spec_json, policy_json, names", [
    pytest.param("{not json", json.dumps(SLOW_POLICY), "not JSON", id="spec-not-json"),
    pytest.param(json.dumps(dict(intbench_spec(2), bogusField=1)), json.dumps(SLOW_POLICY), "bogusField",
                 id="spec-unknown-field"),
    pytest.param(json.dumps(dict(intbench_spec(2), subjects=[{"id": "a", "command": "sh", "colour": "red"}])),
                 json.dumps(SLOW_POLICY), "subjects[0].colour", id="spec-unknown-nested-field"),
    pytest.param(json.dumps(dict(intbench_spec(2), tasks=[])), json.dumps(SLOW_POLICY), "tasks",
                 id="spec-no-tasks"),
    pytest.param(json.dumps(intbench_spec(2)), '{"heartbeatMs": 5}', "policy.heartbeatMs",
                 id="policy-unknown-field"),
    pytest.param(json.dumps(intbench_spec(2)), "[1, 2", "policy", id="policy-not-json"),
    pytest.param(json.dumps(intbench_spec(2)), json.dumps(dict(SLOW_POLICY, maxAttemptsPerCell=0)),
                 "policy.maxAttemptsPerCell", id="policy-out-of-bounds"),
])
def test_invalid_spec_or_policy_is_invalid_argument_naming_the_field(cluster, sessions, spec_json, policy_json,
                                                                     names):
    run_id = submit(cluster)
    before = snapshot(cluster, run_id)
    err = admin_error(cluster, admin_token(cluster), "SubmitRun", submit_request(spec_json, policy_json))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    assert err.details().startswith("SPEC_INVALID"), err.details()
    assert names in err.details(), err.details()
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id)


def test_resubmitting_the_same_spec_finds_the_run(cluster, sessions):
    spec = json.dumps(intbench_spec(GROUPS))
    token = admin_token(cluster)
    first = rc.admin_call(cluster.address, token, "SubmitRun", submit_request(spec))
    assert first.created
    before = snapshot(cluster, first.run_id)
    for run_id in (None, first.run_id):
        again = rc.admin_call(cluster.address, token, "SubmitRun", submit_request(spec, run_id=run_id))
        assert (again.run_id, again.created) == (first.run_id, False)
    assert_unchanged(cluster, before, first.run_id)
    assert_serves(cluster, sessions, first.run_id)


def conflicting_submit(cl: Cluster, change: str) -> tuple[str, grpc.RpcError]:
    """Freeze a run, then submit another spec (or policy) under its id; (run id, the error)."""
    token = admin_token(cl)
    first = rc.admin_call(cl.address, token, "SubmitRun", submit_request(json.dumps(intbench_spec(GROUPS))))
    if change == "spec":
        req = submit_request(json.dumps(intbench_spec(GROUPS + 1)), run_id=first.run_id)
    else:
        req = submit_request(json.dumps(intbench_spec(GROUPS)), json.dumps(dict(SLOW_POLICY, maxAttemptsPerCell=2)),
                             run_id=first.run_id)
    return first.run_id, admin_error(cl, token, "SubmitRun", req)


@pytest.mark.parametrize("change", ["spec", "policy"])
def test_a_different_spec_under_an_existing_run_id_is_spec_conflict(cluster, sessions, change):
    run_id = submit(cluster, groups=GROUPS)
    before = snapshot(cluster, run_id)
    _, err = conflicting_submit(cluster, change)
    assert err.code() != grpc.StatusCode.OK
    assert err.details().startswith("SPEC_CONFLICT"), err.details()
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id)


@pytest.mark.parametrize("change", ["spec", "policy"])
def test_a_different_spec_under_an_existing_run_id_is_already_exists(cluster, change):
    _, err = conflicting_submit(cluster, change)
    assert err.details().startswith("SPEC_CONFLICT"), err.details()
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS, (err.code(), err.details())


def test_explicit_run_id_that_is_not_the_specs_id_is_refused(cluster, sessions):
    run_id = submit(cluster)
    before = snapshot(cluster, run_id)
    req = submit_request(json.dumps(intbench_spec(GROUPS + 2)), run_id="run-made-up-by-hand")
    err = admin_error(cluster, admin_token(cluster), "SubmitRun", req)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    assert err.details().startswith("SPEC_CONFLICT"), err.details()
    assert_unchanged(cluster, before, run_id)
    assert_serves(cluster, sessions, run_id)
