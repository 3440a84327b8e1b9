"""The console's way into the coordinator: the Admin RPCs themselves, called in the process.

Every read and every action of the console is a call of the AdminServicer method fleetctl's
RPC reaches (GetStatus, GetResults, ListAttempts, GetArtifact, PauseRun, RetryCell, ...,
WatchEvents), on the same event loop, with a context that carries the admin token: the same
authorisation, the same checks, the same actor commands and the same log. Nothing here reads
or writes the state by itself. An abort of the servicer becomes an AdminCallError with the
gRPC code and the servicer's message ("UNKNOWN_RUN: ..."), which the pages show as it is.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from common.fleetpb import admin_pb2
from common.report.shapes import results_json, status_json
from coordinator.console.runview import RunView, RunViewBuilder


class AdminCallError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """What the AdminServicer's methods use of a grpc.aio context: the metadata and abort."""

    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    def invocation_metadata(self) -> tuple:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise AdminCallError(code, details)


@dataclass(frozen=True, slots=True)
class CellRef:
    """ReadCell's request: a cell of a run."""

    run_id: str
    cell_id: str


def _fold(builder: RunViewBuilder | None, part: Any, f: dict[str, str], page: int) -> RunViewBuilder:
    """One part of ReadRunPage into the run's view (on a worker thread: the parts are the
    caller's alone)."""
    if builder is None:
        builder = RunViewBuilder(part.cells_total, part.groups_total, f, page,
                                 None if part.score_range is None else list(part.score_range), part.selected_cells)
    add_cell, add_attempt = builder.add_cell, builder.add_attempt
    for c in part.cells:
        add_cell(c)
    for a in part.attempts:
        add_attempt(*a)
    return builder


class LocalAdmin:
    """The AdminServicer's methods with the admin token (given again on SIGHUP)."""

    def __init__(self, servicer: Any, admin_token: str) -> None:
        self._servicer = servicer
        self._token = admin_token

    def reload(self, admin_token: str) -> None:
        self._token = admin_token

    async def call(self, name: str, request: Any) -> Any:
        return await getattr(self._servicer, name)(request, _Context(self._token))

    async def stream(self, name: str, request: Any) -> AsyncIterator[Any]:
        async with contextlib.aclosing(getattr(self._servicer, name)(request, _Context(self._token))) as it:
            async for item in it:
                yield item

    # ---- reads, as the dicts the report renders (common/report/shapes.py) ----

    async def status(self, run_id: str | None = None, *, summary: bool = False) -> dict:
        req = admin_pb2.GetStatusRequest()
        if run_id is not None:
            req.run_id = run_id
        if summary:  # counts by state, the slowest and the refused, and a small fleet whole
            req.workers_view = admin_pb2.WORKERS_VIEW_SUMMARY
            req.workers_shown = 20
            req.workers_listed_max = 50
        return status_json(await self.call("GetStatus", req))

    async def results(self, run_id: str, cells_max: int | None = None) -> dict:
        """The run's cells, page by page (each page one actor query), and the summary."""
        token = ""
        cells: list[dict] = []
        while True:
            page = await self.call("GetResults", admin_pb2.GetResultsRequest(run_id=run_id, page_size=5_000,
                                                                             page_token=token))
            part = results_json(page)
            cells.extend(part["cells"])
            if not page.next_page_token:
                part["cells"] = cells
                return part
            token = page.next_page_token
            if cells_max is not None and len(cells) >= cells_max:
                raise AdminCallError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"more than {cells_max} cells")

    async def run_view(self, run_id: str, f: dict[str, str], page: int) -> RunView:
        """The run page's heavy part (coordinator/console/runview.py) for filter `f` and page
        `page` of its cells table: ReadRunPage's parts folded as they come, off the event loop."""
        builder: RunViewBuilder | None = None
        summary: Any = None
        async for part in self.stream("ReadRunPage", admin_pb2.GetResultsRequest(run_id=run_id)):
            builder = await asyncio.to_thread(_fold, builder, part, f, page)
            summary = part.summary
        assert builder is not None and summary is not None  # ReadRunPage ends with the summary, or aborts
        return await asyncio.to_thread(self._finish, builder, summary)

    @staticmethod
    def _finish(builder: RunViewBuilder, summary: Any) -> RunView:
        got = results_json(admin_pb2.GetResultsResponse(summary=summary))["summary"]
        got.update(builder.cell_sums())  # what results_json sums over the cells it was given
        return builder.finish(got)

    async def cell(self, run_id: str, cell_id: str) -> tuple[dict | None, list[Any]]:
        """A cell as results_json gives it (None: the run has no such cell) and its attempts."""
        proto, attempts = await self.call("ReadCell", CellRef(run_id, cell_id))
        if proto is None:
            return None, []
        return results_json(admin_pb2.GetResultsResponse(cells=[proto]))["cells"][0], attempts
