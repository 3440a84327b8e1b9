"""Goal: what `Store.append` acknowledged survives kill -9 and the kernel lock dies with its owner;
method: a real child process appends (and snapshots) in a loop, printing each index after
`append` returns, is killed with SIGKILL at a seeded random moment, and the parent reopens."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from coordinator.errors import StoreLocked  # noqa: E402
from coordinator.store import Store  # noqa: E402

pytestmark = pytest.mark.crash

ROUNDS = 5
SEED_BASE = 20_240_601
SNAPSHOT_EVERY_RECORDS = 40
# A small map so that growth (set_mapsize) also happens under the kill.
CHILD_MAP_BYTES = 128 << 10
CHILD_BATCH_RECORDS_MAX = 8
KILL_AFTER_S_MIN = 0.05
KILL_AFTER_S_MAX = 0.6
CHILD_READY_TIMEOUT_S = 20


def record(index: int) -> bytes:
    return f"record-{index}|".encode() + b"x" * (index % 97)


def state_at(index: int) -> bytes:
    return f"state-through-{index}".encode()


def child_main(data_dir: Path, seed: int) -> None:
    """Append forever; print `i <last>` once `append` returned, `s <index>` after a snapshot."""
    rng = random.Random(seed)
    store = Store.open(data_dir, map_size_bytes=CHILD_MAP_BYTES,
                       snapshot_every=SNAPSHOT_EVERY_RECORDS)
    print(f"ready {store.last_index}", flush=True)
    while True:
        first = store.last_index + 1
        n = rng.randint(1, CHILD_BATCH_RECORDS_MAX)
        last = store.append([record(i) for i in range(first, first + n)])
        print(f"i {last}", flush=True)
        if store.snapshot_due:
            store.write_snapshot(last, state_at(last))
            print(f"s {last}", flush=True)


def start_child(data_dir: Path, seed: int) -> tuple[subprocess.Popen[str], list[str], threading.Thread]:
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(data_dir), str(seed)],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in child.stdout:
            if line.endswith("\n"):  # a line cut by the kill was never fully printed
                lines.append(line.strip())
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(CHILD_READY_TIMEOUT_S), "child did not start"
    assert lines and lines[0].startswith("ready"), lines
    return child, lines, reader


def kill9(child: subprocess.Popen[str], reader: threading.Thread) -> None:
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    reader.join(timeout=10)


def verify(data_dir: Path, acknowledged: int, snapshots: list[int]) -> int:
    with Store.open(data_dir) as store:
        recovery = store.load()
        assert recovery.warnings == ()
        assert store.last_index >= acknowledged, (
            f"acknowledged {acknowledged}, recovered only {store.last_index}")
        start = 1
        if recovery.snapshot is not None:
            index, state = recovery.snapshot
            assert state == state_at(index)
            assert not snapshots or index >= snapshots[-1], "an acknowledged snapshot was lost"
            start = index + 1
        else:
            assert not snapshots
        indexes = []
        for index, payload in recovery.records:
            assert payload == record(index)
            indexes.append(index)
        assert indexes == list(range(start, store.last_index + 1)), "log not contiguous"
        return store.last_index


@pytest.mark.timeout(120)
def test_every_acknowledged_append_survives_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    acknowledged = 0
    snapshots: list[int] = []
    for round_ in range(ROUNDS):
        seed = SEED_BASE + round_
        rng = random.Random(seed)
        child, lines, reader = start_child(data_dir, seed)
        assert int(lines[0].split()[1]) >= acknowledged
        time.sleep(rng.uniform(KILL_AFTER_S_MIN, KILL_AFTER_S_MAX))
        kill9(child, reader)
        for line in lines[1:]:
            kind, value = line.split()
            if kind == "i":
                assert int(value) > acknowledged
                acknowledged = int(value)
            else:
                snapshots.append(int(value))
        recovered = verify(data_dir, acknowledged, snapshots)
        print(f"round {round_} seed {seed}: acknowledged {acknowledged}, recovered {recovered}, "
              f"snapshots {snapshots[-2:]}")
        acknowledged = recovered  # the next child continues from what is on disk
    assert snapshots, "the rounds were too short to exercise snapshots and compaction"


@pytest.mark.timeout(60)
def test_a_killed_owners_lock_is_released_by_the_kernel(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    child, _, reader = start_child(data_dir, SEED_BASE)
    with pytest.raises(StoreLocked) as info:
        Store.open(data_dir)
    assert info.value.pid == child.pid
    kill9(child, reader)
    assert (data_dir / "LOCK").exists(), "nothing was deleted"
    with Store.open(data_dir) as store:
        assert (data_dir / "LOCK").read_text().strip() == str(os.getpid())
        assert store.last_index >= 0


if __name__ == "__main__":
    child_main(Path(sys.argv[1]), int(sys.argv[2]))
