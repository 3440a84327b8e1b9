"""Tidy: the repository's structural rules hold (generated code current, proto enums equal to
their Python mirrors, a pure core, layered packages, test files that state their goal),
checked by reading sources with `ast` and descriptors, never by running the code under test;
each checker is also run against a small planted violation so that it is known to fail."""
from __future__ import annotations

import ast
import enum
import re
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

from common import evidence, rejections
from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2, log_pb2
from coordinator.core import effects
from tools import gen_protos

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("common", "coordinator", "worker", "tools", "tests")
PROTO_MODULES = (common_pb2, coordinator_pb2, admin_pb2, log_pb2)

# What the pure core may not reach, directly or through any project module it imports: I/O,
# clocks, randomness, threads, processes and generated protobuf code (STYLE.md, Boundaries).
# The brief's list, plus the modules that are the same thing by another name (`secrets` is
# randomness, `_thread`/`concurrent`/`multiprocessing` are threads, `importlib` would hide
# an import from this walk, `structlog` is logging).
CORE_FORBIDDEN = (
    "grpc", "lmdb", "asyncio", "threading", "time", "datetime", "random", "uuid", "os",
    "logging", "socket", "subprocess", "google.protobuf", "common.fleetpb",
    "secrets", "_thread", "concurrent", "multiprocessing", "importlib", "signal", "structlog",
)


# ---- reading imports ------------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    name: str  # a fully qualified module name the statement may load


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports_of(root: Path, path: Path) -> list[Import]:
    """Every module an import statement in `path` may load, fully qualified. `from X import a`
    yields X and X.a (a may be a submodule); relative imports are resolved; a call to
    `__import__` is reported as the name `__import__`."""
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(name, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == "__future__":
                continue
            if base:
                found.append(Import(name, node.lineno, base))
            found += [Import(name, node.lineno, f"{base}.{alias.name}" if base else alias.name)
                      for alias in node.names if alias.name != "*"]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "__import__"):
            found.append(Import(name, node.lineno, "__import__"))
    return found


def matches(name: str, prefixes: tuple[str, ...]) -> str | None:
    for prefix in prefixes:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


def with_parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def core_import_violations(root: Path, start: list[str], forbidden: tuple[str, ...],
                           project: tuple[str, ...] = PROJECT_PACKAGES) -> list[str]:
    """Walk `start` and, transitively, every project module they import; one line per
    forbidden import, naming the module, its line, the import and how the walk got there."""
    via: dict[str, str] = {}
    queue: deque[str] = deque()
    for name in start:
        for m in with_parents(name):
            if m not in via:
                via[m] = ""
                queue.append(m)
    problems: list[str] = []
    while queue:
        current = queue.popleft()
        path = module_path(root, current)
        if path is None:
            continue
        for imp in imports_of(root, path):
            hit = "__import__" if imp.name == "__import__" else matches(imp.name, forbidden)
            if hit:
                chain = f" (reached via {via[current]})" if via[current] else ""
                problems.append(f"{current}:{imp.line} imports {imp.name}{chain}")
                continue
            if not matches(imp.name, project):
                continue
            for m in with_parents(imp.name):
                if m not in via and module_path(root, m) is not None:
                    via[m] = f"{current}" + (f" <- {via[current]}" if via[current] else "")
                    queue.append(m)
    return sorted(set(problems))


def core_modules(root: Path) -> list[str]:
    core = root / "coordinator" / "core"
    return sorted(module_name(root, p) for p in core.rglob("*.py"))


# Each layer, and the packages it may not import (DESIGN.md, Layout: the protocol is the only
# tie between coordinator and worker, and tools stand on top of everything).
LAYER_RULES: dict[str, tuple[str, ...]] = {
    "common": ("coordinator", "worker", "tools", "tests"),
    "coordinator": ("worker", "tools", "tests"),
    "worker": ("coordinator", "tools", "tests"),
}


