"""Lower-case names of the protocol's enums, as fleetctl prints them and its JSON carries them."""
from __future__ import annotations

from common.fleetpb import admin_pb2, common_pb2

RUN_STATE_NAMES = {v: k.removeprefix("RUN_STATE_").lower() for k, v in admin_pb2.RunState.items()}
STATUS_NAMES = {v: k.removeprefix("STATUS_").lower() for k, v in common_pb2.Status.items()}
USAGE_NAMES = {v: k.removeprefix("USAGE_").lower() for k, v in common_pb2.Usage.items()}
OUTCOME_NAMES = {v: k.removeprefix("ACK_OUTCOME_").lower() for k, v in common_pb2.AckOutcome.items()}
REJECTION_NAMES = {v: k.removeprefix("REJECTION_REASON_") for k, v in common_pb2.RejectionReason.items()}

