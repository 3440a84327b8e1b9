"""The namespace holder: PID 1 of one environment's PID namespace, inside its mount namespace.

Started as `unshare --mount --pid --fork --kill-child --propagation private [--net]
python -I holder.py SPEC.json` (stdlib only). It builds the new root from the spec (see
plan.py), chroots into it, prints one JSON line {"ready": true, "pid": <host pid>} and then
only reaps orphans until its stdin closes or it gets SIGTERM. Commands join it with
`nsenter --target <pid> --mount --pid --root --wd`. When it exits the kernel kills every
process left in the namespace and the mounts disappear with it: nothing outlives stop().
On a setup failure it prints {"ready": false, "error": "..."} and exits 1.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


class SetupError(Exception):
    pass


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SetupError(f"mount {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts_under(path: str) -> list[tuple[str, str]]:
    """(mount point, per-mount options) of every mount at or below `path`, parents first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = _unescape(fields[4])
            if point == path or point.startswith(path.rstrip("/") + "/"):
                found.append((point, fields[5]))
    return found


def _make_readonly(path: str) -> None:
    for index, (point, options) in enumerate(_mounts_under(path)):
        keep = [o for o in options.split(",") if o in ("nosuid", "nodev", "noexec")]
        try:
            _mount("-o", ",".join(["remount", "bind", "ro", *keep]), point)
        except SetupError:
            if index == 0:
                raise  # the top itself must be read-only; a special submount may refuse


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def setup(spec: dict) -> None:
    root = spec["root"]
    upper, work = spec["upper"], spec["work"]
    # Read-only binds first: one of them may hold this very root (the base dir), and binding
    # it after the overlays would copy them into the bind as well.
    tops = sorted(spec["tops"], key=lambda t: t["kind"] not in ("readonly", "file"))
    for top in tops:
        name, kind = top["name"], top["kind"]
        host, dst = "/" + name, os.path.join(root, name)
        if kind == "symlink":
            os.symlink(top["link"], dst)
            continue
        if kind == "file":
            open(dst, "a").close()
            _mount("--bind", host, dst)
            _make_readonly(dst)
            continue
        os.mkdir(dst)
        if kind == "private":
            os.chmod(dst, 0o1777 if name == "tmp" else 0o700)
        elif kind == "proc":
            _mount("-t", "proc", "-o", "nosuid,nodev,noexec", "proc", dst)
        elif kind == "dev":
            _mount("--rbind", host, dst)
        elif kind == "sys" and spec["isolateNetwork"]:
            # A fresh sysfs shows this network namespace's devices, not the host's.
            _mount("-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", dst)
        elif kind == "sys":
            _mount("--rbind", host, dst)
            _make_readonly(dst)
        elif kind == "overlay":
            up, wk = os.path.join(upper, name), os.path.join(work, name)
            os.makedirs(up)
            os.makedirs(wk)
            try:
                _mount("-t", "overlay", "-o", f"lowerdir={host},upperdir={up},workdir={wk}", "fleet-nsenv", dst)
            except SetupError as e:
                # An upper dir on a filesystem that cannot hold one (an overlay itself):
                # the host's directory is still visible, read-only.
                print(f"harbor_nsenv holder: /{name} read-only ({e})", file=sys.stderr)
                _mount("--rbind", host, dst)
                _make_readonly(dst)
        elif kind == "readonly":
            _mount("--rbind", host, dst)
            _make_readonly(dst)
        else:
            raise SetupError(f"unknown top kind {kind!r} for /{name}")
    for path in spec["hide"]:
        dst = os.path.join(root, path.lstrip("/"))
        if os.path.isdir(dst) and not os.path.islink(dst):
            _mount("-t", "tmpfs", "-o", "ro,size=4k,mode=755", "fleet-nsenv-hidden", dst)
    if spec["isolateNetwork"]:
        _loopback_up()
    os.chroot(root)
    os.chdir("/")


def main(argv: list[str]) -> int:
    # Before the new proc is mounted, /proc is the host's: its `self` names our host pid.
    host_pid = int(os.readlink("/proc/self"))
    with open(argv[1]) as f:
        spec = json.load(f)
    try:
        setup(spec)
    except (SetupError, OSError) as e:
        print(json.dumps({"ready": False, "error": str(e)}), flush=True)
        return 1
    stopping = False

    def _stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    # PID 1 gets only the signals it handles: these two end the environment.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(json.dumps({"ready": True, "pid": host_pid}), flush=True)
    while not stopping:
        try:
            readable, _, _ = select.select([0], [], [], 0.5)
            if readable and not os.read(0, 4096):
                break  # the environment's owner is gone or closed our stdin
        except InterruptedError:
            pass
        while True:  # orphans of the namespace are ours to reap
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                break
            if pid == 0:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