def layer_violations(root: Path, rules: dict[str, tuple[str, ...]] = LAYER_RULES) -> list[str]:
    problems: list[str] = []
    for layer, banned in rules.items():
        directory = root / layer
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*.py")):
            for imp in imports_of(root, path):
                hit = matches(imp.name, banned)
                if hit:
                    problems.append(f"{imp.module}:{imp.line} imports {imp.name} "
                                    f"({layer}/ may not import {hit})")
    return sorted(set(problems))


# ---- test files state their goal ------------------------------------------------------------

OPENING_WORDS_MIN = 4


def opening_text(path: Path) -> str:
    """The comment block a file opens with, or else its module docstring; '' when neither."""
    lines = path.read_text().splitlines()
    comment: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not comment and not stripped:
            continue
        if stripped.startswith("#!") or re.match(r"#.*coding[:=]", stripped):
            continue
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        break
    if comment:
        return " ".join(comment).strip()
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return ""
    return (ast.get_docstring(tree) or "").strip()


def goal_violations(tests_root: Path) -> list[str]:
    problems: list[str] = []
    for path in sorted(tests_root.rglob("*.py")):
        if path.name == "__init__.py" and not path.read_text().strip():
            continue
        text = opening_text(path)
        shown = path.relative_to(tests_root.parent)
        if not text:
            problems.append(f"{shown}: does not open with a docstring or comment stating its goal")
        elif len(text.split()) < OPENING_WORDS_MIN or "." not in text:
            problems.append(f"{shown}: opening {text!r} is not a sentence stating the file's goal")
    return problems


# ---- (a) generated code is current ----------------------------------------------------------

