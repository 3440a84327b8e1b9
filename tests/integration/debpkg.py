"""Debian packages a browser test needs (chromium, its driver), installed once per machine.

Installed with apt-get only as root with CI=true or FLEET_INSTALL_CHROMIUM=1; otherwise the
test is skipped with what to do. Tests that run in parallel (pytest -n) take a file lock around
the install, so two of them never run apt-get at once (its own lock would fail the second)."""
from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

APT_TIMEOUT_S = 900
LOCK = Path("/tmp/fleet-tests-apt.lock")


def install_or_skip(packages: tuple[str, ...], paths: tuple[Path, ...]) -> None:
    """Every path in `paths` exists afterwards (installing `packages`), or the test skips."""
    if all(p.exists() for p in paths):
        return
    allowed = os.geteuid() == 0 and (os.environ.get("CI") == "true" or os.environ.get("FLEET_INSTALL_CHROMIUM") == "1")
    if not allowed:
        pytest.skip(f"{', '.join(str(p) for p in paths)} not installed; as root, set FLEET_INSTALL_CHROMIUM=1 (or "
                    f"CI=true) to let this test run `apt-get install -y {' '.join(packages)}`, or install them yourself")
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if all(p.exists() for p in paths):  # another test installed them meanwhile
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        if done.returncode != 0:  # stale package lists: refresh them once and try again
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
    assert done.returncode == 0 and all(p.exists() for p in paths), \
        f"apt-get install {' '.join(packages)} failed:\n{done.stderr[-2000:]}"
