"""`fleetctl local ... --console` as a user runs it, in a subprocess without a terminal: it prints
the console's address while the run goes, the console answers there (the login page to nobody,
the run's page to the admin token), and the command still ends with the run, exit 0, every
process it started gone."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.consolekit import Http
from tests.integration.test_local import REPO, no_process_left

DEADLINE_S = 120


def test_local_console_serves_the_run_while_it_goes(tmp_path: Path) -> None:
    data = tmp_path / "fleet"
    spec = REPO / "examples" / "quick" / "experiment.json"
    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tools.fleetctl", "local", str(spec), "--workers", "2",
                                 "--data-dir", str(data), "--console"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=err, stdin=subprocess.DEVNULL, text=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + DEADLINE_S
        m = None
        while m is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"console at http://(127\.0\.0\.1:\d+)/runs/(\S+) \(log in", errlog.read_text())
            time.sleep(0.1)
        assert m, errlog.read_text()[-2000:]
        address, run_id = m.group(1), m.group(2)
        assert Http(address).get(f"/runs/{run_id}").status == 401
        admin = Http(address, bearer=(data / "coordinator" / "admin.token").read_text().strip())
        page = admin.get(f"/runs/{run_id}")
        assert page.status == 200 and f'data-run-id="{run_id}"' in page.text
        out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, errlog.read_text()[-2000:]
    assert "selected" in out
    no_process_left(data)
