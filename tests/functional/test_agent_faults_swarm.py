"""Faults with the whole system as the issue sets it up: moto's S3 server, opentracker, one
publisher and 5 agents as separate processes moving versions with the libtorrent swarm.

One fleet serves every test of this module (starting 5 agents and installing v1 once is
most of the cost); the tests run in file order and each starts by checking the state the
previous one left: every agent on a known version, nothing downloading. Faults are
injected with the publisher's own library calls: a manifest rewritten after signing, a
pointer signed by an untrusted key, a signed manifest whose SHA-256 is not the file's,
a filter object corrupted in the bucket, an unpinned downgrade, the S3 server stopped
for 30 s, and an agent with too little disk; signed pins are followed back to an
installed version and to one that must be downloaded again. The S3 server is this
module's own (not the session's), so that it can be stopped; agents reach it through the
fleet's counting origin. Everything started is stopped by PID at the end of the module.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from bloomswarm.common.bucket_layout import manifest_key, signature_key
from bloomswarm.common.manifest import Manifest, sign_manifest
from bloomswarm.common.signing import generate_keypair, parse_private_key
from bloomswarm.common.storage import S3Config
from bloomswarm.publisher.versions import read_manifest
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.fleet import LocalFleet
from bloomswarm.sandbox.processes import free_port
from bloomswarm.sandbox.s3server import MotoServer
from bloomswarm.sandbox.tracker import OpenTracker
from tests.functional.fleet_setup import (
    KEY,
    fleet_spec,
    keys,
    publish_keys,
    roll_out_first_version,
    with_tables,
)
from tests.functional.live_reader import LiveReader

pytestmark = pytest.mark.timeout(300)

ROGUE = parse_private_key(generate_keypair()[0])
CAPACITY = 1_000_000
"""About 1.2 MB filters: 10 pieces of 128 KiB."""
OUTAGE_S = 30.0


@dataclass
class World:
    """The module's fleet and what the tests need to reach it."""

    server: MotoServer
    tracker: OpenTracker
    s3: S3Config
    fleet: LocalFleet
    reader: LiveReader
    current: int
    """The version every agent is on when a test starts."""

    def publish(self, version_keys: list[str]) -> Manifest:
        """Publish (latest.json held where it is by a pin; the fleet whitelists the torrent)."""
        return publish_keys(self.fleet, version_keys, CAPACITY)

    def hold(self) -> None:
        """Pin latest.json at the current version: agents keep it and drop any download."""
        self.fleet.hold_latest(self.current)

    def all_serving(self, version: int, version_keys: list[str]) -> None:
        """Every agent is on ``version``, ready, and the LiveFilter answers from it."""
        for agent in self.fleet.agents:
            assert agent.current_version() == version, agent.root.name
            assert agent.http_status("/readyz") == 200, agent.root.name
        assert self.reader.answers(version, version_keys[:20], [])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, s3_server: str) -> Iterator[World]:
    """Its own moto server, opentracker, the fleet's origin, 5 agents with v1 installed, a reader.

    ``s3_server`` (the session's server) is asked for only for the environment it sets
    (fake credentials, no proxy for loopback)."""
    del s3_server
    if shutil.which("opentracker") is None:
        pytest.skip("opentracker is not installed (apt-get install opentracker; "
                    "scripts/test.sh installs it)")
    root = tmp_path_factory.mktemp("faults-swarm")
    server = MotoServer(port=free_port())
    server.start()
    tracker = OpenTracker()
    fleet: LocalFleet | None = None
    reader: LiveReader | None = None
    try:
        tracker.start()
        s3 = S3Config(bucket=f"faults-{uuid.uuid4().hex[:12]}", prefix="fleet",
                      endpoint_url=server.endpoint, region="us-east-1", connect_timeout_s=1.0,
                      read_timeout_s=5.0, max_attempts=1)
        boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1").create_bucket(
            Bucket=s3.bucket)
        # Full files only: these faults are the file's (test_agent_deltas.py covers deltas).
        spec = fleet_spec(discovery="tracker", agent_tables=with_tables({"install": {"deltas": False}}))
        fleet = LocalFleet(root, spec, s3=s3, tracker=tracker, signing_key=KEY)
        fleet.start()
        v1, reader = roll_out_first_version(fleet, LiveReader, CAPACITY)
        assert v1.torrent_format == "v1"  # the publisher's default
        yield World(server, tracker, s3, fleet, reader, current=1)
    finally:
        if reader is not None:
            reader.stop()
        if fleet is not None:
            fleet.stop()
        tracker.stop()
        server.stop()


