"""Agents as real processes moving versions with the libtorrent swarm, on 127.0.0.1.

moto's S3 server is the origin, seen by the agents through a counting proxy
(:class:`~bloomswarm.sandbox.origin_proxy.OriginProxy`), so the bytes of filter files
the origin served are counted where they leave it, beside the agents' own
``bytes_from_origin`` accounting. The publisher's own code publishes; opentracker
(whitelist mode) or the agents' DHT finds the peers. An agent is ``python -m bloomswarm
agent run`` with the default ("swarm") transfer, listening on its own loopback port; a
LiveFilter in another process answers lookups from an agent's data directory.

The tracker scenario publishes hybrid v1+v2 torrents, the DHT scenario v1 torrents (the
publisher's default), so both formats run end to end. aria2c, a BitTorrent client no one
here wrote, downloads a published version (default format) from the agents' swarm.

Every process a test starts is stopped by that test, by PID. The waits are deadline
loops whose bounds are safety limits, not timing assertions.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import S3Config
from bloomswarm.publisher.config import TorrentFormat
from bloomswarm.sandbox.origin_proxy import OriginProxy
from bloomswarm.sandbox.processes import free_port
from tests.functional.agent_fleet import AGENTS, ORIGIN_PACE, SwarmFleet, keys
from tests.functional.tracker import OpenTracker, opentracker  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.timeout(300)

MAX_ORIGIN_COPIES = 1.5


@pytest.fixture
def proxy(s3_server: str) -> Iterator[OriginProxy]:
    with OriginProxy(s3_server, connection_rate=ORIGIN_PACE, cache_files=False) as counting:
        yield counting


@contextlib.contextmanager
def _fleet(tmp_path: Path, s3: S3Config, proxy: OriginProxy, trackers: tuple[str, ...] = (),
           torrent_format: TorrentFormat = "v1") -> Iterator[SwarmFleet]:
    fleet = SwarmFleet(tmp_path, s3, proxy, trackers=trackers, torrent_format=torrent_format)
    try:
        yield fleet
    finally:
        fleet.close()


def _publish_and_follow(
    fleet: SwarmFleet,
    settings: Callable[[int], dict[str, object]],
    allow: Callable[[Manifest], None] | None = None,
) -> dict[str, float]:
    """The scenario both discovery modes share: v1 to every agent and a LiveFilter, then v2.
    ``settings(i)`` is agent i's ``[swarm]`` table. ``allow(manifest)`` runs after a
    version is published and before latest points to it (the tracker's whitelist).
    Returns the origin bytes per version, as the agents and the proxy counted them, in
    multiples of the file size."""
    v1 = fleet.publish(keys(1))
    assert v1.torrent_format == fleet.publisher.torrent_format
    if allow is not None:
        allow(v1)
    for i in range(AGENTS):
        fleet.agent(f"agent{i}", settings(i))
    fleet.wait_version("v1 installed", 1)
    fleet.check_installed(v1)
    reader = fleet.reader(fleet.agents[0])
    reader.wait_until_serving(1, keys(1)[:50], keys(2)[:3])
    agents_v1, proxy_v1 = fleet.origin_bytes(), fleet.proxy.filter_bytes

    fleet.hold_latest(1)
    v2 = fleet.publish(keys(1) + keys(2))
    assert v2.version == 2 and v2.size == v1.size
    if allow is not None:
        allow(v2)
    fleet.point_latest(2)
    fleet.wait_version("v2 installed", 2)
    fleet.check_installed(v2)
    reader.wait_until_serving(2, keys(2)[:50], [])
    agents_v2, proxy_v2 = fleet.origin_bytes() - agents_v1, fleet.proxy.filter_bytes - proxy_v1

    copies = {"agents_v1": agents_v1 / v1.size, "proxy_v1": proxy_v1 / v1.size,
              "agents_v2": agents_v2 / v2.size, "proxy_v2": proxy_v2 / v2.size}
    print(f"origin copies for {AGENTS} agents (file {v1.size} bytes): {copies}")
    for agent in fleet.agents:
        assert agent.metric("bytes_from_peers_total") + agent.metric("bytes_from_origin_total") > 0
    peers = sum(agent.metric("bytes_from_peers_total") for agent in fleet.agents)
    assert peers > 0, fleet.describe()
    for name, value in copies.items():
        assert value <= MAX_ORIGIN_COPIES, f"{name}: {value:.2f} copies\n{fleet.describe()}"
    # The proxy saw what the agents say they took from the origin (a little more: bytes
    # in flight when a web seed is dropped are sent but never counted as payload).
    for version in (1, 2):
        assert copies[f"proxy_v{version}"] >= copies[f"agents_v{version}"] * 0.9, copies
    for agent in fleet.agents:
        assert agent.stop() == 0, agent.log()[-3000:]  # SIGTERM: a clean exit
        assert "event=stopped" in agent.log()
    return copies


def test_tracker_swarm_installs_then_swaps_with_little_origin_traffic(
    tmp_path: Path, s3_bucket: S3Config, proxy: OriginProxy, opentracker: OpenTracker,  # noqa: F811
) -> None:
    with _fleet(tmp_path, s3_bucket, proxy, trackers=(opentracker.announce_url,),
                torrent_format="hybrid") as fleet:
        _publish_and_follow(
            fleet,
            lambda _i: {"listen_interfaces": f"127.0.0.1:{free_port(udp=True)}",
                        "trackers": [opentracker.announce_url], "enable_dht": False},
            lambda m: opentracker.allow(m.info_hash_v1, m.info_hash_v2),
        )


def test_dht_only_swarm_installs_then_swaps_with_little_origin_traffic(
    tmp_path: Path, s3_bucket: S3Config, proxy: OriginProxy,
) -> None:
    first = free_port(udp=True)

    def settings(i: int) -> dict[str, object]:
        port = first if i == 0 else free_port(udp=True)
        return {
            "listen_interfaces": f"127.0.0.1:{port}",
            "trackers": [],
            "enable_dht": True,
            "dht_restrict_ips": False,  # every agent shares 127.0.0.1
            "dht_bootstrap_nodes": [] if i == 0 else [f"127.0.0.1:{first}"],
        }

    with _fleet(tmp_path, s3_bucket, proxy) as fleet:
        _publish_and_follow(fleet, settings)


@pytest.mark.skipif(shutil.which("aria2c") is None, reason="aria2c is not installed")
def test_aria2c_downloads_a_published_version_from_the_agents(
    tmp_path: Path, s3_bucket: S3Config, proxy: OriginProxy, opentracker: OpenTracker,  # noqa: F811
) -> None:
    with _fleet(tmp_path, s3_bucket, proxy, trackers=(opentracker.announce_url,)) as fleet:
        v1 = fleet.publish(keys(1))
        # The publisher's default: a v1 torrent. (Debian's aria2c 1.36 computes a wrong
        # info-hash for hybrid v1+v2 torrents, aria2 issue #1903, fixed after 1.36.0;
        # tests/functional/test_swarm.py keeps watching that.)
        assert v1.torrent_format == "v1" and v1.info_hash_v2 is None
        stored = fleet.store.get(v1.torrent_key)
        assert stored is not None
        torrent = tmp_path / "v1.torrent"
        torrent.write_bytes(stored.data)  # the published .torrent, byte for byte
        shown = subprocess.run(["aria2c", "-S", str(torrent)], capture_output=True, text=True,
                               timeout=30, check=False).stdout
        assert f"Info Hash: {v1.info_hash_v1}" in shown, shown  # aria2c reads the same torrent
        opentracker.allow(v1.info_hash_v1, v1.info_hash_v2)
        for i in range(2):
            fleet.agent(f"agent{i}", {"listen_interfaces": f"127.0.0.1:{free_port(udp=True)}",
                                      "trackers": [opentracker.announce_url], "enable_dht": False})
        fleet.wait_version("v1 installed", 1)

        out = tmp_path / "aria2"
        out.mkdir()
        log = tmp_path / "aria2c.log"
        port = free_port(udp=True)
        with log.open("wb") as sink:
            aria = subprocess.Popen(
                ["aria2c", f"--dir={out}", "--seed-time=0", "--enable-dht=false",
                 "--enable-dht6=false", "--bt-enable-lpd=false", "--enable-peer-exchange=false",
                 f"--listen-port={port}", "--interface=127.0.0.1", "--disable-ipv6=true",
                 "--no-conf=true", "--summary-interval=0", "--console-log-level=notice",
                 "--bt-stop-timeout=60", "--allow-overwrite=true", "--file-allocation=none",
                 str(torrent)],
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path,
            )
        fleet.processes.append(aria)
        deadline = time.monotonic() + 120
        while aria.poll() is None:
            assert time.monotonic() < deadline, (
                f"aria2c did not finish:\n{log.read_text(errors='replace')[-3000:]}\n{fleet.describe()}")
            time.sleep(0.2)
        output = log.read_text(errors="replace")
        assert aria.returncode == 0, f"aria2c exited {aria.returncode}:\n{output[-3000:]}\n{fleet.describe()}"
        files = [p for p in out.rglob("*") if p.is_file()]
        assert len(files) == 1, (files, output[-2000:])
        assert hashlib.sha256(files[0].read_bytes()).hexdigest() == v1.sha256
        uploaded = sum(agent.metric("bytes_uploaded_total") for agent in fleet.agents)
        assert uploaded >= v1.size, f"agents uploaded {uploaded} bytes\n{fleet.describe()}"
