"""The session protocol's revisions have one source, protos/fleet/v1/common.proto
`ProtocolRevision`, and an overload is refused with a reason of its own only to a worker that
knows it; method: the coordinator's and the worker's names against the generated enum, the
Node worker's source for a revision literal, and `overload_rejection` per revision."""
from __future__ import annotations

import re
from pathlib import Path

from common.fleetpb import common_pb2
from common.rejections import Rejection
from coordinator import codec
from worker import config as worker_config

ROOT = Path(__file__).resolve().parents[2]
R = common_pb2.ProtocolRevision


def test_the_coordinator_and_the_worker_read_their_revisions_from_the_proto():
    assert codec.PROTOCOL_VERSION == R.Value("PROTOCOL_REVISION_OVERLOADED") == 6
    assert codec.ACK_BATCH_PROTOCOL_VERSION == R.Value("PROTOCOL_REVISION_ACK_BATCH")
    assert codec.RUN_OFFER_PROTOCOL_VERSION == R.Value("PROTOCOL_REVISION_RUN_OFFER")
    assert codec.REPORT_BATCH_PROTOCOL_VERSION == codec.BUNDLE_PROTOCOL_VERSION == \
        codec.TRANSPORT_LIVENESS_PROTOCOL_VERSION == R.Value("PROTOCOL_REVISION_REPORT_BATCH")
    assert worker_config.PROTOCOL_VERSION == codec.PROTOCOL_VERSION
    assert worker_config.REPORT_BATCH_PROTOCOL_VERSION == codec.REPORT_BATCH_PROTOCOL_VERSION
    assert worker_config.COMPLETION_BY_REPORTS_PROTOCOL_VERSION == R.Value("PROTOCOL_REVISION_COMPLETION_BY_REPORTS")


def test_the_node_worker_names_its_revision_instead_of_a_number():
    source = (ROOT / "tools" / "node_worker" / "worker.js").read_text()
    assert not re.search(r"PROTOCOL_VERSION\s*=\s*\d", source)
    named = re.search(r"const PROTOCOL_REVISION = '(PROTOCOL_REVISION_\w+)'", source)
    assert named and named.group(1) in R.keys()


def test_an_overload_is_refused_overloaded_only_to_a_worker_that_knows_the_reason():
    knows = R.Value("PROTOCOL_REVISION_OVERLOADED")
    assert codec.overload_rejection(knows) == codec.overload_rejection(knows + 1) == Rejection.OVERLOADED
    for older in range(R.Value("PROTOCOL_REVISION_RUN_OFFER"), knows):
        assert codec.overload_rejection(older) == Rejection.STORAGE_FULL  # which every older worker resends
    # The Python worker of this tree knows it (and resends it: tests/unit/test_worker_session.py).
    assert codec.overload_rejection(worker_config.PROTOCOL_VERSION) == Rejection.OVERLOADED