def _at_least(name: str, value: float, **labels: str) -> Callable[[AgentProcess], bool]:
    return lambda agent: agent.metric(name, **labels) >= value


def _versions_dir(agent: AgentProcess, version: int) -> Path:
    return agent.data_dir / "versions" / f"v{version}"


def test_tampered_manifest_and_untrusted_pointer_are_refused(world: World) -> None:
    fleet = world.fleet
    fetched = [_downloaded(agent) for agent in fleet.agents]
    world.hold()
    v2 = world.publish(keys(2))
    tampered = dataclasses.replace(v2, source_fingerprint="tampered")  # changed after signing
    fleet.store.put(manifest_key(v2.version), tampered.to_bytes())
    fleet.point_latest(v2.version)
    fleet.wait_all("tampered manifest refused",
                   _at_least("verification_failures_total", 1, check="manifest_signature"))
    fleet.point_latest(v2.version, key=ROGUE)  # a pointer no agent trusts
    fleet.wait_all("untrusted pointer refused",
                   _at_least("verification_failures_total", 1, check="pointer_signature"))
    world.all_serving(1, keys(1))
    assert [_downloaded(agent) for agent in fleet.agents] == fetched  # nothing was fetched
    for agent in fleet.agents:
        assert not _versions_dir(agent, v2.version).exists()
        assert "event=announcement_refused" in agent.log()


def _downloaded(agent: AgentProcess) -> float:
    """Payload bytes ``agent`` has downloaded in all, from peers and the origin."""
    return agent.metric("bytes_from_origin_total") + agent.metric("bytes_from_peers_total")


def test_file_whose_sha256_differs_from_the_signed_manifest_is_never_installed(world: World) -> None:
    """The torrent matches the file, so the swarm moves and piece-checks it, but the signed
    manifest names another SHA-256: the swap gate's whole-file check refuses it."""
    fleet = world.fleet
    world.hold()
    good = world.publish(keys(3))
    wrong = dataclasses.replace(good, sha256="0" * 64)
    manifest_bytes, signature_bytes = sign_manifest(wrong, KEY)  # signed by the real key
    fleet.store.put(manifest_key(good.version), manifest_bytes)
    fleet.store.put(signature_key(good.version), signature_bytes)
    fleet.point_latest(good.version)
    fleet.wait_all("file SHA-256 refused", _at_least("verification_failures_total", 1, check="sha256"))
    world.all_serving(1, keys(1))
    for agent in fleet.agents:
        assert not _versions_dir(agent, good.version).exists()
        assert "SHA-256" in (agent.status()["last_error"] or "")
        assert "event=verification_failed" in agent.log()
    world.hold()  # the fleet drops the download it keeps retrying
    fleet.wait_all("download dropped", lambda a: a.status().get("download") is None)


def test_corrupt_object_in_the_bucket_fails_pieces_then_recovers(world: World) -> None:
    """The filter object is damaged after publishing: its pieces from the origin fail
    libtorrent's hash check, nobody swaps; once the object is repaired, all install it."""
    fleet = world.fleet
    world.hold()
    version = world.publish(keys(4))
    stored = fleet.store.get(version.filter_key)
    assert stored is not None
    corrupt = bytearray(stored.data)
    corrupt[-100] ^= 0x55  # in the last piece
    fleet.store.put(version.filter_key, bytes(corrupt))
    fleet.point_latest(version.version)
    fleet.wait_all("hash failures counted", _at_least("hash_failures_total", 1))
    world.all_serving(1, keys(1))
    for agent in fleet.agents:
        assert not _versions_dir(agent, version.version).exists()

    fleet.store.put(version.filter_key, stored.data)  # the origin repaired
    fleet.wait_all_on(version.version, f"v{version.version} installed after the repair")
    fleet.check_installed(version)
    world.reader.wait_until_serving(version.version, keys(4)[:20], keys(1)[:3])
    world.current = version.version


