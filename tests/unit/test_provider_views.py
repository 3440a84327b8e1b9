"""Providers and spend, as the operator sees them: GetStatus carries every provider and each
run's spend, cap and pause reason, GetResults each cell's throttled attempts and the run's spend
against its cap, `fleetctl status`/`results`/`report` print them, the metrics expose them, and
`fleetctl recover --max-cost` reaches the core as RunRecovered's new cap; method: a core state
filled by hand (the core's own accounting is tested with the core), read through the real
views, formatters, metrics and Admin servicer (a fake actor that steps the core in memory)."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

import pytest

from common.fleetpb import admin_pb2, common_pb2
from coordinator.admin_service import AdminServicer
from coordinator.edge import Hub
from coordinator import views
from coordinator.core import commands as c
from coordinator.core.state import ProviderState
from coordinator.metrics import Metrics, sample
from tests.unit.core_helpers import Core, make_policy, make_spec
from tests.unit.test_results_out import pages_of
from tools import fleetctl
from tools.fleetctl import cli, results_out
from tools.fleetctl import views as ctl
from tools.fleetctl.commands import actions
from tools.fleetctl.report_page import render_html, timeline_from_results


def spent_core() -> Core:
    """A run paused at its spend cap, two providers (one throttled, one not yet), and a cell
    throttled twice: as the core leaves them, set by hand."""
    k = Core(make_spec(tasks=3, subjects=2), make_policy(required_environment_id=""))
    k.advance(10_000)
    k.state.providers.clear()  # whatever the core made of the spec: these are the test's
    k.state.providers["zeta"] = ProviderState(name="zeta", effective=0)
    k.state.providers["openai"] = ProviderState(
        name="openai", effective=6, declared=8, running=4, peak_running=7, throttled=5,
        retry_after_ms_total=12_500, slow_start=False, credit=1, last_throttled_ms=7_000,
        last_throttled="429 rate limit: retry after 2 s")
    run = k.run
    run.observed_cost_usd, run.cost_cap_usd = 2.5000000001, 2.5
    run.pause_reason = "spend cap reached: observed $2.50 of $2.50"
    run.paused = True
    first = next(iter(run.cells))
    run.cells[first].throttled = 2
    return k


def test_status_carries_every_provider_by_name_and_each_runs_spend_cap_and_pause_reason() -> None:
    k = spent_core()
    out = views.status(k.state, None, k.now)
    assert [p.name for p in out.providers] == ["openai", "zeta"], "by name, every provider"
    p = out.providers[0]
    assert (p.running, p.peak_running, p.effective, p.declared) == (4, 7, 6, 8)
    assert (p.throttled, p.retry_after_ms_total, p.slow_start) == (5, 12_500, False)
    assert p.last_throttled == "429 rate limit: retry after 2 s" and p.last_throttled_age_ms == 3_000
    z = out.providers[1]
    assert (z.effective, z.declared, z.slow_start, z.last_throttled_age_ms) == (0, 0, True, 0)
    (r,) = out.runs
    assert r.observed_cost_usd == 2.5 and r.cost_cap_usd == 2.5  # rounded to nanodollars, as the summary
    assert r.pause_reason.startswith("spend cap reached") and r.state == admin_pb2.RUN_STATE_PAUSED
    # A status of one run still lists the providers: they are fleet-wide, like the workers.
    assert len(views.status(k.state, k.run_id, k.now).providers) == 2


def test_results_carry_each_cells_throttled_attempts_and_the_runs_spend_against_its_cap() -> None:
    k = spent_core()
    pages = pages_of(k, 2)
    assert len(pages) == 3
    cells = [cell for p in pages for cell in p.cells]
    assert [cell.throttled for cell in cells] == [2, 0, 0, 0, 0, 0]
    s = pages[-1].summary
    assert s.run_observed_cost_usd == 2.5 and s.cost_cap_usd == 2.5


def printed_status(k: Core) -> tuple[dict, str]:
    data = ctl.status_json(views.status(k.state, None, k.now))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ctl.print_status(data)
    return data, out.getvalue()


def test_fleetctl_status_prints_the_providers_table_and_the_runs_spend_and_pause() -> None:
    k = spent_core()
    data, text = printed_status(k)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("provider"))
    for column in ("running/limit", "declared", "throttled", "retry-after waits"):
        assert column in header
    openai = next(line for line in lines if line.startswith("openai")).split()
    assert openai[:7] == ["openai", "4/6", "7", "8", "5", "12.5s", "no"]
    assert "3.0s ago: 429 rate limit" in text
    zeta = next(line for line in lines if line.startswith("zeta")).split()
    assert zeta[:4] == ["zeta", "0/-", "0", "-"], "no limit yet and none declared"
    assert f"run {k.run_id}: paused (paused: spend cap reached: observed $2.50 of $2.50 — resume with: " \
           f"fleetctl recover {k.run_id} --max-cost DOLLARS)" in text
    assert "  spend $2.5000 of cap $2.5000 (100%)" in text
    # --json carries the same.
    (r,) = data["runs"]
    assert (r["observed_cost_usd"], r["cost_cap_usd"], r["pause_reason"]) == (
        2.5, 2.5, "spend cap reached: observed $2.50 of $2.50")
    p = data["providers"][0]
    assert p == {"name": "openai", "running": 4, "peak_running": 7, "effective": 6, "declared": 8, "throttled": 5,
                 "retry_after_ms_total": 12_500, "slow_start": False,
                 "last_throttled": "429 rate limit: retry after 2 s", "last_throttled_age_ms": 3_000}
    assert data["providers"][1]["effective"] is None and data["providers"][1]["declared"] is None
    json.dumps(data)


def test_fleetctl_status_without_providers_or_cap_prints_no_table_and_says_no_cap() -> None:
    k = Core(make_spec(tasks=1, subjects=1), make_policy(required_environment_id=""))
    k.state.providers.clear()
    data, text = printed_status(k)
    assert data["providers"] == [] and "provider" not in text
    assert data["runs"][0]["cost_cap_usd"] is None and data["runs"][0]["pause_reason"] is None
    assert "  spend $0.0000 (no cap)" in text and "paused" not in text


def test_the_unnamed_default_provider_alone_prints_no_table_until_it_throttles() -> None:
    k = Core(make_spec(tasks=1, subjects=1), make_policy(required_environment_id=""))
    assert list(k.state.providers) == ["default"]
    data, text = printed_status(k)
    assert [p["name"] for p in data["providers"]] == ["default"] and "running/limit" not in text
    k.state.providers["default"].throttled = 1
    _, text = printed_status(k)
    assert "running/limit" in text


def test_an_operators_pause_resumes_without_a_new_cap() -> None:
    k = Core(make_spec(tasks=1, subjects=1), make_policy(required_environment_id=""))
    run = k.run
    run.paused, run.pause_reason, run.cost_cap_usd, run.observed_cost_usd = True, "providers all throttled", 5.0, 1.0
    _, text = printed_status(k)
    assert f"(paused: providers all throttled — resume with: fleetctl recover {k.run_id})" in text


def test_fleetctl_results_sum_throttled_attempts_over_every_page_and_show_spend_against_cap() -> None:
    k = spent_core()
    out = io.StringIO()
    results_out.write_table(pages_of(k, 2), out)
    text = out.getvalue()
    assert "; spend $2.5000 of cap $2.5000 (100%); 2 throttled attempts (not counted against " \
           "maxAttemptsPerCell)" in text
    out = io.StringIO()
    results_out.write_json(pages_of(k, 2), out)
    doc = json.loads(out.getvalue())
    s = doc["summary"]
    assert (s["throttled_attempts"], s["run_observed_cost_usd"], s["cost_cap_usd"]) == (2, 2.5, 2.5)
    assert doc["cells"][0]["throttled"] == 2
    out = io.StringIO()
    results_out.write_jsonl(pages_of(k, 4), out)
    assert json.loads(out.getvalue().splitlines()[-1])["summary"]["throttled_attempts"] == 2
    # A whole response (the report, fleetctl local) counts its own cells.
    whole = ctl.results_json(admin_pb2.GetResultsResponse(
        cells=[cell for p in pages_of(k, 2) for cell in p.cells], summary=pages_of(k, 2)[-1].summary))
    assert whole["summary"]["throttled_attempts"] == 2


def test_the_report_summary_shows_spend_against_cap_the_pause_and_the_throttled_count() -> None:
    k = spent_core()
    results = ctl.results_json(admin_pb2.GetResultsResponse(
        cells=[cell for p in pages_of(k, 100) for cell in p.cells], summary=pages_of(k, 100)[-1].summary))
    status = ctl.status_json(views.status(k.state, k.run_id, k.now))
    page = render_html(results, status, timeline_from_results(results))
    assert '<b id="count-throttled" data-count="2">2</b>' in page
    assert '<dd id="spend" data-usd="2.5" data-cap-usd="2.5" data-cap-reached="true">$2.5000 of cap $2.5000 ' \
           '(100%)</dd>' in page
    assert '<span id="pause-reason">spend cap reached: observed $2.50 of $2.50</span>' in page
    # Without a cap, it says so; without any spend numbers (an older coordinator), no fact.
    results["summary"]["cost_cap_usd"] = None
    assert "(no spend cap)</dd>" in render_html(results, status, [])
    for key in ("run_observed_cost_usd", "cost_cap_usd"):
        del results["summary"][key]
    del status["runs"][0]["observed_cost_usd"]
    assert 'id="spend"' not in render_html(results, status, [])


def test_the_report_and_results_show_the_fleets_providers_but_not_a_lone_untouched_default() -> None:
    k = spent_core()
    results = ctl.results_json(admin_pb2.GetResultsResponse(
        cells=[cell for p in pages_of(k, 100) for cell in p.cells], summary=pages_of(k, 100)[-1].summary))
    status = ctl.status_json(views.status(k.state, k.run_id, k.now))
    page = render_html(results, status, [])
    assert '<section id="providers">' in page
    assert ('<tr data-provider="openai" data-running="4" data-effective="6" data-declared="8" data-throttled="5">'
            in page)
    assert "<td>12.5 s</td>" in page and "429 rate limit: retry after 2 s" in page
    quiet = dict(status, providers=[dict(p, name="default", throttled=0) for p in status["providers"][:1]])
    assert '<section id="providers">' not in render_html(results, quiet, [])
    assert ctl.shown_providers(quiet["providers"]) == [] and ctl.shown_providers(status["providers"])


def test_metrics_expose_the_providers_and_each_runs_spend_from_a_sample_of_state() -> None:
    k = spent_core()
    m = Metrics()
    m.apply(sample(k.state), 0)

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(name, labels)

    assert value("fleet_provider_cells_running", provider="openai") == 4
    assert value("fleet_provider_effective_limit_cells", provider="openai") == 6
    assert value("fleet_provider_declared_limit_cells", provider="openai") == 8
    assert value("fleet_provider_effective_limit_cells", provider="zeta") == 0
    assert value("fleet_provider_throttled_attempts_total", provider="openai") == 5
    assert value("fleet_provider_retry_after_seconds_total", provider="openai") == 12.5
    assert value("fleet_run_observed_cost_usd", run=k.run_id) == pytest.approx(2.5)
    assert value("fleet_run_cost_cap_usd", run=k.run_id) == 2.5
    # The counters are the core's totals as of the last sample, never counted twice.
    k.state.providers["openai"].throttled = 6
    m.apply(sample(k.state), 0)
    m.apply(sample(k.state), 0)
    assert value("fleet_provider_throttled_attempts_total", provider="openai") == 6


# ---- the Admin round trip --------------------------------------------------------------------

class Tokens:
    def check_admin(self, token: object) -> None:
        pass


class Aborted(Exception):
    pass


class Context:
    def invocation_metadata(self) -> tuple:
        return (("authorization", "Bearer admin"),)

    async def abort(self, code: object, details: str) -> None:
        raise Aborted(code, details)


class CoreActor:
    """The actor's contract on one thread and no disk: a command is stepped through the core
    harness and its Transition handed to `done`; a query reads the state."""

    def __init__(self, k: Core) -> None:
        self.k, self.commands = k, []
        self.last_now_ms = k.now

    def submit(self, request: object) -> None:
        if request.make is not None:
            command = request.make(self.k.now)
            self.commands.append(command)
            request.done(self.k.apply(command))
        else:
            request.done(request.query(self.k.state))


def test_recover_with_max_cost_reaches_the_core_as_the_new_cap_and_status_reads_back() -> None:
    k = Core(make_spec(tasks=1, subjects=1), make_policy(required_environment_id=""))
    actor = CoreActor(k)
    admin = AdminServicer(actor, Hub(), Tokens(), None)  # type: ignore[arg-type]

    async def scenario() -> tuple:
        await admin.PauseRun(admin_pb2.PauseRunRequest(run_id=k.run_id), Context())
        capped = await admin.RecoverRun(admin_pb2.RecoverRunRequest(run_id=k.run_id, max_observed_cost_usd=12.5),
                                        Context())
        await admin.PauseRun(admin_pb2.PauseRunRequest(run_id=k.run_id), Context())
        kept = await admin.RecoverRun(admin_pb2.RecoverRunRequest(run_id=k.run_id), Context())
        with pytest.raises(Aborted) as refused:
            await admin.RecoverRun(admin_pb2.RecoverRunRequest(run_id=k.run_id, max_observed_cost_usd=-1), Context())
        k.state.providers.clear()
        k.state.providers["openai"] = ProviderState(name="openai", effective=3, running=1)
        status = await admin.GetStatus(admin_pb2.GetStatusRequest(run_id=k.run_id), Context())
        return capped, kept, refused.value, status

    capped, kept, refused, status = asyncio.run(scenario())
    assert capped.outcome == common_pb2.ACK_OUTCOME_ACCEPTED and kept.outcome == common_pb2.ACK_OUTCOME_ACCEPTED
    recovers = [cmd for cmd in actor.commands if isinstance(cmd, c.RunRecovered)]
    assert [r.max_observed_cost_usd for r in recovers] == [12.5, None], "absent keeps the run's cap"
    assert "MALFORMED_FRAME" in refused.args[1] and len(recovers) == 2, "a negative cap never reaches the core"
    assert [(p.name, p.running, p.effective) for p in status.providers] == [("openai", 1, 3)]


@pytest.fixture
def ctl_admin(monkeypatch, tmp_path: Path):
    token = tmp_path / "admin.token"
    token.write_text("t")
    calls: list = []
    answers: dict = {}

    class FakeAdmin:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def call(self, name, request, timeout=None):
            calls.append((name, request))
            return answers.get(name, admin_pb2.ActionResponse(outcome=common_pb2.ACK_OUTCOME_ACCEPTED))

        def close(self) -> None:
            pass

    monkeypatch.setattr(cli, "Admin", FakeAdmin)
    return lambda *argv: fleetctl.main(["--token-file", str(token), *argv]), calls, answers


def test_fleetctl_recover_sends_max_cost_only_when_given(ctl_admin, capsys) -> None:
    main, calls, _ = ctl_admin
    assert main("recover", "run-x", "--max-cost", "7.25") == 0
    assert main("recover", "run-x") == 0
    (_, with_cap), (_, without) = calls
    assert with_cap.HasField("max_observed_cost_usd") and with_cap.max_observed_cost_usd == 7.25
    assert not without.HasField("max_observed_cost_usd")
    assert main("recover", "run-x", "--max-cost", "0") == 1 and len(calls) == 2
    assert "--max-cost must be a positive number of dollars" in capsys.readouterr().err


def test_a_recover_refused_at_the_cap_says_how_to_raise_it(ctl_admin, capsys, monkeypatch) -> None:
    main, _, answers = ctl_admin
    # The rejection's number comes with the core's change; its name is what fleetctl reads.
    monkeypatch.setitem(actions.REJECTION_NAMES, 43, "SPEND_CAP_REACHED")
    answers["RecoverRun"] = admin_pb2.ActionResponse(outcome=common_pb2.ACK_OUTCOME_REJECTED, rejection=43,
                                                     detail="observed $2.50 of $2.50")
    assert main("recover", "run-x") == 1
    err = capsys.readouterr().err
    assert "refused: SPEND_CAP_REACHED: observed $2.50 of $2.50 (raise the cap: fleetctl recover run-x " \
           "--max-cost DOLLARS)" in err
