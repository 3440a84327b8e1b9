"""sd_notify sends systemd's messages to the socket its environment names, and is a harmless
no-op otherwise: checked against real AF_UNIX datagram sockets (a path in a temporary dir,
and an abstract name), reading back exactly what was sent."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.notify import STATUS_CHARS_MAX, Notifier, NotifySettings, settings_from_environ


@pytest.fixture
def listener() -> Iterator[tuple[str, socket.socket]]:
    # A short dir of its own: AF_UNIX paths are limited to 108 bytes.
    d = tempfile.mkdtemp(prefix="fn-", dir="/tmp")
    path = os.path.join(d, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    try:
        yield path, sock
    finally:
        sock.close()
        shutil.rmtree(d, ignore_errors=True)


def fields(datagram: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in datagram.decode().split("\n"))


def test_each_message_arrives_as_one_datagram_of_key_value_lines(listener) -> None:
    path, sock = listener
    n = Notifier(NotifySettings(path, 0))
    assert n.enabled and n.watchdog_interval_s is None
    assert n.ready("serving 0 runs")
    got = fields(sock.recv(4096))
    assert got == {"READY": "1", "MAINPID": str(os.getpid()), "STATUS": "serving 0 runs"}
    assert n.status("connected, 1/2 slots busy, outbox 0")
    assert fields(sock.recv(4096)) == {"STATUS": "connected, 1/2 slots busy, outbox 0"}
    assert n.watchdog()
    assert fields(sock.recv(4096)) == {"WATCHDOG": "1"}
    assert n.stopping("draining")
    assert fields(sock.recv(4096)) == {"STOPPING": "1", "STATUS": "draining"}
    assert n.sent == 4 and n.failed == 0
    n.close()
    assert not n.enabled and not n.status("after close")


def test_a_status_is_one_bounded_line() -> None:
    d = tempfile.mkdtemp(prefix="fn-", dir="/tmp")
    try:
        path = os.path.join(d, "n")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(2)
            n = Notifier(NotifySettings(path))
            n.status("two\nlines\n" + "x" * 1000)
            status = fields(sock.recv(8192))["STATUS"]
            assert "\n" not in status and status.startswith("two lines x") and len(status) == STATUS_CHARS_MAX
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_an_abstract_socket_is_written_with_a_leading_at() -> None:
    name = f"fleet-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(2)
        n = Notifier(NotifySettings("@" + name))
        assert n.ready()
        assert fields(sock.recv(4096))["READY"] == "1"


def test_without_a_socket_every_call_is_a_no_op() -> None:
    n = Notifier(NotifySettings())
    assert not n.enabled and n.watchdog_interval_s is None
    assert not n.ready("x") and not n.status("x") and not n.watchdog() and not n.stopping()
    assert n.sent == 0 and n.failed == 0


def test_a_send_nobody_receives_is_counted_never_raised(tmp_path: Path) -> None:
    n = Notifier(NotifySettings(str(tmp_path / "absent"), 1_000_000))
    assert not n.ready() and not n.watchdog()
    assert n.failed == 2 and n.last_error


def test_the_environment_decides_socket_and_watchdog() -> None:
    pid = 4242
    assert settings_from_environ({}, pid) == NotifySettings("", 0)
    env = {"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000"}
    assert settings_from_environ(env, pid) == NotifySettings("/run/systemd/notify", 30_000_000)
    assert settings_from_environ({**env, "WATCHDOG_PID": str(pid)}, pid).watchdog_usec == 30_000_000
    # A watchdog meant for another process (inherited) is not ours.
    assert settings_from_environ({**env, "WATCHDOG_PID": "1"}, pid).watchdog_usec == 0
    assert settings_from_environ({**env, "WATCHDOG_USEC": "soon"}, pid).watchdog_usec == 0
    assert settings_from_environ({"NOTIFY_SOCKET": "@abstract"}, pid).socket == "@abstract"
    assert settings_from_environ({"NOTIFY_SOCKET": "vsock:2:1234"}, pid).socket == ""  # not spoken here
    n = Notifier(settings_from_environ({**env, "NOTIFY_SOCKET": "@x"}, pid))
    assert n.watchdog_interval_s == pytest.approx(15.0), "pinged at half the timeout"
    n.close()
