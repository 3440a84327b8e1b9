"""A chunked upload cut off by a lost stream resumes from the coordinator's committed offset on
the worker's next session (through the probe and through Welcome.upload_offsets), survives a
kill -9 of the coordinator in between, and the report referencing it is then accepted."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2
from tests.integration import rawclient as rc
from tests.integration.harness import Cluster
from tests.integration.test_bad_input import SLOW_POLICY, enroll_token, submit

CHUNK = 1 << 20
ACCEPTED = common_pb2.ACK_OUTCOME_ACCEPTED


@pytest.fixture
def cluster(tmp_path: Path):
    cl = Cluster(tmp_path)
    cl.start_coordinator()
    try:
        yield cl
    finally:
        cl.stop_all()


@pytest.mark.parametrize("restart_coordinator", [False, True], ids=["reconnect", "coordinator-kill-9"])
def test_an_interrupted_upload_resumes_at_the_committed_offset(cluster: Cluster, restart_coordinator: bool) -> None:
    submit(cluster, 1, SLOW_POLICY)
    data = os.urandom(3 * CHUNK + 123)
    digest = rc.digest_of(data)
    first = rc.RawSession(cluster.address, rc.worker_metadata(enroll_token(cluster), "w-up"))
    try:
        welcome = first.open(rc.hello("w-up", incarnation=1))
        credential = welcome.worker_credential
        [push] = first.push(1)
        attempt = push.cells[0].attempt_id
        probe = first.ack(first.chunk(attempt, digest, len(data), 0, b""))
        assert probe.outcome == ACCEPTED and probe.committed_offset == 0
        offset = 0
        for _ in range(2):
            ack = first.ack(first.chunk(attempt, digest, len(data), offset, data[offset:offset + CHUNK]))
            assert ack.outcome == ACCEPTED, ack
            offset = ack.committed_offset
        assert offset == 2 * CHUNK
    finally:
        first.close()  # the stream is lost mid-upload
    if restart_coordinator:
        cluster.coordinator.kill9()
        cluster.start_coordinator()
    second = rc.RawSession(cluster.address, rc.worker_metadata(credential, "w-up"))
    try:
        hello = rc.hello("w-up", incarnation=1, owned_assignment_ids=[push.assignment_id])
        hello.hello.pending_uploads.append(coordinator_pb2.PendingUpload(digest=digest, total_length=len(data)))
        welcome = second.open(hello)
        assert [(u.digest, u.committed_offset, u.complete) for u in welcome.upload_offsets] == \
            [(digest, 2 * CHUNK, False)], "Welcome says where the upload resumes"
        probe = second.ack(second.chunk(attempt, digest, len(data), 0, b""))
        assert probe.committed_offset == 2 * CHUNK, "the probe says the same"
        # Resending an already committed chunk is refused, nothing changes.
        stale = second.ack(second.chunk(attempt, digest, len(data), 0, data[:CHUNK]))
        assert stale.outcome == common_pb2.ACK_OUTCOME_REJECTED
        assert common_pb2.RejectionReason.Name(stale.rejection) == "REJECTION_REASON_CHUNK_OUT_OF_RANGE"
        ack = second.ack(second.chunk(attempt, digest, len(data), 2 * CHUNK, data[2 * CHUNK:3 * CHUNK]))
        done = second.ack(second.chunk(attempt, digest, len(data), ack.committed_offset,
                                       data[ack.committed_offset:], last=True))
        assert done.outcome == ACCEPTED and done.committed_offset == len(data), done
        report = rc.good_report()
        report.artifacts.append(common_pb2.ArtifactRef(name="log", digest=digest, size_bytes=len(data)))
        acked = second.ack(second.report(push, 0, report))
        assert acked.outcome == ACCEPTED, acked
    finally:
        second.close()
    admin = cluster.admin()
    try:
        stored = b"".join(c.data for c in admin.stub.GetArtifact(
            admin_pb2.GetArtifactRequest(digest=digest), metadata=admin.metadata, timeout=30))
    finally:
        admin.close()
    assert stored == data, "the bytes served back are exactly the bytes sent"
