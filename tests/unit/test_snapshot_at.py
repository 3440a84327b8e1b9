"""`tools.bench.snapshot_at` adds a snapshot N records after a store's newest one that recovers to
exactly the fold of the whole log; method: a real store in a temp dir holding a short real log
(a submit and some registrations) with a snapshot after its second record."""
from __future__ import annotations

from pathlib import Path

from common.ids import WorkerId, run_id_for
from coordinator.recovery import recover
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.state import durable_fingerprint
from coordinator.logcodec import encode_record
from coordinator.snapshot import encode_state
from coordinator.store import Store
from tests.unit.core_helpers import ENV, make_policy, make_spec
from tools.bench import snapshot_at


def test_a_snapshot_added_n_records_on_recovers_to_the_full_fold(tmp_path: Path, capsys) -> None:
    spec, policy = make_spec(tasks=6, subjects=2, cap=4), make_policy()
    commands = [c.RunSubmitted(1_000, run_id_for(spec.canonical, policy.canonical()), spec, policy)]
    commands += [c.WorkerRegistered(1_000 + i, WorkerId(f"w{i}"), 1, 2, ENV) for i in range(6)]
    state, records, at_two = new_state(), [], b""
    for cmd in commands:
        state, t = step(state, cmd)
        assert t.outcome.ok
        records.extend(encode_record(len(records) + 1, d) for d in t.durable)  # the log, as the actor writes it
        if len(records) == 2:
            at_two = encode_state(state)
    assert at_two and len(records) >= 7
    with Store.open(tmp_path) as store:
        store.append(records[:2])
        store.write_snapshot(2, at_two)
        store.append(records[2:])

    assert snapshot_at.main([str(tmp_path), "3"]) == 0
    assert "snapshot at 5:" in capsys.readouterr().out
    with Store.open(tmp_path) as store:
        assert store.snapshot_indexes[-1] == 5
        recovered, index = recover(store)
    assert index == len(records)
    assert durable_fingerprint(recovered) == durable_fingerprint(state)
