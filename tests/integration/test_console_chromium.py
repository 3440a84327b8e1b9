"""The console in a real browser: Debian's Chromium driven by Selenium through chromium-driver,
against a real coordinator and real workers on 127.0.0.1. A run's progress and a cell's result
appear on the open page without a reload; a worker killed with -9 shows as lost and its group's
cells as waiting again; a bulk retry's dry run lists exactly the cells its filter matches and
the confirmed retry runs them; a viewer's action is refused; the page of a run of 100,000 cells
stays under the console's response limit. Screenshots of the login, fleet, run and cell pages
are kept in FLEET_CONSOLE_ARTIFACTS (default .fleet/test-artifacts/console/).

Chromium and its driver are Debian's `chromium` and `chromium-driver` packages; when missing,
the test installs them with apt-get only as root with CI=true or FLEET_INSTALL_CHROMIUM=1, and
skips otherwise, saying how to enable it (as tests/integration/test_report_chromium.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from coordinator.console import limits
from tests.integration.consolekit import Http, attr, start_console_coordinator
from tests.integration.debpkg import install_or_skip
from tests.integration.harness import FAST_POLICY, INTBENCH, REPO, Cluster, intbench_spec

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 40
ARTIFACTS = Path(os.environ.get("FLEET_CONSOLE_ARTIFACTS") or REPO / ".fleet" / "test-artifacts" / "console")
DOWN_SH = """#!/bin/sh
echo "down: the model API is unreachable" >&2
exit 75
"""


def browser_or_skip() -> None:
    install_or_skip(("chromium", "chromium-driver"), (CHROMIUM, DRIVER))


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory):
    browser_or_skip()
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("chromium-profile")
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1320,1000"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    d.set_page_load_timeout(60)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield d
    finally:
        d.quit()  # chromedriver stops the browser it started, then itself


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def wait(driver, what: str, check, timeout_s: float = WAIT_S):
    """Poll `check(driver)` (bounded) until it is truthy; fail naming what was awaited."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            got = check(driver)
            if got:
                return got
        except Exception as e:  # the live part may be replaced between find and read
            last_error = e
        time.sleep(0.2)
    shot(driver, f"timeout-{what.replace(' ', '-')[:40]}")
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last error: {last_error})")


