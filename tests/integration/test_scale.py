"""A real coordinator at sizes past one message: a spec larger than MESSAGE_BYTES_MAX submits
through fleetctl's channel, and results and attempts come back whole in pages, with page
tokens bound to their run and refused, typed, when forged, stale or from another run."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from common import limits
from common.fleetpb import admin_pb2
from tests.integration.harness import FAST_POLICY, PY, REPO, Cluster, intbench_spec
from tools.fleetctl import results_out
from tools.fleetctl.pages import attempts_pages, results_pages


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


def page_error(admin, method: str, request) -> grpc.RpcError:
    try:
        getattr(admin.stub, method)(request, metadata=admin.metadata, timeout=30)
    except grpc.RpcError as e:
        return e
    raise AssertionError(f"{method} was not refused")


def test_results_in_pages_while_workers_run_list_every_cell_once(cluster: Cluster) -> None:
    run_id = cluster.submit(intbench_spec(60))
    cluster.start_worker("w1", slots=3)
    cluster.start_worker("w2", slots=3)
    admin = cluster.admin()
    try:
        time.sleep(1.0)  # the workers are registering and running while the listing goes on
        seen: list[str] = []
        pages = 0
        for page in results_pages(admin, run_id, page_size=7):
            pages += 1
            seen.extend(c.cell_id for c in page.cells)
            assert page.total_size == 120
            assert page.HasField("summary") == (not page.next_page_token)
            time.sleep(0.05)
        assert pages == 18
        assert len(seen) == len(set(seen)) == 120
        listed = [a for p in attempts_pages(admin, run_id, page_size=5) for a in p.attempts]
        assert len({a.attempt_id for a in listed}) == len(listed) > 0
        whole = admin.call("ListAttempts", admin_pb2.ListAttemptsRequest(run_id=run_id))
        orders = [a.dispatch_order for a in whole.attempts]
        assert orders == sorted(orders), "unpaged attempts stay in dispatch order"
        done = cluster.wait_settled(run_id)
        assert len(done["cells"]) == 120
        unpaged = admin.call("GetResults", admin_pb2.GetResultsRequest(run_id=run_id))
        assert len(unpaged.cells) == 120 and not unpaged.next_page_token
        assert unpaged.summary.selected == done["summary"]["selected"]
    finally:
        admin.close()


def test_page_tokens_from_another_run_forged_or_stale_are_refused_typed(cluster: Cluster) -> None:
    run_a = cluster.submit(intbench_spec(30))
    run_b = cluster.submit(intbench_spec(31))
    admin = cluster.admin()
    try:
        first = admin.call("GetResults", admin_pb2.GetResultsRequest(run_id=run_a, page_size=10))
        token = first.next_page_token
        assert token and len(first.cells) == 10
        cases = {
            "another run": (admin_pb2.GetResultsRequest(run_id=run_b, page_size=10, page_token=token), "another run"),
            "another listing": (admin_pb2.ListAttemptsRequest(run_id=run_a, page_size=10, page_token=token),
                                "GetResults listing"),
            "forged": (admin_pb2.GetResultsRequest(run_id=run_a, page_size=10,
                                                   page_token=token[:20] + ("A" if token[20] != "A" else "B")
                                                   + token[21:]), "forged"),
            "garbage": (admin_pb2.GetResultsRequest(run_id=run_a, page_token="!!"), "malformed"),
        }
        for case, (request, why) in cases.items():
            method = "ListAttempts" if isinstance(request, admin_pb2.ListAttemptsRequest) else "GetResults"
            err = page_error(admin, method, request)
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (case, err.code(), err.details())
            assert err.details().startswith("PAGE_TOKEN_INVALID: ") and why in err.details(), (case, err.details())
        # The token still continues its own listing.
        second = admin.call("GetResults", admin_pb2.GetResultsRequest(run_id=run_a, page_size=10, page_token=token))
        assert {c.cell_id for c in second.cells}.isdisjoint({c.cell_id for c in first.cells})
    finally:
        admin.close()
    # After a kill -9 and restart the token is stale: its key died with the process.
    cluster.coordinator.kill9()
    cluster.start_coordinator()
    admin = cluster.admin()
    try:
        err = page_error(admin, "GetResults", admin_pb2.GetResultsRequest(run_id=run_a, page_size=10,
                                                                          page_token=token))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details().startswith("PAGE_TOKEN_INVALID: stale"), err.details()
    finally:
        admin.close()


def test_fleetctl_results_reads_a_run_of_several_pages_in_every_format(cluster: Cluster) -> None:
    spec = intbench_spec(2 * limits.PAGE_ITEMS_MAX // 3 + 10, subjects=("good", "bad", "ugly"))
    run_id = cluster.submit(spec)
    cells = len(spec["tasks"]) * 3
    assert cells > limits.PAGE_ITEMS_MAX * 2

    def ctl(*args: str) -> str:
        out = subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", cluster.address, "--token-file",
                              str(cluster.data_dir / "admin.token"), "results", run_id, *args],
                             capture_output=True, text=True, timeout=120, cwd=REPO, env=cluster.env())
        assert out.returncode == 0, out.stderr
        return out.stdout

    doc = json.loads(ctl("--json"))
    assert len(doc["cells"]) == len({c["cell_id"] for c in doc["cells"]}) == cells
    assert doc["summary"]["incomplete"] == cells and len(doc["subjects"]) == 3
    lines = ctl("--jsonl").splitlines()
    assert len(lines) == cells + 1 and json.loads(lines[-1])["summary"]["incomplete"] == cells
    assert len(ctl("--csv").splitlines()) == cells + 1
    table = ctl()
    assert f"and {cells - results_out.INCOMPLETE_LISTED_MAX} more" in table


def test_an_unpaged_read_of_a_run_too_large_for_one_message_is_refused_typed(cluster: Cluster) -> None:
    spec = intbench_spec(20_000, subjects=("good", "bad", "ugly"))
    run_id = cluster.submit(spec)
    admin = cluster.admin()
    try:
        err = page_error(admin, "GetResults", admin_pb2.GetResultsRequest(run_id=run_id))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.details().startswith("MESSAGE_TOO_LARGE: ") and "page_token" in err.details(), err.details()
        assert sum(len(p.cells) for p in results_pages(admin, run_id)) == 60_000
    finally:
        admin.close()
