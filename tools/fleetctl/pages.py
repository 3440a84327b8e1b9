"""Reading the admin listings page by page (AIP-158 `page_size`/`page_token`).

`results_pages` and `attempts_pages` yield one response per page; a consumer that keeps only
what it needs of each page holds one page in memory, not the run. `results_whole` joins the
pages into one response for small runs and the callers that want every cell at once (tests,
`fleetctl local`): its memory is the run's.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from common import limits
from common.fleetpb import admin_pb2

# Pages per listing at most: the largest run at the smallest page the server may choose,
# so a coordinator that kept answering with a next token could not loop a client forever.
PAGES_MAX = limits.CELLS_PER_RUN_MAX * limits.ATTEMPTS_PER_CELL_MAX


def _pages(admin: Any, method: str, request: Any, run_id: str, page_size: int) -> Iterator[Any]:
    """Every page of one AIP-158 listing, following next_page_token to its end."""
    token = ""
    for _ in range(PAGES_MAX):
        page = admin.call(method, request(run_id=run_id, page_size=page_size, page_token=token))
        yield page
        token = page.next_page_token
        if not token:
            return
    raise AssertionError(f"{method} of {run_id} did not end within {PAGES_MAX} pages")


def results_pages(admin: Any, run_id: str, page_size: int = limits.PAGE_ITEMS_MAX) -> Iterator[Any]:
    return _pages(admin, "GetResults", admin_pb2.GetResultsRequest, run_id, page_size)


def attempts_pages(admin: Any, run_id: str, page_size: int = limits.PAGE_ITEMS_MAX) -> Iterator[Any]:
    return _pages(admin, "ListAttempts", admin_pb2.ListAttemptsRequest, run_id, page_size)


def results_whole(admin: Any, run_id: str, page_size: int = limits.PAGE_ITEMS_MAX) -> Any:
    """Every page of GetResults joined into one response (cells in order, the last summary)."""
    out = admin_pb2.GetResultsResponse()
    for page in results_pages(admin, run_id, page_size):
        out.cells.extend(page.cells)
        out.total_size = page.total_size
        if page.HasField("summary"):
            out.summary.CopyFrom(page.summary)
    return out
