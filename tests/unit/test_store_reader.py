"""Goal: the snapshot process's read-only view of a store (Store.open_reader) sees what the
writing process committed, can write nothing, takes no data-dir lock, and folds exactly to a
given index (recovery.fold_to); method: a real writer Store here and the reader in another
process (LMDB allows one open of an environment per process), printing what it saw."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.ids import WorkerId
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.state import durable_fingerprint
from coordinator.errors import StoreLocked
from coordinator.logcodec import encode_record
from coordinator.snapshot import encode_state
from coordinator.store import Store
from tests.unit.test_store import fill

REPO = Path(__file__).resolve().parents[2]

READER = r"""
import json, sys
from coordinator.recovery import fold_to
from coordinator.core.state import durable_fingerprint
from coordinator.store import Store
out = {}
with Store.open_reader(sys.argv[1]) as reader:
    out["last"] = reader.last_index
    out["records"] = [i for i, _ in reader.load().records]
    out["folds"] = {}
    for upto in json.loads(sys.argv[2]):
        state, at = fold_to(reader, upto)
        out["folds"][str(upto)] = [at, repr(durable_fingerprint(state))]
    try:
        reader.append([b"x"])
        out["wrote"] = True
    except AssertionError:
        out["wrote"] = False
print(json.dumps(out))
"""


def read(data_dir: Path, folds: list[int] = ()) -> dict:
    done = subprocess.run([sys.executable, "-c", READER, str(data_dir), json.dumps(list(folds))], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_reader_sees_the_writers_commits_and_cannot_write(tmp_path: Path) -> None:
    with Store.open(tmp_path) as writer:
        fill(writer, 12)
        got = read(tmp_path)
        assert got["last"] == 12 and got["records"] == list(range(1, 13)) and got["wrote"] is False, got
        fill(writer, 20)  # the writer goes on
        assert read(tmp_path)["records"] == list(range(1, 21))
        assert writer.last_index == 20  # nothing the reader tried reached the log
        with pytest.raises(StoreLocked):
            Store.open(tmp_path)  # the writer still holds the data dir; the readers took nothing


def test_fold_to_stops_at_the_index_from_the_newest_snapshot_below_it(tmp_path: Path) -> None:
    cmds = [c.WorkerRegistered(10 * i, WorkerId(f"w{i}"), 1, 1, "env") for i in range(1, 31)]
    fingerprints = []
    state = new_state()
    for cmd in cmds:
        state, t = step(state, cmd)
        assert t.outcome.ok
        fingerprints.append(repr(durable_fingerprint(state)))
    records = [encode_record(i, cmd) for i, cmd in enumerate(cmds, start=1)]
    with Store.open(tmp_path) as writer:
        writer.append(records[:10])
        folded = new_state()
        for cmd in cmds[:10]:
            folded, _ = step(folded, cmd)
        writer.write_snapshot(10, encode_state(folded))
        writer.append(records[10:])
        got = read(tmp_path, [12, 25, 30])["folds"]
    assert got == {str(upto): [upto, fingerprints[upto - 1]] for upto in (12, 25, 30)}, got


SLOW_READER = r"""
import sys
from coordinator.store import Store
with Store.open_reader(sys.argv[1]) as reader:
    print("open", flush=True)
    sys.stdin.readline()  # the writer grows its map meanwhile
    print(len(list(reader.load().records)), flush=True)
"""


def test_a_reader_open_before_the_writer_grew_its_map_still_reads(tmp_path: Path) -> None:
    # The snapshot process failed so in the sessions bench: MDB_MAP_RESIZED at its first read.
    start = 16 << 20  # above py-lmdb's default map (10 MiB), which would hide the error
    with Store.open(tmp_path, map_size_bytes=start) as writer:
        fill(writer, 10)
        reader = subprocess.Popen([sys.executable, "-c", SLOW_READER, str(tmp_path)], cwd=REPO, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert reader.stdout.readline().strip() == "open", reader.stderr.read()
            big = b"y" * 200_000
            while writer.map_size_bytes <= start:  # grows the map (doubling) on MapFullError
                writer.append([big])
            out, err = reader.communicate(input="\n", timeout=60)
            assert reader.returncode == 0, err
            assert int(out.strip()) == 10  # the log as of the reader's open, read in full
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait(10)
