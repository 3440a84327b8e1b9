"""The Admin API client every command uses, and CtlError: the one error fleetctl prints as
a single line on stderr (exit 1; UsageError, a command line it cannot act on, exit 2)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from common import limits
from common.fleetpb import admin_pb2_grpc

CALL_TIMEOUT_S = 30


class CtlError(Exception):
    exit_code = 1


class UsageError(CtlError):
    """Arguments that parse but do not make a command (argparse's own errors exit 2 too)."""

    exit_code = 2


def channel(address: str, tls_ca: Path | None, tls_cert: Path | None = None,
            tls_key: Path | None = None) -> grpc.Channel:
    # The coordinator's receive limit (coordinator/main.py grpc_options): a spec up to
    # SPEC_BYTES_MAX submits. Its answers fit MESSAGE_BYTES_MAX; an older coordinator's
    # unpaged results could be larger, so the receive side is as generous.
    options = [("grpc.max_send_message_length", limits.ADMIN_REQUEST_BYTES_MAX),
               ("grpc.max_receive_message_length", limits.ADMIN_REQUEST_BYTES_MAX)]
    if tls_ca is not None:
        creds = grpc.ssl_channel_credentials(tls_ca.read_bytes(), tls_key.read_bytes() if tls_key else None,
                                             tls_cert.read_bytes() if tls_cert else None)
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


class Admin:
    def __init__(self, address: str, token: str, tls_ca: Path | None = None, tls_cert: Path | None = None,
                 tls_key: Path | None = None) -> None:
        self.channel = channel(address, tls_ca, tls_cert, tls_key)
        self.stub = admin_pb2_grpc.AdminStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.address = address

    def call(self, name: str, request: Any, timeout: float | None = CALL_TIMEOUT_S) -> Any:
        try:
            return getattr(self.stub, name)(request, metadata=self.metadata, timeout=timeout)
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                raise CtlError(f"coordinator at {self.address} is unreachable: {e.details()}") from None
            raise CtlError(f"{e.details()} ({code.name})") from None

    def close(self) -> None:
        self.channel.close()
