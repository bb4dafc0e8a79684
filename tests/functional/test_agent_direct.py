"""Agents as real processes against moto's S3 server, moving bytes with the direct transfer.

The same faults with the issue's whole setting — opentracker and 5 agents moving bytes
with the libtorrent swarm — and the 30 s S3 outage are in test_agent_faults_swarm.py.
The publisher's own code publishes into the bucket; faults are injected with the same
library calls (a manifest rewritten after signing, a pointer signed by an untrusted key,
a filter object replaced). An agent is ``python -m bloomswarm agent run``; a LiveFilter
in another process answers lookups from the agent's data directory. Every process a
test starts is stopped by that test, by PID.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import manifest_key
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.signing import generate_keypair, parse_private_key
from bloomswarm.common.storage import S3Config
from bloomswarm.publisher.refresh import refresh_latest
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.fleet import LocalFleet
from tests.functional.fleet_setup import KEY, fleet_spec, keys, publish_keys
from tests.functional.live_reader import LiveReader

pytestmark = pytest.mark.timeout(300)

ROGUE = parse_private_key(generate_keypair()[0])
CAPACITY = 1000
"""Keys the filters are sized for (a small file) unless a test needs a larger one."""

Readers = Callable[[Path], LiveReader]


@pytest.fixture
def fleet(tmp_path: Path, s3_bucket: S3Config) -> Iterator[LocalFleet]:
    """The bucket behind the origin and agents with the direct transfer (none yet)."""
    with LocalFleet(tmp_path, fleet_spec(transfer="direct", piece_size=None), s3=s3_bucket,
                    signing_key=KEY) as fleet:
        yield fleet


def _publish(fleet: LocalFleet, version_keys: list[str], capacity: int = CAPACITY) -> Manifest:
    return publish_keys(fleet, version_keys, capacity)


def _agent(fleet: LocalFleet, name: str, **tables: dict[str, object]) -> AgentProcess:
    return fleet.add_agent(name=name, tables=tables)


def _on(version: int) -> object:
    return lambda agent: agent.current_version() == version


def test_agents_install_then_swap_and_a_live_filter_follows(fleet: LocalFleet, live_reader: Readers) -> None:
    v1 = _publish(fleet, keys(1))
    agents = [_agent(fleet, "a"), _agent(fleet, "b")]
    for agent in agents:
        agent.wait_for("v1 installed", _on(1))  # type: ignore[arg-type]
        assert agent.http_status("/readyz") == 200 and agent.http_status("/healthz") == 200
    reader = live_reader(agents[0].data_dir)
    reader.wait_until_serving(1, keys(1)[:50], keys(2)[:3])
    installed = agents[0].data_dir / "versions" / "v1" / "filter.bsf"
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == v1.sha256
    assert oct(installed.stat().st_mode & 0o777) == "0o444"

    _publish(fleet, keys(1) + keys(2))
    for agent in agents:
        agent.wait_for("v2 installed", _on(2))  # type: ignore[arg-type]
        assert agent.metric("swaps_total") == 2
        assert agent.metric("swap_latency_seconds_count") == 2
        assert agent.metric("bytes_from_origin_total") > 0
    reader.wait_until_serving(2, keys(2)[:50], [])
    for agent in agents:
        assert agent.stop() == 0  # SIGTERM: a clean exit
        assert "event=stopped" in agent.log()


def test_bad_versions_never_swap_and_v1_keeps_serving(fleet: LocalFleet, live_reader: Readers) -> None:
    _publish(fleet, keys(1))
    agents = [_agent(fleet, "a"), _agent(fleet, "b")]
    for agent in agents:
        agent.wait_for("v1 installed", _on(1))  # type: ignore[arg-type]
    reader = live_reader(agents[0].data_dir)
    reader.wait_until_serving(1, keys(1)[:20], [])
    fleet.hold_latest(1)  # latest stays while we stage faults

    # A tampered manifest: changed after it was signed.
    v2 = _publish(fleet, keys(2))
    tampered = dataclasses.replace(v2, source_fingerprint="tampered")
    fleet.store.put(manifest_key(2), tampered.to_bytes())
    fleet.point_latest(2)
    for agent in agents:
        agent.wait_for("tampered manifest refused",
                       lambda a: a.metric("verification_failures_total", check="manifest_signature") >= 1)

    # A pointer signed by a key no agent trusts.
    fleet.point_latest(2, key=ROGUE)
    for agent in agents:
        agent.wait_for("untrusted pointer refused",
                       lambda a: a.metric("verification_failures_total", check="pointer_signature") >= 1)

    # A file in S3 whose SHA-256 differs from the signed manifest's.
    fleet.hold_latest(1)
    v3 = _publish(fleet, keys(3))
    stored = fleet.store.get(v3.filter_key)
    assert stored is not None
    corrupt = bytearray(stored.data)
    corrupt[-100] ^= 0x55
    fleet.store.put(v3.filter_key, bytes(corrupt))
    fleet.point_latest(3)
    for agent in agents:
        agent.wait_for("corrupt file refused",
                       lambda a: a.metric("verification_failures_total", check="sha256") >= 1)
        assert agent.current_version() == 1
        assert "SHA-256" in agent.status()["last_error"]
        assert not (agent.data_dir / "versions" / "v2").exists()
        assert not (agent.data_dir / "versions" / "v3").exists()
    assert reader.answers(1, keys(1)[:20], keys(3)[:3])
    assert "event=verification_failed" in agents[0].log()

    fleet.store.put(v3.filter_key, stored.data)  # the origin repaired: the retry succeeds
    for agent in agents:
        agent.wait_for("v3 installed after repair", _on(3))  # type: ignore[arg-type]
    reader.wait_until_serving(3, keys(3)[:20], [])


def test_downgrade_refused_and_a_signed_pin_followed(fleet: LocalFleet, live_reader: Readers) -> None:
    _publish(fleet, keys(1))
    _publish(fleet, keys(2))
    agent = _agent(fleet, "a")
    agent.wait_for("v2 installed", _on(2))  # type: ignore[arg-type]
    fleet.point_latest(1)  # unpinned, lower: refused
    agent.wait_for("downgrade refused", lambda a: a.metric("refusals_total", reason="downgrade") >= 1)
    assert agent.current_version() == 2
    assert "event=refused reason=downgrade" in agent.log()
    fleet.hold_latest(1)
    agent.wait_for("rolled back to v1", _on(1))  # type: ignore[arg-type]
    reader = live_reader(agent.data_dir)
    reader.wait_until_serving(1, keys(1)[:20], keys(2)[:3])


def test_too_little_disk_is_refused_before_download(fleet: LocalFleet) -> None:
    _publish(fleet, keys(1))
    agent = _agent(fleet, "a", install={"disk_margin_bytes": 1 << 60})
    agent.wait_for("download refused", lambda a: a.metric("refusals_total", reason="disk_space") >= 1)
    assert "not enough disk space" in agent.status()["last_error"]
    assert agent.metric("bytes_from_origin_total") == 0
    assert not (agent.data_dir / "staging" / "v1" / "filter.bsf").exists()
    assert agent.http_status("/readyz") == 503
    assert "event=download_refused" in agent.log() and "not enough disk space" in agent.log()


def test_sigkill_mid_download_resumes_and_staging_is_never_visible(fleet: LocalFleet) -> None:
    v1 = _publish(fleet, keys(1))
    agent = _agent(fleet, "a", direct={"rate_limit_bytes_per_s": 2_000_000, "chunk_size": 65536})
    agent.wait_for("v1 installed", _on(1))  # type: ignore[arg-type]
    v2 = _publish(fleet, keys(2), capacity=5_000_000)  # about 6 MB: 3 s at the rate limit
    sizes = {1: v1.size, 2: v2.size}
    seen = _VisibleFiles(agent.data_dir, sizes)
    seen.start()
    try:
        partial = agent.data_dir / "staging" / "v2" / "filter.bsf"
        agent.wait_for("v2 partly downloaded",
                       lambda a: partial.exists() and partial.stat().st_size >= 1_000_000)
        assert agent.stop(signal.SIGKILL) == -signal.SIGKILL
        on_disk = partial.stat().st_size
        assert 0 < on_disk < v2.size
        assert not (agent.data_dir / "versions" / "v2").exists()
        assert os.readlink(agent.data_dir / "current") == os.path.join("versions", "v1")

        agent.start()  # the same data directory: resume
        agent.wait_for("v2 installed after restart", _on(2))  # type: ignore[arg-type]
        assert agent.metric("bytes_from_origin_total") <= v2.size - on_disk
        assert "resumed_bytes=" in agent.log()
    finally:
        seen.stop()
    assert seen.problems == []
    assert seen.samples > 10
    current = agent.data_dir / "current" / "filter.bsf"
    assert hashlib.sha256(current.read_bytes()).hexdigest() == v2.sha256
    assert not (agent.data_dir / "staging" / "v2").exists()


class _VisibleFiles(threading.Thread):
    """Samples what readers can see — ``versions/*/filter.bsf`` and ``current`` — and
    records any file that is not complete (its size differs from the manifest's)."""

    def __init__(self, data_dir: Path, sizes: dict[int, int]) -> None:
        super().__init__(daemon=True)
        self.data_dir = data_dir
        self.sizes = sizes
        self.problems: list[str] = []
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.01):
            paths = list((self.data_dir / "versions").glob("v*/filter.bsf"))
            paths.append(self.data_dir / "current" / "filter.bsf")
            for path in paths:
                try:
                    size = path.stat().st_size
                    version = int(path.resolve().parent.name[1:])
                except (OSError, ValueError):
                    continue  # not there (yet): nothing visible
                if size != self.sizes.get(version):
                    self.problems.append(f"{path} -> v{version}: {size} bytes")
            self.samples += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def test_a_frozen_pointer_is_reported_stale_and_a_refresh_clears_it_without_a_download(
    fleet: LocalFleet,
) -> None:
    """watch.max_pointer_age_s through a real agent process and moto's S3: the publisher
    stops signing, the agent reports stale (metric, one log line, /status) and keeps serving;
    `refresh` re-signs latest.json and the agent is fresh again with no download or swap."""
    _publish(fleet, keys(1))
    agent = _agent(fleet, "a", watch={"max_pointer_age_s": 3.0})
    agent.wait_for("v1 installed", _on(1))  # type: ignore[arg-type]
    agent.wait_for("stale", lambda a: a.metric("pointer_stale") == 1, limit_s=30)
    assert agent.metric("pointer_age_seconds") > 3.0
    assert agent.http_status("/healthz") == 200 and agent.http_status("/readyz") == 200
    assert agent.current_version() == 1
    origin_bytes = agent.metric("bytes_from_origin_total")
    refresh_latest(fleet.store, KEY, [KEY.public_key()], "functional")
    agent.wait_for("fresh again", lambda a: "event=pointer_fresh" in a.log(), limit_s=30)
    assert agent.log().count("event=pointer_stale") in (1, 2)  # the refreshed pointer ages too
    assert agent.metric("swaps_total") == 1 and agent.current_version() == 1
    assert agent.metric("bytes_from_origin_total") == origin_bytes
    assert "event=announcement version=1 sequence=2" in agent.log()
    assert agent.stop() == 0
