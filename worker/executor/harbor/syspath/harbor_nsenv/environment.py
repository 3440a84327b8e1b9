"""NamespaceEnvironment: Harbor's BaseEnvironment over the host system, without a container
engine, for machines that have no Docker.

Rules. start() makes a private base dir (kwarg `base_dir`, default a fresh temporary dir),
builds a new root there and starts the holder (holder.py) as PID 1 of a new PID and mount
namespace (and of a new network namespace with only loopback when the task's network
policy is no-network). The new root shows the host's top-level directories through
copy-on-write overlays (`host_mode="overlay"`, the default: the agent may install and write
anywhere, nothing reaches the host) or read-only binds (`host_mode="readonly"`); /tmp and
/root are fresh private directories; `hide_paths` (the bench root, the worker's scratch
dir) are covered by empty read-only mounts, so an agent cannot read a task's tests or
solution from the host. The task's Dockerfile is replayed as far as it can be over the host
(plan.py): WORKDIR (default cwd; "/app" when none is declared), ENV, COPY/ADD from the build
context, RUN; without a Dockerfile the environment dir is copied into the workdir. Every
exec and every file transfer runs inside the namespace (`nsenter`; tar streams for
transfers), so paths, symlinks and read-only mounts mean what they mean to the task.
stop() ends the holder (the kernel then kills whatever the task left running) and, with
delete, removes the base dir; what it made is gone. Exec's environment is a clean one
(PATH, HOME, LANG, the image's ENV, then Harbor's persistent, per-exec and scoped env):
nothing of the runner's own environment leaks into the task.
"""
from __future__ import annotations

import asyncio
import json
import os
import posixpath
import shlex
import shutil
import signal
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode

from .plan import (
    COMPOSE_FILES,
    Build,
    Unsupported,
    holder_spec,
    join_workdir,
    parse_dockerfile,
    top_level_plan,
)

DEFAULT_WORKDIR = "/app"
EXEC_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOLDER = Path(__file__).resolve().with_name("holder.py")
HOLDER_READY_TIMEOUT_S = 60
HOLDER_STOP_GRACE_S = 5
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")


class NamespaceEnvironmentUnsupported(RuntimeError):
    """The task needs what a namespace over the host cannot give (a compose file, a
    multi-stage build, a container OS other than Linux). Deterministic: retrying the same
    task here fails the same way."""


class NamespaceBuildError(RuntimeError):
    """A Dockerfile step (RUN, COPY) failed while the environment was being prepared."""


