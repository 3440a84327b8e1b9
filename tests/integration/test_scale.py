"""A real coordinator at sizes past one message: a spec larger than MESSAGE_BYTES_MAX submits
through fleetctl's channel, and results and attempts come back whole in pages, with page
tokens bound to their run and refused, typed, when forged, stale or from another run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from common import limits
from common.fleetpb import admin_pb2
from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    c.start_coordinator()
    yield c
    c.stop_all()


def big_spec(target_bytes: int) -> dict:
    """A few tasks whose metadata pads the spec past `target_bytes` of JSON."""
    spec = intbench_spec(8)
    pad = "x" * (target_bytes // len(spec["tasks"]) + 1)
    for t in spec["tasks"]:
        t["metadata"] = {"pad": pad}
    return spec


def test_a_spec_larger_than_a_message_submits(cluster: Cluster) -> None:
    spec = big_spec(limits.MESSAGE_BYTES_MAX + (1 << 20))
    text = json.dumps(spec)
    assert len(text) > limits.MESSAGE_BYTES_MAX
    admin = cluster.admin()
    try:
        resp = admin.call("SubmitRun", admin_pb2.SubmitRunRequest(spec_json=text, policy_json=json.dumps(FAST_POLICY)))
        assert resp.created
        status = admin.call("GetStatus", admin_pb2.GetStatusRequest(run_id=resp.run_id))
        assert status.runs[0].cells_total == 16
    finally:
        admin.close()
