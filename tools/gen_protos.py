"""The only writer of generated protobuf code: protos/fleet/v1/*.proto -> common/fleetpb/.

    python -m tools.gen_protos           regenerate common/fleetpb/ in place
    python -m tools.gen_protos --check   regenerate into a temporary directory and exit 1,
                                         naming each stale, missing or extra file

It runs the protoc bundled with grpcio-tools (pinned in pyproject.toml, so the output is a
function of the .proto files alone), writes `_pb2.py`, `.pyi` and, for files that declare
a service, `_pb2_grpc.py`, and rewrites protoc's `from fleet.v1 import ...` imports so the
code loads as `common.fleetpb.<name>_pb2` inside this repository. The output is flat:
`common/fleetpb/coordinator_pb2.py`, not a tree mirroring the proto package. The files
are checked in; tests/test_tidy.py runs `--check` so a stale checkout fails.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_PACKAGE_DIR = "fleet/v1"  # where the .proto files live under protos/, and their import path
OUT_DIR = ROOT / "common" / "fleetpb"
OUT_PACKAGE = "common.fleetpb"

HEADER = "# Written by tools/gen_protos.py from protos/{source}; do not edit, rerun the tool.\n"
INIT_TEXT = '''"""Generated protobuf and gRPC code for the fleet.v1 protocol (see protos/fleet/v1/).

Written by tools/gen_protos.py; do not edit. Import modules as
`from common.fleetpb import coordinator_pb2`. Only the edges (codecs, servicers, the worker's
client) may import this package: the pure core never does (tests/test_tidy.py checks).
"""
'''


class GenerationError(RuntimeError):
    """protoc failed or produced something this script does not know how to place."""


def proto_files() -> list[Path]:
    files = sorted((PROTO_ROOT / PROTO_PACKAGE_DIR).glob("*.proto"))
    if not files:
        raise GenerationError(f"no .proto files under {PROTO_ROOT / PROTO_PACKAGE_DIR}")
    return files


def _run_protoc(raw_dir: Path) -> None:
    # Imported here so that `--help` works without grpcio-tools installed.
    from importlib import resources

    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={raw_dir}",
        f"--pyi_out={raw_dir}",
        f"--grpc_python_out={raw_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
    ]
    code = protoc.main(args)
    if code != 0:
        raise GenerationError(f"protoc exited with {code} (its messages are above)")


_PROTOC_IMPORT = re.compile(r"^from fleet\.v1 import (\w+) as (\w+)$", re.M)


def _rewrite(text: str, name: str, source: str) -> str:
    """Make protoc's output importable as common.fleetpb.<module> and stamp its origin."""
    text = _PROTOC_IMPORT.sub(rf"from {OUT_PACKAGE} import \1 as \2", text)
    # The module name given to the builder becomes each message class's __module__.
    text = text.replace(f"'fleet.v1.{name}'", f"'{OUT_PACKAGE}.{name}'")
    # The grpc plugin names its own path in its version-mismatch message.
    text = text.replace(f"{PROTO_PACKAGE_DIR}/{name}.py", f"common/fleetpb/{name}.py")
    if re.search(r"^\s*(from|import) fleet\b", text, re.M):
        raise GenerationError(f"{name}: an import of `fleet` survived the rewrite")
    return HEADER.format(source=source) + text


def _declares_service(proto: Path) -> bool:
    return re.search(r"^\s*service\s+\w+", proto.read_text(), re.M) is not None


def generate(out_dir: Path) -> list[Path]:
    """Write every generated file into `out_dir` (which must be empty); return their paths."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="fleet-protoc-") as tmp:
        raw = Path(tmp)
        _run_protoc(raw)
        (out_dir / "__init__.py").write_text(INIT_TEXT)
        written.append(out_dir / "__init__.py")
        for proto in proto_files():
            stem = proto.stem
            source = f"{PROTO_PACKAGE_DIR}/{proto.name}"
            outputs = [f"{stem}_pb2.py", f"{stem}_pb2.pyi"]
            # A file without a service yields a _pb2_grpc.py holding only a grpc version
            # check; leaving it out keeps grpc out of modules that need no grpc.
            if _declares_service(proto):
                outputs.append(f"{stem}_pb2_grpc.py")
            for filename in outputs:
                produced = raw / PROTO_PACKAGE_DIR / filename
                if not produced.is_file():
                    raise GenerationError(f"protoc did not produce {PROTO_PACKAGE_DIR}/{filename}")
                module = filename.rsplit(".", 1)[0]
                target = out_dir / filename
                target.write_text(_rewrite(produced.read_text(), module, source))
                written.append(target)
    return written


def _existing(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in (".py", ".pyi")
    }


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def stale_files(out_dir: Path | None = None) -> list[str]:
    """One line per file of `out_dir` (default: the checked-in package) that is stale,
    missing, or not produced by a fresh generation; empty when everything is current."""
    out_dir = OUT_DIR if out_dir is None else out_dir
    with tempfile.TemporaryDirectory(prefix="fleet-gen-check-") as tmp:
        fresh_dir = Path(tmp)
        generate(fresh_dir)
        fresh = _existing(fresh_dir)
    current = _existing(out_dir)
    rel = _shown(out_dir)
    problems: list[str] = []
    for name in sorted(set(fresh) | set(current)):
        if name not in current:
            problems.append(f"{rel / name}: missing")
        elif name not in fresh:
            problems.append(f"{rel / name}: not produced by the generator (remove it)")
        elif fresh[name] != current[name]:
            problems.append(f"{rel / name}: stale")
    return problems


def write() -> list[Path]:
    """Regenerate OUT_DIR: a fresh generation replaces it whole, so no old file lingers."""
    OUT_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fleet-gen-", dir=OUT_DIR.parent) as tmp:
        staging = Path(tmp) / "fleetpb"
        staging.mkdir()
        generate(staging)
        if OUT_DIR.exists():
            shutil.rmtree(OUT_DIR)
        staging.rename(OUT_DIR)
    return sorted(OUT_DIR.iterdir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gen_protos", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 naming each generated file that is not current")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = stale_files()
            for line in problems:
                print(line, file=sys.stderr)
            if problems:
                print("generated code is not current: run `python -m tools.gen_protos`", file=sys.stderr)
                return 1
            print("generated code is current")
            return 0
        for path in write():
            print(path.relative_to(ROOT))
        return 0
    except GenerationError as e:
        print(f"gen_protos: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
