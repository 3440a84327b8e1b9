"""Prometheus metrics of the coordinator (prometheus-client), served on `--metrics-listen`.

Names follow Prometheus conventions: base units (`_seconds`, `_bytes`), counters end in
`_total`. Counters and histograms are fed by the shell as things happen (commits, acks,
uploads, events); gauges that describe the core state are refreshed every few seconds by a
read-only query on the actor thread, never by reading state from another thread. The
providers' throttling counters are totals the core keeps in its state (durable, rebuilt by
replay), so they are read with that sample too and exposed as they are (`_StateTotals`), not
counted a second time from events.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric

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
    providers: dict[str, ProviderSample] = field(default_factory=dict)
    run_cost_usd: dict[str, tuple[float, float]] = field(default_factory=dict)  # run -> (observed, cap; 0: none)


@dataclass(frozen=True, slots=True)
class ProviderSample:
    running: int
    effective: int  # 0: no limit yet
    declared: int  # 0: none declared
    throttled: int  # ever
    retry_after_ms_total: int


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
    providers = {name: ProviderSample(p.running, p.effective, p.declared, p.throttled, p.retry_after_ms_total)
                 for name, p in state.providers.items()}
    costs = {run_id: (run.observed_cost_usd, run.cost_cap_usd) for run_id, run in state.runs.items()}
    return Sample(workers, busy, free, groups, cells, providers, costs)


class _StateTotals:
    """Counters whose values are the core's own totals, as of the last sample (a restarted
    coordinator replays them from its log, so they do not fall back to zero)."""

    def __init__(self) -> None:
        self.providers: dict[str, ProviderSample] = {}

    def describe(self) -> Iterator[Metric]:
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        return self._families(self.providers)

    @staticmethod
    def _families(providers: dict[str, ProviderSample]) -> Iterator[Metric]:
        throttled = CounterMetricFamily("fleet_provider_throttled_attempts", "Attempts a provider throttled",
                                        labels=["provider"])
        waited = CounterMetricFamily("fleet_provider_retry_after_seconds",
                                     "The retry-after the throttled attempts of a provider waited, summed",
                                     labels=["provider"])
        for name, p in providers.items():
            throttled.add_metric([name], p.throttled)
            waited.add_metric([name], p.retry_after_ms_total / 1000)
        yield throttled
        yield waited


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
        self.provider_running = Gauge("fleet_provider_cells_running", "Cells running against a provider",
                                      ["provider"], registry=r)
        self.provider_effective = Gauge("fleet_provider_effective_limit_cells", "Cells a provider may run at once "
                                        "now, adapted on throttling (0: no limit yet)", ["provider"], registry=r)
        self.provider_declared = Gauge("fleet_provider_declared_limit_cells", "The smallest maxConcurrentCells the "
                                       "unsettled runs declare for a provider (0: none)", ["provider"], registry=r)
        self.run_cost = Gauge("fleet_run_observed_cost_usd", "Known cost of every report of a run, as its spend cap "
                              "counts it", ["run"], registry=r)
        self.run_cost_cap = Gauge("fleet_run_cost_cap_usd", "Spend cap of a run (0: none)", ["run"], registry=r)
        self.state_totals = _StateTotals()
        r.register(self.state_totals)

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
        for name, p in s.providers.items():
            self.provider_running.labels(name).set(p.running)
            self.provider_effective.labels(name).set(p.effective)
            self.provider_declared.labels(name).set(p.declared)
        for run, (observed, cap) in s.run_cost_usd.items():
            self.run_cost.labels(run).set(observed)
            self.run_cost_cap.labels(run).set(cap)
        self.state_totals.providers = s.providers

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
