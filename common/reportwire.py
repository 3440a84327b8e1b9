"""A Report and its wire message `fleet.v1.Report`, converted in one place for both sides (the
worker's codec, the coordinator's frame codec and log record codec).

Rules. The Report maps field for field; its unknowable numbers use proto3 `optional`, so None
stays None and is never written as zero. Encoding checks what the wire cannot carry (an enum
that is not its type's, an integer out of int64, a non-UTF-8 string); decoding refuses an enum
number this version does not know, never guesses. Each side refuses with an error of its own
(`report_codec(error)`: the coordinator's `LogCodecError`, the worker's `CodecError`).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from common.evidence import (
    ArtifactRef,
    ArtifactUnavailable,
    Cleanup,
    Execution,
    Report,
    Status,
    Usage,
    Verification,
)
from common.fastpickle import canonical_float, canonical_str
from common.fleetpb import common_pb2
from common.ids import Digest

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

_REPORT_ENUMS: dict[str, type] = {
    "status": Status,
    "execution": Execution,
    "verification": Verification,
    "usage": Usage,
    "cleanup": Cleanup,
}
_REPORT_OPTIONAL_INTS = ("input_tokens", "output_tokens", "cached_tokens")
_REPORT_OPTIONAL_FLOATS = ("score", "cost_usd")
_REPORT_INTS = ("started_ms", "finished_ms", "retry_after_ms")
_REPORT_STRS = ("environment_failure", "detail", "throttled")
# report_from_proto passes the fields by position, in the dataclass's order.
_REPORT_ORDER = ("status", "execution", "verification", "usage", "cleanup", "score", "environment_failure",
                 "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "started_ms", "finished_ms",
                 "detail", "artifacts", "unavailable", "throttled", "retry_after_ms")
if tuple(f.name for f in fields(Report)) != _REPORT_ORDER:
    raise ImportError("common.evidence.Report's fields moved: mend common/reportwire.py report_from_proto")


def _members(enum_type: type) -> dict[int, Any]:
    """Number -> member, for decoding many reports without the Enum call's cost."""
    return {int(m): m for m in enum_type}  # type: ignore[attr-defined]


_REPORT_MEMBERS = tuple((name, _members(enum_type)) for name, enum_type in _REPORT_ENUMS.items())
_STATUS_OF, _EXECUTION_OF, _VERIFICATION_OF, _USAGE_OF, _CLEANUP_OF = (members for _, members in _REPORT_MEMBERS)

ToProto = Callable[..., common_pb2.Report]
FromProto = Callable[[common_pb2.Report], Report]


