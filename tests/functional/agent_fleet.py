"""Agents as real processes moving versions with the libtorrent swarm, for the functional tests.

:class:`SwarmFleet` holds the bucket (direct for the publisher, through an
:class:`~bloomswarm.sandbox.origin_proxy.OriginProxy` for the agents, so the bytes of
filter files the origin serves are counted where they leave it), the publisher's own
code, and the agent and LiveFilter processes a test started — all stopped by PID in
:meth:`SwarmFleet.close`. An agent is
``python -m bloomswarm agent run`` with the default ("swarm") transfer on its own
loopback port.

Used by test_agent_swarm.py (installs, swaps, origin traffic, aria2c) and
test_agent_faults_swarm.py (faults with the 5-agent fleet).
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from pathlib import Path

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.signing import SigningKey, generate_keypair, parse_private_key
from bloomswarm.common.storage import S3Config, S3ObjectStore
from bloomswarm.publisher.config import PublisherConfig, TorrentFormat
from bloomswarm.publisher.latest import Target, swap_latest
from bloomswarm.publisher.pinning import pin
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.origin_proxy import OriginProxy
from bloomswarm.sandbox.processes import stop_process
from tests.functional.live_reader import LiveReader

_PRIVATE, PUBLIC_PEM = generate_keypair()
KEY = parse_private_key(_PRIVATE)
"""The publisher's key; every fleet's agents trust it."""

AGENTS = 5
CAPACITY = 5_000_000
"""Keys the filter is sized for: a file of about 6 MB."""
PIECE_SIZE = 128 * 1024
"""About 45 pieces of the 6 MB file: enough for agents to trade pieces while others
still download."""
ORIGIN_PACE = 1_000_000
"""Bytes/s the origin (the proxy) sends on each connection, like S3's bounded throughput
per connection: one copy takes about 6 s, time for pieces to spread from peer to peer."""
ORIGIN_LIMIT = 3 * ORIGIN_PACE
"""Bytes/s an agent may take from 127.0.0.1's origin class. On loopback every peer shares
the origin's address, so this caps each agent's whole download; above the origin's pace,
so an agent reads what the origin sends at once (nothing waits in socket buffers to be
thrown away when it drops the web seed)."""


def keys(version: int, count: int = 200) -> list[str]:
    """The keys of version ``version`` (distinct per version)."""
    return [f"v{version}-key-{i}" for i in range(count)]


# --- the fleet ----------------------------------------------------------------------------------


class SwarmFleet:
    """The bucket (direct for the publisher, through the proxy for the agents), the
    publisher, and the processes a test started (stopped at the end, by PID).

    ``torrent_format`` is the publisher's setting (v1, its default, or hybrid);
    ``capacity`` sizes the published filters (:data:`CAPACITY`: about 6 MB)."""

    def __init__(self, root: Path, s3: S3Config, proxy: OriginProxy, *,
                 trackers: tuple[str, ...] = (), torrent_format: TorrentFormat = "v1",
                 capacity: int = CAPACITY) -> None:
        self.root = root
        self.s3 = s3
        self.agent_s3 = S3Config(bucket=s3.bucket, prefix=s3.prefix, endpoint_url=proxy.endpoint,
                                 region=s3.region or "us-east-1")
        self.proxy = proxy
        self.store = S3ObjectStore(s3)
        self.capacity = capacity
        self.public_key = root / "publisher.pub"
        self.public_key.write_bytes(PUBLIC_PEM)
        self.publisher = PublisherConfig(s3=s3, publisher_id="functional", trackers=trackers,
                                         piece_size=PIECE_SIZE, torrent_format=torrent_format)
        self.agents: list[AgentProcess] = []
        self.readers: list[LiveReader] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def publish(self, version_keys: list[str]) -> Manifest:
        builder = FilterBuilder.for_capacity(self.capacity, 0.01)
        builder.add_many(version_keys)
        return publish_filter(self.store, self.publisher, builder, KEY, "functional", force=True,
                              progress=False).manifest

    def hold_latest(self, version: int) -> None:
        """Pin latest to ``version`` so that a publish does not move it yet."""
        pin(self.store, version, KEY, [KEY.public_key()], "functional")

    def point_latest(self, version: int, *, pinned: bool = False, key: SigningKey = KEY) -> None:
        """Move latest.json to ``version`` whatever it names, signed by ``key``."""
        swap_latest(self.store, lambda _current: Target(version, pinned=pinned), key, "functional")

    def agent(self, name: str, swarm: dict[str, object],
              tables: dict[str, dict[str, object]] | None = None) -> AgentProcess:
        """Start an agent; ``swarm`` adds to (or overrides) its ``[swarm]`` table, ``tables``
        to its other tables."""
        settings: dict[str, object] = {
            "allow_private_origin": True,  # the origin (the proxy) is on loopback
            "origin_rate_limit": ORIGIN_LIMIT,
            "origin_grace_s": 2.0,
            "origin_stagger_s": 3.0,  # turns at the origin spread wide: few collisions
            "origin_starved_s": 2.0,
            # Small origin requests: two agents that take the origin at the same moment
            # fetch little twice before one of them backs off.
            "origin_request_bytes": 2 * PIECE_SIZE,
            "peer_rediscovery_s": 4.0,
            "enable_lsd": False,
        }
        settings.update(swarm)
        agent = AgentProcess(self.root / name, self.agent_s3, self.public_key, transfer="swarm",
                             tables={"swarm": settings, "origin": {"presign_expiry_s": 3600},
                                     **(tables or {})}).start()
        self.agents.append(agent)
        return agent

    def reader(self, agent: AgentProcess) -> LiveReader:
        reader = LiveReader(agent.data_dir)
        self.readers.append(reader)
        return reader

    def origin_bytes(self) -> float:
        """The agents' own count of payload bytes from the origin, summed."""
        return sum(agent.metric("bytes_from_origin_total") for agent in self.agents)

    def describe(self) -> str:
        """Every agent's status and log tail, for failure messages."""
        parts = [f"proxy: {self.proxy.filter_bytes} filter bytes in "
                 f"{self.proxy.filter_requests} GETs"]
        for agent in self.agents:
            try:
                status: object = agent.status()
            except Exception as exc:  # a diagnostic only
                status = f"(no status: {exc})"
            parts.append(f"--- {agent.root.name}: {status}\n{agent.log()[-2500:]}")
        return "\n".join(parts)

    def wait_all(self, what: str, condition: object, limit_s: float = 90.0) -> None:
        """Wait until ``condition(agent)`` holds for every agent (a safety bound, not a
        timing assertion); AssertionError with the fleet's state otherwise."""
        deadline = time.monotonic() + limit_s
        for agent in self.agents:
            try:
                agent.wait_for(what, condition, limit_s=max(1.0, deadline - time.monotonic()))  # type: ignore[arg-type]
            except AssertionError as exc:
                raise AssertionError(f"{agent.root.name}: {exc}\n\nfleet:\n{self.describe()}") from None

    def wait_version(self, what: str, version: int, limit_s: float = 90.0) -> None:
        """Wait until every agent's current version is ``version``."""
        # .get: /status is {} until the agent's first loop iteration
        self.wait_all(what, lambda a: a.status().get("current_version") == version, limit_s)

    def check_installed(self, manifest: Manifest) -> None:
        """Every agent holds ``manifest``'s version with its SHA-256."""
        for agent in self.agents:
            installed = agent.data_dir / "versions" / f"v{manifest.version}" / "filter.bsf"
            digest = hashlib.sha256(installed.read_bytes()).hexdigest()
            assert digest == manifest.sha256, agent.root.name

    def close(self) -> None:
        for process in self.processes:
            stop_process(process, timeout_s=10)
        for reader in self.readers:
            reader.stop()
        for agent in self.agents:
            agent.stop(signal.SIGTERM, timeout=15)


__all__ = [
    "AGENTS",
    "CAPACITY",
    "KEY",
    "ORIGIN_LIMIT",
    "ORIGIN_PACE",
    "PIECE_SIZE",
    "PUBLIC_PEM",
    "SwarmFleet",
    "keys",
]
