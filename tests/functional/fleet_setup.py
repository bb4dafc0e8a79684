"""What the functional tests of whole agents share over :class:`~bloomswarm.sandbox.fleet.LocalFleet`:
the publisher's key, each version's keys, the fleet's settings for tests and a publish helper.

The tests' agents poll often and give up on S3 sooner than the demo's and the
benchmarks' (:data:`AGENT_TABLES`); their swarm waits are short (:data:`SWARM`) and the
origin does not keep copies of filter files, so a test may change an object in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.signing import generate_keypair, parse_private_key
from bloomswarm.sandbox.fleet import FleetSpec, LocalFleet
from tests.functional.live_reader import LiveReader

KEY = parse_private_key(generate_keypair()[0])
"""The publisher's key; every fleet's agents trust it."""

AGENTS = 5
CAPACITY = 5_000_000
"""Keys the swarm tests' filters are sized for: a file of about 6 MB."""
PIECE_SIZE = 128 * 1024
"""About 45 pieces of the 6 MB file: enough for agents to trade pieces while others
still download."""
ORIGIN_PACE = 1_000_000
"""Bytes/s the origin sends on each connection, like S3's bounded throughput per
connection: one copy takes about 6 s, time for pieces to spread from peer to peer."""
ORIGIN_LIMIT = 3 * ORIGIN_PACE
"""Bytes/s an agent may take from 127.0.0.1's origin class. On loopback every peer shares
the origin's address, so this caps each agent's whole download; above the origin's pace,
so an agent reads what the origin sends at once (nothing waits in socket buffers to be
thrown away when it drops the web seed)."""

SWARM: dict[str, object] = {
    "origin_rate_limit": ORIGIN_LIMIT,
    "origin_grace_s": 2.0,
    "origin_stagger_s": 3.0,  # turns at the origin spread wide: few collisions
    "origin_starved_s": 2.0,
    # Small origin requests: two agents that take the origin at the same moment
    # fetch little twice before one of them backs off.
    "origin_request_bytes": 2 * PIECE_SIZE,
    "peer_rediscovery_s": 4.0,
}
"""[swarm] settings of the swarm tests' agents."""

AGENT_TABLES: dict[str, dict[str, object]] = {
    # Fast failure handling, so that fault tests take seconds: short S3 timeouts, one
    # attempt, retries from 0.2 s; resume data saved every 0.5 s for the restart tests;
    # no free-space margin (a CI disk may be small). Benchmarks and the demo keep the
    # agent's defaults for all of these.
    "": {"resume_save_interval_s": 0.5},
    "s3": {"connect_timeout_s": 1.0, "read_timeout_s": 5.0, "max_attempts": 1},
    "watch": {"retry_initial_s": 0.2, "retry_max_s": 1.0},
    "install": {"disk_margin_bytes": 0},
    "direct": {"timeout_s": 5.0},
    "origin": {"presign_expiry_s": 3600},
}
"""Config tables of every test agent, beyond the fleet's."""


def keys(version: int, count: int = 200) -> list[str]:
    """The keys of version ``version`` (distinct per version)."""
    return [f"v{version}-key-{i}" for i in range(count)]


def with_tables(extra: Mapping[str, Mapping[str, object]]) -> dict[str, dict[str, object]]:
    """:data:`AGENT_TABLES` with ``extra`` merged in, table by table."""
    merged = {table: dict(values) for table, values in AGENT_TABLES.items()}
    for table, values in extra.items():
        merged.setdefault(table, {}).update(values)
    return merged


def fleet_spec(**overrides: Any) -> FleetSpec:
    """A fleet of no agents yet (tests add theirs) with the tests' settings; ``overrides``
    are FleetSpec fields."""
    fields: dict[str, Any] = {
        "agents": 0, "transfer": "swarm", "piece_size": PIECE_SIZE, "poll_interval_s": 0.2,
        "publisher_keep_versions": 5, "origin_cache_files": False, "swarm": SWARM,
        "agent_tables": AGENT_TABLES,
    }
    fields.update(overrides)
    return FleetSpec(**fields)


def publish_keys(fleet: LocalFleet, version_keys: list[str], capacity: int = CAPACITY) -> Manifest:
    """Publish a filter of ``version_keys`` sized for ``capacity`` keys; its manifest."""
    builder = FilterBuilder.for_capacity(capacity, 0.01)
    builder.add_many(version_keys)
    return fleet.publish(builder).manifest


def roll_out_first_version(fleet: LocalFleet, start_reader: Callable[[Path], LiveReader],
                           capacity: int = CAPACITY) -> tuple[Manifest, LiveReader]:
    """Publish v1, start :data:`AGENTS` agents, wait until every one has installed it
    (its SHA-256 checked), and start a LiveFilter on the first agent's data directory
    (``start_reader``) once it answers from v1. Returns v1 and the LiveFilter."""
    v1 = publish_keys(fleet, keys(1), capacity)
    assert v1.torrent_format == fleet.spec.torrent_format
    for _ in range(AGENTS):
        fleet.add_agent()
    fleet.wait_all_on(1, "v1 installed")
    fleet.check_installed(v1)
    reader = start_reader(fleet.agents[0].data_dir)
    reader.wait_until_serving(1, keys(1)[:50], keys(2)[:3])
    return v1, reader


__all__ = ["AGENTS", "AGENT_TABLES", "CAPACITY", "KEY", "ORIGIN_LIMIT", "ORIGIN_PACE", "PIECE_SIZE", "SWARM",
           "fleet_spec", "keys", "publish_keys",
           "roll_out_first_version"]