def test_generated_code_is_current():
    result = subprocess.run([sys.executable, "-m", "tools.gen_protos", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        "generated code is stale; run `python -m tools.gen_protos`\n" + result.stdout + result.stderr)


def test_check_names_stale_missing_and_extra_files(tmp_path, capsys, monkeypatch):
    out = tmp_path / "fleetpb"
    out.mkdir()
    for p in gen_protos.OUT_DIR.iterdir():
        if p.is_file():
            (out / p.name).write_bytes(p.read_bytes())
    (out / "common_pb2.py").write_text((out / "common_pb2.py").read_text() + "\n# edited by hand\n")
    (out / "log_pb2.pyi").unlink()
    (out / "leftover_pb2.py").write_text("")
    monkeypatch.setattr(gen_protos, "OUT_DIR", out)
    assert gen_protos.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "common_pb2.py: stale" in err
    assert "log_pb2.pyi: missing" in err
    assert "leftover_pb2.py: not produced by the generator" in err


def test_generated_code_imports_without_warnings():
    code = ("import warnings; warnings.simplefilter('error'); "
            "from common.fleetpb import common_pb2, coordinator_pb2, coordinator_pb2_grpc, "
            "admin_pb2, admin_pb2_grpc, log_pb2")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


# ---- (b) proto enums mirror the Python enums ------------------------------------------------

MIRRORS = [
    (rejections.Rejection, "RejectionReason"),
    (evidence.Execution, "Execution"),
    (evidence.Verification, "Verification"),
    (evidence.Usage, "Usage"),
    (evidence.Cleanup, "Cleanup"),
    (evidence.Status, "Status"),
    (effects.OutcomeKind, "AckOutcome"),
]


def enum_prefix(proto_enum_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", proto_enum_name).upper() + "_"


def mirror_problems(py_enum: type[enum.IntEnum], proto_enum) -> list[str]:
    prefix = enum_prefix(proto_enum.name)
    proto = {v.name.removeprefix(prefix): v.number for v in proto_enum.values}
    python = {m.name: int(m.value) for m in py_enum}
    problems = [f"{py_enum.__name__}.{name} = {number} but {proto_enum.name} has "
                f"{prefix}{name} = {proto.get(name)}" for name, number in python.items()
                if proto.get(name) != number]
    problems += [f"{proto_enum.name} has {prefix}{name} = {number}, {py_enum.__name__} has no {name}"
                 for name, number in proto.items() if name not in python]
    return problems


@pytest.mark.parametrize("py_enum, proto_name", MIRRORS, ids=[m[1] for m in MIRRORS])
def test_proto_enum_mirrors_python_enum(py_enum, proto_name):
    proto_enum = common_pb2.DESCRIPTOR.enum_types_by_name[proto_name]
    assert mirror_problems(py_enum, proto_enum) == []


def test_mirror_check_fails_on_drift():
    Drifted = enum.IntEnum("Drifted", {"UNSPECIFIED": 0, "COMPLETED": 1, "SUBJECT_FAILED": 7, "NEW": 9})
    problems = mirror_problems(Drifted, common_pb2.DESCRIPTOR.enum_types_by_name["Execution"])
    assert any("SUBJECT_FAILED = 7" in p for p in problems)
    assert any("has no NEW" in p or "NEW = 9" in p for p in problems)
    assert any("EXECUTION_UNKNOWN" in p for p in problems)


def _all_enums(module):
    stack = list(module.DESCRIPTOR.enum_types_by_name.values())
    messages = list(module.DESCRIPTOR.message_types_by_name.values())
    while messages:
        m = messages.pop()
        stack += list(m.enum_types)
        messages += list(m.nested_types)
    return stack


@pytest.mark.parametrize("module", PROTO_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_proto_style(module):
    """Package fleet.v1; every enum's zero value is <ENUM>_UNSPECIFIED, every value prefixed."""
    assert module.DESCRIPTOR.package == "fleet.v1"
    for e in _all_enums(module):
        prefix = enum_prefix(e.name)
        assert e.values_by_number[0].name == prefix + "UNSPECIFIED", e.full_name
        for v in e.values:
            assert v.name.startswith(prefix), f"{e.full_name}.{v.name} lacks the prefix {prefix}"


# ---- (c) the core's import boundary ---------------------------------------------------------

def test_core_imports_nothing_impure():
    start = core_modules(ROOT)
    assert "coordinator.core.commands" in start
    assert core_import_violations(ROOT, start, CORE_FORBIDDEN) == []


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_core_walk_finds_direct_transitive_and_disguised_imports(tmp_path):
    _plant(tmp_path, {
        "coordinator/__init__.py": "",
        "coordinator/core/__init__.py": "from . import machine\n",
        "coordinator/core/machine.py": "from common import helper\nimport json\n",
        "coordinator/core/pure.py": "from ..core import machine\nfrom google import protobuf\n",
        "coordinator/core/sneaky.py": "def f():\n    return __import__('time')\n",
        "common/__init__.py": "",
        "common/helper.py": "from common.deep import x\n",
        "common/deep.py": "import os.path\nfrom common.fleetpb import log_pb2\nx = 1\n",
    })
    start = core_modules(tmp_path)
    problems = core_import_violations(tmp_path, start, CORE_FORBIDDEN)
    assert "common.deep:1 imports os.path (reached via common.helper <- coordinator.core.machine)" in problems
    assert any(p.startswith("common.deep:2 imports common.fleetpb") for p in problems)
    assert "coordinator.core.pure:2 imports google.protobuf" in problems
    assert "coordinator.core.sneaky:2 imports __import__" in problems
    assert not any("json" in p for p in problems)


# The worker's protocol (worker/protocol.py, the held groups and what each does next) is held to
# the core's rule: the asyncio shell (worker/session.py) and the simulation drive it, so it may
# reach no I/O, clock, thread or generated code, directly or through what it imports.
WORKER_PROTOCOL = ["worker.protocol"]


def test_worker_protocol_imports_nothing_impure():
    assert module_path(ROOT, "worker.protocol") is not None
    assert core_import_violations(ROOT, WORKER_PROTOCOL, CORE_FORBIDDEN) == []


def test_worker_protocol_walk_fails_on_planted_violations(tmp_path):
    _plant(tmp_path, {
        "worker/__init__.py": "",
        "worker/protocol.py": "from common.ids import AttemptId\nfrom worker import outbox\nimport asyncio\n",
        "worker/outbox.py": "import lmdb\n",
        "common/__init__.py": "",
        "common/ids.py": "import hashlib\n",
    })
    assert core_import_violations(tmp_path, WORKER_PROTOCOL, CORE_FORBIDDEN) == [
        "worker.outbox:1 imports lmdb (reached via worker.protocol)",
        "worker.protocol:3 imports asyncio",
    ]


# ---- (d) layering ---------------------------------------------------------------------------

def test_layers_import_only_downward():
    assert layer_violations(ROOT) == []


def test_layer_check_fails_on_upward_imports(tmp_path):
    _plant(tmp_path, {
        "common/a.py": "from coordinator.core import commands\n",
        "coordinator/b.py": "import worker.session\n",
        "worker/c.py": "from coordinator import logcodec\nfrom common import ids\n",
        "worker/d/e.py": "from ... import coordinator\n",
    })
    problems = layer_violations(tmp_path)
    assert any(p.startswith("common.a:1 imports coordinator") for p in problems)
    assert any(p.startswith("coordinator.b:1 imports worker.session") for p in problems)
    assert any(p.startswith("worker.c:1 imports coordinator") for p in problems)
    assert any(p.startswith("worker.d.e:1 imports coordinator") for p in problems)
    assert not any("common.ids" in p for p in problems)


# ---- (e) every test file states its goal ----------------------------------------------------

def test_every_test_file_states_its_goal():
    assert goal_violations(ROOT / "tests") == []


def test_goal_check_fails_on_silent_files(tmp_path):
    _plant(tmp_path, {
        "tests/__init__.py": "",
        "tests/unit/__init__.py": "x = 1\n",
        "tests/unit/test_a.py": "import pytest\n",
        "tests/unit/test_b.py": '"""Tests."""\n',
        "tests/unit/test_c.py": "# The store survives a crash: kill -9 mid-commit, then reopen.\nimport os\n",
        "tests/unit/test_d.py": '"""Selection is immutable: replay every seed and compare states."""\n',
    })
    problems = goal_violations(tmp_path / "tests")
    assert any(p.startswith("tests/unit/__init__.py") for p in problems)
    assert any(p.startswith("tests/unit/test_a.py") for p in problems)
    assert any(p.startswith("tests/unit/test_b.py") for p in problems)
    assert not any("test_c.py" in p or "test_d.py" in p or p.startswith("tests/__init__.py")
                   for p in problems)


# ---- (f) no import circle in the tree; fleetctl's imports run one way -----------------------

FLEETCTL = "tools.fleetctl"
FLEETCTL_UPPER = ("tools.fleetctl.cli", "tools.fleetctl.commands")  # the parser and the commands


def import_graph(root: Path, packages: tuple[str, ...] = PROJECT_PACKAGES) -> dict[str, list[tuple[str, int]]]:
    """Module -> the modules under `packages` it imports (with the line), counting imports
    inside functions too: a lazy import is how the old circles hid (fleetctl's, the actor and
    its snapshot process, the executor contract and its registry). Parent packages are not
    edges: importing a.b runs a/__init__.py, but a module that needs the package imports it."""
    graph: dict[str, list[tuple[str, int]]] = {}
    for package in packages:
        directory = root.joinpath(*package.split("."))
        for path in sorted(directory.rglob("*.py")) if directory.is_dir() else ():
            if "__pycache__" in path.parts or "node_modules" in path.parts:
                continue
            name = module_name(root, path)
            found = [(imp.name, imp.line) for imp in imports_of(root, path)
                     if matches(imp.name, packages) and module_path(root, imp.name) is not None and imp.name != name]
            # `from P import m` loads P only as m's parent when m is a module: then the edge is to m.
            graph[name] = [(t, line) for t, line in found
                           if not any(u.startswith(t + ".") and ln == line for u, ln in found)]
    return graph


def fleetctl_graph(root: Path) -> dict[str, list[tuple[str, int]]]:
    """fleetctl's own modules and their imports of each other (tools/fleetctl/__init__.py
    imports nothing at import time: checked below)."""
    return import_graph(root, (FLEETCTL,))


def import_cycles(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Each import cycle once, as 'a:LINE -> b:LINE -> ... -> a' (depth-first search; a back
    edge closes a cycle)."""
    cycles: set[str] = set()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[tuple[str, int]] = []

    def visit(node: str) -> None:
        state[node] = 1
        for target, line in sorted(graph.get(node, [])):
            stack.append((node, line))
            if state.get(target) == 1:
                start = next(i for i, (n, _) in enumerate(stack) if n == target)
                loop = stack[start:]
                k = min(range(len(loop)), key=lambda i: loop[i][0])  # one spelling per cycle
                loop = loop[k:] + loop[:k]
                cycles.add(" -> ".join(f"{n}:{ln}" for n, ln in loop) + f" -> {loop[0][0]}")
            elif target not in state:
                visit(target)
            stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return sorted(cycles)


# Edges that close a circle and are known, each with the reason it is still there; the test
# below fails when one of them is gone (then it is struck from here) as when a new circle appears.
TRANSITIONAL_EDGES: dict[tuple[str, str], str] = {}


def without_edges(graph: dict[str, list[tuple[str, int]]],
                  edges: dict[tuple[str, str], str]) -> dict[str, list[tuple[str, int]]]:
    return {m: [(t, ln) for t, ln in out if (m, t) not in edges] for m, out in graph.items()}


def test_no_import_cycle_anywhere_in_the_tree():
    graph = import_graph(ROOT)
    for name in ("coordinator.actor", "coordinator.snapshotter", "tools.sim.simulation", "tools.sim.scale",
                 "worker.executor.base", "tools.fleetctl.cli", "tests.test_tidy"):
        assert name in graph, f"{name} is not walked"
    for (src, dst), why in TRANSITIONAL_EDGES.items():
        assert any(t == dst for t, _ in graph.get(src, ())), f"{src} -> {dst} is gone: strike it ({why})"
    assert import_cycles(without_edges(graph, TRANSITIONAL_EDGES)) == []


def test_the_tree_cycle_check_fails_on_planted_cycles(tmp_path):
    _plant(tmp_path, {
        "coordinator/__init__.py": "",
        # the old shape: the snapshot process's module lazily imports the actor that imports it
        "coordinator/actor.py": "from coordinator import snapshotter\nfrom coordinator.store import Store\n",
        "coordinator/snapshotter.py": "import sys\n\ndef main():\n    from coordinator.actor import fold_to\n",
        "coordinator/store.py": "class Store: ...\n",
        "tools/__init__.py": "",
        "tools/sim/__init__.py": "",
        # the command line over the model and the scale scenario: no circle
        "tools/sim/cli.py": "from tools.sim import scale\nfrom tools.sim.simulation import run_seed\n",
        "tools/sim/scale.py": "from tools.sim.simulation import Simulation\n",
        "tools/sim/simulation.py": "from coordinator.store import Store\n",
        # a circle through three modules of two packages, one edge relative
        "worker/__init__.py": "",
        "worker/a.py": "from . import b\n",
        "worker/b.py": "def f():\n    import tools.c\n",
        "tools/c.py": "from worker.a import x\n",
    })
    graph = import_graph(tmp_path)
    assert import_cycles(graph) == [
        "coordinator.actor:1 -> coordinator.snapshotter:4 -> coordinator.actor",
        "tools.c:1 -> worker.a:1 -> worker.b:2 -> tools.c",
    ]
    assert import_cycles(without_edges(graph, {("worker.b", "tools.c"): "planted"})) == [
        "coordinator.actor:1 -> coordinator.snapshotter:4 -> coordinator.actor"]


def fleetctl_layer_violations(root: Path) -> list[str]:
    """Shared modules never import the parser or a command; a command never imports another
    command or the parser; the package's __init__ imports nothing of the package at import time."""
    problems: list[str] = []
    for module, edges in fleetctl_graph(root).items():
        is_command = matches(module, ("tools.fleetctl.commands",)) and module != "tools.fleetctl.commands"
        upper = matches(module, FLEETCTL_UPPER) or module in (FLEETCTL, "tools.fleetctl.__main__")
        for target, line in edges:
            if not upper and matches(target, FLEETCTL_UPPER):
                problems.append(f"{module}:{line} imports {target} (a shared module may not import "
                                "the parser or a command)")
            elif is_command and (target == "tools.fleetctl.cli"
                                 or (matches(target, ("tools.fleetctl.commands",))
                                     and target != "tools.fleetctl.commands")):
                problems.append(f"{module}:{line} imports {target} (a command imports shared modules only)")
    init = module_path(root, FLEETCTL)
    if init is not None:
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                    matches(n, (FLEETCTL,)) for n in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                                      else [node.module or ""])):
                problems.append(f"{FLEETCTL}:{node.lineno} imports the package at import time")
    return sorted(problems)


def test_fleetctl_imports_have_no_cycle_and_run_one_way():
    graph = fleetctl_graph(ROOT)
    assert "tools.fleetctl.cli" in graph and "tools.fleetctl.client" in graph
    assert import_cycles(graph) == []
    assert fleetctl_layer_violations(ROOT) == []
    for old in ("fleetctl", "local", "report", "compat", "stats", "submission"):
        assert not (ROOT / "tools" / f"{old}.py").exists(), f"tools/{old}.py is back beside tools/fleetctl/"


def test_fleetctl_checks_fail_on_a_planted_cycle_and_upward_imports(tmp_path):
    _plant(tmp_path, {
        "tools/__init__.py": "",
        "tools/fleetctl/__init__.py": "from tools.fleetctl import cli\n",
        "tools/fleetctl/cli.py": "from tools.fleetctl.commands import results\n",
        "tools/fleetctl/commands/__init__.py": "",
        "tools/fleetctl/commands/results.py": "from tools.fleetctl import views\nfrom . import status\n",
        "tools/fleetctl/commands/status.py": "from tools.fleetctl.views import table\n",
        "tools/fleetctl/views.py": "def table():\n    from tools.fleetctl.stats import fmt\n",
        "tools/fleetctl/stats.py": "import math\n\ndef fmt():\n    from ..fleetctl import views\n",
    })
    cycles = import_cycles(fleetctl_graph(tmp_path))
    assert cycles == ["tools.fleetctl.stats:4 -> tools.fleetctl.views:2 -> tools.fleetctl.stats"]
    problems = fleetctl_layer_violations(tmp_path)
    assert "tools.fleetctl:1 imports the package at import time" in problems
    assert any(p.startswith("tools.fleetctl.commands.results:2 imports tools.fleetctl.commands.status")
               for p in problems)
    assert not any(p.startswith("tools.fleetctl.cli") for p in problems)


# ---- one straight path: only the codec turns a worker's frame into a command ----------------

# The commands a worker's Session frame becomes. In the coordinator outside its core, only
# coordinator/codec.py may construct them; the services hand the codec's command to the actor
# and the edge answers it after the commit (issue 25).
FRAME_COMMANDS = ("CellReported", "ResultOffered", "WorkerRegistered", "GroupFinished",
                  "RunEnvironmentMeasured", "WorkerGone")
FRAME_COMMANDS_BUILT_IN = ("coordinator/codec.py",)


def frame_command_builders(root: Path) -> list[str]:
    """`file:line Name` of each call that constructs a frame command outside the codec and the
    core (`c.CellReported(...)`, `commands.CellReported(...)` or a bare imported name)."""
    found = []
    for path in sorted((root / "coordinator").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in FRAME_COMMANDS_BUILT_IN or rel.startswith("coordinator/core/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in FRAME_COMMANDS:
                found.append(f"{rel}:{node.lineno} {name}")
    return found


def test_only_the_codec_turns_worker_frames_into_commands():
    assert frame_command_builders(ROOT) == []
    codec_text = (ROOT / "coordinator" / "codec.py").read_text()
    assert all(f"c.{name}(" in codec_text for name in FRAME_COMMANDS)


def test_the_frame_command_check_fails_on_a_planted_builder(tmp_path):
    _plant(tmp_path, {
        "coordinator/codec.py": "def f(c):\n    return c.CellReported(1)\n",
        "coordinator/core/machine.py": "def g(c):\n    return c.GroupFinished(1)\n",
        "coordinator/worker_service.py": "from coordinator.core.commands import WorkerGone\n\n"
                                         "def h(c):\n    return c.CellReported(1), WorkerGone(2)\n",
    })
    assert frame_command_builders(tmp_path) == ["coordinator/worker_service.py:4 CellReported",
                                                "coordinator/worker_service.py:4 WorkerGone"]
