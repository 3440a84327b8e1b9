"""`fleetctl retry RUN --where KEY=VALUE,... [--dry-run]` grants exactly the incomplete cells that
match every key: the dry run lists them (count and ids) and grants nothing, the real one grants
each through RetryCell and reports a refused cell while the rest go on, and a filter it cannot
read exits 2; method: a settled run built by the core (cells exhausted on two workers), read and
steered by the real fleetctl command line through a fake Admin client that calls the real Admin
servicer (page tokens included) over a fake actor stepping the core in memory."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.evidence import Execution, Usage, Verification
from common.fleetpb import admin_pb2
from coordinator.admin_service import AdminServicer
from coordinator.edge import Hub
from coordinator.core import commands as c
from coordinator.core.state import GroupStatus
from tests.unit.core_helpers import OK, Core, make_policy, make_report, make_spec
from tests.unit.test_provider_views import Context, CoreActor, Tokens
from tools import fleetctl
from tools.fleetctl import cli
from tools.fleetctl.client import CtlError

FAILED = make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING, detail="no space left on device")
# What each cell reports: t0 and t2 run on w1, t1 and t3 on w2 (the core's dispatch order).
PLAN = {"t0": {"s0": FAILED, "s1": OK}, "t1": {"s0": FAILED, "s1": FAILED},
        "t2": {"s0": FAILED, "s1": OK}, "t3": {"s0": OK, "s1": FAILED}}


def exhausted_run() -> Core:
    """A settled run whose failed cells are out of attempts (one attempt a cell)."""
    k = Core(make_spec(tasks=4, subjects=2), make_policy(max_attempts_per_cell=1, quarantine_after_failures=0))
    k.register("w1")
    k.register("w2")
    for _ in range(20):
        held = [a for a in k.state.assignments.values() if a.authoritative]
        if not held:
            break
        for a in held:
            for tid in a.attempts:
                task, _, subject = k.attempt(tid).cell_id.split("/")
                k.report(tid, PLAN[task][subject])
    assert k.run.settled
    workers = {cid: k.attempt(cell.attempts[-1]).worker_id for cid, cell in k.run.cells.items()}
    assert workers == {"t0/r1/s0": "w1", "t0/r1/s1": "w1", "t1/r1/s0": "w2", "t1/r1/s1": "w2",
                       "t2/r1/s0": "w1", "t2/r1/s1": "w1", "t3/r1/s0": "w2", "t3/r1/s1": "w2"}
    return k


@pytest.fixture
def fleet(monkeypatch, tmp_path: Path):
    """(main, core, calls): fleetctl's main over the real Admin servicer of `core`, pages of 2
    cells (so a listing crosses page tokens), and every RPC fleetctl made."""
    k = exhausted_run()
    actor = CoreActor(k)
    servicer = AdminServicer(actor, Hub(), Tokens(), None)  # type: ignore[arg-type]
    token = tmp_path / "admin.token"
    token.write_text("t")
    calls: list = []

    class ServicerAdmin:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def call(self, name, request, timeout=None):
            calls.append((name, request))
            if name == "GetResults":
                request.page_size = 2
            try:
                return asyncio.run(getattr(servicer, name)(request, Context()))
            except Exception as e:  # an abort: what the real client turns into CtlError
                raise CtlError(str(e)) from None

        def close(self) -> None:
            pass

    monkeypatch.setattr(cli, "Admin", ServicerAdmin)
    main = lambda *argv: fleetctl.main(["--token-file", str(token), *argv])  # noqa: E731
    return main, k, calls, actor


def retries(calls: list) -> list[str]:
    return [request.cell_id for name, request in calls if name == "RetryCell"]


def test_a_dry_run_lists_exactly_the_matching_incomplete_cells_and_grants_nothing(fleet, capsys) -> None:
    main, k, calls, _ = fleet
    before = {cid: cell.grants for cid, cell in k.run.cells.items()}
    assert main("retry", k.run_id, "--where", "state=incomplete,reason=exhausted,subject=s0,worker=w1",
                "--dry-run") == 0
    out = capsys.readouterr().out
    assert out == (f"would retry 2 cells of run {k.run_id} (state=incomplete,reason=exhausted,subject=s0,"
                   "worker=w1):\n  t0/r1/s0\n  t2/r1/s0\n")
    assert retries(calls) == [] and {cid: cell.grants for cid, cell in k.run.cells.items()} == before
    assert sum(name == "GetResults" for name, _ in calls) == 4, "every page of the 8 cells, 2 a page"
    # Every key narrows: all the exhausted cells; those of w2; of subject s1.
    assert main("retry", k.run_id, "--where", "reason=exhausted", "--dry-run") == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  t0/r1/s0", "  t1/r1/s0", "  t1/r1/s1", "  t2/r1/s0",
                                                        "  t3/r1/s1"]
    assert main("retry", k.run_id, "--where", "worker=w2,subject=s1", "--dry-run") == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  t1/r1/s1", "  t3/r1/s1"]
    assert main("retry", k.run_id, "--where", "reason=provider_throttled", "--dry-run") == 0
    assert "no incomplete cell of run" in capsys.readouterr().out and retries(calls) == []


def test_the_real_retry_grants_each_matching_cell_through_retry_cell(fleet, capsys) -> None:
    main, k, calls, actor = fleet
    assert main("retry", k.run_id, "--where", "state=incomplete,reason=exhausted,subject=s0,worker=w1") == 0
    out = capsys.readouterr().out
    assert out == (f"retrying 2 cells of run {k.run_id} (state=incomplete,reason=exhausted,subject=s0,worker=w1):\n"
                   "  t0/r1/s0: accepted\n  t2/r1/s0: accepted\n2 of 2 cells granted one more attempt\n")
    assert retries(calls) == ["t0/r1/s0", "t2/r1/s0"]
    granted = [cmd.cell_id for cmd in actor.commands if isinstance(cmd, c.CellRetryGranted)]
    assert granted == ["t0/r1/s0", "t2/r1/s0"]
    assert {cid for cid, cell in k.run.cells.items() if cell.grants} == {"t0/r1/s0", "t2/r1/s0"}
    assert not k.run.settled and k.run.groups[0].status != GroupStatus.SETTLED


def test_a_refused_cell_is_reported_the_rest_go_on_and_the_exit_says_so(fleet, capsys) -> None:
    main, k, calls, _ = fleet
    # Between the listing and the grants another operator retried t1/r1/s0: its group runs again.
    real = cli.Admin.call

    def racing(self, name, request, timeout=None):
        if name == "RetryCell" and not retries(calls):
            k.grant("t1/r1/s0")
        return real(self, name, request, timeout)

    cli.Admin.call = racing
    assert main("retry", k.run_id, "--where", "worker=w2") == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"retrying 3 cells of run {k.run_id} (worker=w2):"
    assert lines[1].startswith("  t1/r1/s0: refused: CELL_NOT_INCOMPLETE: cell t1/r1/s0 is running")
    assert lines[2] == "  t1/r1/s1: accepted", "the refusal did not stop the rest"
    assert lines[3] == "  t3/r1/s1: accepted"
    assert lines[4] == "2 of 3 cells granted one more attempt; 1 refused"
    assert retries(calls) == ["t1/r1/s0", "t1/r1/s1", "t3/r1/s1"]
    assert k.run.cells["t1/r1/s1"].grants == 1 and k.run.cells["t3/r1/s1"].grants == 1


def test_two_cells_of_one_group_are_both_granted_though_the_first_grant_dispatches_the_group(fleet, capsys) -> None:
    main, k, _, _ = fleet
    assert main("retry", k.run_id, "--where", "task=t1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == ["  t1/r1/s0: accepted", "  t1/r1/s1: accepted"]
    assert k.run.cells["t1/r1/s0"].grants == 1 and k.run.cells["t1/r1/s1"].grants == 1


@pytest.mark.parametrize("where, says", [
    ("color=red", "unknown filter key 'color' (keys: state, reason, task, subject, worker)"),
    ("reason=exhaustd", "unknown incomplete reason 'exhaustd'"),
    ("state=selected", "only incomplete cells can be retried"),
    ("worker", "'worker' is not KEY=VALUE"),
    ("worker=w1,worker=w2", "filter key 'worker' is given twice"),
])
def test_a_filter_it_cannot_read_exits_2_with_a_clear_error_and_calls_nothing(fleet, capsys, where, says) -> None:
    main, k, calls, _ = fleet
    with pytest.raises(SystemExit) as exited:
        main("retry", k.run_id, "--where", where)
    assert exited.value.code == 2 and says in capsys.readouterr().err and calls == []


def test_retry_takes_a_cell_or_a_filter_and_the_single_cell_form_still_works(fleet, capsys) -> None:
    main, k, calls, _ = fleet
    assert main("retry", k.run_id) == 2
    assert "retry takes a CELL or --where KEY=VALUE,..., one of the two" in capsys.readouterr().err
    assert main("retry", k.run_id, "t0/r1/s0", "--where", "worker=w1") == 2
    assert main("retry", k.run_id, "t0/r1/s0", "--dry-run") == 2
    assert calls == []
    assert main("retry", k.run_id, "t3/r1/s1") == 0
    assert capsys.readouterr().out == "accepted\n" and retries(calls) == ["t3/r1/s1"]
    assert main("retry", k.run_id, "t0/r1/s1") == 1  # selected: refused, as before
    assert "refused: CELL_NOT_INCOMPLETE: cell t0/r1/s1 already has a selected result" in capsys.readouterr().err
