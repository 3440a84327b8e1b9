"""Recorded coordinator logs replayed through today's codec and core must rebuild exactly the
recorded state: this catches log-format breaks and any nondeterminism in the core."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from coordinator.core import durable_fingerprint, new_state, step
from coordinator.logcodec import decode_record
from tools.sim.golden import summary_dict

HERE = Path(__file__).parent
CASES = sorted(p.name.removesuffix(".log") for p in HERE.glob("sim_seed_*.log"))


def test_there_are_golden_logs() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("case", CASES)
def test_recorded_log_replays_to_the_recorded_state(case: str) -> None:
    expected = json.loads((HERE / f"{case}.expected.json").read_text())
    state = new_state()
    lines = (HERE / f"{case}.log").read_text().split()
    assert len(lines) == expected["records"]
    for position, line in enumerate(lines, start=1):
        index, cmd = decode_record(base64.b64decode(line))
        assert index == position
        state, t = step(state, cmd)
        assert t.outcome.ok, f"record {index} ({type(cmd).__name__}) refused on replay: {t.outcome}"
        assert t.durable == (cmd,), f"record {index} replayed to different durable decisions"
    assert summary_dict(state, expected["run_id"]) == expected["summary"]
    assert durable_fingerprint(state) == expected["fingerprint"]


def test_a_reordered_log_does_not_pass_for_the_recording() -> None:
    case = CASES[0]
    expected = json.loads((HERE / f"{case}.expected.json").read_text())
    lines = (HERE / f"{case}.log").read_text().split()
    # Swap two reports late in the log: a replay must notice (refusal or a different state).
    cmds = [decode_record(base64.b64decode(line))[1] for line in lines]
    reports = [i for i, cmd in enumerate(cmds) if type(cmd).__name__ == "CellReported"]
    i, j = reports[-1], reports[-2]
    cmds[i], cmds[j] = cmds[j], cmds[i]
    state = new_state()
    refused = False
    for cmd in cmds:
        state, t = step(state, cmd)
        refused |= not t.outcome.ok
    assert refused or durable_fingerprint(state) != expected["fingerprint"]
