"""Pure planning for the namespace environment (stdlib only, no I/O beyond what is passed in).

Two things are decided here. First, what a task's Dockerfile asks for that can be honoured
over the host system: FROM names an image we do not have, so the host system is the image;
WORKDIR, ENV, COPY/ADD of files from the build context and RUN are replayed in the
namespace; instructions that only describe the container (CMD, EXPOSE, LABEL, ...) are
ignored; what cannot be honoured (a multi-stage COPY --from, ADD of a URL, a compose file)
raises `Unsupported`, a deterministic defect of the task for this environment. Second, the
holder's mount plan: which top-level host directories are overlaid (copy-on-write, the
default), bound read-only, or replaced by private directories.
"""
from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import Iterable

# Top-level names that are never taken from the host as they are.
PRIVATE_TOPS = ("tmp", "root")  # fresh, private directories (TMPDIR, root's HOME)
SPECIAL_TOPS = ("proc", "dev", "sys")  # a new proc for the PID namespace; dev and sys bound
IGNORED_INSTRUCTIONS = {"FROM", "CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "VOLUME",
                        "STOPSIGNAL", "HEALTHCHECK", "SHELL", "ONBUILD", "ARG", "USER"}
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
HOST_MODES = ("overlay", "readonly")


class Unsupported(ValueError):
    """The task asks for something this environment cannot provide (deterministic)."""


@dataclass(frozen=True, slots=True)
class Step:
    op: str  # WORKDIR, ENV, COPY, RUN
    args: tuple[str, ...] = ()  # WORKDIR: (path,); COPY: (*sources, dest); RUN: (command,)
    env: tuple[tuple[str, str], ...] = ()  # ENV
    line: int = 0


@dataclass(slots=True)
class Build:
    steps: list[Step] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # "LINE: INSTRUCTION" notes for the log

    @property
    def workdir(self) -> str | None:
        """The image's last WORKDIR (Docker's default cwd), or None."""
        current: str | None = None
        for step in self.steps:
            if step.op == "WORKDIR":
                current = join_workdir(current, step.args[0])
        return current


def join_workdir(current: str | None, path: str) -> str:
    return posixpath.normpath(posixpath.join(current or "/", path))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Instructions with their first line number: comments dropped, continuations joined."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = number
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        out.append((start, " ".join(part.strip() for part in buf).strip()))
        buf = []
    if buf:
        out.append((start, " ".join(part.strip() for part in buf).strip()))
    return out


def _json_or_words(rest: str) -> list[str]:
    rest = rest.strip()
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return shlex.split(rest)


def _env_pairs(rest: str, line: int) -> tuple[tuple[str, str], ...]:
    words = shlex.split(rest)
    if not words:
        raise Unsupported(f"Dockerfile line {line}: ENV without a value")
    if "=" not in words[0]:
        return ((words[0], " ".join(words[1:])),)  # ENV KEY value with spaces
    pairs = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise Unsupported(f"Dockerfile line {line}: cannot read ENV {word!r}")
        pairs.append((key, value))
    return tuple(pairs)


def parse_dockerfile(text: str) -> Build:
    build = Build()
    for line, instruction in _logical_lines(text):
        op, _, rest = instruction.partition(" ")
        op = op.upper()
        if op in IGNORED_INSTRUCTIONS:
            if op not in ("FROM", "CMD", "ENTRYPOINT", "LABEL", "MAINTAINER", "ARG"):
                build.ignored.append(f"{line}: {op}")
            continue
        if op == "WORKDIR":
            path = rest.strip()
            if not path:
                raise Unsupported(f"Dockerfile line {line}: WORKDIR without a path")
            build.steps.append(Step("WORKDIR", (path,), line=line))
        elif op == "ENV":
            build.steps.append(Step("ENV", env=_env_pairs(rest, line), line=line))
        elif op == "RUN":
            words = rest.strip()
            if words.startswith("["):
                command = shlex.join(_json_or_words(words))
            else:
                command = words
            if command.startswith("--"):
                raise Unsupported(f"Dockerfile line {line}: RUN flags ({command.split()[0]}) are not supported")
            build.steps.append(Step("RUN", (command,), line=line))
        elif op in ("COPY", "ADD"):
            words = _json_or_words(rest)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            for flag in flags:
                if flag.startswith("--from"):
                    raise Unsupported(f"Dockerfile line {line}: {op} {flag} (multi-stage builds) is not supported")
            if len(paths) < 2:
                raise Unsupported(f"Dockerfile line {line}: {op} needs a source and a destination")
            for src in paths[:-1]:
                if "://" in src:
                    raise Unsupported(f"Dockerfile line {line}: {op} of a URL is not supported")
                if src.startswith("/") or ".." in src.split("/"):
                    raise Unsupported(f"Dockerfile line {line}: {op} source {src!r} leaves the build context")
            build.steps.append(Step("COPY", tuple(paths), line=line))
        else:
            raise Unsupported(f"Dockerfile line {line}: unknown instruction {op}")
    return build


# ---- the holder's mount plan --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopMount:
    name: str  # the top-level entry of the host's /
    kind: str  # "overlay", "readonly" (a recursive read-only bind), "private", "symlink",
    #            "file" (a read-only bind of a file), "proc", "dev", "sys"
    link: str = ""  # the symlink's target


def top_level_plan(entries: Iterable[tuple[str, str, str]], *, host_mode: str,
                   base_dir: str) -> list[TopMount]:
    """The new root's top level from the host's: `entries` are (name, type, link) with type
    "dir", "file", "symlink" or "other". A top that holds the environment's own base dir is
    bound read-only: an overlay whose upper dir lies inside its lower dir is refused."""
    if host_mode not in HOST_MODES:
        raise Unsupported(f"host_mode {host_mode!r} is not one of {', '.join(HOST_MODES)}")
    base_top = posixpath.normpath(base_dir).lstrip("/").split("/", 1)[0]
    plan: list[TopMount] = []
    seen: set[str] = set()
    for name, kind, link in sorted(entries):
        seen.add(name)
        if name in SPECIAL_TOPS:
            plan.append(TopMount(name, name))
        elif name in PRIVATE_TOPS:
            plan.append(TopMount(name, "private"))
        elif kind == "symlink":
            plan.append(TopMount(name, "symlink", link))
        elif kind == "dir":
            overlay = host_mode == "overlay" and name != base_top
            plan.append(TopMount(name, "overlay" if overlay else "readonly"))
        elif kind == "file":
            plan.append(TopMount(name, "file"))
    for name in (*SPECIAL_TOPS, *PRIVATE_TOPS):
        if name not in seen:
            plan.append(TopMount(name, name if name in SPECIAL_TOPS else "private"))
    return plan


def holder_spec(*, root: str, upper: str, work: str, plan: list[TopMount], hide: Iterable[str],
                isolate_network: bool) -> dict:
    """The JSON the holder (holder.py) reads: everything it mounts, decided here."""
    hidden = sorted({posixpath.normpath(p) for p in hide if p and p.startswith("/") and p != "/"})
    return {
        "root": root,
        "upper": upper,
        "work": work,
        "tops": [{"name": t.name, "kind": t.kind, "link": t.link} for t in plan],
        "hide": hidden,
        "isolateNetwork": isolate_network,
    }
