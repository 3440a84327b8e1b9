"""The worker's Prometheus metrics (`metrics_listen`): running cells, held groups, outbox
depth, streams opened (reconnects). Read from the session at scrape time by a collector, so
the session keeps no metric objects; reading its counters from the scrape thread is safe
(plain integers, written only by the session's event loop)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class SessionCollector(Collector):
    def __init__(self, session: Any, state: Any) -> None:
        self.session = session
        self.state = state

    def collect(self) -> Iterator[Any]:
        yield GaugeMetricFamily("fleet_worker_running_cells", "Cells running now",
                                value=self.session._running_cells)
        yield GaugeMetricFamily("fleet_worker_held_groups", "Assignments the worker holds",
                                value=len(self.session.held_assignment_ids))
        yield GaugeMetricFamily("fleet_worker_outbox_depth", "Reports waiting for an acknowledgement",
                                value=self.state.depth)
        yield CounterMetricFamily("fleet_worker_streams_opened", "Session streams opened (1 + reconnects)",
                                  value=self.session.streams_opened)
        yield GaugeMetricFamily("fleet_worker_incarnation", "Starts of this worker's process",
                                value=self.state.incarnation)


def serve(listen: str, session: Any, state: Any) -> int:
    registry = CollectorRegistry()
    registry.register(SessionCollector(session, state))
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    return server.server_port