def test_downgrade_is_refused_and_a_signed_pin_is_followed(world: World) -> None:
    fleet = world.fleet
    assert world.current == 4
    world.all_serving(4, keys(4))
    fleet.point_latest(1)  # lower and not pinned
    fleet.wait_all("downgrade refused", _at_least("refusals_total", 1, reason="downgrade"))
    world.all_serving(4, keys(4))
    for agent in fleet.agents:
        assert "event=refused reason=downgrade" in agent.log()
    fleet.point_latest(1, pinned=True)  # a signed pin: the rollback
    fleet.wait_all_on(1, "rolled back to v1")
    world.reader.wait_until_serving(1, keys(1)[:20], keys(4)[:3])
    world.current = 1


def test_s3_stopped_for_30_seconds_agents_keep_serving_and_recover(world: World) -> None:
    fleet = world.fleet
    world.all_serving(world.current, keys(world.current))
    saved = {key: fleet.store.get(key) for key in fleet.store.list()}
    errors = [agent.metric("origin_errors_total") for agent in fleet.agents]
    world.server.stop()  # by its PID
    stopped = time.monotonic()
    try:
        fleet.wait_all("origin errors counted", lambda a: a.metric("origin_errors_total")
                       >= errors[fleet.agents.index(a)] + 2)
        while time.monotonic() - stopped < OUTAGE_S:  # down for 30 s, serving all along
            world.all_serving(world.current, keys(world.current))
            time.sleep(1.0)
    finally:
        world.server.start()  # the same port
    outage = time.monotonic() - stopped
    assert outage >= OUTAGE_S
    # moto keeps no state across a restart: put the bucket back as it was.
    boto3.client("s3", endpoint_url=world.server.endpoint, region_name="us-east-1").create_bucket(
        Bucket=world.s3.bucket)
    for key, stored in saved.items():
        assert stored is not None
        fleet.store.put(key, stored.data)
    fresh = world.publish(keys(5))
    fleet.point_latest(fresh.version)  # unpinned, above everything installed
    fleet.wait_all_on(fresh.version, "new version installed after the outage")
    fleet.check_installed(fresh)
    world.reader.wait_until_serving(fresh.version, keys(5)[:20], [])
    for agent in fleet.agents:
        assert "event=origin_error" in agent.log() and "event=origin_recovered" in agent.log()
    print(f"S3 was down {outage:.1f}s")
    world.current = fresh.version


def test_a_pin_to_a_collected_version_fetches_it_through_the_swarm(world: World) -> None:
    """After v5, garbage collection kept v5 and v4 (``install.keep_versions`` = 2): a pin
    back to v1 makes every agent download v1 again, through the swarm, and swap to it."""
    fleet = world.fleet
    assert world.current == 5
    world.all_serving(5, keys(5))
    for agent in fleet.agents:
        assert not _versions_dir(agent, 1).exists(), agent.root.name
    fetched = [_downloaded(agent) for agent in fleet.agents]
    fleet.point_latest(1, pinned=True)
    fleet.wait_all_on(1, "rolled back to v1 by download")
    fleet.check_installed(read_manifest(fleet.store, 1))
    world.reader.wait_until_serving(1, keys(1)[:20], keys(5)[:3])
    for agent, before in zip(fleet.agents, fetched, strict=True):
        assert _downloaded(agent) > before, agent.root.name
    world.current = 1


def test_too_little_disk_is_refused_before_download(world: World) -> None:
    fleet = world.fleet
    agent = fleet.add_agent(name="small-disk", tables={"install": {"disk_margin_bytes": 1 << 60}})
    fleet.agents.remove(agent)  # not one of the fleet the other checks wait for
    try:
        agent.wait_for("download refused", _at_least("refusals_total", 1, reason="disk_space"))
        assert "not enough disk space" in agent.status()["last_error"]
        assert agent.metric("bytes_from_origin_total") == agent.metric("bytes_from_peers_total") == 0
        assert not (agent.data_dir / "staging" / f"v{world.current}" / "filter.bsf").exists()
        assert agent.http_status("/readyz") == 503
        assert "event=download_refused" in agent.log()
    finally:
        assert agent.stop() == 0
