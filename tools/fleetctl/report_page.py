"""The HTML report (`fleetctl report RUN --html FILE`, `fleetctl local --html FILE`): one
self-contained page about a run, written to a file.

The page itself is rendered by common/report/html.py (pure: the same inputs give the same
bytes; its rules are there), which the coordinator's live console (coordinator/console/)
renders its run page with too: one rendering for the static report and the console. This
module reads the page's inputs from the Admin API and writes the file atomically.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.report.html import (  # noqa: F401  (re-exported: the report's names, as before the split)
    CSS,
    ENTRY_KEYS,
    KINDS,
    AttemptsFileError,
    Bar,
    Lanes,
    _timed,
    attempts_from_records,
    build_bars,
    layout,
    load_attempts,
    merge_timeline,
    pack_lanes,
    render_html,
    timeline_from_results,
)
from tools.fleetctl.client import CtlError
from tools.fleetctl.pages import attempts_pages, results_whole
from tools.fleetctl.views import results_json, status_json

# ---- writing the page, and the page from the Admin API ---------------------------------

def write_atomically(path: Path, text: str) -> None:
    path = path.resolve()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def page_from_admin(admin: Any, run_id: str, attempts: Path | None = None) -> tuple[str, dict, list[dict]]:
    """The page of run `run_id` from the Admin API (results, status, every listed attempt, and
    `attempts`, an optional file of further attempts): (page, results, timeline)."""
    from common.fleetpb import admin_pb2

    # Fetched page by page (no message limit), but held whole: the page draws every bar.
    results = results_json(results_whole(admin, run_id))
    status = status_json(admin.call("GetStatus", admin_pb2.GetStatusRequest(run_id=run_id)))
    timeline = timeline_from_results(results)
    try:
        listed = [a for page in attempts_pages(admin, run_id) for a in page.attempts]
        timeline = merge_timeline(timeline, attempts_from_records(listed))
    except CtlError:
        pass  # an older coordinator without ListAttempts: the selected attempts only
    if attempts:
        try:
            timeline = merge_timeline(timeline, load_attempts(attempts))
        except AttemptsFileError as e:
            raise CtlError(str(e)) from None
    return render_html(results, status, timeline), results, timeline


def write_page(path: Path, page: str, results: dict, timeline: list[dict]) -> None:
    """Write the page atomically and say on stderr what it shows."""
    try:
        write_atomically(path, page)
    except OSError as e:
        raise CtlError(f"cannot write {path}: {e.strerror}") from None
    selected = sum(1 for c in results["cells"] if c["state"] == "selected")
    untimed = sum(1 for e in timeline if not _timed(e))
    print(f"{path}: {selected} selected, {len(results['cells']) - selected} incomplete of "
          f"{len(results['cells'])} cells"
          + (f"; {untimed} attempts without times (placed by dispatch order)" if untimed else ""),
          file=sys.stderr)
