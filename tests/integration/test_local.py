"""`fleetctl local` as a new user runs it, in a subprocess without a terminal: the example
completes with exit 0, plain progress lines, intervals inside its score range and (with --html)
the HTML report, a second run resumes without re-executing
anything, Ctrl-C stops every process it started, and an exhausted budget exits non-zero."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fleetctl_local(spec: Path, data: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.fleetctl", "local", str(spec), "--workers", "3",
                           "--data-dir", str(data), *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO)))


def attempts_in(stdout: str) -> dict[str, str]:
    """cell -> attempts column of the printed cells table."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0].count("/") == 2 and len(parts) >= 3:
            out[parts[0]] = line
    return out


def no_process_left(data: Path) -> None:
    for lock in [data / "coordinator" / "LOCK", *sorted((data / "workers").glob("*/LOCK"))]:
        text = lock.read_text().strip() if lock.exists() else ""
        if text.isdigit():
            pid = int(text)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}/status").exists() else ""
                if "State:\tZ" in status:
                    break
                time.sleep(0.1)
            assert not Path(f"/proc/{pid}/cmdline").exists() or not Path(f"/proc/{pid}/cmdline").read_bytes(), \
                f"process {pid} ({lock}) still running"


def test_the_example_runs_resumes_and_reports(tmp_path: Path) -> None:
    data = tmp_path / "fleet"
    spec = REPO / "examples" / "quick" / "experiment.json"
    page = tmp_path / "report.html"
    first = fleetctl_local(spec, data, "--html", str(page))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    # --html: the report of the run, written when it ended (before the coordinator stopped).
    run_id = re.search(r"fleet local: run (\S+) \(new\)", first.stderr).group(1)
    html = page.read_text()
    assert f'data-run-id="{run_id}"' in html and 'data-cells-selected="60"' in html
    cells = set(attempts_in(first.stdout))
    assert len(cells) == 60 and all(f'data-cell="{c}"' in html for c in cells), "every cell drawn"
    assert f"{page}: 60 selected, 0 incomplete of 60 cells" in first.stderr
    assert "(new)" in first.stderr and "cells selected" in first.stderr, "plain progress lines off a terminal"
    assert "60 selected, 0 incomplete; run complete" in first.stdout
    assert "mean score [95% CI, clustered by task]" in first.stdout
    assert "paired difference" in first.stdout
    # The example declares scoreRange [0, 1]: no subject's interval leaves it.
    rows = [row for row in map(str.split, first.stdout.splitlines())
            if row[:1] in (["reference"], ["sloppy"], ["flaky"]) and row[1].isdigit()]
    assert len(rows) == 3, first.stdout
    for row in rows:
        mean, low, high = float(row[3]), float(row[4].strip("[,")), float(row[5].rstrip("]"))
        assert 0.0 <= low <= mean <= high <= 1.0, row
    assert "clipped to the score range [0, 1]" in first.stdout
    no_process_left(data)
    second = fleetctl_local(spec, data)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "(resumed)" in second.stderr
    # Resuming re-executes nothing: the same attempts, workers and generations.
    assert attempts_in(second.stdout) == attempts_in(first.stdout)
    no_process_left(data)


def test_ctrl_c_stops_everything_and_the_next_run_finishes(tmp_path: Path) -> None:
    data = tmp_path / "fleet"
    spec = REPO / "examples" / "quick" / "experiment.json"
    proc = subprocess.Popen([sys.executable, "-m", "tools.fleetctl", "local", str(spec), "--workers", "2",
                             "--data-dir", str(data)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 60
        while not (data / "coordinator" / "listen.addr").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(2.0)  # mid-run
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "resume" in err
    no_process_left(data)
    again = fleetctl_local(spec, data)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "(resumed)" in again.stderr
    assert "60 selected, 0 incomplete; run complete" in again.stdout


def test_an_exhausted_budget_exits_non_zero_with_the_reasons(tmp_path: Path) -> None:
    result = fleetctl_local(REPO / "examples" / "exhausted" / "experiment.json", tmp_path / "fleet")
    assert result.returncode != 0
    assert "incomplete: exhausted" in result.stdout
    assert "not counted as zero" in result.stdout
