"""Functional: deploy/docker-compose.yml run on loopback as real processes (no Docker engine).

moto's S3 server stands in for MinIO (no MinIO server is installable from PyPI or Debian);
everything else runs the compose services' own commands, environment and config files:
keygen, the sample data, opentracker started by the tracker service's shell script (it
records its PID), tracker-sync finding that PID in the file and sending SIGHUP, one
publish, three agents that fetch the version from each other and the origin, and the
app reading agent-1's directory through LiveFilter. See tests/deploy/compose_local.py
for what is mapped and why.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from bloomswarm.common.datadir import DataDir
from bloomswarm.sandbox.processes import free_port
from bloomswarm.sandbox.s3server import MotoServer
from bloomswarm.sandbox.tracker import OpenTracker, tracker_accepts
from tests.deploy.compose_local import LocalCompose

pytestmark = pytest.mark.skipif(
    shutil.which("opentracker") is None,
    reason="opentracker is not installed (scripts/test.sh installs it with apt-get as root)",
)

AGENTS = ("agent-1", "agent-2", "agent-3")


@pytest.fixture
def local() -> Iterator[LocalCompose]:
    with MotoServer() as s3:
        fleet = LocalCompose(s3.endpoint)
        try:
            yield fleet
        finally:
            fleet.stop()


def _serving_v1(status_port: int) -> bool:
    """The agent's /status says it is ready with v1 installed (False while it starts)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/status", timeout=5) as reply:
            data = json.loads(reply.read())
    except OSError:
        return False
    return bool(data["ready"] is True and data["current_version"] == 1)


def test_the_tracker_probe_sees_hashes_with_space_and_plus_bytes() -> None:
    # opentracker reads "+" as 0x2b, not as a space: a probe must send 0x20 as %20
    with OpenTracker() as tracker:
        space, plus = "20" * 20, "2b" * 20
        tracker.allow(space)  # raises unless accepted within 10 s of one SIGHUP
        assert tracker_accepts(tracker.host, tracker.port, space)
        assert not tracker_accepts(tracker.host, tracker.port, plus)
        tracker.allow(plus)
        assert tracker_accepts(tracker.host, tracker.port, plus)


@pytest.mark.slow
def test_compose_services_publish_distribute_and_serve_one_version(local: LocalCompose) -> None:
    # minio-init: the bucket its script creates
    script = local.services["minio-init"]["command"][0]
    (bucket,) = re.findall(r"mc mb --ignore-existing local/([a-z0-9.-]+)", script)
    boto3.client("s3", endpoint_url=local.hosts["http://minio:9000"], region_name="us-east-1",
                 aws_access_key_id="x", aws_secret_access_key="x").create_bucket(Bucket=bucket)

    for service in ("keygen", "sample-data"):
        result = local.run(service)
        assert result.returncode == 0, f"{service}: {result.stderr}"
    assert (local.volume("trust") / "publisher.pub").is_file()
    assert (local.volume("publisher-input") / "keys.txt").stat().st_size > 0

    tracker = local.start_tracker()
    pid_file = local.volume("tracker-state") / "opentracker.pid"
    local.wait(lambda: pid_file.is_file() and pid_file.read_text().strip() == str(tracker.pid), 10,
               "the tracker's PID file", ("tracker",))
    local.wait(local.healthy("tracker"), 20, "the tracker's healthcheck", ("tracker",))  # depends_on
    local.start("tracker-sync")

    published = local.run("publisher")
    assert published.returncode == 0, published.stderr
    assert "published v1" in published.stdout, published.stdout

    # tracker-sync: whitelist from the bucket, SIGHUP through the PID file
    whitelist = local.volume("tracker-state") / "whitelist.txt"
    local.wait(lambda: whitelist.is_file() and whitelist.read_text().strip() != "", 30,
               "tracker-sync to write the whitelist", ("tracker", "tracker-sync"))
    hashes = whitelist.read_text().split()
    # the sandbox's probe: urlencode's "+" for a 0x20 byte made this fail 1 run in ~13
    local.wait(lambda: all(tracker_accepts("127.0.0.1", local.tracker_port, h) for h in hashes), 30,
               "the tracker to accept the whitelisted version", ("tracker", "tracker-sync"))
    assert "sent SIGHUP to" in local.log("tracker-sync")

    status_ports = {}
    for name in AGENTS:
        status_ports[name] = free_port()
        local.start(name, extra_env={
            "BLOOMSWARM_AGENT_STATUS_HOST": "127.0.0.1",
            "BLOOMSWARM_AGENT_STATUS_PORT": str(status_ports[name]),
            "BLOOMSWARM_AGENT_SWARM_LISTEN_INTERFACES": f"127.0.0.1:{local.agent_ports[name]}",
            "BLOOMSWARM_AGENT_SWARM_DHT_RESTRICT_IPS": "false",
        })
    data_dirs = {name: local.volume(f"{name}-data") for name in AGENTS}
    local.wait(lambda: all(_serving_v1(port) for port in status_ports.values()), 120,
               "every agent to install v1", ("tracker", "tracker-sync", *AGENTS))
    assert all(DataDir(d).current_version() == 1 for d in data_dirs.values())

    app = local.run("app", "--count", "1", timeout_s=120)
    assert app.returncode == 0, app.stderr
    assert app.stdout.startswith("version=1 user:1=True user:0=False lookups_per_s="), app.stdout
    assert Path(local.volume("agent-1-data") / "current").is_symlink()
