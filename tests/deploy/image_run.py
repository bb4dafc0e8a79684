"""deploy/Dockerfile built with buildah and its services run from the image, for the deploy tests.

:func:`build_image` runs scripts/build_image.sh (a debootstrap ``bookworm`` base, then
``buildah bud`` with vfs storage and chroot isolation) in :data:`CACHE`, the tests' own
directory: the debootstrap tarball kept there makes a second run faster; a CI machine
starts without it. :class:`Container` is one working container of the
image; each service runs in it with ``buildah run`` on the host's network, as the image's
user, its volumes bind-mounted where compose mounts them. No Docker engine is involved.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomswarm.sandbox.processes import stop_process
from tests.deploy.deploy_tree import ROOT

CACHE = Path(os.environ.get("BLOOMSWARM_IMAGE_CACHE")
             or Path(tempfile.gettempdir()) / "bloomswarm-image-test")
"""The image tests' own directory (debootstrap tarball, buildah storage); safe to delete."""
TAG = "localhost/bloomswarm:test"
BUILD_TIMEOUT_S = 1800


def buildah_command(cache: Path = CACHE) -> list[str]:
    """``buildah`` on the tests' own storage (vfs: no overlay mounts needed)."""
    return ["buildah", "--root", str(cache / "storage"), "--runroot", str(cache / "run"),
            "--storage-driver", "vfs"]


def why_buildah_cannot_run() -> str | None:
    """The reason the image cannot be built and run here, or None when it can."""
    if os.geteuid() != 0:
        return "not root: buildah with vfs storage and chroot isolation needs root here"
    for tool in ("buildah", "debootstrap", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/test.sh installs it with apt-get as root)"
    with tempfile.TemporaryDirectory(prefix="bloomswarm-buildah-probe-") as probe:
        command = buildah_command(Path(probe))
        made = subprocess.run([*command, "from", "scratch"], capture_output=True, text=True,
                              timeout=60, check=False)
        if made.returncode != 0:
            return f"buildah cannot run here: {made.stderr.strip()[-300:]}"
        subprocess.run([*command, "rm", "--all"], capture_output=True, timeout=60, check=False)
    namespaces = subprocess.run(["unshare", "--mount", "--pid", "--fork", "true"], capture_output=True,
                                text=True, timeout=30, check=False)
    if namespaces.returncode != 0:
        return f"no mount/PID namespaces for chroot isolation: {namespaces.stderr.strip()[-300:]}"
    return None


@dataclass(frozen=True)
class Build:
    """A finished image build."""

    tag: str
    seconds: int
    """Wall time of scripts/build_image.sh (with the base image's debootstrap when not cached)."""
    size: str
    """The unpacked image size as buildah prints it, e.g. "572 MB"."""


def build_image(cache: Path = CACHE, tag: str = TAG) -> Build:
    """Build deploy/Dockerfile with scripts/build_image.sh; AssertionError with its output on failure."""
    started = time.monotonic()
    result = subprocess.run([str(ROOT / "scripts" / "build_image.sh"), str(cache), tag], cwd=ROOT,
                            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert result.returncode == 0, f"image build failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    (size,) = re.findall(r"^image_size=(.+)$", result.stdout, re.M)
    return Build(tag, round(time.monotonic() - started), size.strip())


class Container:
    """A working container of ``image``; :meth:`run` and :meth:`start` run commands in it.

    Every command runs with the image's configuration (user, working directory, PATH),
    on the host's network, with ``mounts`` (container path -> (host path, read-only))
    bind-mounted for that command only, so services with different volumes share one
    container (vfs copies the whole image per container)."""

    def __init__(self, image: str, cache: Path = CACHE) -> None:
        self.buildah = buildah_command(cache)
        self.image = image
        name = f"bloomswarm-test-{os.getpid()}-{time.time_ns()}"
        made = subprocess.run([*self.buildah, "from", "--pull-never", "--name", name, image],
                              capture_output=True, text=True, timeout=300, check=False)
        assert made.returncode == 0, made.stderr
        self.name = name
        self.processes: list[subprocess.Popen[bytes]] = []

    def config(self) -> dict[str, Any]:
        """The image's OCI configuration (Entrypoint, Cmd, User, WorkingDir, Env)."""
        result = subprocess.run([*self.buildah, "inspect", "--type", "image", self.image],
                                capture_output=True, text=True, timeout=60, check=True)
        return dict(json.loads(result.stdout)["OCIv1"]["config"])

    def command(self, argv: Sequence[str], mounts: Mapping[str, tuple[Path, bool]] | None = None,
                env: Mapping[str, str] | None = None) -> list[str]:
        """The ``buildah run`` command line running ``argv`` in the container."""
        command = [*self.buildah, "run", "--isolation", "chroot", "--network", "host"]
        for target, (source, read_only) in (mounts or {}).items():
            command += ["--volume", f"{source}:{target}:{'ro' if read_only else 'rw'}"]
        for name, value in (env or {}).items():
            command += ["--env", f"{name}={value}"]
        return [*command, self.name, "--", *argv]

    def run(
        self, argv: Sequence[str], mounts: Mapping[str, tuple[Path, bool]] | None = None,
        env: Mapping[str, str] | None = None, timeout_s: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion."""
        return subprocess.run(self.command(argv, mounts, env), capture_output=True, text=True,
                              timeout=timeout_s, check=False)

    def start(self, argv: Sequence[str], log: Path, mounts: Mapping[str, tuple[Path, bool]] | None = None,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the background, its output in ``log``."""
        with log.open("wb") as out:
            process = subprocess.Popen(self.command(argv, mounts, env), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int | None:
        """SIGTERM the command ``buildah run`` started (by its PID, like a container
        runtime's stop) and return its exit status; a command that does not exit in
        ``timeout_s`` is killed with buildah, and None returned."""
        payload = _payload_pid(process.pid)
        if payload is not None and process.poll() is None:
            os.kill(payload, signal.SIGTERM)
            try:
                return process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        stop_process(process, timeout_s=timeout_s)
        return None if payload is not None else process.returncode

    def remove(self) -> None:
        """Stop what still runs and delete the working container."""
        for process in self.processes:
            if process.poll() is None:
                self.stop(process, timeout_s=10.0)
        subprocess.run([*self.buildah, "rm", self.name], capture_output=True, timeout=120, check=False)


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def _payload_pid(buildah_pid: int) -> int | None:
    """The PID of the command under ``buildah run`` (the first descendant not a buildah
    process), or None once it is gone."""
    pending = _children(buildah_pid)
    while pending:
        pid = pending.pop(0)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if "buildah" not in comm:
            return pid
        pending += _children(pid)
    return None
