"""The coordinator bench `upload`: MB/s of a 64 MiB artifact uploaded in 1 MiB chunks through a session
(8 chunks in flight, as the worker does), against SHA-256 plus write-and-fsync of the same bytes.

Run by `python -m tools.bench.coordinator --only upload` (tools/bench/coordinator.py: sizes, the
table of every figure, the command line).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

import grpc

from common import limits
from common.fleetpb import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tools.bench.clients import aio_channel, bench_report, hello_frame, noop_spec
from tools.bench.harness import Coordinator, Profiler, mono, say
from tools.bench.sizes import Sizes


async def _upload_session(coord: Coordinator, blobs: list[bytes], window: int,
                          before_each: Any = None) -> tuple[list[float], str]:
    channel = aio_channel(coord.address)
    md = (("authorization", f"Bearer {coord.enroll_token}"), ("x-fleet-worker-id", "uploader"))
    call = coordinator_pb2_grpc.CoordinatorStub(channel).Session(metadata=md)
    seq = 1
    try:
        await call.write(hello_frame("uploader", 1))
        push = None
        while push is None:
            f = await asyncio.wait_for(call.read(), 30)
            if f is grpc.aio.EOF:
                raise RuntimeError("upload session ended before a push")
            if f.WhichOneof("body") == "assignment":
                push = f.assignment
            elif f.WhichOneof("body") == "run_offer":
                seq += 1
                await call.write(coordinator_pb2.WorkerFrame(seq=seq, run_environment=coordinator_pb2.RunEnvironment(
                    run_id=f.run_offer.run_id)))
        attempt = push.cells[0].attempt_id
        acks: asyncio.Queue = asyncio.Queue()

        async def reader() -> None:
            while True:
                fr = await call.read()
                if fr is grpc.aio.EOF:
                    return
                if fr.WhichOneof("body") == "ack":
                    acks.put_nowait(fr.ack)
                elif fr.WhichOneof("body") == "acks":
                    for ack in fr.acks.acks:
                        acks.put_nowait(ack)

        rt = asyncio.create_task(reader())
        times = []
        digest = ""
        for n, data in enumerate(blobs):
            if before_each is not None:
                before_each(data)  # the local baselines, interleaved with the uploads (a shared disk drifts)
            digest = "sha256:" + hashlib.sha256(data).hexdigest()  # known to a worker before it uploads
            chunk = limits.CHUNK_BYTES_MAX
            offsets = list(range(0, len(data), chunk))
            t0 = mono()
            in_flight = 0
            last_seq = 0
            for off in offsets:
                seq += 1
                last = off + chunk >= len(data)
                await call.write(coordinator_pb2.WorkerFrame(seq=seq, upload_chunk=coordinator_pb2.UploadChunk(
                    upload_id=f"u{n}", attempt_id=attempt, digest=digest, total_length=len(data), offset=off,
                    data=data[off:off + chunk], last=last)))
                in_flight += 1
                last_seq = seq
                while in_flight >= window:
                    a = await acks.get()
                    in_flight -= 1
                    if a.outcome == common_pb2.ACK_OUTCOME_REJECTED:
                        raise RuntimeError(f"chunk refused: {a}")
            while True:
                a = await acks.get()
                if a.outcome == common_pb2.ACK_OUTCOME_REJECTED:
                    raise RuntimeError(f"chunk refused: {a}")
                if a.seq == last_seq:
                    break
            times.append(mono() - t0)
        # The report referencing the last artifact must be accepted: the digest is really stored.
        seq += 1
        rep = bench_report(int(time.time() * 1000))
        rep.artifacts.append(common_pb2.ArtifactRef(name="big.bin", digest=digest, size_bytes=len(blobs[-1])))
        await call.write(coordinator_pb2.WorkerFrame(seq=seq, cell_report=coordinator_pb2.CellReport(
            run_id=push.run_id, attempt_id=attempt, assignment_id=push.assignment_id, generation=push.generation,
            report=rep)))
        while True:
            a = await asyncio.wait_for(acks.get(), 30)
            if a.seq == seq:
                verdict = common_pb2.AckOutcome.Name(a.outcome)
                break
        rt.cancel()
        return times, verdict
    finally:
        call.cancel()
        await channel.close(grace=None)


def local_write(root: Path, data: bytes, *, chunked: bool = False, rehash: bool = False) -> float:
    """SHA-256 of the bytes plus writing them to a file on the same disk and one fsync (the
    baseline). `chunked`: an fsync after every CHUNK_BYTES_MAX instead, as the coordinator
    commits each chunk; `rehash`: the SHA-256 computed by reading the file back afterwards, as
    the coordinator's finish does. Both only explain the gap; the baseline is neither."""
    path = root / "local.bin"
    t0 = mono()
    if not rehash:
        hashlib.sha256(data).hexdigest()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        step = limits.CHUNK_BYTES_MAX if chunked else len(data) or 1
        for off in range(0, len(data), step):
            view = memoryview(data)[off:off + step]
            while view:
                view = view[os.write(fd, view):]
            if chunked:
                os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    if rehash:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(limits.CHUNK_BYTES_MAX):
                h.update(block)
        h.hexdigest()
    dt = mono() - t0
    path.unlink()
    return dt


def bench_upload(sz: Sizes, root: Path, profile: Path | None) -> dict:
    mib = sz.upload_bytes / (1 << 20)
    say(f"Artifact upload: {mib:.0f} MiB in {limits.CHUNK_BYTES_MAX >> 20} MiB chunks, 8 in flight, "
        f"{sz.upload_repeats} repeat(s), against SHA-256 + write + fsync locally")
    r = root / "upload"
    coord = Coordinator(r)
    try:
        coord.submit(noop_spec(1, cap=1, name="uploadbench"))
        blobs = [os.urandom(sz.upload_bytes) for _ in range(sz.upload_repeats)]
        local_write(r, blobs[0])  # warm-up, not counted
        local: list[float] = []
        chunked: list[float] = []
        both: list[float] = []

        def before_each(data: bytes) -> None:
            local.append(local_write(r, data))
            chunked.append(local_write(r, data, chunked=True))
            both.append(local_write(r, data, chunked=True, rehash=True))

        prof = Profiler(profile, "upload", coord.pid, 5)
        times, verdict = asyncio.run(_upload_session(coord, blobs, window=8, before_each=before_each))
        prof.finish()
    finally:
        coord.stop()
    mib_s = lambda ts: sz.upload_bytes / (1 << 20) / statistics.median(ts)  # noqa: E731
    up, loc = mib_s(times), mib_s(local)
    res = {"upload_mib_s": up, "local_mib_s": loc, "upload_ratio": up / loc, "upload_report": verdict,
           "local_chunk_fsync_mib_s": mib_s(chunked), "local_chunk_fsync_rehash_mib_s": mib_s(both)}
    say(f"  upload {up:.0f} MiB/s (median of {len(times)}), local SHA-256 + write + fsync {loc:.0f} MiB/s "
        f"(median of {len(local)}): ratio {up / loc:.2f}; report referencing it: {verdict}")
    say(f"  to explain the gap, locally: an fsync per 1 MiB chunk {mib_s(chunked):.0f} MiB/s; that plus the "
        f"SHA-256 read back from the file afterwards {mib_s(both):.0f} MiB/s")
    return res
