"""sd_notify: tell systemd (or anything listening on `$NOTIFY_SOCKET`) how a daemon is doing.

Rules. The protocol is one datagram per message on an AF_UNIX socket, newline-separated
`KEY=VALUE` lines (READY=1, STATUS=..., STOPPING=1, WATCHDOG=1). The address is
a filesystem path, or an abstract socket written with a leading `@`. The entry point reads
`NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from its environment snapshot
(`settings_from_environ`) and passes them in; nothing here reads `os.environ`. Without a
socket every call is a no-op. Notification is best effort: a send that fails (no listener,
a full queue) is counted and never raised, because a daemon must not stop serving for the
sake of its supervisor; systemd's watchdog notices a daemon that stops pinging anyway.
The watchdog is pinged at half of `WATCHDOG_USEC`, as sd_watchdog_enabled(3) advises.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

# A STATUS= line longer than this is cut: systemctl status shows one line anyway.
STATUS_CHARS_MAX = 200


@dataclass(frozen=True, slots=True)
class NotifySettings:
    socket: str = ""  # $NOTIFY_SOCKET: a path, or "@name" for the abstract namespace; "" off
    watchdog_usec: int = 0  # $WATCHDOG_USEC when it is meant for this process; 0 off


def settings_from_environ(environ: Mapping[str, str], pid: int) -> NotifySettings:
    """What systemd passed to process `pid`. A WATCHDOG_PID naming another process means the
    watchdog is not ours (it was inherited), as sd_watchdog_enabled(3) says."""
    address = environ.get("NOTIFY_SOCKET", "")
    if address and not address.startswith(("/", "@")):
        address = ""  # vsock: and other transports are not spoken here
    usec = 0
    text = environ.get("WATCHDOG_USEC", "")
    if text.isdigit() and int(text) > 0:
        owner = environ.get("WATCHDOG_PID", "")
        if not owner or (owner.isdigit() and int(owner) == pid):
            usec = int(text)
    return NotifySettings(address, usec)


def _sockaddr(address: str) -> str | bytes:
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= STATUS_CHARS_MAX else line[: STATUS_CHARS_MAX - 1] + "…"


class Notifier:
    """A connectionless sender of sd_notify messages; thread-safe (one sendto per message)."""

    def __init__(self, settings: NotifySettings) -> None:
        self.settings = settings
        self.sent = 0
        self.failed = 0
        self.last_error = ""
        self._sock: socket.socket | None = None
        if settings.socket:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._address = _sockaddr(settings.socket)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send WATCHDOG=1 (half the timeout), or None when no watchdog is set."""
        if self._sock is None or self.settings.watchdog_usec <= 0:
            return None
        return self.settings.watchdog_usec / 2 / 1_000_000

    def notify(self, **fields: str | int) -> bool:
        """Send one message of KEY=VALUE lines; False when it could not be sent (or no socket)."""
        if self._sock is None:
            return False
        message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        try:
            self._sock.sendto(message, socket.MSG_DONTWAIT, self._address)
        except OSError as e:
            self.failed += 1
            self.last_error = e.strerror or str(e)
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "") -> bool:
        fields: dict[str, str | int] = {"READY": 1, "MAINPID": os.getpid()}
        if status:
            fields["STATUS"] = _one_line(status)
        return self.notify(**fields)

    def status(self, text: str) -> bool:
        return self.notify(STATUS=_one_line(text))

    def stopping(self, status: str = "") -> bool:
        return self.notify(STOPPING=1, **({"STATUS": _one_line(status)} if status else {}))

    def watchdog(self, status: str = "") -> bool:
        return self.notify(WATCHDOG=1, **({"STATUS": _one_line(status)} if status else {}))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
