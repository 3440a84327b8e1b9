"""Admin listings in pages: over a core whose run changes between pages (reports, retries,
redispatch), every cell comes exactly once, the last page's summary equals one whole walk
once the run is still, and page tokens refuse, by name, every way they can be misused."""
from __future__ import annotations

import pytest

from common import limits
from coordinator import views
from coordinator.core.summary import Tally
from coordinator.paging import KIND_ATTEMPTS, KIND_RESULTS, PageTokenError, PageTokens, Position
from tests.unit.core_helpers import OK, UNKNOWN, Core, make_spec

KEY = b"k" * 32
INCARNATION = 7


def core() -> Core:
    k = Core(make_spec(tasks=40, subjects=3, repetitions=2, cap=6))
    for w in ("w1", "w2", "w3"):
        k.register(w, slots=2)
    return k


def advance_run(k: Core, n: int) -> None:
    """Report up to `n` outstanding attempts, one in five an infrastructure failure (retried)."""
    done = 0
    for a in list(k.state.assignments.values()):
        if not a.authoritative:
            continue
        for tid in a.attempts:
            if done >= n:
                return
            if k.state.attempts[tid].report is None:
                k.report(tid, UNKNOWN if (k.state.attempts[tid].dispatch_order % 5 == 0) else OK)
                done += 1
    k.tick(1)


def list_results(k: Core, tokens: PageTokens, page_size: int, between=None) -> tuple[list, object]:
    """Every page through a token round trip, calling `between()` after each page."""
    token, cells, summary = "", [], None
    for _ in range(10_000):
        at, tally = (Position(), Tally()) if not token else tokens.decode(token, KIND_RESULTS, k.run_id, k.now)
        assert views.position_problem(k.state, k.run_id, at) == ""
        page = views.results_page(k.state, k.run_id, at, page_size, limits.PAGE_BYTES_MAX, tally)
        assert len(page.items) <= page_size
        cells.extend(page.items)
        if page.next_at is None:
            return cells, page.summary
        token = tokens.encode(KIND_RESULTS, k.run_id, page.next_at, k.now, page.tally)
        if between is not None:
            between()
    raise AssertionError("the listing did not end")


def test_every_cell_exactly_once_while_the_run_changes():
    k = core()
    tokens = PageTokens(KEY, INCARNATION)
    cells, summary = list_results(k, tokens, 7, between=lambda: advance_run(k, 12))
    ids = [c.cell_id for c in cells]
    assert len(ids) == len(set(ids)) == len(k.run.cells) == 240
    assert set(ids) == set(k.run.cells)
    # The summary counts exactly the cells listed, each as it was listed.
    assert summary.selected == sum(1 for c in cells if c.state == "selected")
    assert summary.incomplete == sum(1 for c in cells if c.state == "incomplete")
    assert 0 < summary.selected < 240, "the run changed during the listing"


def test_the_paged_summary_equals_one_walk_when_the_run_is_still():
    k = core()
    for _ in range(30):
        advance_run(k, 9)
    whole = k.summary()
    for size in (1, 7, 240, limits.PAGE_ITEMS_MAX):
        cells, summary = list_results(k, PageTokens(KEY, INCARNATION), size)
        assert [c.cell_id for c in cells] == [r.cell_id for r in sorted(
            whole.selected + whole.incomplete, key=lambda r: list(k.run.cells).index(r.cell_id))]
        assert (summary.selected, summary.incomplete) == (len(whole.selected), len(whole.incomplete))
        assert summary.observed_cost_usd == whole.observed_cost_usd
        assert summary.selected_cost_usd == whole.selected_cost_usd
        assert summary.usage_complete == whole.usage_complete
        assert summary.late_reports == whole.late_reports


def test_attempt_pages_end_at_cell_boundaries_and_list_each_attempt_once():
    k = core()
    for _ in range(20):
        advance_run(k, 9)
    at, seen = Position(), []
    for _ in range(1_000):
        page = views.attempts_page(k.state, k.run_id, at, 4, limits.PAGE_BYTES_MAX)
        seen.extend(r.attempt_id for r in page.items)
        if page.next_at is None:
            break
        at = page.next_at
    assert sorted(seen) == sorted(t for t, a in k.state.attempts.items() if a.run_id == k.run_id)
    assert len(seen) == len(set(seen))


def test_a_page_stops_at_its_byte_budget():
    k = core()
    page = views.results_page(k.state, k.run_id, Position(), 1_000, 200, Tally())
    assert page.next_at is not None and 1 <= len(page.items) < 240
    assert page.size_bytes >= 200


def token_for(tokens: PageTokens, run_id: str = "run-a", kind: int = KIND_RESULTS, now: int = 1_000) -> str:
    return tokens.encode(kind, run_id, Position(3, 1), now, Tally(selected=2, observed_cost_usd=0.5))


def test_a_token_round_trips_its_position_and_tally():
    tokens = PageTokens(KEY, INCARNATION)
    at, tally = tokens.decode(token_for(tokens), KIND_RESULTS, "run-a", 2_000)
    assert at == Position(3, 1) and tally.selected == 2 and tally.observed_cost_usd == 0.5


@pytest.mark.parametrize("case, why", [
    ("another run", "another run"),
    ("another listing", "ListAttempts listing"),
    ("earlier process", "stale: issued by an earlier coordinator process"),
    ("expired", "stale: issued"),
    ("forged", "forged"),
    ("another key", "forged"),
    ("garbage", "malformed"),
    ("truncated", "malformed"),
])
def test_a_bad_token_is_refused_naming_why(case, why):
    tokens = PageTokens(KEY, INCARNATION)
    token, kind, run_id, now = token_for(tokens), KIND_RESULTS, "run-a", 2_000
    if case == "another run":
        run_id = "run-b"
    elif case == "another listing":
        token = token_for(tokens, kind=KIND_ATTEMPTS)
    elif case == "earlier process":
        token = token_for(PageTokens(KEY, INCARNATION - 1))
    elif case == "expired":
        now = 1_000 + limits.PAGE_TOKEN_TTL_MS + 1
    elif case == "forged":
        raw = bytearray(token.encode())
        raw[30] = ord("A") if raw[30] != ord("A") else ord("B")  # a byte of the position or tally
        token = raw.decode()
    elif case == "another key":
        token = token_for(PageTokens(b"x" * 32, INCARNATION))
    elif case == "garbage":
        token = "not a token!"
    elif case == "truncated":
        token = token[:-4]
    with pytest.raises(PageTokenError, match=why):
        tokens.decode(token, kind, run_id, now)
