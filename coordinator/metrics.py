"""Prometheus metrics of the coordinator (prometheus-client), served on `--metrics-listen`.

Names follow Prometheus conventions: base units (`_seconds`, `_bytes`), counters end in
`_total`. Counters and histograms are fed by the shell as things happen (commits, acks,
uploads, events); gauges that describe the core state are refreshed every few seconds by a
read-only query on the actor thread, never by reading state from another thread.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from coordinator.core.effects import Emit
from coordinator.core.state import State, WorkerStatus

SAMPLE_EVERY_S = 5.0
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True, slots=True)
class Sample:
    """What the gauges show, taken on the actor thread."""

    workers_by_status: dict[str, int]
    slots_busy: int
    slots_free: int
    groups_by_state: dict[tuple[str, str], int]  # (run, state) -> count
    cells_by_state: dict[tuple[str, str], int]  # (run, selected|incomplete) -> count


def sample(state: State) -> Sample:
    workers: dict[str, int] = {s.name.lower(): 0 for s in WorkerStatus}
    busy = free = 0
    for w in state.workers.values():
        workers[w.status.name.lower()] += 1
        if w.status == WorkerStatus.ACTIVE:
            busy += len(w.assignments)
            free += max(0, w.slots - len(w.assignments))
    groups: dict[tuple[str, str], int] = {}
    cells: dict[tuple[str, str], int] = {}
    for run_id, run in state.runs.items():
        settled = run.settled_groups
        groups[(run_id, "assigned")] = run.active
        groups[(run_id, "settled")] = settled
        groups[(run_id, "waiting")] = len(run.groups) - settled - run.active
        cells[(run_id, "selected")] = run.selected_cells  # counted by the core: no walk of a million cells
        cells[(run_id, "incomplete")] = len(run.cells) - run.selected_cells
    return Sample(workers, busy, free, groups, cells)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.connected_workers = Gauge("fleet_connected_workers", "Workers with an open session", registry=r)
        self.workers = Gauge("fleet_workers", "Registered workers by status", ["status"], registry=r)
        self.slots = Gauge("fleet_slots", "Group slots of active workers", ["state"], registry=r)
        self.groups = Gauge("fleet_groups", "Groups by state", ["run", "state"], registry=r)
        self.cells = Gauge("fleet_cells", "Cells selected or not (yet)", ["run", "state"], registry=r)
        self.cells_selected = Counter("fleet_cells_selected_total", "Cells given a selected result", registry=r)
        self.cells_exhausted = Counter("fleet_cells_exhausted_total", "Cells out of attempts", registry=r)
        self.retries = Counter("fleet_retries_total", "Reports that send their cell back for a retry, by cause",
                               ["cause"], registry=r)
        self.superseded = Counter("fleet_assignments_superseded_total", "Assignments taken back, by reason",
                                  ["reason"], registry=r)
        self.late_reports = Counter("fleet_late_reports_total", "Reports of superseded assignments", registry=r)
        self.rejections = Counter("fleet_rejections_total", "Frames refused, by reason", ["reason"], registry=r)
        self.commit_batch = Histogram("fleet_commit_batch_records", "Log records per group commit",
                                      buckets=BATCH_BUCKETS, registry=r)
        self.commit_latency = Histogram("fleet_commit_latency_seconds", "Duration of one group commit",
                                        buckets=LATENCY_BUCKETS_S, registry=r)
        self.slot_refill = Histogram("fleet_slot_refill_seconds",
                                     "From a group's last report received to the next assignment queued for "
                                     "that worker", buckets=LATENCY_BUCKETS_S, registry=r)
        self.gc_pause = Histogram("fleet_gc_pause_seconds", "Collections of the cyclic garbage collector that held "
                                  "the process 10 ms or more, by generation", ["generation"],
                                  buckets=LATENCY_BUCKETS_S, registry=r)
        self.artifact_bytes = Counter("fleet_artifact_bytes_stored_total", "Artifact bytes stored", registry=r)

    def serve(self, listen: str) -> int:
        host, _, port = listen.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        return server.server_port

    def apply(self, s: Sample, connected: int) -> None:
        self.connected_workers.set(connected)
        for status, n in s.workers_by_status.items():
            self.workers.labels(status).set(n)
        self.slots.labels("busy").set(s.slots_busy)
        self.slots.labels("free").set(s.slots_free)
        for (run, state), n in s.groups_by_state.items():
            self.groups.labels(run, state).set(n)
        for (run, state), n in s.cells_by_state.items():
            self.cells.labels(run, state).set(n)

    def events(self, events: list[tuple[Emit, int]]) -> None:
        """Count a batch's events (`Emit`s with their times): one increment per counter and
        label, not one per cell (each takes the counter's lock)."""
        selected = exhausted = late = 0
        causes: dict[str, int] = {}  # of the retries
        reasons: dict[str, int] = {}  # of the supersessions
        for e, _ in events:
            name = e.event
            if name == "cell_selected":
                selected += 1
            elif name == "cell_exhausted":
                exhausted += 1
            elif name == "late_report":
                late += 1
            elif name == "cell_retryable":
                cause = e.detail.split(":", 1)[0].lower() or "unknown"
                causes[cause] = causes.get(cause, 0) + 1
            elif name == "assignment_superseded":
                reason = e.detail or "unknown"
                reasons[reason] = reasons.get(reason, 0) + 1
        if selected:
            self.cells_selected.inc(selected)
        if exhausted:
            self.cells_exhausted.inc(exhausted)
        if late:
            self.late_reports.inc(late)
        for cause, n in causes.items():
            self.retries.labels(cause).inc(n)
        for reason, n in reasons.items():
            self.superseded.labels(reason).inc(n)