class NamespaceEnvironment(BaseEnvironment):
    def __init__(self, *args: Any, base_dir: str | None = None, host_mode: str = "overlay",
                 hide_paths: list[str] | None = None, workdir: str | None = None,
                 run_dockerfile: bool = True, **kwargs: Any) -> None:
        self._base_request = base_dir
        self._host_mode = host_mode
        self._hide = [os.path.abspath(p) for p in (hide_paths or [])]
        self._workdir_override = workdir
        self._run_dockerfile = run_dockerfile
        self._base: Path | None = None
        self._holder: asyncio.subprocess.Process | None = None
        self._holder_pid = 0
        self._image_env: dict[str, str] = {}
        self._workdir = DEFAULT_WORKDIR
        self._build = Build()
        self._nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
        self._unshare = shutil.which("unshare") or "/usr/bin/unshare"
        super().__init__(*args, **kwargs)

    # ---- what this environment is ----------------------------------------------------------

    @staticmethod
    def type() -> str:
        return "fleet-nsenv"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # No network is a network namespace with only loopback; no allowlists, no GPUs,
        # no compose, no host mounts of the trial's dirs (logs are copied out).
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        env_dir = Path(self.environment_dir)
        for name in COMPOSE_FILES:
            if (env_dir / name).exists():
                raise NamespaceEnvironmentUnsupported(
                    f"the task's environment is a compose project ({name}); the namespace "
                    "environment runs one host system, not several containers")
        dockerfile = env_dir / "Dockerfile"
        try:
            self._build = parse_dockerfile(dockerfile.read_text()) if dockerfile.is_file() else Build()
        except Unsupported as e:
            raise NamespaceEnvironmentUnsupported(str(e)) from None
        if self._host_mode not in ("overlay", "readonly"):
            raise NamespaceEnvironmentUnsupported(f"host_mode {self._host_mode!r} is not overlay or readonly")
        self._workdir = (self._workdir_override or self.task_env_config.workdir or self._build.workdir
                         or DEFAULT_WORKDIR)

    @property
    def workdir(self) -> str:
        return self._workdir

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, force_build: bool) -> None:
        if self._holder is not None:
            return
        if self._base_request:
            base = Path(self._base_request)
            if base.exists():
                await asyncio.to_thread(_remove_tree, base)
            base.mkdir(parents=True)
        else:
            base = Path(tempfile.mkdtemp(prefix=f"fleet-nsenv-{self.session_id[:40]}-"))
        self._base = base
        root, upper, work = base / "root", base / "upper", base / "ovlwork"
        for d in (root, upper, work):
            d.mkdir()
        plan = top_level_plan(_host_entries(), host_mode=self._host_mode, base_dir=str(base.resolve()))
        spec = holder_spec(root=str(root), upper=str(upper), work=str(work), plan=plan,
                           hide=[*self._hide, str(base.resolve())],
                           isolate_network=self._network_policy.network_mode == NetworkMode.NO_NETWORK)
        spec_path = base / "holder.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        argv = [self._unshare, "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private"]
        if spec["isolateNetwork"]:
            argv.append("--net")
        argv += ["--", sys.executable, "-I", str(HOLDER), str(spec_path)]
        self._holder = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
            env={"PATH": EXEC_PATH, "LANG": "C.UTF-8"})
        try:
            line = await asyncio.wait_for(self._holder.stdout.readline(), HOLDER_READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self._end_holder()
            raise RuntimeError(f"the namespace holder was not ready within {HOLDER_READY_TIMEOUT_S}s") from None
        try:
            ready = json.loads(line or b"{}")
        except ValueError:
            ready = {}
        if not ready.get("ready"):
            await self._end_holder()
            raise RuntimeError(f"the namespace holder failed: {ready.get('error') or line.decode(errors='replace')!r}")
        self._holder_pid = int(ready["pid"])
        self.logger.debug(f"namespace environment {self.session_id}: holder pid {self._holder_pid}, "
                          f"host {self._host_mode}, workdir {self._workdir}")
        for note in self._build.ignored:
            self.logger.warning(f"Dockerfile line {note} has no meaning over the host and is ignored")
        await self._checked(f"mkdir -p {' '.join(shlex.quote(d) for d in (*LOG_DIRS, self._workdir))}"
                            f" && chmod 777 {' '.join(LOG_DIRS)}", "prepare the environment's directories")
        await self._replay_build()

    async def _replay_build(self) -> None:
        env_dir = Path(self.environment_dir)
        if not self._build.steps and not (env_dir / "Dockerfile").is_file():
            # No image to build: the environment dir's files are the task's files.
            if env_dir.is_dir() and any(env_dir.iterdir()):
                await self.upload_dir(env_dir, self._workdir)
            return
        current: str | None = None
        for step in self._build.steps:
            if step.op == "WORKDIR":
                current = join_workdir(current, step.args[0])
                await self._checked(f"mkdir -p {shlex.quote(current)}", f"Dockerfile line {step.line}: WORKDIR")
            elif step.op == "ENV":
                self._image_env.update(dict(step.env))
            elif step.op == "COPY":
                await self._copy_step(env_dir, step.args[:-1], step.args[-1], current, step.line)
            elif step.op == "RUN" and self._run_dockerfile:
                result = await self.exec(step.args[0], cwd=current or "/", user="root",
                                         timeout_sec=int(self.task_env_config.build_timeout_sec))
                if result.return_code != 0:
                    tail = ((result.stderr or "") + (result.stdout or ""))[-400:]
                    raise NamespaceBuildError(
                        f"Dockerfile line {step.line}: RUN exited {result.return_code}: {tail.strip()}")

    async def _copy_step(self, env_dir: Path, sources: tuple[str, ...], dest: str, current: str | None,
                         line: int) -> None:
        context = env_dir.resolve()
        target = join_workdir(current, dest)
        matched: list[Path] = []
        for src in sources:
            found = sorted(context.glob(src)) if any(c in src for c in "*?[") else [context / src]
            for p in found:
                p = p.resolve()
                if not p.is_relative_to(context) or not p.exists():
                    raise NamespaceBuildError(f"Dockerfile line {line}: COPY source {src!r} not found in the build context")
                matched.append(p)
        into_dir = dest.endswith("/") or len(matched) > 1 or any(p.is_dir() for p in matched)
        for p in matched:
            if p.is_dir():
                await self.upload_dir(p, target)
            elif into_dir:
                await self.upload_file(p, posixpath.join(target, p.name))
            else:
                await self.upload_file(p, target)

    async def stop(self, delete: bool) -> None:
        await self._end_holder()
        if delete and self._base is not None:
            base = self._base
            gone = await asyncio.to_thread(_remove_tree, base)
            if not gone:
                raise RuntimeError(f"could not remove the namespace environment's dir {base}")
            self._base = None

    async def _end_holder(self) -> None:
        holder, self._holder = self._holder, None
        if holder is None or holder.returncode is not None:
            return
        try:
            if holder.stdin is not None:
                holder.stdin.close()
            holder.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(holder.wait(), HOLDER_STOP_GRACE_S)
        except asyncio.TimeoutError:
            holder.kill()  # unshare --kill-child takes the holder, the kernel the rest
            await holder.wait()

    # ---- commands --------------------------------------------------------------------------

    def _enter(self, user: str | int | None, cwd: str) -> list[str]:
        if not self._holder_pid or self._holder is None or self._holder.returncode is not None:
            raise RuntimeError("the namespace environment is not running")
        argv = [self._nsenter, "--target", str(self._holder_pid), "--mount", "--pid", "--root", "--wd"]
        if self._network_policy.network_mode == NetworkMode.NO_NETWORK:
            argv.append("--net")
        argv += ["--", "/usr/bin/env", "-C", cwd]
        if user is not None and str(user) not in ("root", "0"):
            if isinstance(user, int) or str(user).isdigit():
                argv += ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
            else:
                argv += ["runuser", "-u", str(user), "--"]
        return argv

    def _exec_env(self, env: dict[str, str] | None) -> dict[str, str]:
        merged = {"PATH": EXEC_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm",
                  **self._image_env}
        merged.update(self._merge_env(env) or {})
        return merged

    async def _run(self, argv: list[str], *, env: dict[str, str], stdin: Any = None,
                   stdout: Any = asyncio.subprocess.PIPE, timeout_sec: float | None = None
                   ) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=stdout, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            if timeout_sec:
                out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
            else:
                out, err = await proc.communicate()
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except BaseException:
            _kill_group(proc.pid)  # cancelled: nothing of this command outlives the call
            raise
        return proc.returncode if proc.returncode is not None else -1, out or b"", err or b""

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        argv = self._enter(self._resolve_user(user), cwd or self._workdir) + ["bash", "-c", command]
        code, out, err = await self._run(argv, env=self._exec_env(env), timeout_sec=timeout_sec)
        return ExecResult(stdout=out.decode(errors="replace") or None,
                          stderr=err.decode(errors="replace") or None, return_code=code)

    async def _checked(self, command: str, what: str) -> None:
        result = await self.exec(command, cwd="/", user="root")
        if result.return_code != 0:
            raise NamespaceBuildError(f"{what}: exit {result.return_code}: {(result.stderr or '').strip()[-300:]}")

    async def _root_sh(self, script: str, *args: str, stdin: Any = None,
                       stdout: Any = asyncio.subprocess.PIPE) -> tuple[int, bytes, bytes]:
        argv = self._enter("root", "/") + ["sh", "-c", script, "sh", *args]
        return await self._run(argv, env={"PATH": EXEC_PATH, "LANG": "C.UTF-8"}, stdin=stdin, stdout=stdout)

    # ---- files: tar streams through the namespace ------------------------------------------

    async def _untar_into(self, archive: Path, target_dir: str) -> None:
        with open(archive, "rb") as f:
            code, _, err = await self._root_sh('mkdir -p -- "$1" && tar -x -f - -C "$1" --no-same-owner',
                                               target_dir, stdin=f)
        if code != 0:
            raise RuntimeError(f"upload into {target_dir!r} failed: {err.decode(errors='replace').strip()}")

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = posixpath.join(self._workdir, target_path)
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "upload.tar"
            with tarfile.open(archive, "w") as tf:
                tf.add(str(source_path), arcname=posixpath.basename(target), recursive=False)
            await self._untar_into(archive, posixpath.dirname(target) or "/")

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = posixpath.join(self._workdir, target_dir)
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "upload.tar"

            def pack() -> None:
                with tarfile.open(archive, "w") as tf:
                    for child in sorted(Path(source_dir).iterdir()):
                        tf.add(str(child), arcname=child.name)

            await asyncio.to_thread(pack)
            await self._untar_into(archive, target)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        source = posixpath.join(self._workdir, source_path)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            code, _, err = await self._root_sh('exec cat -- "$1"', source, stdout=out)
        if code != 0:
            target.unlink(missing_ok=True)
            raise FileNotFoundError(f"download of {source!r} failed: {err.decode(errors='replace').strip()}")

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        source = posixpath.join(self._workdir, source_dir)
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "download.tar"
            with open(archive, "wb") as out:
                code, _, err = await self._root_sh('exec tar -c -f - -C "$1" .', source, stdout=out)
            if code != 0:
                raise RuntimeError(f"download of {source!r} failed: {err.decode(errors='replace').strip()}")

            def unpack() -> None:
                with tarfile.open(archive, "r") as tf:
                    tf.extractall(path=target, filter=_transfer_filter)

            await asyncio.to_thread(unpack)


def _transfer_filter(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    if member.isdev() or member.isfifo():
        return None
    return tarfile.data_filter(member, dest_path)


def _host_entries() -> list[tuple[str, str, str]]:
    entries = []
    for name in os.listdir("/"):
        p = os.path.join("/", name)
        if os.path.islink(p):
            entries.append((name, "symlink", os.readlink(p)))
        elif os.path.isdir(p):
            entries.append((name, "dir", ""))
        elif os.path.isfile(p):
            entries.append((name, "file", ""))
        else:
            entries.append((name, "other", ""))
    return entries


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path: Path) -> bool:
    def _retry(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            func(p)
        except OSError:
            pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=_retry)
    return not os.path.lexists(path)