def shot(driver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def login(driver, base: str, token: str, name: str = "") -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(base + "/")
    assert driver.find_element(By.ID, "login-form")  # unauthenticated: the login page, nothing else
    if name:
        shot(driver, name)
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login-submit").click()
    wait(driver, "the fleet page after login", lambda d: d.find_elements(By.ID, "role"))


def attr_of(driver, css: str, name: str) -> str | None:
    """`name` of the first element matching `css`, read in one script: a live part may be
    replaced between a find and a read (a StaleElementReferenceException), never inside it."""
    return driver.execute_script(
        "var e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null;",
        css, name)


def attrs_of(driver, css: str, name: str) -> list[str | None]:
    """`name` of every element matching `css`, in document order, read in one script."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.getAttribute(arguments[1]));",
        css, name)


def text_of(driver, css: str) -> str | None:
    """The rendered text of the first element matching `css`, read in one script."""
    return driver.execute_script(
        "var e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css)


def live_attr(driver, name: str) -> str | None:
    return attr_of(driver, "#live", name)


def click(driver, what: str, css: str) -> None:
    """Click the element matching `css`, found again if a live refresh replaced it meanwhile."""
    from selenium.webdriver.common.by import By

    wait(driver, what, lambda d: d.find_element(By.CSS_SELECTOR, css).click() or True)


def test_progress_lost_worker_and_cell_result_live(driver, cluster: Cluster) -> None:
    from selenium.webdriver.common.by import By

    base = "http://" + start_console_coordinator(cluster)
    login(driver, base, (cluster.data_dir / "admin.token").read_text().strip(), "login")
    # Groups of 3 s ("hang"), so that the one a lone worker holds is still running when it dies.
    run_id = cluster.submit(intbench_spec(4, ("hang", "good")), FAST_POLICY)
    driver.get(f"{base}/runs/{run_id}")
    driver.execute_script("window.__not_reloaded = 'yes';")
    wait(driver, "the live stream", lambda d: d.find_element(By.ID, "live-status").get_attribute("data-state") == "live")
    assert live_attr(driver, "data-cells-selected") == "0"

    w2 = cluster.start_worker("w2", slots=1)
    held_cells = sorted(wait(driver, "a cell of w2's group running on the page", lambda d: attrs_of(
        d, 'a.m[data-class="running"][data-worker="w2"]', "data-cell")))
    w2.kill9()
    # Lost: the worker expires (FAST_POLICY: 3 s) and its group's cells wait again, on this page.
    # (A cell of the group that finished before the kill keeps its result; the others wait.)
    def waiting_again(d) -> bool:
        classes = [attr_of(d, f'a.m[data-cell="{c}"]', "data-class") for c in held_cells]
        return "waiting" in classes and all(k in ("waiting", "pass") for k in classes)

    wait(driver, "w2's cells waiting again", waiting_again)
    held_cells = [c for c in held_cells if attr_of(driver, f'a.m[data-cell="{c}"]', "data-class") == "waiting"]
    wait(driver, "a lost attempt counted", lambda d: d.find_elements(By.CSS_SELECTOR, '#attempt-kinds [data-kind="lost"]'))
    assert int(live_attr(driver, "data-cells-selected")) < 8
    shot(driver, "run-worker-lost")
    driver.get(base + "/")
    wait(driver, "w2 shown lost on the fleet page", lambda d: d.find_element(
        By.CSS_SELECTOR, '#workers tr[data-worker-id="w2"]').get_attribute("data-state") == "expired"
        and d.find_elements(By.CSS_SELECTOR, '#workers tr[data-worker-id="w2"] .lost'))
    shot(driver, "fleet-worker-lost")

    driver.get(f"{base}/runs/{run_id}")
    driver.execute_script("window.__not_reloaded = 'yes';")
    wait(driver, "the live stream", lambda d: d.find_element(By.ID, "live-status").get_attribute("data-state") == "live")
    cluster.start_worker("w1", slots=2)
    seen: list[int] = []

    def finished(d) -> bool:
        n = int(live_attr(d, "data-cells-selected"))
        if not seen or seen[-1] != n:
            seen.append(n)
        return n == 8

    wait(driver, "every cell selected on the open page", finished, timeout_s=60)
    assert driver.execute_script("return window.__not_reloaded;") == "yes", "the page reloaded instead of updating"
    assert seen[0] < 8 and len(seen) >= 2, seen  # progress came in while the page stayed open
    assert int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0) >= 1
    wait(driver, "the events list", lambda d: int(d.find_element(By.ID, "events").get_attribute("data-events")) > 0)
    wait(driver, "the run complete", lambda d: live_attr(d, "data-state") == "complete")
    assert text_of(driver, "#eta") == "0.00 s"
    assert len(attrs_of(driver, 'a.m[data-class="pass"]', "data-cell")) == 8
    assert driver.find_elements(By.CSS_SELECTOR, "#scores tr[data-subject]")
    shot(driver, "run-complete")

    # The cell w2 lost: its page shows the lost attempt and the one that counts, with provenance.
    click(driver, "the lost cell's link", f'a.m[data-cell="{held_cells[0]}"]')
    wait(driver, "the cell page", lambda d: d.find_elements(By.ID, "cell-id"))
    assert live_attr(driver, "data-state") == "selected" and live_attr(driver, "data-score") == "1.0"
    kinds = set(attrs_of(driver, "#attempts tr[data-kind]", "data-kind"))
    assert kinds == {"lost", "selected"}, kinds
    assert "worker w1" in text_of(driver, "#cell-provenance")
    shot(driver, "cell")
    names = attrs_of(driver, "#artifacts tr[data-artifact]", "data-artifact")
    assert names, "the selected attempt has artifacts"
    click(driver, "an artifact's link", "#artifacts tr[data-artifact] a")
    wait(driver, "an artifact shown", lambda d: d.find_elements(By.ID, "artifact-text"))


def test_bulk_retry_dry_run_then_confirm_and_a_viewer_is_refused(driver, cluster: Cluster, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    bench = tmp_path / "bench"
    shutil.copytree(INTBENCH, bench)
    (bench / "down.sh").write_text(DOWN_SH)
    spec = intbench_spec(3, ("good", "bad"))
    spec["subjects"].append({"id": "down", "command": "sh", "args": ["{{bench_root}}/down.sh", "{{task.input}}"]})
    policy = dict(FAST_POLICY, maxAttemptsPerCell=2)
    base = "http://" + start_console_coordinator(cluster)
    admin_token = (cluster.data_dir / "admin.token").read_text().strip()
    viewer_token = (cluster.data_dir / "viewer.token").read_text().strip()
    run_id = cluster.submit(spec, policy)
    cluster.start_worker("w1", slots=2, bench_root=bench)
    results = cluster.wait_settled(run_id, 60)
    down = sorted(c["cell_id"] for c in results["cells"] if c["state"] == "incomplete")
    assert len(down) == 3 and all(c.endswith("/down") for c in down), down
    before = {c["cell_id"]: c["attempts"] for c in results["cells"]}

    login(driver, base, admin_token)
    # One cell first, from its own page: the same RetryCell.
    driver.get(f"{base}/runs/{run_id}/cells/{down[0]}")
    click(driver, "the retry button", "#action-retry-cell")
    wait(driver, "the retry's outcome", lambda d: d.find_elements(By.ID, "action-result"))
    assert driver.find_element(By.ID, "action-result").get_attribute("data-outcome") == "accepted"
    wait(driver, "the retried cell to run out of attempts again", lambda d: next(
        c for c in cluster.results(run_id)["cells"] if c["cell_id"] == down[0])["attempts"] > before[down[0]]
        and cluster.results(run_id)["summary"]["state"] == "incomplete")
    results = cluster.wait_settled(run_id, 60)
    before = {c["cell_id"]: c["attempts"] for c in results["cells"]}
    driver.get(f"{base}/runs/{run_id}")
    Select(driver.find_element(By.ID, "bulk-reason")).select_by_value("exhausted")
    driver.find_element(By.ID, "bulk-subject").send_keys("down")
    driver.find_element(By.ID, "bulk-dry-run").click()
    wait(driver, "the dry run", lambda d: d.find_elements(By.ID, "bulk-plan"))
    listed = sorted(li.get_attribute("data-cell") for li in driver.find_elements(By.CSS_SELECTOR, "#bulk-cells li"))
    assert listed == down and driver.find_element(By.ID, "bulk-plan").get_attribute("data-count") == "3"
    # Nothing retried by the dry run itself.
    assert {c["cell_id"]: c["attempts"] for c in cluster.results(run_id)["cells"]} == before
    shot(driver, "bulk-dry-run")
    driver.find_element(By.ID, "bulk-confirm").click()
    wait(driver, "the bulk result", lambda d: d.find_elements(By.ID, "bulk-result"))
    assert driver.find_element(By.ID, "bulk-result").get_attribute("data-granted") == "3"
    again = cluster.wait_settled(run_id, 60)
    after = {c["cell_id"]: c["attempts"] for c in again["cells"]}
    assert all(after[c] > before[c] for c in down), (before, after)  # the confirmed retry ran them
    assert all(after[c] == before[c] for c in before if c not in down)  # and nothing else
    log = [json.loads(line) for line in (cluster.root / "coordinator.log").read_text().splitlines()
           if line.startswith("{")]
    assert sum(1 for e in log if e.get("event") == "console_action" and e["action"] == "retry"
               and e["who"].startswith("admin session ")) == 1 + 3  # the one cell, then the bulk

    # A viewer: no action on the page, and an action it posts anyway is refused.
    login(driver, base, viewer_token)
    driver.get(f"{base}/runs/{run_id}")
    assert not driver.find_elements(By.ID, "run-actions") and not driver.find_elements(By.ID, "bulk-form")
    csrf = driver.find_element(By.CSS_SELECTOR, 'form[action="/logout"] input[name="csrf"]').get_attribute("value")
    driver.execute_script("""
        const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];
        const i = document.createElement('input'); i.name = 'csrf'; i.value = arguments[1]; f.appendChild(i);
        document.body.appendChild(f); f.submit();""", f"/runs/{run_id}/pause", csrf)
    wait(driver, "the refusal", lambda d: d.find_elements(By.ID, "refused"))
    assert "viewer cannot act" in driver.find_element(By.ID, "refused").text
    shot(driver, "viewer-refused")
    assert cluster.status()["runs"][0]["state"] != "paused"


def test_a_run_of_100000_cells_stays_under_the_size_limit(driver, cluster: Cluster) -> None:
    from selenium.webdriver.common.by import By

    address = start_console_coordinator(cluster)
    base = "http://" + address
    spec = intbench_spec(20_000, ("a", "b", "c", "d", "e"))
    run_id = cluster.submit(spec, FAST_POLICY)  # no worker: every cell waits
    client = Http(address, bearer=(cluster.data_dir / "admin.token").read_text().strip())
    t0 = time.monotonic()
    page = client.get(f"/runs/{run_id}", timeout=120)
    took = time.monotonic() - t0
    assert page.status == 200, page.text[:300]
    assert len(page.body) < limits.RESPONSE_BYTES_MAX, len(page.body)
    assert attr(page.text, "matrix", "data-mode") == "aggregated" and attr(page.text, "matrix", "data-cells") == "100000"
    assert attr(page.text, "timeline-omitted", "data-groups") is not None or "timeline" in page.text
    fragment = client.get(f"/runs/{run_id}?fragment=1&page=999", timeout=120)
    assert fragment.status == 200 and len(fragment.body) < limits.RESPONSE_BYTES_MAX
    assert client.get(f"/runs/{run_id}?page=x").status == 400  # a bad page number is refused, typed
    fleet = client.get("/")
    assert fleet.status == 200 and len(fleet.body) < limits.RESPONSE_BYTES_MAX

    login(driver, base, (cluster.data_dir / "viewer.token").read_text().strip())
    driver.get(f"{base}/runs/{run_id}")
    wait(driver, "the aggregated matrix", lambda d: d.find_element(By.ID, "matrix").get_attribute("data-mode") == "aggregated")
    assert int(driver.find_element(By.ID, "matrix").get_attribute("data-rows")) <= limits.MATRIX_ROWS_MAX
    assert len(driver.find_elements(By.CSS_SELECTOR, "#cells tbody tr")) == limits.TABLE_ROWS_MAX
    shot(driver, "run-100000-cells")
    print(json.dumps({"console_page_bytes": len(page.body), "limit": limits.RESPONSE_BYTES_MAX,
                      "first_read_s": round(took, 2)}))
