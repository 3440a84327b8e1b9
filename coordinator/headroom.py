"""How much more memory this process's tree could take before the kernel's OOM killer acts,
read from /proc and the memory cgroups it is in, for the actor to decide whether a snapshot
process can fit beside the coordinator (it holds a second copy of the state: at a million cells
1.5 GB beside the coordinator's 1.4). A guess, not a reservation: None where nothing can be
read, and the actor then tries the process and lets the kernel judge.

The room is the smallest of: the host's MemAvailable, and, for the coordinator's memory cgroup
and every ancestor with a limit (cgroup v1's memory controller or cgroup v2), the limit less
the usage, with the cgroup's inactive file pages counted as room (clean cache the kernel drops
before it kills anything)."""
from __future__ import annotations

from pathlib import Path

_V1, _V2 = "sys/fs/cgroup/memory", "sys/fs/cgroup"
_UNLIMITED = 1 << 60  # v1 writes "no limit" as a page-rounded 2**63 - 1


def own_anonymous_bytes(root: Path = Path("/"), pid: str = "self") -> int | None:
    """This process's anonymous resident memory (RssAnon): its heaps, the state."""
    return _status_kb(root / "proc" / pid / "status", "RssAnon")


def room_bytes(root: Path = Path("/"), pid: str = "self") -> int | None:
    """The memory this process's tree can still take, or None when nothing says."""
    rooms = [r for r in (_meminfo_available(root), *_cgroup_rooms(root, pid)) if r is not None]
    return min(rooms) if rooms else None


def _status_kb(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0]) << 10
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo_available(root: Path) -> int | None:
    return _status_kb(root / "proc" / "meminfo", "MemAvailable")


def _cgroup_rooms(root: Path, pid: str) -> list[int | None]:
    try:
        lines = (root / "proc" / pid / "cgroup").read_text().splitlines()
    except OSError:
        return []
    out: list[int | None] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            out += _walk(root / _V1, parts[2], "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        elif parts[0] == "0" and parts[1] == "":
            out += _walk(root / _V2, parts[2], "memory.max", "memory.current", "inactive_file")
    return out


def _walk(mount: Path, path: str, limit_name: str, usage_name: str, inactive_key: str) -> list[int | None]:
    """The room of the cgroup at `path` under `mount` and of each ancestor that has a limit."""
    out: list[int | None] = []
    here = mount / path.strip("/")
    while True:
        limit = _number(here / limit_name)
        if limit is not None and limit < _UNLIMITED:
            usage = _number(here / usage_name)
            inactive = _stat(here / "memory.stat", inactive_key) or 0
            out.append(None if usage is None else max(0, limit - usage + inactive))
        if here == mount or mount not in here.parents:
            return out
        here = here.parent


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def _stat(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None
