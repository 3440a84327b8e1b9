"""The console shares its rendering with the static report and reaches the coordinator only
through the Admin RPCs: from the same results and status, the console's run page carries the
report's own sections byte for byte (scores, cost, providers, counts); and no module of
coordinator/console imports the actor, the store, the core or the servicer's internals (a walk of
their imports; shown failing on a planted import first)."""
from __future__ import annotations

import ast
from pathlib import Path

from common.report import html as report_html
from coordinator.console import pages
from coordinator.console.auth import Principal
from tests.unit.test_console_pages import results, status

CONSOLE = Path(__file__).resolve().parents[2] / "coordinator" / "console"
FORBIDDEN = ("coordinator.actor", "coordinator.store", "coordinator.core", "coordinator.snapshot", "lmdb")
VIEWER = Principal("viewer", "session", "viewer session 1", "t")


def test_the_run_page_carries_the_reports_sections() -> None:
    r = results(6, "abc")
    st = status(18)
    st["providers"] = [{"name": "openai", "running": 1, "peak_running": 2, "effective": 4, "declared": 4,
                        "throttled": 3, "retry_after_ms_total": 1500, "slow_start": False, "last_throttled": "w1",
                        "last_throttled_age_ms": 10}]
    report = report_html.render_html(r, st, report_html.timeline_from_results(r))
    console = pages.run_live("r", r, st, [], {}, 0, None, VIEWER, 1000)
    scores, _ = report_html.render_scores(r["cells"], None)
    for section in (scores, report_html.render_cost(r["cells"], r["summary"]),
                    report_html.render_providers(st["providers"])):
        assert section and section in report and section in console
    counts = report[report.index('<ul class="counts">'):report.index("</dl>") + 5]
    assert counts in console  # the counts and the facts, the same bytes


def imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


def violations(root: Path) -> list[str]:
    return sorted(f"{p.name} imports {name}" for p in root.glob("*.py") for name in imports(p)
                  if any(name == f or name.startswith(f + ".") for f in FORBIDDEN))


def test_the_console_reaches_the_state_only_through_the_admin_rpcs(tmp_path: Path) -> None:
    planted = tmp_path / "console"
    planted.mkdir()
    (planted / "sneaky.py").write_text("from coordinator.actor import Actor\nimport coordinator.core.state\n")
    assert violations(planted) == ["sneaky.py imports coordinator.actor", "sneaky.py imports coordinator.core.state"]
    assert violations(CONSOLE) == []
