"""deploy/docker-compose.yml played on loopback with real processes, without a Docker engine.

Each compose service that runs the bloomswarm image becomes a child process running the
service's own command line, environment and configuration files. What a container would
provide is mapped onto a private directory and loopback ports:

- every named volume is a directory under ``root/volumes``, and every bind-mounted file a
  copy under ``root/files``; container paths in commands, environment values and the
  mounted config files are rewritten to them (per service, by its mount targets); files
  the Dockerfile copies from deploy/ into the image are read from the repository;
- service host names become loopback addresses: ``minio:9000`` the moto S3 server (MinIO
  is not installable here), ``tracker:6969`` opentracker's port, ``agent-N:6881`` agent
  N's BitTorrent port;
- agents share 127.0.0.1, so each gets its own listen and status port and the DHT's
  per-address limits are off (environment overrides; containers have addresses of their
  own).

Every process is stopped by its own PID.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bloomswarm.sandbox.processes import free_port, stop_process
from tests.deploy.deploy_tree import DEPLOY, compose, compose_argv, compose_environment, compose_mounts

MINIO = "minio:9000"
TRACKER = "tracker:6969"


class LocalCompose:
    """The compose file's services as local processes under ``root`` (see the module doc)."""

    def __init__(self, s3_endpoint: str) -> None:
        self.document = compose()
        self.services: dict[str, dict[str, Any]] = self.document["services"]
        self.root = Path(tempfile.mkdtemp(prefix="bloomswarm-compose-"))
        self.root.chmod(0o755)  # the tracker runs as nobody, like the container's user
        self.tracker_port = free_port(udp=True)
        self.agent_ports = {name: free_port(udp=True) for name in self.services if name.startswith("agent-")}
        self.hosts = {
            f"http://{MINIO}": s3_endpoint,
            TRACKER: f"127.0.0.1:{self.tracker_port}",
            **{f"{name}:6881": f"127.0.0.1:{port}" for name, port in self.agent_ports.items()},
        }
        dockerfile = (DEPLOY / "Dockerfile").read_text()
        self.image_files = {
            dest: str(DEPLOY.parent / source)
            for source, dest in re.findall(r"^COPY (deploy/\S+) (\S+)$", dockerfile, re.M)
        }
        """Files the Dockerfile copies from deploy/ into the image -> the repository's files."""
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        for name in self.document["volumes"]:
            path = self.volume(name)
            path.mkdir(parents=True)
            path.chmod(0o777)

    def volume(self, name: str) -> Path:
        return self.root / "volumes" / name

    # --- rewriting ------------------------------------------------------------------------

    def mounts(self, service: str) -> dict[str, Path]:
        """Container path -> local path of one service's volumes and (rewritten) files."""
        result: dict[str, Path] = {}
        for target, (source, _) in compose_mounts(self.services[service]).items():
            if source.startswith("."):
                result[target] = self.root / "files" / service / Path(target).name
            else:
                result[target] = self.volume(source)
        return result

    def rewrite(self, service: str, text: str) -> str:
        """``text`` as the service sees it here: container paths and host names replaced."""
        for target, local in sorted(self.mounts(service).items(), key=lambda kv: -len(kv[0])):
            text = text.replace(target, str(local))
        for host, local_host in {**self.hosts, **self.image_files}.items():
            text = text.replace(host, local_host)
        return text

    def prepare_files(self, service: str) -> None:
        """Copy the service's bind-mounted files, rewritten."""
        for target, (source, _) in compose_mounts(self.services[service]).items():
            if source.startswith("."):
                local = self.mounts(service)[target]
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(self.rewrite(service, (DEPLOY / source).read_text()))

    def argv(self, service: str) -> list[str]:
        argv = [self.rewrite(service, a) for a in compose_argv(self.services[service])]
        if argv[0] == "bloomswarm":
            return [sys.executable, "-m", "bloomswarm", *argv[1:]]
        if argv[0] == "python":
            return [sys.executable, *argv[1:]]
        return argv

    def environ(self, service: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BLOOMSWARM_", "AWS_"))}
        # the image's PATH starts with the virtual environment holding bloomswarm
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        declared = compose_environment(self.services[service])
        env.update({k: self.rewrite(service, v) for k, v in declared.items()})
        env.update(extra or {})
        return env

    # --- running --------------------------------------------------------------------------

    def run(
        self, service: str, *extra_args: str, timeout_s: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a one-shot service to completion."""
        self.prepare_files(service)
        return subprocess.run([*self.argv(service), *extra_args], env=self.environ(service),
                              capture_output=True, text=True, timeout=timeout_s, check=False)

    def start(self, service: str, *, extra_env: Mapping[str, str] | None = None, as_nobody: bool = False,
              argv: list[str] | None = None) -> subprocess.Popen[bytes]:
        """Start a long-running service; its output goes to ``root/logs/SERVICE.log``."""
        self.prepare_files(service)
        command = argv if argv is not None else self.argv(service)
        if as_nobody and os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            assert setpriv is not None, "setpriv (util-linux) is needed to drop root like the image"
            command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        log = self.root / "logs" / f"{service}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("wb") as out:
            process = subprocess.Popen(command, env=self.environ(service, extra_env), cwd=self.root,
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.processes[service] = process
        return process

    def start_tracker(self) -> subprocess.Popen[bytes]:
        """The tracker service's shell script, its ports moved to the loopback port."""
        argv = self.argv("tracker")
        argv[-1] = re.sub(r"-([pP]) 6969\b", lambda m: f"-{m.group(1)} {self.tracker_port}", argv[-1])
        return self.start("tracker", argv=argv, as_nobody=True)

    def healthy(self, service: str) -> Callable[[], bool]:
        """A check running the service's own healthcheck command (CMD form), rewritten."""
        test = self.services[service]["healthcheck"]["test"]
        assert test[0] == "CMD", test
        command = [self.rewrite(service, a) for a in test[1:]]
        if service == "tracker":
            command = [a.replace("127.0.0.1:6969", f"127.0.0.1:{self.tracker_port}") for a in command]
        if command[0] == "python":
            command[0] = sys.executable

        def check() -> bool:
            return subprocess.run(command, capture_output=True, timeout=30, check=False).returncode == 0

        return check

    def log(self, service: str) -> str:
        path = self.root / "logs" / f"{service}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            stop_process(process, timeout_s=15.0)
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def wait(
        self, condition: Callable[[], bool], timeout_s: float, what: str, services: tuple[str, ...] = ()
    ) -> None:
        """Poll ``condition`` until true; fail with the services' logs on a timeout or exit."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            for name in services:
                process = self.processes.get(name)
                assert process is None or process.poll() is None, f"{name} exited: {self.log(name)}"
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {name}\n{self.log(name)}" for name in services)
                raise AssertionError(f"timed out waiting for {what}\n{logs}")
            time.sleep(0.2)
