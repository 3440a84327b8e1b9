"""Goal: a worker killed with SIGKILL at any moment loses no report it was told is stored;
method: a child process puts reports with small artifact files in a loop (acking and
dead-lettering some), printing each step only after it returns, the parent kills it at a
seeded random moment, reopens the state dir and checks every printed promise against disk,
re-hashing every artifact, over 5 seeded rounds on one accumulating state dir."""
from __future__ import annotations

import hashlib
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
SEED = int(os.environ.get("FLEET_OUTBOX_CRASH_SEED", "20240611"))
ROUNDS = 5
KILL_AFTER_S_MAX = 0.8
READY_TIMEOUT_S = 15.0
SHARED_BLOBS = (b"shared-a" * 100, b"shared-b" * 3000)


def attempt_id(round_no: int, i: int) -> str:
    return f"run-crash:t{i}/r{round_no}/s:a1"


def parse_attempt_id(aid: str) -> tuple[int, int]:
    task, rep, _ = aid.removeprefix("run-crash:t").split("/", 2)
    return int(rep.removeprefix("r")), int(task)


def content(round_no: int, i: int) -> bytes:
    """What the child writes for entry i: some entries share a blob, so digests are shared."""
    if i % 3 == 0:
        return SHARED_BLOBS[i % 2]
    seed = hashlib.sha256(attempt_id(round_no, i).encode()).digest()
    return seed * (1 + (i * 37) % 2000)  # 32 B to 64 KiB


def payload(aid: str) -> bytes:
    return f"report of {aid}".encode()


def child_main(state_dir: Path, scratch: Path, round_no: int) -> None:
    from worker.outbox import WorkerState

    state = WorkerState.open(state_dir)
    print("ready", flush=True)
    for i in range(1_000_000):
        aid = attempt_id(round_no, i)
        src = scratch / f"{round_no}-{i}.bin"
        src.write_bytes(content(round_no, i))
        state.put_report(aid, f"run-crash:r{round_no}:g1", payload(aid), [("log", src)])
        print(f"put {aid}", flush=True)
        src.unlink()
        if i % 4 == 3 and (i - 1) % 7 != 6:  # ack the previous entry unless it is dead;
            # this frees its file unless the digest is shared with another entry.
            prev = attempt_id(round_no, i - 1)
            print(f"acking {prev}", flush=True)
            state.ack(prev)
            print(f"acked {prev}", flush=True)
        if i % 7 == 6:
            print(f"deading {aid}", flush=True)
            state.dead_letter(aid, "rejected for good")
            print(f"dead {aid}", flush=True)


def sha256_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def run_round(state_dir: Path, scratch: Path, round_no: int, rng: random.Random) -> list[str]:
    """Start the child, kill it at a random moment, return the complete lines it printed."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.test_outbox_crash",
         str(state_dir), str(scratch), str(round_no)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    lines: list[bytes] = []
    ready = threading.Event()

    def reader() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line)
            if line == b"ready\n":
                ready.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        if not ready.wait(READY_TIMEOUT_S):
            child.kill()
            pytest.fail(f"child never became ready: {child.stderr.read().decode()[-2000:]}")
        time.sleep(rng.uniform(0.05, KILL_AFTER_S_MAX))
        assert child.poll() is None, f"child died by itself: {child.stderr.read().decode()[-2000:]}"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
        t.join(timeout=5)
    assert child.returncode == -signal.SIGKILL
    # A line cut by the kill has no newline: its step returned but was not reported whole,
    # so it promises nothing.
    return [ln.decode().rstrip("\n") for ln in lines if ln.endswith(b"\n")][1:]


@pytest.mark.crash
def test_sigkill_never_loses_a_stored_report(tmp_path: Path) -> None:
    from worker.outbox import WorkerState

    state_dir, scratch = tmp_path / "state", tmp_path / "scratch"
    scratch.mkdir()
    rng = random.Random(SEED)
    promised: dict[str, str] = {}  # attempt id -> "pending", "gone" or "dead"
    for round_no in range(ROUNDS):
        lines = run_round(state_dir, scratch, round_no, rng)
        started = {ln.split(" ", 1)[1] for ln in lines if ln.startswith(("acking ", "deading "))}
        for ln in lines:
            verb, aid = ln.split(" ", 1)
            if verb == "put" and aid not in started:
                promised[aid] = "pending"
            elif verb == "acked":
                promised[aid] = "gone"
            elif verb == "dead":
                promised[aid] = "dead"
            elif verb in ("acking", "deading"):
                promised.pop(aid, None)  # interrupted mid-step: either outcome is fine
        puts = sum(1 for ln in lines if ln.startswith("put "))
        assert puts > 0, f"round {round_no} stored nothing before the kill (seed {SEED})"

        with WorkerState.open(state_dir) as s:
            assert s.incarnation == 2 * round_no + 2
            assert list((state_dir / "artifacts" / "tmp").iterdir()) == []
            pending = {e.attempt_id: e for e in s.pending()}
            dead = {d.entry.attempt_id: d for d in s.dead_letters()}
            where = f"round {round_no}, seed {SEED}"
            for aid, promise in promised.items():
                if promise == "pending":
                    assert aid in pending, f"{aid} was stored but is lost ({where})"
                elif promise == "gone":
                    assert aid not in pending and aid not in dead, f"{aid} acked but back ({where})"
                else:
                    assert aid in dead and aid not in pending, f"{aid} dead letter lost ({where})"
            referenced = set()
            for e in list(pending.values()) + [d.entry for d in dead.values()]:
                r, i = parse_attempt_id(e.attempt_id)
                assert e.payload == payload(e.attempt_id), f"{e.attempt_id} payload changed ({where})"
                (art,) = e.artifacts
                path = s.artifact_path(art.digest)
                assert path.is_file(), f"{e.attempt_id} refers to missing {path} ({where})"
                assert sha256_file(path) == art.digest, f"{path} does not match its digest ({where})"
                assert path.read_bytes() == content(r, i), f"{e.attempt_id} artifact changed ({where})"
                assert art.size_bytes == len(content(r, i))
                referenced.add(path)
            # What was acknowledged is kept for a restore (outbox table kept), its artifact too.
            referenced |= {s.artifact_path(a.digest) for e, _ in s.kept() for a in e.artifacts}
            on_disk = {p for p in (state_dir / "artifacts" / "sha256").rglob("*") if p.is_file()}
            assert on_disk == referenced, f"unreferenced files survived the sweep ({where})"
            assert s.check(rehash=True) == [], where


if __name__ == "__main__":
    child_main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
