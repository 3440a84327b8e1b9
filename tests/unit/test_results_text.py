"""`fleetctl results RUN [--json] [--ci t|bootstrap]` states its intervals' method and keeps them
inside the spec's score range; with the bootstrap, both intervals are shown where they disagree.
Driven through fleetctl's main with a fake Admin client returning a protobuf response."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2, common_pb2
from tools import fleetctl
from tools.fleetctl import cli


def response(score_range: bool, tasks: int = 10, failing: tuple[int, ...] = (0,)) -> admin_pb2.GetResultsResponse:
    resp = admin_pb2.GetResultsResponse()
    for g in range(tasks):
        for rep in (1, 2):
            resp.cells.append(admin_pb2.CellResult(
                cell_id=f"t{g}/r{rep}/flaky", task_id=f"t{g}", repetition=rep, subject_id="flaky", state="selected",
                score=0.0 if g in failing else 1.0, status=common_pb2.STATUS_COMPLETED, worker_id="w1", generation=1,
                attempts=1))
    resp.summary.CopyFrom(admin_pb2.Summary(selected=2 * tasks, state=admin_pb2.RUN_STATE_COMPLETE))
    if score_range:
        resp.summary.score_range_low, resp.summary.score_range_high = 0.0, 1.0
    return resp


@pytest.fixture
def run_results(monkeypatch, tmp_path: Path, capsys):
    token = tmp_path / "admin.token"
    token.write_text("t")

    def run(resp: admin_pb2.GetResultsResponse, *flags: str) -> str:
        class FakeAdmin:
            def __init__(self, *args, **kwargs) -> None:
                pass

            def call(self, name, request, timeout=None):
                assert name in ("GetResults", "GetStatus") and request.run_id == "run-x"
                if name == "GetStatus":  # results also say which dispatch order the run used
                    return admin_pb2.GetStatusResponse(runs=[admin_pb2.RunStatus(run_id="run-x")])
                return resp

            def close(self) -> None:
                pass

        monkeypatch.setattr(cli, "Admin", FakeAdmin)
        assert fleetctl.main(["--token-file", str(token), "results", "run-x", *flags]) == 0
        return capsys.readouterr().out
    return run


def test_the_text_names_the_method_and_the_interval_stays_in_the_range(run_results) -> None:
    out = run_results(response(score_range=True))
    assert "0.900 [0.674, 1.000]" in out and "1.126" not in out
    assert "clipped to the score range [0, 1]" in out and "pass rate: Wilson" in out
    without = run_results(response(score_range=False))
    assert "0.900 [0.674, 1.126]" in without and "declares no benchmark.scoreRange" in without


def test_the_bootstrap_shows_both_intervals_where_they_disagree(run_results) -> None:
    # Four tasks, one failing: the pass rate's Wilson interval is [16%, 98%], the bootstrap's
    # [0, 100%] (expanded percentiles at four tasks): more than a tenth of the range apart.
    out = run_results(response(score_range=True, tasks=4), "--ci", "bootstrap")
    assert "cluster bootstrap over tasks" in out and "flaky pass rate: bootstrap 75% [0, 100]; Wilson" in out
    data = json.loads(run_results(response(score_range=True, tasks=4), "--json", "--ci", "bootstrap"))
    (subject,) = data["subjects"]
    t, boot = subject["score"], subject["score_bootstrap"]
    assert boot["method"] == "cluster_bootstrap" and t["method"] == "t_clustered_clipped"
    assert 0.0 <= boot["ci95"][0] <= boot["ci95"][1] <= 1.0
    differ = abs(t["ci95"][0] - boot["ci95"][0]) > 0.1 or abs(t["ci95"][1] - boot["ci95"][1]) > 0.1
    assert subject["disagree"]["score"] is differ
    assert ("flaky mean score: bootstrap" in out) is differ
    # Ten tasks, one failing: the two agree within the margin and only the bootstrap is printed.
    quiet = run_results(response(score_range=True, tasks=10), "--ci", "bootstrap")
    data = json.loads(run_results(response(score_range=True, tasks=10), "--json", "--ci", "bootstrap"))
    assert data["subjects"][0]["disagree"]["score"] is False and "both are shown" not in quiet


def test_json_without_bootstrap_carries_the_method_and_range(run_results) -> None:
    data = json.loads(run_results(response(score_range=True), "--json"))
    assert data["summary"]["score_range"] == [0.0, 1.0]
    (subject,) = data["subjects"]
    assert subject["score"]["range"] == [0.0, 1.0] and subject["pass_rate"]["method"] == "wilson_clustered"
    assert "score_bootstrap" not in subject


def test_a_score_outside_the_declared_range_is_named(run_results) -> None:
    resp = response(score_range=True)
    resp.cells[0].score = 1.5
    out = run_results(resp)
    assert "warning: 1 selected scores lie outside the declared benchmark.scoreRange" in out and "t0/r1/flaky" in out
    assert json.loads(run_results(resp, "--json"))["scores_outside_range"] == ["t0/r1/flaky"]
    assert "warning" not in run_results(response(score_range=True))
