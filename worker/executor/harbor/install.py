"""Create the pinned Harbor environment the Harbor executor runs trials with.

    python -m worker.executor.harbor.install [--dir .fleet/harbor-env] [--python python3.12]

Makes a venv with `python3.12 -m venv DIR` and installs `harbor==0.25.0` into it with pip
(the machine's ordinary package configuration). Idempotent: a stamp file records what was
installed (Harbor's version and the interpreter's), and a matching stamp with a working
interpreter is left alone; anything else is rebuilt from scratch. Prints the interpreter's
path on stdout, the one line a script needs. The default dir is fleet's root's
`.fleet/harbor-env`, which the Harbor executor uses when a spec names no `executor.python`.

Harbor 0.25.0 needs Python 3.12. `python3.12` is looked up on PATH and, failing that, in
pyenv's versions (a pyenv shim that has no 3.12 selected does not count).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from worker.executor.harbor.executor import DEFAULT_ENV_DIR, FLEET_ROOT, HARBOR_VERSION

STAMP = ".fleet-harbor-env.json"
PYTHON_MINOR = (3, 12)


def find_python312(explicit: str | None = None) -> str | None:
    """A working Python 3.12 interpreter, or None."""
    candidates = [explicit] if explicit else []
    if not explicit:
        found = shutil.which("python3.12")
        if found:
            candidates.append(found)
        root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
        candidates += sorted(glob.glob(os.path.join(root, "versions", "3.12*", "bin", "python3.12")), reverse=True)
    for c in candidates:
        try:
            done = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == str(PYTHON_MINOR):
            return c
    return None


def _stamp_ok(env_dir: Path, version: str) -> bool:
    python = env_dir / "bin" / "python"
    try:
        stamp = json.loads((env_dir / STAMP).read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("harbor") != version or not python.is_file():
        return False
    check = ("import importlib.metadata, sys; "
             "print(importlib.metadata.version('harbor'), '%d.%d' % sys.version_info[:2])")
    try:
        done = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.split() == [version, "%d.%d" % PYTHON_MINOR]


def ensure(env_dir: Path, *, python: str | None = None, version: str = HARBOR_VERSION,
           log=lambda text: print(text, file=sys.stderr)) -> Path:
    """The env's interpreter, creating or rebuilding the env first when needed."""
    env_dir = Path(env_dir)
    if _stamp_ok(env_dir, version):
        return env_dir / "bin" / "python"
    base = find_python312(python)
    if base is None:
        raise SystemExit("harbor_env: no Python 3.12 found (python3.12 on PATH or in pyenv's versions); "
                         "Harbor 0.25.0 needs it")
    started = time.monotonic()
    if env_dir.exists():
        log(f"harbor_env: rebuilding {env_dir}")
        shutil.rmtree(env_dir)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    log(f"harbor_env: {base} -m venv {env_dir}")
    subprocess.run([base, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    log(f"harbor_env: pip install harbor=={version}")
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"harbor=={version}"], check=True)
    (env_dir / STAMP).write_text(json.dumps({"harbor": version, "python": "%d.%d" % PYTHON_MINOR,
                                             "base": base, "seconds": round(time.monotonic() - started, 1)}))
    if not _stamp_ok(env_dir, version):
        raise SystemExit(f"harbor_env: {env_dir} was built but does not report harbor {version}")
    log(f"harbor_env: ready in {time.monotonic() - started:.1f}s")
    return py


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m worker.executor.harbor.install", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=str(FLEET_ROOT / DEFAULT_ENV_DIR), help="the venv to create (default: %(default)s)")
    p.add_argument("--python", default=None, help="the Python 3.12 interpreter to build it with")
    args = p.parse_args(argv)
    print(ensure(Path(args.dir).absolute(), python=args.python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
