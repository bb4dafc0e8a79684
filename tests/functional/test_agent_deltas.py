"""Deltas between agents as real processes, over the libtorrent swarm on 127.0.0.1.

moto's S3 server behind the sandbox's counting origin (which counts the bytes of filter
files it sends), opentracker in whitelist mode, the publisher's own code: it publishes a
delta from v1 with v2 (same parameters). Three agents on v1 fetch the delta (a torrent
of its own: the tracker, the origin as web seed, each other), apply it, pass the gate,
and swap; the origin sends no byte of v2's file, and the bytes the agents receive are a
small fraction of it. A LiveFilter in another process answers from v2 as from any version.
The fleet whitelists the deltas' info-hashes at the tracker, as ``tracker-sync`` does. An
agent stopped in the middle of a delta continues it after its restart.

Every process the test starts is stopped by it, by PID; the waits are safety bounds.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from bloomswarm.agent.deltas import FALLBACK_REASONS
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.storage import S3Config
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.fleet import LocalFleet
from bloomswarm.sandbox.tracker import OpenTracker
from tests.functional.fleet_setup import KEY, ORIGIN_PACE, SWARM, fleet_spec, keys, publish_keys
from tests.functional.live_reader import LiveReader

pytestmark = pytest.mark.timeout(300)

AGENTS = 3
NEW_KEYS = 20_000
"""Keys v2 adds to v1's 200 (of a 5M-key filter): a delta of about 3% of the file."""


def _received(agent: AgentProcess) -> float:
    return agent.metric("bytes_from_origin_total") + agent.metric("bytes_from_peers_total")


@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_agents_on_v1_get_v2_by_delta_over_the_swarm(
    tmp_path: Path, s3_bucket: S3Config, opentracker: OpenTracker, live_reader: Callable[[Path], LiveReader],
    private: bool,
) -> None:
    """Private: the delta's torrent carries the fleet CA too, and the agents trade it over
    TLS (docs/private-swarm.md)."""
    spec = fleet_spec(discovery="tracker", origin_connection_rate=ORIGIN_PACE, private=private)
    with LocalFleet(tmp_path, spec, s3=s3_bucket, tracker=opentracker, signing_key=KEY) as fleet:
        v1 = publish_keys(fleet, keys(1))
        for _ in range(AGENTS):
            fleet.add_agent()
        fleet.wait_all_on(1, "v1 installed")
        fleet.check_installed(v1)
        reader = live_reader(fleet.agents[0].data_dir)
        reader.wait_until_serving(1, keys(1)[:50], keys(2)[:3])
        before = [_received(agent) for agent in fleet.agents]
        origin_before = fleet.agents_origin_bytes()
        file_bytes_v1 = fleet.origin_bytes()

        fleet.hold_latest(1)
        v2 = publish_keys(fleet, keys(1) + keys(2, NEW_KEYS))
        entry = v2.delta_from(1)
        assert entry is not None and v2.size == v1.size, v2
        assert v2.private is private
        fleet.point_latest(2)
        fleet.wait_all_on(2, "v2 installed")
        fleet.check_installed(v2)
        reader.wait_until_serving(2, keys(2)[:50], [])

        received = sum(_received(agent) - old for agent, old in zip(fleet.agents, before, strict=True))
        from_origin = fleet.agents_origin_bytes() - origin_before
        print(f"v2 ({v2.size} bytes) to {AGENTS} agents by a delta of {entry.size} bytes "
              f"({entry.size / v2.size:.1%}): {received:.0f} bytes received in all "
              f"({from_origin:.0f} from the origin), {received / (AGENTS * v2.size):.2%} of "
              f"{AGENTS} full copies")
        # The origin counts files and deltas alike: since v1, at most a delta per agent and
        # no byte of v2's file.
        assert fleet.origin_bytes() - file_bytes_v1 <= AGENTS * entry.size, fleet.describe()
        assert entry.size < v2.size / 10
        assert received <= AGENTS * entry.size * 1.5, fleet.describe()
        for agent in fleet.agents:
            assert agent.metric("delta_installs_total") == 1, agent.log()[-3000:]
            assert entry.size <= agent.metric("delta_bytes_total") <= 1.5 * entry.size
            assert all(agent.metric("delta_fallbacks_total", reason=r) == 0 for r in FALLBACK_REASONS)
            # The delta is seeded once installed; /status may show the swap a tick earlier.
            agent.wait_for("seeding the delta",
                           lambda a: a.status()["seeding_deltas"] == ["v2-from-v1"], limit_s=30)
            status = agent.status()
            assert status["last_swap"]["delta_from"] == 1
        for agent in fleet.agents:
            assert agent.stop() == 0, agent.log()[-3000:]  # SIGTERM: a clean exit


def test_an_agent_stopped_during_a_delta_continues_it_after_restart(
    tmp_path: Path, s3_bucket: S3Config, opentracker: OpenTracker,
) -> None:
    slow = 300_000  # bytes/s from the origin: the delta takes seconds, time to stop the agent
    spec = fleet_spec(discovery="tracker", origin_connection_rate=slow,
                      swarm={**SWARM, "origin_rate_limit": slow})
    with LocalFleet(tmp_path, spec, s3=s3_bucket, tracker=opentracker, signing_key=KEY) as fleet:
        publish_keys(fleet, keys(1))
        agent = fleet.add_agent()
        fleet.wait_all_on(1, "v1 installed")
        file_bytes_v1 = fleet.origin_bytes()
        fleet.hold_latest(1)
        v2 = publish_keys(fleet, keys(1) + keys(2, 10 * NEW_KEYS))
        entry = v2.delta_from(1)
        assert entry is not None and entry.size < v2.size / 2, v2
        fleet.point_latest(2)
        partial = DataDir(agent.data_dir).staged_delta(2, 1)
        agent.wait_for("a third of the delta on disk", lambda a: _verified(a) >= 0.3, limit_s=90)
        fleet.restart_agent(agent, signal.SIGTERM)  # resume data saved, the pieces flushed
        assert partial.is_file()
        fleet.wait_all_on(2, "v2 installed after the restart")
        fleet.check_installed(v2)
        after = agent.metric("delta_bytes_total")
        print(f"delta of {entry.size} bytes: {after:.0f} fetched after the restart")
        assert agent.metric("delta_installs_total") == 1, agent.log()[-3000:]
        assert 0 < after <= 0.75 * entry.size  # the pieces on disk were kept, not fetched again
        # One copy of the delta at most, and a little of it twice (what was in flight at the
        # stop); no byte of v2's file.
        assert fleet.origin_bytes() - file_bytes_v1 <= 1.5 * entry.size, fleet.describe()
        assert agent.stop() == 0, agent.log()[-3000:]


def _verified(agent: AgentProcess) -> float:
    download = agent.status().get("download")
    if not download or download.get("delta_from") != 1:
        return 0.0
    return float(download["progress"])
