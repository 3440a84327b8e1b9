"""A one-second network blip costs no second execution and no wait (issue 26).

Coordinator and two workers in their own network namespaces on a bridged LAN (as in
test_netns_partition.py), at the default liveness policy. While worker w1 runs a group (its
"slow" cell sleeps 1 s), its network goes away for 1 s and comes back, in two shapes:

- lost: w1's port on the bridge goes down, so every packet either way is lost while w1's own
  interface and routes stay up; the TCP connection itself survives, retransmission carries it
  over the gap;
- unplugged: w1's interface goes down (its routes with it, so its sends fail at once);
- reset: w1's connections to the coordinator are torn down with a reset (what a middlebox or
  a NAT that forgot the flow does) and then every packet is lost for the second, so w1's
  reconnection attempts hang in the gap; it has to connect again once the network is back,
  within the coordinator's stream-end grace.

Either way the groups w1 held are not handed on (a dead worker costs the
stream-end grace; a blip is not a dead worker), no cell is executed twice (every subject
appends a line per execution to one file), nothing is counted late, and w1 goes on working.

Needs root and iproute2, and `ss` for the reset shape (skipped otherwise).
"""
from __future__ import annotations

import shutil
from datetime import datetime
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.harness import INTBENCH, expected_score, intbench_spec
from tests.integration.netns import Lan, NetnsCluster, NetnsUnavailable, ensure_iproute2, run
from tests.integration.test_netns_partition import events, log_records, remaining

BUDGET_S = 75
GROUPS = 16
SUBJECTS = ("slow", "good")
BLIP_S = 1.0
WARMUP_GROUPS = 1
# The default policy, spelled out (the harness's submit would put its fast policy in place of an
# empty one): the blip must pass under the limits users run with.
DEFAULT_POLICY = {"maxAttemptsPerCell": 3}


def blip_spec(exec_log: Path) -> dict:
    spec = intbench_spec(GROUPS, SUBJECTS, cap=4)
    for subject in spec["subjects"]:
        subject["args"].append(str(exec_log))
    return spec


def stamp(record: dict) -> float:
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


def restore(lan: Lan, shape: str) -> None:
    if shape == "unplugged":
        lan.link("w1", up=True)
    else:
        lan.port("w1", up=True)


