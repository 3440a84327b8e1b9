"""Settings tables and TOML configuration files shared by both daemons.

Rules. Each daemon declares its settings once, as a tuple of `Setting`: the TOML key, its
type, its default and one sentence of meaning. From that one table come the command-line
flags (`--key-with-dashes`), the checks of a configuration file, `--print-config` and the
table in docs/configuration.md, so that the four cannot drift apart. Precedence, lowest
first: the built-in default, a default the entry point derives from the environment (for
example systemd's `$STATE_DIRECTORY`), the file, the flags. A file is flat (`key = value`
at the top level); an unknown key, a value of the wrong type or out of range is refused
with the file, the line where it can be found and the reason (`ConfigFileError`), never
ignored. A relative path in a file is taken relative to the file's own directory. Nothing
here reads `os.environ`: the entry point passes in what it took from the environment.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRING = "string"
INTEGER = "integer"
BOOLEAN = "boolean"
PATH = "path"
KINDS = (STRING, INTEGER, BOOLEAN, PATH)

_TOML_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


class ConfigFileError(ValueError):
    """A configuration file (or a flag) the operator must fix: where, which key, and why."""

    def __init__(self, reason: str, *, file: Path | str | None = None, line: int | None = None,
                 key: str | None = None, flag: str | None = None) -> None:
        self.file = None if file is None else str(file)
        self.line = line
        self.key = key
        self.flag = flag
        self.reason = reason
        where = self.file or ""
        if where and line is not None:
            where += f":{line}"
        what = f"flag {flag}" if flag else f"key {key!r}" if key else ""
        parts = [p for p in (where, what) if p]
        super().__init__(": ".join(parts + [reason]))


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: a TOML key, a flag, a line of documentation."""

    key: str  # snake_case; the flag is --key-with-dashes
    kind: str  # STRING, INTEGER, BOOLEAN or PATH
    help: str  # one sentence: what it means
    default: Any = None  # None: unset (what unset means is in `default_text` and `help`)
    default_text: str = ""  # how the docs show the default when it is derived, not a constant
    required: bool = False  # must come from the file, a flag or the environment
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    metavar: str | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert re.fullmatch(r"[a-z][a-z0-9_]*", self.key), self.key

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    def shown_default(self) -> str:
        if self.default_text:
            return self.default_text
        if self.default is None:
            return "required" if self.required else "unset"
        return toml_value(self.default)

    def check(self, value: Any) -> Any:
        """The value, converted (a path to `Path`); ValueError with the reason when it is not
        of this setting's type, range or choices. Booleans are not integers."""
        kind = self.kind
        if kind == BOOLEAN:
            if not isinstance(value, bool):
                raise ValueError(f"must be true or false, got {_show(value)}")
        elif kind == INTEGER:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"must be an integer, got {_show(value)}")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"must be at least {self.minimum}, got {value}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"must be at most {self.maximum}, got {value}")
        else:
            if not isinstance(value, str):
                raise ValueError(f"must be a string, got {_show(value)}")
            if "\0" in value:
                raise ValueError("must not contain a NUL character")
            if kind == PATH:
                if not value:
                    raise ValueError("must be a path, got an empty string")
                return Path(value)
        if self.choices and value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}; got {_show(value)}")
        return value


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return f"{type(value).__name__} {value!r}"


# ---- flags -------------------------------------------------------------------------------------

def add_flags(parser: argparse.ArgumentParser, settings: Sequence[Setting]) -> None:
    """One flag per setting; every flag's default is None so that `flags_layer` tells a flag
    given from one left out (a flag overrides the file only when it is given)."""
    for s in settings:
        shown = s.shown_default()
        text = f"{s.help} (default: {shown})" if shown not in ("unset", "required") else s.help
        if s.kind == BOOLEAN:
            parser.add_argument(s.flag, dest=s.key, action=argparse.BooleanOptionalAction, default=None, help=text)
            continue
        parser.add_argument(s.flag, dest=s.key, default=None, type=_flag_type(s), help=text,
                            metavar=s.metavar or s.key.upper(), choices=s.choices or None)


