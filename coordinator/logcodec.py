"""The write-ahead log record codec: durable core commands <-> `fleet.v1.LogRecord` bytes.

Rules. Every durable command class of coordinator/core/commands.py (every class of
`Command` not in `SOFT_COMMANDS`) has a message of the same name nested in `LogRecord`,
holding exactly the class's fields except `now_ms`, which travels once on the record; the
oneof field is the class name in snake case. The mapping is driven by that table and the
message descriptors, so a field the log has no place for is refused loudly, never dropped.
The spec travels as `spec.canonical` and the policy as `policy.canonical()`, both checked
on encode to parse back to an equal object, since a record that cannot be replayed must
never reach the disk. `Report` maps field for field, by common/reportwire.py (the one
conversion both sides use). Decoding is strict: bytes that do not parse, a record with
no command, an enum number this version does not know, or a field this version does not
know (a record written by a newer fleet) is refused. Every refusal, on either side, is a
`LogCodecError` (a `ValueError`); nothing else escapes.
"""
from __future__ import annotations

import re
import typing
from dataclasses import fields, is_dataclass
from typing import Any, Callable

from google.protobuf import message as pb_message
from google.protobuf import unknown_fields
from google.protobuf.descriptor import FieldDescriptor

from common.fleetpb import common_pb2, log_pb2
from common.policy import Policy, parse_canonical_policy
from common.reportwire import report_codec
from common.spec import ExperimentSpec, SpecError, parse_spec_text
from coordinator.core import commands

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


class LogCodecError(ValueError):
    """A command that cannot be written to the log, or bytes that are not a valid record."""


# ---- scalar checks -------------------------------------------------------------------------

