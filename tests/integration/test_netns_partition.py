"""A real network partition: coordinator and two workers in their own network namespaces on
a bridged private LAN (10.77.0.0/24). Mid-run one worker's link is pulled for longer than
the policy's expireAfterMs while it runs "slow" groups, and the other's packets are delayed
(netem 200 ms ± 50 ms, where tc/netem exist); then both links are restored.

The run must complete with every cell selected once at its expected score; every report a
worker saw acknowledged ACCEPTED is its cell's selected result; the cut worker's reports of
its superseded assignments come back acknowledged LATE and are counted as late evidence.

Needs root and iproute2 (skipped otherwise; in CI, as root, iproute2 is apt-installed when
missing). The test process stays in the root namespace: everything that talks to 10.77.x
(the daemons and fleetctl) runs under `ip netns exec`.
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest

from tests.integration.harness import FAST_POLICY, expected_score, intbench_spec
from tests.integration.netns import Lan, NetnsCluster, NetnsUnavailable, ensure_iproute2

BUDGET_S = 90  # the whole test, set-up to the last check (teardown is bounded separately)
GROUPS = 30
SUBJECTS = ("good", "bad", "slow")
EXPIRE_S = FAST_POLICY["expireAfterMs"] / 1000
CUT_MIN_S = EXPIRE_S + 1.5  # the cut outlasts expiry, so the held groups are redispatched
CUT_MAX_S = EXPIRE_S + 8.0  # ... and is restored by then even if expiry was not observed
WARMUP_GROUPS = 2  # groups w1 finishes before the cut: the partition hits a worker mid-run
# A worker persists an ack, then logs it; a stream cut in between loses the line, not the ack.
ACK_LINE_GRACE_S = 3.0


def log_records(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
    return out


def events(records: list[dict], name: str, key: str) -> set[str]:
    return {r[key] for r in records if r.get("event") == name and key in r}


def remaining(deadline: float, waiting_for: str) -> float:
    left = deadline - time.monotonic()
    assert left > 0, f"the test's {BUDGET_S}s budget is spent waiting for {waiting_for}"
    return left


@pytest.mark.crash
@pytest.mark.timeout(BUDGET_S + 60)
def test_partitioned_worker_expires_and_its_late_reports_are_kept_not_selected(tmp_path: Path) -> None:
    try:
        iproute = ensure_iproute2()
    except NetnsUnavailable as e:
        pytest.skip(f"no network namespaces: {e}")
    lan = Lan(("coord", "w1", "w2"))
    cluster = NetnsCluster(tmp_path, lan, "coord")
    cut = delayed = False
    try:
        try:
            lan.create()
        except NetnsUnavailable as e:
            pytest.skip(f"no network namespaces ({iproute}): {e}")
        started = time.monotonic()
        deadline = started + BUDGET_S
        cluster.start_coordinator()
        assert cluster.address.startswith(f"{lan.addr('coord')}:"), cluster.address
        # Per-cell lines ("assignment received", "outcome buffered", ...) are at debug.
        short_drain = ("--drain-timeout-s", "10", "--flush-timeout-s", "5", "--log-level", "debug")
        w1 = cluster.start_worker("w1", slots=2, extra=short_drain)
        cluster.start_worker("w2", slots=2, extra=short_drain)
        run_id = cluster.submit(intbench_spec(GROUPS, SUBJECTS, cap=4))

        # Wait for w1 to take a fresh group after a warm-up, and pull its cable right then:
        # the group's "slow" cell (1 s) is still running, so its report cannot reach the
        # coordinator before the assignment expires. The groups that w1 has not finished by
        # a log read after the cut (`held_at_cut`) had a cell unreported when the link went:
        # they can only be superseded. Should a slow host let none be held, the link comes
        # back at once and the next fresh group is tried.
        seen: set[str] = set()
        held_at_cut: set[str] = set()
        while not held_at_cut:
            remaining(deadline, f"w1 to take a group after {WARMUP_GROUPS}\n{cluster.tails()}")
            assert w1.alive(), w1.tail()
            records = log_records(w1.log_path)
            received = [r["assignment"] for r in records if r.get("event") == "assignment received"]
            ran = events(records, "group ran", "assignment")
            fresh = {a for a in received if a not in seen and a not in ran}
            seen.update(received)
            if len(ran) >= WARMUP_GROUPS and fresh:
                lan.link("w1", up=False)
                cut = True
                cut_at = time.monotonic()
                records = log_records(w1.log_path)
                held_at_cut = (events(records, "assignment received", "assignment")
                               - events(records, "group ran", "assignment"))
                if not held_at_cut:
                    lan.link("w1", up=True)
                    cut = False
            time.sleep(0.02)
        delayed = lan.delay("w2")

        # Hold the cut until the coordinator has expired w1 (seen through its admin API,
        # from inside the coordinator's namespace) and at least CUT_MIN_S have passed.
        statuses: list[str] = []
        while True:
            remaining(deadline, "the cut's end")
            held_s = time.monotonic() - cut_at
            w1_status = next((w["status"] for w in cluster.status()["workers"] if w["worker_id"] == "w1"), "")
            if not statuses or statuses[-1] != w1_status:
                statuses.append(w1_status)
            if (held_s >= CUT_MIN_S and "expired" in w1_status) or held_s >= CUT_MAX_S:
                break
            time.sleep(0.2)
        lan.link("w1", up=True)
        cut = False
        cut_s = time.monotonic() - cut_at
        if delayed:
            lan.undelay("w2")
            delayed = False
        assert any("expired" in s for s in statuses), f"w1 never expired during a {cut_s:.1f}s cut: {statuses}"

        results = cluster.wait_settled(run_id, remaining(deadline, "the run to settle"))
        # The run may settle before w1's replayed outbox has been answered: wait until the
        # coordinator holds every outcome either worker buffered, as a selected result or as
        # late evidence, and the worker has logged its acknowledgement (or, where the ack was
        # persisted by the worker but its log line lost to a stream cut, its outbox emptied).
        selected_ids = {c["attempt_id"] for c in results["cells"]}
        all_held_at: float | None = None
        while True:
            coord = log_records(cluster.coordinator.log_path)
            held = selected_ids | events([r for r in coord if r.get("run_id") == run_id], "late_report", "subject")
            missing, unlogged = {}, {}
            for wid, proc in cluster.workers.items():
                records = log_records(proc.log_path)
                buffered = events(records, "outcome buffered", "attempt")
                missing[wid] = buffered - held
                unlogged[wid] = buffered - events(records, "report acknowledged", "attempt")
            if not any(missing.values()) and not any(unlogged.values()):
                break
            if any(missing.values()):
                all_held_at = None
            elif all_held_at is None:
                all_held_at = time.monotonic()
            elif time.monotonic() - all_held_at > ACK_LINE_GRACE_S:
                break  # every report is held; only ack lines are missing (reported below)
            remaining(deadline, f"the outboxes to be delivered: not held {missing}, no ack line {unlogged}\n"
                                + cluster.tails())
            time.sleep(0.2)
            results = cluster.results(run_id)
            selected_ids = {c["attempt_id"] for c in results["cells"]}
        elapsed = time.monotonic() - started

        summary = results["summary"]
        assert summary["state"] == "complete", summary
        assert summary["selected"] == GROUPS * len(SUBJECTS), summary
        cells = results["cells"]
        by_id: dict[str, dict] = {}
        for cell in cells:
            assert cell["cell_id"] not in by_id, f"cell {cell['cell_id']} listed twice"
            by_id[cell["cell_id"]] = cell
            assert cell["state"] == "selected", cell
            assert cell["score"] == expected_score(int(cell["task"][1:]), cell["subject"]), cell
            assert cell["worker_id"] and cell["assignment_id"] and cell["generation"] >= 1, cell
        assert len(by_id) == GROUPS * len(SUBJECTS)
        selected = {c["attempt_id"]: c for c in cells}
        assert len(selected) == len(cells), "one attempt selected for two cells"

        # Every acknowledged ACCEPTED report is the selected result of its cell, from that
        # worker and assignment; every selected result is an outcome its worker buffered.
        late_acked: dict[str, set[str]] = {}
        late_ack_assignments: dict[str, set[str]] = {}
        buffered_by: dict[str, tuple[str, str]] = {}
        for wid, proc in cluster.workers.items():
            for rec in log_records(proc.log_path):
                if rec.get("event") == "outcome buffered":
                    buffered_by[rec["attempt"]] = (wid, rec["assignment"])
                if rec.get("event") != "report acknowledged":
                    continue
                if rec["outcome"] == "ACK_OUTCOME_ACCEPTED":
                    cell = selected.get(rec["attempt"])
                    assert cell is not None, f"{wid} saw {rec['attempt']} ACCEPTED but it is not selected"
                    assert cell["worker_id"] == wid and cell["assignment_id"] == rec["assignment"], (rec, cell)
                elif rec["outcome"] == "ACK_OUTCOME_LATE":
                    late_acked.setdefault(wid, set()).add(rec["attempt"])
                    late_ack_assignments.setdefault(wid, set()).add(rec["assignment"])
        for attempt, cell in selected.items():
            assert buffered_by.get(attempt) == (cell["worker_id"], cell["assignment_id"]), (attempt, cell)

        # The coordinator superseded the groups w1 held at the cut (it expired w1) and kept
        # every one of their reports it did not select as late evidence, never selected.
        coord = [r for r in log_records(cluster.coordinator.log_path) if r.get("run_id") == run_id]
        superseded = {r["subject"] for r in coord
                      if r.get("event") == "assignment_superseded" and r.get("detail") == "worker expired"}
        late_kept = events(coord, "late_report", "subject")
        w2_assignments = events(log_records(cluster.workers["w2"].log_path), "assignment received", "assignment")
        assert held_at_cut <= superseded, f"groups w1 held at the cut not superseded: {held_at_cut - superseded}"
        # Judged by w2's own log, not by w1's: a push to w1 that the cut swallowed is superseded
        # with w1 but never reached w1's log (one CI run in five on a loaded VM).
        assert not superseded & w2_assignments, "an assignment of the undisturbed worker expired"
        expired = events(log_records(cluster.coordinator.log_path), "worker_expired", "subject")
        assert "w1" in expired and "w2" not in expired, f"expired: {expired}"
        assert not late_kept & selected.keys(), "a late report was selected"
        for attempt, (wid, assignment) in buffered_by.items():
            if assignment in superseded:
                assert attempt in selected or attempt in late_kept, f"{attempt} of superseded {assignment} lost"
            else:
                assert attempt not in late_kept, f"{attempt} of live {assignment} counted late"
        assert summary["late_reports"] == len(late_kept), (summary, sorted(late_kept))
        assert summary["late_reports"] > 0, summary
        assert all(buffered_by.get(a, ("",))[0] == "w1" for a in late_kept), sorted(late_kept)
        assert not late_acked.get("w2"), f"the undisturbed worker saw LATE acknowledgements: {late_acked}"
        assert late_acked.get("w1", set()) <= late_kept and late_ack_assignments.get("w1", set()) <= superseded
        # ... and w1 saw each acknowledged LATE: by its log line, or (where a stream cut took
        # the line) by its outbox being empty after a clean drain, since the coordinator's
        # only answer to a report it keeps as late evidence is LATE.
        for wid, proc in cluster.workers.items():
            assert proc.term(20) == 0, proc.tail()
            records = log_records(proc.log_path)
            drained = [r for r in records if r.get("event") == "worker drained"]
            assert drained and drained[-1]["outbox_depth"] == 0, proc.tail()
            assert not events(records, "report dead-lettered", "attempt"), proc.tail()
        late_unlogged = late_kept - late_acked.get("w1", set())
        assert late_unlogged <= unlogged["w1"], f"late evidence w1 never had acknowledged: {late_unlogged}"
        # Their cells were redispatched and selected from a later generation.
        for attempt in late_kept:
            cell = by_id[attempt.removeprefix(f"{run_id}:").rsplit(":", 1)[0]]
            assert cell["assignment_id"] not in superseded and cell["generation"] >= 2, cell

        unlogged_n = sum(len(v) for v in unlogged.values())
        print(f"\nnetns partition: {elapsed:.1f}s total, w1 cut {cut_s:.1f}s (w1 {' -> '.join(statuses)}), "
              f"{len(held_at_cut)} group(s) held at the cut, {len(superseded)} superseded, "
              f"late_reports={summary['late_reports']}, LATE ack lines on w1={len(late_acked.get('w1', ()))}"
              + (f", {unlogged_n} ack(s) without a log line: {unlogged}" if unlogged_n else "")
              + (f"; note: {'; '.join(lan.notes)}" if lan.notes else ""))
        for n in lan.notes:
            warnings.warn(n, stacklevel=1)
    finally:
        try:
            if cut:
                lan.link("w1", up=True)
            if delayed:
                lan.undelay("w2")
        except Exception:
            pass
        try:
            cluster.stop_all()
        finally:
            lan.destroy()