@pytest.mark.crash
@pytest.mark.timeout(BUDGET_S + 60)
@pytest.mark.parametrize("shape", ["lost", "unplugged", "reset"])
def test_a_one_second_blip_costs_no_second_execution_and_no_wait(tmp_path: Path, shape: str) -> None:
    try:
        iproute = ensure_iproute2()
    except NetnsUnavailable as e:
        pytest.skip(f"no network namespaces: {e}")
    if shape == "reset" and shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed: connections cannot be reset")
    lan = Lan(("coord", "w1", "w2"))
    cluster = NetnsCluster(tmp_path, lan, "coord")
    exec_log = tmp_path / "executions.log"
    down = False
    try:
        try:
            lan.create()
        except NetnsUnavailable as e:
            pytest.skip(f"no network namespaces ({iproute}): {e}")
        deadline = time.monotonic() + BUDGET_S
        cluster.start_coordinator()
        extra = ("--drain-timeout-s", "10", "--flush-timeout-s", "5", "--log-level", "debug")
        w1 = cluster.start_worker("w1", slots=2, bench_root=INTBENCH, extra=extra)
        cluster.start_worker("w2", slots=2, bench_root=INTBENCH, extra=extra)
        run_id = cluster.submit(blip_spec(exec_log), DEFAULT_POLICY)

        # The blip comes while w1 runs a group it took after a warm-up one.
        while True:
            remaining(deadline, f"w1 to run a group after {WARMUP_GROUPS}\n{cluster.tails()}")
            assert w1.alive(), w1.tail()
            records = log_records(w1.log_path)
            held = (events(records, "assignment received", "assignment")
                    - events(records, "group ran", "assignment"))
            if len(events(records, "group ran", "assignment")) >= WARMUP_GROUPS and held:
                break
            time.sleep(0.02)
        if shape == "reset":
            done = run(*lan.exec_argv("w1", "ss", "-K", "dst", lan.addr("coord")), check=False)
            if done.returncode != 0:
                pytest.skip(f"ss -K cannot destroy sockets here: {done.stderr.strip()}")
        if shape == "unplugged":
            lan.link("w1", up=False)
        else:
            lan.port("w1", up=False)
        down = True
        blip_at = time.monotonic()
        time.sleep(BLIP_S)
        restore(lan, shape)
        down = False
        back_at = time.monotonic()

        # w1 finishes the groups it held and its reports reach the coordinator.
        while True:
            remaining(deadline, f"w1's held groups {sorted(held)} to be acknowledged\n{cluster.tails()}")
            records = log_records(w1.log_path)
            acked = {r["assignment"] for r in records if r.get("event") == "report acknowledged"}
            if held <= acked:
                break
            time.sleep(0.05)
        held_done_s = time.monotonic() - back_at

        results = cluster.wait_settled(run_id, remaining(deadline, "the run to settle"))
        summary = results["summary"]
        assert summary["state"] == "complete", summary
        assert summary["selected"] == GROUPS * len(SUBJECTS), summary
        assert summary["late_reports"] == 0, summary
        for cell in results["cells"]:
            assert cell["state"] == "selected", cell
            assert cell["score"] == expected_score(int(cell["task"][1:]), cell["subject"]), cell
            assert cell["executions"] == 1, cell
        # Each subject appended "start CELL ATTEMPT" once per execution, whoever ran it.
        starts = Counter(line.split()[1] for line in exec_log.read_text().splitlines() if line.startswith("start "))
        twice = {cell: n for cell, n in starts.items() if n > 1}
        assert not twice, f"executed more than once after a {BLIP_S}s blip ({shape}): {twice}"
        assert len(starts) == GROUPS * len(SUBJECTS), len(starts)

        coord = log_records(cluster.coordinator.log_path)
        superseded = {r["subject"] for r in coord if r.get("event") == "assignment_superseded"}
        assert not superseded & held, f"groups w1 held handed on after a {BLIP_S}s blip ({shape}): {superseded}"
        # A push the reset swallowed is released when w1 comes back without it, and dispatched
        # again: it never ran, so it cost nothing. Any other supersession is a wrong call.
        received = set().union(*(events(log_records(p.log_path), "assignment received", "assignment")
                                 for p in cluster.workers.values()))
        assert not superseded & received, f"assignments that ran were handed on ({shape}): {superseded & received}"
        assert "w1" not in events(coord, "worker_expired", "subject"), "w1 expired over a 1 s blip"
        w1_records = log_records(w1.log_path)
        # ... and w1 went on working: it was given groups after the blip.
        after = [r for r in w1_records if r.get("event") == "assignment received" and r["assignment"] not in held]
        assert after, "w1 got no group after the blip"
        streams = sum(1 for r in w1_records if r.get("event") == "session open")
        # How long the coordinator was without w1's stream (its grace is 1.5 s): the reset shape.
        closed = [r for r in coord if r.get("event") == "session_closed" and r.get("worker_id") == "w1"]
        opened = [r for r in coord if r.get("event") == "session_open" and r.get("worker_id") == "w1"]
        gap = (f"{(stamp(opened[1]) - stamp(closed[0])):.2f}s" if len(opened) > 1 and closed else "none")
        print(f"\nblip ({shape}): {BLIP_S:.1f}s from {blip_at - deadline + BUDGET_S:.1f}s, w1's held groups "
              f"{len(held)} acknowledged {held_done_s:.2f}s after the link came back, streams opened by w1: "
              f"{streams}, without a stream on the coordinator: {gap}, pushes lost and sent again: {len(superseded)}, cells {len(starts)}, each executed once")
    finally:
        try:
            if down:
                restore(lan, shape)
        except Exception:
            pass
        try:
            cluster.stop_all()
        finally:
            lan.destroy()
