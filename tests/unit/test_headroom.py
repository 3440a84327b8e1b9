"""coordinator/headroom.py reads the room left from a /proc and /sys laid out as the kernel lays
them out: cgroup v1's memory controller, cgroup v2, an ancestor's limit, no limit, nothing."""
from __future__ import annotations

from pathlib import Path

from coordinator import headroom

MB = 1 << 20


def layout(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def proc(available_mb: int, cgroup: str, anon_kb: int = 1_150_000) -> dict[str, str]:
    return {"proc/meminfo": f"MemTotal: 24000000 kB\nMemAvailable: {available_mb * 1024} kB\n",
            "proc/self/status": f"Name: python\nVmRSS: 1400000 kB\nRssAnon: {anon_kb} kB\nRssFile: 250000 kB\n",
            "proc/self/cgroup": cgroup}


def test_v1_room_is_the_limit_less_usage_with_inactive_file_pages_counted_as_room(tmp_path: Path) -> None:
    cg = "sys/fs/cgroup/memory/box/coord"
    root = layout(tmp_path, proc(20_000, "9:name=systemd:/\n4:memory:/box/coord\n3:cpuset:/\n") | {
        f"{cg}/memory.limit_in_bytes": str(2048 * MB), f"{cg}/memory.usage_in_bytes": str(1600 * MB),
        f"{cg}/memory.stat": f"cache 1\ninactive_file 7\ntotal_inactive_file {100 * MB}\n",
        "sys/fs/cgroup/memory/box/memory.limit_in_bytes": "9223372036854771712",  # v1's "no limit"
    })
    assert headroom.room_bytes(root) == 548 * MB
    assert headroom.own_anonymous_bytes(root) == 1_150_000 * 1024


def test_v2_an_ancestor_with_less_room_decides_and_max_is_no_limit(tmp_path: Path) -> None:
    root = layout(tmp_path, proc(20_000, "0::/a/b\n") | {
        "sys/fs/cgroup/a/b/memory.max": "max", "sys/fs/cgroup/a/b/memory.current": str(900 * MB),
        "sys/fs/cgroup/a/memory.max": str(1000 * MB), "sys/fs/cgroup/a/memory.current": str(950 * MB),
        "sys/fs/cgroup/a/memory.stat": f"anon 1\ninactive_file {10 * MB}\n",
    })
    assert headroom.room_bytes(root) == 60 * MB


def test_the_host_decides_where_no_cgroup_limits_and_nothing_readable_is_unknown(tmp_path: Path) -> None:
    assert headroom.room_bytes(layout(tmp_path / "a", proc(3_000, "0::/\n"))) == 3_000 * MB
    assert headroom.room_bytes(tmp_path / "empty") is None
    assert headroom.own_anonymous_bytes(tmp_path / "empty") is None
    # a usage that cannot be read under a limit: that cgroup says nothing, the host still does
    root = layout(tmp_path / "b", proc(5_000, "4:memory:/x\n") | {
        "sys/fs/cgroup/memory/x/memory.limit_in_bytes": str(100 * MB)})
    assert headroom.room_bytes(root) == 5_000 * MB
