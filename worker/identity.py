"""Environment identity: what a run uses, measured on this machine, never echoed.

Three measurements share one set of keys (common/identity.py says which part each joins):
1. `worker_identity`: the Hello's spec-independent manifest (interpreter, platform, fleet's
   own version, revision and source, Harbor's version): part of every run's pin.
2. `run_manifest`: what `fleetctl submit` measures of a spec from the submitter's bench root:
   the digests of the bench files its commands and callables name and of every task dir
   (the reference), and the names of the tools the commands resolve to (measured by
   workers only, part of the pin).
3. `measure_keys`: a worker's measurement of exactly the keys a run offers, from its own
   bench root and PATH.
Absent things are recorded as "missing", so two sides agree exactly when their files agree.
A task dir's digest leaves out what the bench root says is not part of it: `.fleetignore`
and `.gitignore` files, in gitignore syntax (read with pathspec, the same on every machine,
checkout or not). Nothing is imported or run from the bench root: identity must not execute
benchmark code.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import stat
import subprocess
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Callable, Iterable, Mapping

import pathspec

from common.identity import REFERENCE_KEY_PREFIXES, WORKER_KEY_PREFIXES, manifest_id
from common.limits import GIT_REVISION_TIMEOUT_MS
from worker.executor.command import DEFAULT_PATH, PLACEHOLDER, UnknownPlaceholder, substitute, template_values

FLEET_ROOT = Path(__file__).resolve().parent.parent
# The parts of fleet that run on a worker; coordinator and tools code does not change what
# a cell does here.
FLEET_SOURCE_DIRS = ("common", "worker")
SKIPPED_DIRS = {"__pycache__", ".git"}
MISSING = "missing"
_HEX_REVISION = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def compute_manifest(spec_document: Mapping, bench_root: Path, *, path: str | None = None) -> dict[str, str]:
    """What this worker measures for running `spec_document` from `bench_root`. `path` is the
    PATH the command executor resolves commands with (its default unless configured)."""
    bench_root = Path(os.path.abspath(bench_root))  # as the executors substitute it
    m: dict[str, str] = {
        "python.implementation": platform.python_implementation(),
        "python.version": platform.python_version(),
        "platform.machine": platform.machine(),
        "platform.system": platform.system(),
    }
    try:
        m["fleet.version"] = importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        pass
    rev = git_revision(FLEET_ROOT)
    if rev:
        m["fleet.revision"] = rev
    m["fleet.source"] = tree_digest(FLEET_ROOT, FLEET_SOURCE_DIRS, suffix=".py")
    rev = git_revision(bench_root)
    if rev:
        m["bench.revision"] = rev
    ignored = bench_ignore(bench_root)
    executor = spec_document.get("executor") or {}
    kind = str(executor.get("kind", ""))
    m["executor.kind"] = kind
    tasks = list(spec_document.get("tasks") or ())
    for task in tasks:
        rel = task.get("dir")
        if rel:
            src = bench_root / rel
            m[f"bench.taskdir:{rel}"] = tree_digest(src, ignored=ignored) if src.is_dir() else MISSING
    subjects = list(spec_document.get("subjects") or ())
    verifier = spec_document.get("verifier") or {}
    if kind == "command":
        reps = int(spec_document.get("repetitions") or 1)
        for program in [*subjects, verifier]:
            _command_entries(m, program, tasks, reps, bench_root, path or DEFAULT_PATH, ignored)
    elif kind == "python":
        for program in [*subjects, verifier]:
            target = program.get("callable")
            if isinstance(target, str) and ":" in target:
                module = target.partition(":")[0]
                m[f"python.module:{module}"] = _module_digest(module, bench_root)
    return dict(sorted(m.items()))


def environment_id(manifest: Mapping[str, str]) -> str:
    return manifest_id(manifest)


def run_manifest(spec_document: Mapping, bench_root: Path, *, path: str | None = None
                 ) -> tuple[dict[str, str], tuple[str, ...]]:
    """What `fleetctl submit` freezes with a run: (the reference, measured here, of the bench
    files and task dirs the spec uses; the keys only workers measure, by name)."""
    m = compute_manifest(spec_document, bench_root, path=path)
    reference = {k: v for k, v in m.items() if k.startswith(REFERENCE_KEY_PREFIXES) and k != "executor.kind"}
    worker_keys = [k for k in m if k.startswith(WORKER_KEY_PREFIXES)]
    if str((spec_document.get("executor") or {}).get("kind", "")) == "harbor":
        # Harbor's own checksum of each task, by the worker's Harbor: pinned, so every
        # worker of a run agrees with the first one on what Harbor makes of the tasks.
        worker_keys += [f"harbor.task:{t['dir']}" for t in spec_document.get("tasks") or () if t.get("dir")]
    return reference, tuple(sorted(dict.fromkeys(worker_keys)))


def measure_keys(keys: Iterable[str], bench_root: Path, *, path: str | None = None) -> dict[str, str]:
    """This worker's measurement of the keys a run offers, from its own bench root and PATH.
    A key of a kind this version does not know is answered "unknown key", which differs
    from any reference, so a worker never serves what it cannot measure."""
    root = Path(os.path.abspath(bench_root))
    ignored = bench_ignore(root)
    out: dict[str, str] = {}
    harbor_tasks: list[str] = []
    for key in keys:
        kind, _, name = key.partition(":")
        if kind == "bench.file":
            p = _inside(root, name)
            out[key] = file_digest(p) if p is not None and p.is_file() else MISSING
        elif kind == "bench.taskdir":
            p = _inside(root, name, resolve=False)
            out[key] = tree_digest(p, ignored=ignored) if p is not None and p.is_dir() else MISSING
        elif kind == "python.module":
            out[key] = _module_digest(name, root)
        elif kind == "tool":
            tool = _which(name, path or DEFAULT_PATH)
            out[key] = file_digest(Path(tool)) if tool else MISSING
        elif kind == "harbor.task":
            harbor_tasks.append(name)
        else:
            out[key] = UNKNOWN_KEY
    if harbor_tasks:
        from worker.executor.harbor import harbor_manifest, harbor_python

        measured = harbor_manifest(root, harbor_python({}), harbor_tasks)
        for name in harbor_tasks:
            out[f"harbor.task:{name}"] = measured.get(f"harbor.task:{name}", measured.get("harbor.version", MISSING))
    return dict(sorted(out.items()))


UNKNOWN_KEY = "unknown key"


def _inside(root: Path, rel: str, *, resolve: bool = True) -> Path | None:
    """`root / rel` when it stays inside the root (a key never reads outside it)."""
    if not rel or Path(rel).is_absolute():
        return None
    p = root / rel
    try:
        real = p.resolve() if resolve else Path(os.path.normpath(p))
    except OSError:
        return None
    base = root.resolve() if resolve else root
    return real if real != base and real.is_relative_to(base) else None



def describe(spec_document: Mapping, bench_root: Path, *, path: str | None = None) -> str:
    """Pretty JSON of the manifest and its id, for `fleet-worker identity`."""
    manifest = compute_manifest(spec_document, bench_root, path=path)
    return json.dumps({"environmentId": environment_id(manifest), "manifest": manifest},
                      indent=2, sort_keys=True)


def worker_identity(bench_root: Path, *, path: str | None = None) -> tuple[dict[str, str], str]:
    """(manifest, environment id) a worker presents in Hello, before it knows any spec: the
    measurements that do not depend on a spec (interpreter, platform, fleet's version,
    revision and source, Harbor's version)."""
    manifest = compute_manifest({}, bench_root, path=path)
    manifest.pop("executor.kind", None)  # spec-dependent; empty without a spec
    # The bench root as a whole is no part of it: a run compares the files it uses
    # (`measure_keys`), so a log file, a cache or a results folder locks no worker out.
    manifest.pop("bench.revision", None)
    if _has_harbor_tasks(Path(bench_root)):
        # Harbor's version, its interpreter, the runner; tasks are measured per run.
        from worker.executor.harbor import harbor_manifest, harbor_python

        manifest.update({k: v for k, v in harbor_manifest(Path(bench_root), harbor_python({})).items()
                         if not k.startswith("harbor.task:")})
    manifest = dict(sorted(manifest.items()))
    return manifest, environment_id(manifest)


def _has_harbor_tasks(bench_root: Path) -> bool:
    """A bench root of Harbor tasks holds task.toml files (Terminal-Bench layout)."""
    return bench_root.is_dir() and next(bench_root.rglob("task.toml"), None) is not None


# ---- measurements -------------------------------------------------------------------------


def git_revision(directory: Path) -> str:
    """HEAD of the git checkout holding `directory`, or "" (not a checkout, no git, no commit)."""
    if not Path(directory).is_dir():
        return ""
    try:
        done = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"],
                              capture_output=True, text=True,
                              timeout=GIT_REVISION_TIMEOUT_MS / 1000, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    rev = done.stdout.strip()
    return rev if done.returncode == 0 and _HEX_REVISION.match(rev) else ""


def file_digest(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


Ignored = Callable[[Path, bool], bool]
IGNORE_FILE_NAMES = (".fleetignore", ".gitignore")


def bench_ignore(bench_root: Path) -> Ignored:
    """What a bench root says is not part of it: every `.fleetignore` and `.gitignore` file
    (gitignore syntax, pathspec's GitIgnoreSpec), each applying below its own directory.
    Read the same way on every machine, git checkout or not, so a copy agrees with its source."""
    root = Path(os.path.abspath(bench_root))
    specs: dict[Path, pathspec.PathSpec | None] = {}

    def spec_of(directory: Path) -> pathspec.PathSpec | None:
        if directory not in specs:
            lines: list[str] = []
            for name in IGNORE_FILE_NAMES:
                f = directory / name
                if f.is_file():
                    lines += f.read_text(errors="replace").splitlines()
            specs[directory] = pathspec.GitIgnoreSpec.from_lines(lines) if lines else None
        return specs[directory]

    real_root = root.resolve()

    def ignored(p: Path, is_dir: bool) -> bool:
        try:
            rel = p.relative_to(root)
        except ValueError:
            try:  # a resolved path (symlinks followed) of a root reached through one
                rel = p.relative_to(real_root)
            except ValueError:
                return False
        base = root
        parts = rel.parts
        for i in range(len(parts)):
            spec = spec_of(base)
            if spec is not None:
                sub = "/".join(parts[i:]) + ("/" if is_dir else "")
                if spec.match_file(sub):
                    return True
            base = base / parts[i]
        return False

    return ignored


def tree_digest(root: Path, subdirs: Iterable[str] = ("",), *, suffix: str = "", ignored: Ignored | None = None) -> str:
    """One digest over the names, kinds, executable bits and contents of a tree; symlinks by
    their target, never followed. Caches (__pycache__) and .git are not part of a tree, nor
    is what `ignored` (a bench root's ignore rules) says."""
    h = hashlib.sha256()
    for sub in subdirs:
        top = root / sub if sub else root
        for dirpath, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS
                             and not (ignored and ignored(Path(dirpath, d), True)))
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            h.update(b"D " + rel_dir.encode() + b"\n")
            for name in sorted(names):
                if suffix and not name.endswith(suffix):
                    continue
                p = Path(dirpath, name)
                if ignored and ignored(p, False):
                    continue
                rel = p.relative_to(root).as_posix().encode()
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    h.update(b"L " + rel + b"\0" + os.readlink(p).encode() + b"\n")
                elif stat.S_ISREG(st.st_mode):
                    x = b"x" if st.st_mode & 0o111 else b"-"
                    h.update(b"F " + rel + b"\0" + x + file_digest(p).encode() + b"\n")
    return h.hexdigest()


def _expansions(token: str, tasks: list[Mapping], reps: int, bench_root: Path, subject_id: str) -> set[str]:
    """Every value a templated token takes over the spec's tasks and repetitions."""
    names = {m.group(1) for m in PLACEHOLDER.finditer(token)}
    task_list = tasks if names & {"task.id", "task.input"} else tasks[:1] or [{}]
    rep_list = range(1, reps + 1) if "repetition" in names else (1,)
    out: set[str] = set()
    for task in task_list:
        for rep in rep_list:
            try:
                out.add(substitute(token, template_values(task, subject_id, rep, bench_root)))
            except UnknownPlaceholder:
                return set()  # the executor refuses such a spec; nothing to measure
    return out


def _under(bench_root: Path, text: str) -> Path | None:
    """The bench file an absolute path names, or None. A relative path is not measured here:
    processes run in the work dir, so it names a file of the task dir's copy, which the
    task dir's digest covers."""
    p = Path(text)
    if not text or not p.is_absolute():
        return None
    root = bench_root.resolve()
    try:
        p = p.resolve()
    except OSError:
        return None
    if p == root or not p.is_relative_to(root):
        return None
    return p


def _command_entries(m: dict[str, str], program: Mapping, tasks: list[Mapping], reps: int,
                     bench_root: Path, path: str, ignored: Ignored) -> None:
    """The bench files a program's command and arguments name (less what the bench root
    ignores: a log file a subject appends to is no part of the benchmark), and the tool its
    command resolves to."""
    command = program.get("command")
    if not isinstance(command, str):
        return
    subject_id = str(program.get("id", ""))
    root = bench_root.resolve()
    for text in sorted(_expansions(command, tasks, reps, bench_root, subject_id)):
        p = _under(bench_root, text)
        if p is not None and p.is_file():
            if not ignored(p, False):
                m[f"bench.file:{p.relative_to(root).as_posix()}"] = file_digest(p)
            continue
        tool = _which(text, path)
        m[f"tool:{text}"] = file_digest(Path(tool)) if tool else MISSING
    for arg in program.get("args") or ():
        for text in sorted(_expansions(str(arg), tasks, reps, bench_root, subject_id)):
            # A flag may carry its path after "=": `--script={{bench_root}}/x.py`.
            for candidate in {text, text.partition("=")[2]}:
                p = _under(bench_root, candidate)
                if p is not None and p.is_file() and not ignored(p, False):
                    m[f"bench.file:{p.relative_to(root).as_posix()}"] = file_digest(p)


def _which(command: str, path: str) -> str:
    """The real file a command runs (symlinks resolved), looked up as the executor does."""
    if "/" in command:
        candidates = [command]
    else:
        candidates = [os.path.join(d, command) for d in path.split(os.pathsep) if d]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.realpath(c)
    return ""


def _module_digest(module: str, bench_root: Path) -> str:
    """sha256 of a callable's module file, found as the python executor would find it (the
    worker's own paths first, the bench root last; an already imported module as it is),
    without importing or running anything."""
    search = [p for p in sys.path if p] + [str(bench_root.resolve())]
    origin: str | None = None
    name = ""
    for part in module.split("."):
        name = f"{name}.{part}" if name else part
        loaded = sys.modules.get(name)
        if loaded is not None:
            origin = getattr(loaded, "__file__", None) or "builtin"
            search = list(getattr(loaded, "__path__", None) or [])
            continue
        try:
            spec = PathFinder.find_spec(name, search)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return MISSING
        origin = spec.origin
        search = list(spec.submodule_search_locations or [])
    if origin == "builtin":
        return "builtin"
    if origin and os.path.isfile(origin):
        return file_digest(Path(origin))
    return MISSING