def _flag_type(s: Setting) -> Any:
    def convert(text: str) -> Any:
        if s.kind == INTEGER:
            try:
                value: Any = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        else:
            value = text
        try:
            return s.check(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = s.kind  # argparse names the type in its message
    return convert


# ---- files -------------------------------------------------------------------------------------

def load_file(path: Path, settings: Sequence[Setting], *, program: str) -> Layer:
    """The settings of a TOML file, checked: unknown keys, tables, wrong types and ranges are
    refused with the file, the line and the reason. Relative paths are made relative to the
    file's directory."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigFileError(f"cannot read the configuration file: {e.strerror or e}", file=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigFileError(f"not UTF-8 text (byte {e.start})", file=path, line=line) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        m = _TOML_LINE.search(message)
        line = int(m.group(1)) if m else None
        reason = _TOML_LINE.sub("", message).strip()
        if m:
            reason += f" (column {m.group(2)})"
        raise ConfigFileError(f"TOML syntax error: {reason}", file=path, line=line) from None
    by_key = {s.key: s for s in settings}
    values: dict[str, Any] = {}
    lines: dict[str, int | None] = {}
    for key, value in data.items():
        s = by_key.get(key)
        line = lines[key] = key_line(text, key)
        if s is None:
            close = difflib.get_close_matches(key, list(by_key), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = "table" if isinstance(value, dict) else "key"
            raise ConfigFileError(f"unknown {what}: {program} has no setting {key!r}{hint}; "
                                  "see docs/configuration.md", file=path, line=line, key=key)
        try:
            checked = s.check(value)
        except ValueError as e:
            raise ConfigFileError(str(e), file=path, line=line, key=key) from None
        if s.kind == PATH and not checked.is_absolute():
            checked = (path.parent / checked).absolute()
        values[key] = checked
    return Layer(str(path), values, lines, is_file=True)


def key_line(text: str, key: str) -> int | None:
    """The line where `key` is set at the top level of a TOML text, when it can be found by
    reading (tomllib keeps no positions); None otherwise."""
    pattern = re.compile(r"^\s*(?:" + re.escape(key) + r"|\"" + re.escape(key) + r"\"|'" + re.escape(key)
                         + r"')\s*[=.]|^\s*\[\[?\s*" + re.escape(key) + r"\s*[\].]")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


# ---- layers ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Layer:
    """Values from one place: "environment", "flags", or a file (its path, with each key's line)."""

    name: str
    values: Mapping[str, Any]
    lines: Mapping[str, int | None] = field(default_factory=dict)
    is_file: bool = False


def flags_layer(args: argparse.Namespace, settings: Sequence[Setting]) -> Layer:
    """The settings given as flags (a flag left out is absent, so the file's value stands)."""
    return Layer("flags", {s.key: getattr(args, s.key) for s in settings if getattr(args, s.key, None) is not None})


@dataclass(frozen=True, slots=True)
class Resolved:
    """Every setting's effective value and the layer it came from (None: the default)."""

    settings: tuple[Setting, ...]
    values: Mapping[str, Any]
    origin: Mapping[str, Layer | None]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def source(self, key: str) -> str:
        layer = self.origin[key]
        if layer is None:
            return "default"
        if layer.name == "flags":
            return "flag " + _setting(self.settings, key).flag
        if layer.is_file:
            line = layer.lines.get(key)
            return f"{layer.name}:{line}" if line else layer.name
        return layer.name

    def error(self, key: str, reason: str) -> ConfigFileError:
        """A refusal of `key`'s effective value that names where the value came from."""
        layer = self.origin[key]
        s = _setting(self.settings, key)
        if layer is not None and layer.is_file:
            return ConfigFileError(reason, file=layer.name, line=layer.lines.get(key), key=key)
        if layer is not None and layer.name == "flags":
            return ConfigFileError(reason, key=key, flag=s.flag)
        where = "" if layer is None else f" (from the {layer.name})"
        return ConfigFileError(f"{reason}{where}", key=key)


def _setting(settings: Sequence[Setting], key: str) -> Setting:
    for s in settings:
        if s.key == key:
            return s
    raise KeyError(key)


def resolve(settings: Sequence[Setting], *layers: Layer) -> Resolved:
    """Defaults, overridden by each layer in order (lowest first); a required setting that no
    layer gives is refused, naming its key and its flag."""
    values: dict[str, Any] = {s.key: s.default for s in settings}
    origin: dict[str, Layer | None] = {s.key: None for s in settings}
    for layer in layers:
        for key, value in layer.values.items():
            assert key in values, f"{key} is not a setting"
            if value is not None:
                values[key] = value
                origin[key] = layer
    missing = [s for s in settings if s.required and values[s.key] is None]
    if missing:
        names = ", ".join(f"{s.key} ({s.flag})" for s in missing)
        raise ConfigFileError(f"missing required setting{'s' if len(missing) > 1 else ''}: {names}; "
                              "give it in the configuration file (--config) or as a flag")
    return Resolved(tuple(settings), values, origin)


# ---- printing ----------------------------------------------------------------------------------

def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string: the same escapes, \uXXXX included.
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"no TOML form for {type(value).__name__}")


def render_toml(settings: Sequence[Setting], values: Mapping[str, Any], *, header: str,
                notes: Mapping[str, str] | None = None) -> str:
    """The effective configuration as a TOML file that loads back to the same values; an unset
    setting is a comment saying what unset means. `values` must hold no secret: settings name
    files, never their contents."""
    notes = notes or {}
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for s in settings:
        value = values.get(s.key)
        note = notes.get(s.key, "")
        if value is None:
            meaning = note or s.shown_default()
            lines.append(f"# {s.key} is unset" + (f": {meaning}" if meaning not in ("unset", "required") else ""))
        else:
            lines.append(f"{s.key} = {toml_value(value)}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"


def markdown_table(settings: Sequence[Setting]) -> str:
    """The docs table: one row per key, its type, default and meaning."""
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for s in settings:
        kind = s.kind + (f" ({' / '.join(s.choices)})" if s.choices else "")
        if s.kind == INTEGER and (s.minimum is not None or s.maximum is not None):
            lo = "" if s.minimum is None else str(s.minimum)
            hi = "" if s.maximum is None else str(s.maximum)
            kind += f", {lo}..{hi}"
        default = s.shown_default()
        default = f"`{default}`" if s.default is not None and not s.default_text else default
        meaning = s.help.replace("|", "\\|")
        rows.append(f"| `{s.key}` | {kind} | {default} | {meaning} |")
    return "\n".join(rows) + "\n"