def report_codec(error: type[ValueError]) -> tuple[ToProto, FromProto]:
    """(report_to_proto, report_from_proto), refusing with `error`."""

    def _int(value: Any, where: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"{where}: expected an integer, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise error(f"{where}: {value} is out of range [{lo}, {hi}]")
        return value

    def _str(value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise error(f"{where}: expected a string, got {type(value).__name__}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise error(f"{where}: not encodable as UTF-8 ({e.reason})") from None
        return value

    def _float(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise error(f"{where}: expected a number, got {type(value).__name__}")
        try:
            return float(value)
        except OverflowError:
            raise error(f"{where}: {value} does not fit a double") from None

    def _enum_to_proto(value: Any, enum_type: type, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"{where}: {value!r} is not a {enum_type.__name__}")
        try:
            return int(enum_type(value))
        except ValueError:
            raise error(f"{where}: {value} is not a {enum_type.__name__}") from None

    def _enum_from_proto(number: int, enum_type: type, where: str) -> Any:
        try:
            return enum_type(number)
        except ValueError:
            raise error(f"{where}: {number} is not a known {enum_type.__name__}") from None

    def report_to_proto(report: Report, out: common_pb2.Report | None = None) -> common_pb2.Report:
        """Fill `out` (or a new message) from `report`; raises error for a value the wire
        cannot carry (an enum that is not its type's, an integer out of int64, a non-UTF-8 str)."""
        if not isinstance(report, Report):
            raise error(f"report: expected a Report, got {type(report).__name__}")
        msg = common_pb2.Report() if out is None else out
        for name, enum_type in _REPORT_ENUMS.items():
            setattr(msg, name, _enum_to_proto(getattr(report, name), enum_type, f"report.{name}"))
        for name in _REPORT_OPTIONAL_FLOATS:
            value = getattr(report, name)
            if value is not None:
                setattr(msg, name, _float(value, f"report.{name}"))
        for name in _REPORT_OPTIONAL_INTS:
            value = getattr(report, name)
            if value is not None:
                setattr(msg, name, _int(value, f"report.{name}"))
        for name in _REPORT_INTS:
            setattr(msg, name, _int(getattr(report, name), f"report.{name}"))
        for name in _REPORT_STRS:
            setattr(msg, name, _str(getattr(report, name), f"report.{name}"))
        if not isinstance(report.artifacts, (tuple, list)):
            raise error("report.artifacts: expected a tuple")
        for i, a in enumerate(report.artifacts):
            where = f"report.artifacts[{i}]"
            if not isinstance(a, ArtifactRef):
                raise error(f"{where}: expected an ArtifactRef, got {type(a).__name__}")
            msg.artifacts.add(
                name=_str(a.name, f"{where}.name"),
                digest=_str(a.digest, f"{where}.digest"),
                size_bytes=_int(a.size_bytes, f"{where}.size_bytes", 0, UINT64_MAX),
            )
        if not isinstance(report.unavailable, (tuple, list)):
            raise error("report.unavailable: expected a tuple")
        for i, u in enumerate(report.unavailable):
            where = f"report.unavailable[{i}]"
            if not isinstance(u, ArtifactUnavailable):
                raise error(f"{where}: expected an ArtifactUnavailable, got {type(u).__name__}")
            msg.unavailable.add(name=_str(u.name, f"{where}.name"), reason=_str(u.reason, f"{where}.reason"))
        return msg


    def report_from_proto(msg: common_pb2.Report) -> Report:
        """The `Report` a message carries; an absent optional field is None, never zero. Raises
        error for an enum number this version does not know (the servicer maps that, like
        any ValueError from a frame, to a malformed frame). Once per report received and per
        report replayed: the fields are read in one call, in `_REPORT_ORDER`; its 0.0 and 1.0
        and its artifacts' names and digests are the shared objects (common/fastpickle.py), as a snapshot's
        load makes them."""
        if not isinstance(msg, common_pb2.Report):
            raise error(f"report: expected a fleet.v1.Report, got {type(msg).__name__}")
        try:
            status, execution, verification, usage, cleanup = (
                _STATUS_OF[msg.status], _EXECUTION_OF[msg.execution], _VERIFICATION_OF[msg.verification],
                _USAGE_OF[msg.usage], _CLEANUP_OF[msg.cleanup])
        except KeyError:
            for name, members in _REPORT_MEMBERS:
                if getattr(msg, name) not in members:
                    _enum_from_proto(getattr(msg, name), _REPORT_ENUMS[name], f"report.{name}")
            raise
        has = msg.HasField
        artifacts, unavailable = msg.artifacts, msg.unavailable
        return Report(
            status, execution, verification, usage, cleanup,
            canonical_float(msg.score) if has("score") else None,
            msg.environment_failure,
            msg.input_tokens if has("input_tokens") else None,
            msg.output_tokens if has("output_tokens") else None,
            msg.cached_tokens if has("cached_tokens") else None,
            canonical_float(msg.cost_usd) if has("cost_usd") else None,
            msg.started_ms, msg.finished_ms, msg.detail,
            tuple(ArtifactRef(name=canonical_str(a.name), digest=Digest(a.digest), size_bytes=a.size_bytes)
                  for a in artifacts)
            if artifacts else (),
            tuple(ArtifactUnavailable(name=u.name, reason=u.reason) for u in unavailable) if unavailable else (),
            msg.throttled, msg.retry_after_ms)

    return report_to_proto, report_from_proto
