"""`Metrics.events` counts a batch of events with one increment per counter and label: the
counts must be those of one increment per event, and events that are not counted change no
counter."""
from __future__ import annotations

from coordinator.core.effects import Emit
from coordinator.metrics import Metrics


def sample(m: Metrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_batch_of_events_counts_each_kind_and_label_as_one_increment_per_event_would():
    m = Metrics()
    events = [
        (Emit("cell_selected", "r1", "c1", "score 1.0"), 1),
        (Emit("cell_retryable", "r1", "c2", "FAILED: exit 1"), 1),
        (Emit("cell_selected", "r1", "c3", "score 0.0"), 2),
        (Emit("cell_retryable", "r1", "c4", "TIMEOUT: after 60 s"), 2),
        (Emit("cell_retryable", "r1", "c5", "FAILED: exit 2"), 2),
        (Emit("cell_retryable", "r1", "c6", ""), 2),
        (Emit("cell_exhausted", "r1", "c7", ""), 3),
        (Emit("assignment_superseded", "r1", "a1", "worker_expired"), 3),
        (Emit("assignment_superseded", "r1", "a2", ""), 3),
        (Emit("late_report", "r1", "t1", "completed"), 4),
        (Emit("worker_registered", None, "w1", ""), 4),  # not counted
    ]
    m.events(events)
    m.events(events[:1])
    assert sample(m, "fleet_cells_selected_total") == 3
    assert sample(m, "fleet_retries_total", cause="failed") == 2
    assert sample(m, "fleet_retries_total", cause="timeout") == 1
    assert sample(m, "fleet_retries_total", cause="unknown") == 1
    assert sample(m, "fleet_cells_exhausted_total") == 1
    assert sample(m, "fleet_assignments_superseded_total", reason="worker_expired") == 1
    assert sample(m, "fleet_assignments_superseded_total", reason="unknown") == 1
    assert sample(m, "fleet_late_reports_total") == 1
    assert sample(m, "fleet_rejections_total", reason="MALFORMED_FRAME") == 0


def test_an_empty_batch_changes_no_counter():
    m = Metrics()
    m.events([])
    assert sample(m, "fleet_cells_selected_total") == 0
    assert sample(m, "fleet_late_reports_total") == 0
