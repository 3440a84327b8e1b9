"""The HTML report of a real small run, opened in headless Chromium, shows the run's counts: a
coordinator and three workers on loopback run 12 task groups of five subjects (one retried on
its first attempt, one never reachable), `fleetctl report` writes the page, Chromium renders it
with every network path disabled, and the test reads the counts from the rendered DOM and
takes a screenshot.

Chromium is Debian's `chromium` package. When /usr/bin/chromium is missing the test installs it
with apt-get only when running as root with CI=true or FLEET_INSTALL_CHROMIUM=1; otherwise it
skips and says how to enable it. FLEET_REPORT_KEEP=DIR keeps the page, its inputs and the
screenshot in DIR.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.integration.debpkg import install_or_skip
from tests.integration.harness import FAST_POLICY, INTBENCH, Cluster, intbench_spec
from tools import fleetctl

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_TIMEOUT_S = 90
GROUPS = 12
SUBJECTS = ("good", "bad", "slow", "flaky", "down")

# `flaky` fails its first attempt with exit 75 (an infrastructure failure, retried) when the
# input is a multiple of 4, then answers as `good`; `down` always exits 75 without usage, so
# its cells exhaust their attempts and stay incomplete, and usage is incomplete.
FLAKY_SH = """#!/bin/sh
case "$FLEET_ATTEMPT_ID" in
  *:a1) if [ $(($2 % 4)) -eq 0 ]; then echo "flaky: first attempt fails" >&2; exit 75; fi ;;
esac
exec sh "$FLEET_BENCH_ROOT/subject.sh" good "$2"
"""
DOWN_SH = """#!/bin/sh
echo "down: the model API is unreachable" >&2
exit 75
"""


def chromium_or_skip() -> Path:
    install_or_skip(("chromium",), (CHROMIUM,))
    return CHROMIUM


def chromium_argv(binary: Path, profile: Path) -> list[str]:
    return [str(binary), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}"]


class Ids(HTMLParser):
    """Every element's attributes by id, plus the rows of the scores table."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.subject_rows: list[dict[str, str]] = []
        self.incomplete_rows: list[dict[str, str]] = []
        self.bars = 0
        self.fetching: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.by_id[a["id"]] = a
        if tag == "tr" and "data-subject" in a:
            self.subject_rows.append(a)
        if tag == "tr" and "data-cell-id" in a:
            self.incomplete_rows.append(a)
        if tag == "g" and "bar" in a.get("class", "").split():
            self.bars += 1
        for key in ("src", "href", "srcset", "action"):
            if key in a and not a[key].startswith("#"):
                self.fetching.append(f"<{tag} {key}={a[key]!r}>")


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def test_report_of_a_real_run_renders_its_counts_in_chromium(cluster: Cluster, tmp_path: Path) -> None:
    t_install = time.monotonic()
    binary = chromium_or_skip()
    install_s = time.monotonic() - t_install

    bench = tmp_path / "bench"
    shutil.copytree(INTBENCH, bench)
    (bench / "flaky.sh").write_text(FLAKY_SH)
    (bench / "down.sh").write_text(DOWN_SH)
    spec = intbench_spec(GROUPS, SUBJECTS[:3], cap=6)
    for name in ("flaky", "down"):
        spec["subjects"].append({"id": name, "command": "sh", "args": [f"{{{{bench_root}}}}/{name}.sh", name,
                                                                        "{{task.input}}"]})
    cluster.start_coordinator()
    for wid in ("w1", "w2", "w3"):
        cluster.start_worker(wid, slots=2, bench_root=bench)
    run_id = cluster.submit(spec, FAST_POLICY)
    results = cluster.wait_settled(run_id, 120)
    cells = GROUPS * len(SUBJECTS)
    assert results["summary"]["state"] == "incomplete", results["summary"]
    assert results["summary"]["selected"] == cells - GROUPS and results["summary"]["incomplete"] == GROUPS

    page = tmp_path / "report.html"
    token = cluster.data_dir / "admin.token"
    t_report = time.monotonic()
    assert fleetctl.main(["--coordinator", cluster.address, "--token-file", str(token), "report", run_id,
                          "--html", str(page)]) == 0
    report_s = time.monotonic() - t_report
    text = page.read_text()
    assert "http://" not in text and "https://" not in text, "the page must not name any network address"

    profile = tmp_path / "chromium-profile"
    t_dom = time.monotonic()
    dom = subprocess.run([*chromium_argv(binary, profile), "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=CHROMIUM_TIMEOUT_S)
    dom_s = time.monotonic() - t_dom
    assert dom.returncode == 0 and "</main>" in dom.stdout, f"chromium --dump-dom failed:\n{dom.stderr[-3000:]}"
    ids = Ids()
    ids.feed(dom.stdout)
    assert ids.fetching == [], f"the page would fetch something: {ids.fetching}"
    main = ids.by_id["report"]
    assert main["data-run-id"] == run_id
    assert int(main["data-cells-total"]) == cells
    assert int(main["data-cells-selected"]) == cells - GROUPS
    assert int(main["data-cells-incomplete"]) == GROUPS
    assert int(main["data-subjects"]) == len(SUBJECTS)
    assert main["data-usage-complete"] == "false"
    assert main["data-timeline-mode"] == "time", "the coordinator reports start and finish times"
    assert ids.by_id["count-selected"]["data-count"] == str(cells - GROUPS)
    assert ids.by_id["count-incomplete"]["data-count"] == str(GROUPS)
    assert ids.by_id["count-subjects"]["data-count"] == str(len(SUBJECTS))
    assert ids.by_id["incomplete-cells"]["data-cells-incomplete"] == str(GROUPS)
    assert {r["data-reason"] for r in ids.incomplete_rows} == {"exhausted"}
    assert {r["data-cell-id"].rsplit("/", 1)[1] for r in ids.incomplete_rows} == {"down"}
    assert {r["data-subject"]: r["data-selected"] for r in ids.subject_rows} == {
        "good": str(GROUPS), "bad": str(GROUPS), "slow": str(GROUPS), "flaky": str(GROUPS), "down": "0"}
    assert ids.by_id["usage-status"]["data-usage-complete"] == "false"
    # Every selected cell sits in one group bar; retried flaky cells (inputs 0, 4, 8) ran again.
    assert ids.bars >= GROUPS
    assert int(ids.by_id["count-retried-cells"]["data-count"]) >= GROUPS + 3
    used = {c["worker_id"] for c in results["cells"] if c["state"] == "selected"}
    assert int(main["data-workers"]) == len(used)

    shot = tmp_path / "report.png"
    t_shot = time.monotonic()
    done = subprocess.run([*chromium_argv(binary, profile), "--hide-scrollbars", "--window-size=1300,2200",
                           f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True,
                          timeout=CHROMIUM_TIMEOUT_S)
    shot_s = time.monotonic() - t_shot
    assert done.returncode == 0 and shot.exists() and shot.stat().st_size > 10_000, done.stderr[-3000:]
    keep = os.environ.get("FLEET_REPORT_KEEP")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(page, Path(keep) / "report.html")
        shutil.copy(shot, Path(keep) / "report.png")
        (Path(keep) / "report-inputs.json").write_text(json.dumps({"results": results, "status": cluster.status()}))
    print(json.dumps({"install_s": round(install_s, 1), "report_s": round(report_s, 2), "dump_dom_s": round(dom_s, 1),
                      "screenshot_s": round(shot_s, 1), "screenshot": str(shot)}))
