"""Functional: deploy/Dockerfile built (debootstrap base + buildah) and its compose services run
from the image against moto's S3 server on loopback.

What runs from the image, each with its compose command line (the image's entry point plus
the service's command), environment, volumes at the compose mount points (host
directories initialised like Docker initialises a named volume: owner and mode of the
image's directory) and config files (copies with host names mapped to loopback): keygen,
sample-data, one publish, agent-1 and agent-2, agent-1's healthcheck, and the app reading
agent-1's data directory. The agents find each other through agent-1 (DHT bootstrap) and
read the origin through presigned URLs; the tracker is not run (its announce URL points at
a closed port). Skipped only where buildah cannot run (see ``why_buildah_cannot_run``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from bloomswarm.sandbox.processes import free_port
from bloomswarm.sandbox.s3server import MotoServer
from tests.deploy.deploy_tree import (
    DEPLOY,
    IMAGE_ENTRYPOINT,
    bloomswarm_services,
    compose,
    compose_argv,
    compose_environment,
    compose_mounts,
)
from tests.deploy.image_run import Build, Container, build_image, why_buildah_cannot_run

REASON = why_buildah_cannot_run()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400),
              pytest.mark.skipif(REASON is not None, reason=f"image not built: {REASON}")]

IMAGE_UID = 10001
AGENTS = ("agent-1", "agent-2")
Mounts = dict[str, tuple[Path, bool]]


@pytest.fixture(scope="module")
def image() -> Build:
    build = build_image()
    print(f"\nimage {build.tag}: built in {build.seconds} s, {build.size}")
    return build


@pytest.fixture
def container(image: Build) -> Iterator[Container]:
    made = Container(image.tag)
    try:
        yield made
    finally:
        made.remove()


class Services:
    """The compose services of the bloomswarm image, mapped onto ``root`` and loopback."""

    def __init__(self, container: Container, root: Path, s3_endpoint: str) -> None:
        self.container = container
        self.root = root
        self.document = compose()
        self.services = bloomswarm_services(self.document)
        self.agent_ports = {name: free_port(udp=True) for name in AGENTS}
        self.status_ports = {name: free_port() for name in AGENTS}
        self.hosts = {"http://minio:9000": s3_endpoint, "tracker:6969": f"127.0.0.1:{free_port()}",
                      **{f"{name}:6881": f"127.0.0.1:{port}" for name, port in self.agent_ports.items()}}

    def volume(self, name: str, target: str) -> Path:
        """A named volume's host directory, first initialised from the image's ``target``."""
        path = self.root / "volumes" / name
        if not path.exists():
            stat = self.container.run(["stat", "-c", "%u %g %a", target])
            assert stat.returncode == 0, f"{target} is not in the image: {stat.stderr}"
            uid, gid, mode = stat.stdout.split()
            path.mkdir(parents=True)
            os.chown(path, int(uid), int(gid))
            path.chmod(int(mode, 8))
        return path

    def mounts(self, service: str) -> Mounts:
        result: Mounts = {}
        for target, (source, read_only) in compose_mounts(self.services[service]).items():
            if source.startswith("."):
                local = self.root / "files" / service / Path(target).name
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(self.rewrite((DEPLOY / source).read_text()))
                local.chmod(0o644)
                result[target] = (local, True)
            else:
                result[target] = (self.volume(source, target), read_only)
        return result

    def rewrite(self, text: str) -> str:
        for host, local in self.hosts.items():
            text = text.replace(host, local)
        return text

    def argv(self, service: str) -> list[str]:
        return [self.rewrite(a) for a in compose_argv(self.services[service])]

    def env(self, service: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: self.rewrite(v) for k, v in compose_environment(self.services[service]).items()}
        return {**env, **(extra or {})}

    def run(self, service: str, *extra_args: str) -> str:
        argv = [*self.argv(service), *extra_args]
        result = self.container.run(argv, self.mounts(service), self.env(service))
        assert result.returncode == 0, f"{service}: {result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        return result.stdout

    def start_agent(self, name: str) -> None:
        extra = {"BLOOMSWARM_AGENT_STATUS_HOST": "127.0.0.1",
                 "BLOOMSWARM_AGENT_STATUS_PORT": str(self.status_ports[name]),
                 "BLOOMSWARM_AGENT_SWARM_LISTEN_INTERFACES": f"127.0.0.1:{self.agent_ports[name]}",
                 "BLOOMSWARM_AGENT_SWARM_DHT_RESTRICT_IPS": "false"}  # agents share 127.0.0.1 here
        (self.root / "logs").mkdir(exist_ok=True)
        self.container.start(self.argv(name), self.root / "logs" / f"{name}.log", self.mounts(name),
                             self.env(name, extra))

    def log(self, name: str) -> str:
        path = self.root / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _status(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as reply:
            return dict(json.loads(reply.read()))
    except OSError:
        return {}


def test_the_image_runs_the_compose_services_and_serves_a_version(
    container: Container, tmp_path: Path
) -> None:
    started = time.monotonic()
    config = container.config()
    assert config["Entrypoint"] == IMAGE_ENTRYPOINT  # what compose_argv assumes for services without one
    assert config["User"] == f"{IMAGE_UID}:{IMAGE_UID}"
    whoami = container.run(["id", "-u"])
    assert whoami.stdout.strip() == str(IMAGE_UID), whoami
    default = container.run([*config["Entrypoint"], *config["Cmd"]])  # `docker run IMAGE`
    assert default.returncode == 0 and "usage: bloomswarm" in default.stdout, default
    fast = container.run(["python", "-c",
                          "from bloomswarm.common.fastpath import EXTENSION; print(EXTENSION is not None)"])
    assert fast.stdout.strip() == "True", fast

    tmp_path.chmod(0o755)
    with MotoServer() as s3:
        services = Services(container, tmp_path, s3.endpoint)
        # Every writable volume mounts on a directory of the image owned by its user.
        for name, service in services.services.items():
            for target, (source, read_only) in compose_mounts(service).items():
                if not source.startswith(".") and not read_only:
                    path = services.volume(source, target)
                    assert path.stat().st_uid == IMAGE_UID, f"{name}: {target} is not owned by the image user"

        script = services.document["services"]["minio-init"]["command"][0]
        (bucket,) = re.findall(r"mc mb --ignore-existing local/([a-z0-9.-]+)", script)
        boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id="x",
                     aws_secret_access_key="x").create_bucket(Bucket=bucket)

        services.run("keygen")
        key = tmp_path / "volumes" / "signing-key" / "publisher.key"
        assert key.stat().st_uid == IMAGE_UID and key.stat().st_mode & 0o077 == 0
        assert (tmp_path / "volumes" / "trust" / "publisher.pub").is_file()
        services.run("sample-data")
        published = services.run("publisher")
        assert "published v1" in published, published

        for name in AGENTS:
            services.start_agent(name)
        deadline = time.monotonic() + 180
        while not all(_status(port).get("current_version") == 1 for port in services.status_ports.values()):
            for process in container.processes:
                assert process.poll() is None, "\n".join(services.log(n) for n in AGENTS)
            assert time.monotonic() < deadline, "\n".join(f"--- {n}\n{services.log(n)}" for n in AGENTS)
            time.sleep(0.5)
        statuses = {name: _status(port) for name, port in services.status_ports.items()}
        assert all(s["ready"] is True for s in statuses.values()), statuses

        health = services.services["agent-1"]["healthcheck"]["test"]
        assert health[0] == "CMD"
        port = services.status_ports["agent-1"]
        check = [a.replace("127.0.0.1:9731", f"127.0.0.1:{port}") for a in health[1:]]
        assert container.run(check).returncode == 0  # the compose healthcheck, in the image

        app = services.run("app", "--count", "1")
        assert app.startswith("version=1 user:1=True user:0=False lookups_per_s="), app

        for name in AGENTS:
            installed = tmp_path / "volumes" / f"{name}-data" / "current"
            assert installed.is_symlink()
            assert installed.resolve().stat().st_uid == IMAGE_UID
        for process in list(container.processes):
            assert container.stop(process) == 0  # SIGTERM: a clean shutdown inside the image
    print(f"image run: {time.monotonic() - started:.1f} s")
    shutil.rmtree(tmp_path / "volumes", ignore_errors=True)