def _int(value: Any, where: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogCodecError(f"{where}: expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise LogCodecError(f"{where}: {value} is out of range [{lo}, {hi}]")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise LogCodecError(f"{where}: expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LogCodecError(f"{where}: not encodable as UTF-8 ({e.reason})") from None
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise LogCodecError(f"{where}: expected a bool, got {type(value).__name__}")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LogCodecError(f"{where}: expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise LogCodecError(f"{where}: {value} does not fit a double") from None


def _strs(value: Any, where: str) -> list[str]:
    if not isinstance(value, (tuple, list)):
        raise LogCodecError(f"{where}: expected a tuple of strings, got {type(value).__name__}")
    return [_str(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _manifest(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, (tuple, list)):
        raise LogCodecError(f"{where}: expected (key, value) pairs, got {type(value).__name__}")
    out: dict[str, str] = {}
    for i, pair in enumerate(value):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise LogCodecError(f"{where}[{i}]: expected a (key, value) pair")
        out[_str(pair[0], f"{where}[{i}].key")] = _str(pair[1], f"{where}[{i}].value")
    if len(out) != len(value):
        raise LogCodecError(f"{where}: a key appears twice")
    return out


# ---- Report: common/reportwire.py, refusing with LogCodecError -------------------------------

report_to_proto, report_from_proto = report_codec(LogCodecError)


# ---- spec and policy ------------------------------------------------------------------------

def _spec_to_text(spec: Any, where: str) -> str:
    if not isinstance(spec, ExperimentSpec):
        raise LogCodecError(f"{where}: expected an ExperimentSpec, got {type(spec).__name__}")
    text = _str(spec.canonical, where)
    if _spec_from_text(text, where) != spec:
        raise LogCodecError(f"{where}: the spec does not parse back from its canonical text")
    return text


def _spec_from_text(text: str, where: str) -> ExperimentSpec:
    try:
        return parse_spec_text(text)
    except (SpecError, ValueError, TypeError, RecursionError) as e:
        # SpecError is the parser's word; the others guard the promise that a corrupt
        # record yields LogCodecError even if it trips the parser somewhere unforeseen.
        raise LogCodecError(f"{where}: the spec does not parse: {e}") from None


def _policy_to_text(policy: Any, where: str) -> str:
    if not isinstance(policy, Policy):
        raise LogCodecError(f"{where}: expected a Policy, got {type(policy).__name__}")
    try:
        text = policy.canonical()
    except (TypeError, ValueError) as e:
        raise LogCodecError(f"{where}: {e}") from None
    if _policy_from_text(text, where) != policy:
        raise LogCodecError(f"{where}: the policy does not parse back from its canonical text")
    return text


def _policy_from_text(text: str, where: str) -> Policy:
    try:
        return parse_canonical_policy(text)
    except (SpecError, ValueError, TypeError, RecursionError) as e:
        raise LogCodecError(f"{where}: the policy does not parse: {e}") from None


def _order(value: Any, where: str) -> list[int]:
    if value is None:
        raise LogCodecError(f"{where}: an unresolved dispatch order is never logged (step resolves it)")
    if not isinstance(value, (tuple, list)):
        raise LogCodecError(f"{where}: expected a tuple of group indexes, got {type(value).__name__}")
    return [_int(v, f"{where}[{i}]", 0, INT64_MAX) for i, v in enumerate(value)]


# ---- the command table ----------------------------------------------------------------------

Encoder = Callable[[Any, Any, str], None]  # (message, value, where) -> None: sets the field
Decoder = Callable[[Any, str], Any]  # (message, where) -> the command field's value


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def durable_command_classes() -> tuple[type, ...]:
    """Every durable command class, in the order of the `Command` union."""
    return tuple(c for c in typing.get_args(commands.Command) if c not in commands.SOFT_COMMANDS)


def _field_codec(cls: type, fd: FieldDescriptor) -> tuple[Encoder, Decoder]:
    name = fd.name
    if cls is commands.RunSubmitted and name == "spec":
        return (lambda m, v, w: setattr(m, name, _spec_to_text(v, w)),
                lambda m, w: _spec_from_text(getattr(m, name), w))
    if cls is commands.RunSubmitted and name == "policy":
        return (lambda m, v, w: setattr(m, name, _policy_to_text(v, w)),
                lambda m, w: _policy_from_text(getattr(m, name), w))
    if fd.message_type is not None and fd.message_type.full_name == "fleet.v1.Report" and not fd.is_repeated:
        return (lambda m, v, w: report_to_proto(v, getattr(m, name)),
                lambda m, w: report_from_proto(getattr(m, name)))
    if cls is commands.RunSubmitted and name == "order":
        return (lambda m, v, w: getattr(m, name).extend(_order(v, w)),
                lambda m, w: tuple(getattr(m, name)))
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        # map<string, string>: a manifest, kept in the core as (key, value) pairs sorted by key.
        return (lambda m, v, w: getattr(m, name).update(_manifest(v, w)),
                lambda m, w: tuple(sorted(getattr(m, name).items())))
    if fd.type == FieldDescriptor.TYPE_STRING and fd.is_repeated:
        return (lambda m, v, w: getattr(m, name).extend(_strs(v, w)),
                lambda m, w: tuple(getattr(m, name)))
    if fd.type == FieldDescriptor.TYPE_STRING:
        return (lambda m, v, w: setattr(m, name, _str(v, w)),
                lambda m, w: getattr(m, name))
    if fd.type == FieldDescriptor.TYPE_INT64 and not fd.is_repeated:
        return (lambda m, v, w: setattr(m, name, _int(v, w)),
                lambda m, w: getattr(m, name))
    if fd.type == FieldDescriptor.TYPE_BOOL and not fd.is_repeated:
        return (lambda m, v, w: setattr(m, name, _bool(v, w)),
                lambda m, w: getattr(m, name))
    if fd.type == FieldDescriptor.TYPE_DOUBLE and fd.has_presence and not fd.is_repeated:
        # optional double: None when absent, never zero.
        return (lambda m, v, w: None if v is None else setattr(m, name, _float(v, w)),
                lambda m, w: getattr(m, name) if m.HasField(name) else None)
    # The log schema uses only the kinds above; a new kind needs a codec here first.
    raise AssertionError(f"logcodec has no mapping for {fd.full_name} (type {fd.type})")


class _CommandCodec:
    __slots__ = ("cls", "oneof", "message_type", "fields")

    def __init__(self, cls: type) -> None:
        assert is_dataclass(cls), cls
        self.cls = cls
        self.oneof = _snake(cls.__name__)
        self.message_type = getattr(log_pb2.LogRecord, cls.__name__, None)
        self.fields: dict[str, tuple[Encoder, Decoder]] = {}
        if self.message_type is None:
            return  # encoding refuses the class, by name (see encode_record)
        for fd in self.message_type.DESCRIPTOR.fields:
            self.fields[fd.name] = _field_codec(cls, fd)


_BY_CLASS: dict[type, _CommandCodec] = {c: _CommandCodec(c) for c in durable_command_classes()}
_BY_ONEOF: dict[str, _CommandCodec] = {c.oneof: c for c in _BY_CLASS.values() if c.message_type is not None}


def encode_record(index: int, cmd: Any) -> bytes:
    """The serialized `LogRecord` of one applied durable command at log position `index`."""
    codec = _BY_CLASS.get(type(cmd))
    if codec is None:
        raise LogCodecError(f"{type(cmd).__name__} is not a durable command; it has no log record")
    name = codec.cls.__name__
    if codec.message_type is None:
        raise LogCodecError(f"{name} has no message in fleet.v1.LogRecord (protos/fleet/v1/log.proto)")
    record = log_pb2.LogRecord(
        index=_int(index, "index", 0, UINT64_MAX),
        now_ms=_int(cmd.now_ms, f"{name}.now_ms"),
    )
    body = getattr(record, codec.oneof)
    body.SetInParent()  # a command without fields still selects its oneof member
    for f in fields(codec.cls):
        if f.name == "now_ms":
            continue
        pair = codec.fields.get(f.name)
        where = f"{name}.{f.name}"
        if pair is None:
            raise LogCodecError(f"{where} has no field in fleet.v1.LogRecord.{name}; it would be lost")
        try:
            pair[0](body, getattr(cmd, f.name), where)
        except (TypeError, ValueError) as e:  # protobuf's own refusal of a value
            if isinstance(e, LogCodecError):
                raise
            raise LogCodecError(f"{where}: {e}") from None
    return record.SerializeToString()


def encode_cell_reported(index: int, cmd: Any, wire_report: common_pb2.Report) -> bytes:
    """`encode_record(index, cmd)` for a `CellReported` whose report was decoded from
    `wire_report` (the worker's message: `report_from_proto(wire_report) == cmd.report`).

    The report is copied message to message (in C) instead of being rebuilt field by field
    from the Python object, which was a quarter of the actor's time per report. Replay stays
    exact: the record holds the very fields the report was decoded from, and decoding it gives
    `cmd` again. Fields unknown to this version (a newer worker's) are dropped, as decoding the
    frame dropped them; the bytes are those `encode_record` writes (a test compares them)."""
    if type(cmd) is not commands.CellReported:
        raise LogCodecError(f"encode_cell_reported takes a CellReported, not {type(cmd).__name__}")
    if not isinstance(wire_report, common_pb2.Report):
        raise LogCodecError(f"CellReported.report: expected a fleet.v1.Report, got {type(wire_report).__name__}")
    try:
        record = log_pb2.LogRecord(index=index, now_ms=cmd.now_ms)
        body = record.cell_reported
        body.worker_id = cmd.worker_id
        body.attempt_id = cmd.attempt_id
        body.assignment_id = cmd.assignment_id
        body.generation = cmd.generation
        body.report.CopyFrom(wire_report)
    except (TypeError, ValueError) as e:  # protobuf's own refusal of a value, as encode_record
        raise LogCodecError(f"CellReported: {e}") from None
    body.report.DiscardUnknownFields()
    return record.SerializeToString()


def _unknown_field_path(msg: pb_message.Message, path: str) -> str:
    """The path of the first message in `msg` holding fields this schema does not know."""
    if len(unknown_fields.UnknownFieldSet(msg)):
        return path
    for fd, value in msg.ListFields():
        if fd.message_type is None or fd.message_type.GetOptions().map_entry:
            continue  # scalars, and map<string, string> entries (scalars both)
        children = value if fd.is_repeated else [value]
        for i, child in enumerate(children):
            found = _unknown_field_path(child, f"{path}.{fd.name}" + (f"[{i}]" if fd.is_repeated else ""))
            if found:
                return found
    return ""


def decode_record(data: bytes) -> tuple[int, Any]:
    """The log index and the durable command that `data` (from `encode_record`) holds."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LogCodecError(f"a log record is bytes, not {type(data).__name__}")
    try:
        record = log_pb2.LogRecord.FromString(bytes(data))
    except pb_message.DecodeError as e:
        raise LogCodecError(f"not a log record ({len(data)} bytes): {e}") from None
    # Unknown fields anywhere in the record: dropping them (in C, recursively) changes its
    # size. Only then is the tree walked, on a fresh parse, for the path to name.
    size = record.ByteSize()
    record.DiscardUnknownFields()
    unknown = _unknown_field_path(log_pb2.LogRecord.FromString(bytes(data)), "record") if record.ByteSize() != size else ""
    if unknown:
        raise LogCodecError(
            f"record {record.index}: {unknown} has fields this version does not know "
            "(written by a newer fleet?)"
        )
    oneof = record.WhichOneof("command")
    if oneof is None:
        raise LogCodecError(f"record {record.index} holds no command")
    codec = _BY_ONEOF.get(oneof)
    if codec is None:  # the schema knows it but the command classes do not: a retired command
        raise LogCodecError(f"record {record.index}: command {oneof!r} is not a durable command of this version")
    body = getattr(record, oneof)
    name = codec.cls.__name__
    values: dict[str, Any] = {"now_ms": record.now_ms}
    for field_name, (_, decode) in codec.fields.items():
        values[field_name] = decode(body, f"record {record.index}: {name}.{field_name}")
    try:
        return record.index, codec.cls(**values)
    except TypeError as e:  # a message field the command class has not (or no longer) got
        raise LogCodecError(f"record {record.index}: {name} does not take these fields: {e}") from None

