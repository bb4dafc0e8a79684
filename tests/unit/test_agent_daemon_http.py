"""The agent over real HTTP: HttpAnnouncements, CdnOrigin and DirectTransfer in front of a
memory store served by a local HTTP server (StoreServer).

The daemon's behaviour is tested over the in-memory origin and transfer
(test_agent_daemon.py); this is what only the HTTP path has: a download resumed with a
Range request from a server that ignores it, and a delta (its torrent through
HttpAnnouncements.document, its bytes through DirectTransfer; a 404 falls back to the
file). These tests wait for real threads.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from bloomswarm.agent.announcements import HttpAnnouncements
from bloomswarm.agent.config import DirectConfig
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.direct import DirectTransfer
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.origin import CdnOrigin
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import PUBLIC, StoreServer, agent_config, installed, publish

store, server, daemons = agent_helpers.store, agent_helpers.server, agent_helpers.daemons  # fixtures


def _agent(tmp_path: Path, server: StoreServer, daemons: list[AgentDaemon], **changes: object) -> AgentDaemon:
    """An agent reading ``server`` with a DirectTransfer, started."""
    config = agent_config(tmp_path, server.url, **changes)
    source = HttpAnnouncements(server.url, PUBLIC, timeout_s=5.0)
    daemon = AgentDaemon(config, source, DirectTransfer(config.direct), CdnOrigin(server.url), PUBLIC,
                         metrics=AgentMetrics())
    daemon.start()
    daemons.append(daemon)
    return daemon


def _run_until(daemon: AgentDaemon, condition: Callable[[], bool], *, limit_s: float = 30.0) -> None:
    """Step ``daemon`` until ``condition()`` holds; AssertionError (with the agent's status)
    when it does not within ``limit_s`` (a safety bound, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached; agent status: {daemon.status()}")
        daemon.step()
        time.sleep(0.005)


def test_a_server_that_ignores_ranges_still_gives_a_correct_file(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, daemons: list[AgentDaemon]
) -> None:
    manifest = publish(store, ["a"], capacity=400_000)
    slow = DirectConfig(timeout_s=5.0, rate_limit_bytes_per_s=1_000_000, chunk_size=64 * 1024)
    daemon = _agent(tmp_path, server, daemons, direct=slow)
    partial = daemon.layout.staged_file(1)
    _run_until(daemon, lambda: partial.is_file() and partial.stat().st_size > 0)
    daemon.shutdown()
    daemons.remove(daemon)
    server.ignore_range = True
    again = _agent(tmp_path, server, daemons)
    _run_until(again, lambda: installed(again, 1))
    assert hashlib.sha256(again.layout.current_filter.read_bytes()).hexdigest() == manifest.sha256


def test_a_delta_over_http_installs_and_a_missing_one_falls_back(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, daemons: list[AgentDaemon]
) -> None:
    publish(store, [f"k{i}" for i in range(300)], deltas=True)
    daemon = _agent(tmp_path, server, daemons)
    _run_until(daemon, lambda: installed(daemon, 1))
    v2 = publish(store, [f"k{i}" for i in range(310)], deltas=True)
    entry = v2.delta_from(1)
    assert entry is not None
    _run_until(daemon, lambda: installed(daemon, 2))
    assert server.served[entry.key] == entry.size and server.served[v2.filter_key] == 0
    assert hashlib.sha256(daemon.layout.current_filter.read_bytes()).hexdigest() == v2.sha256

    v3 = publish(store, [f"k{i}" for i in range(320)], deltas=True)
    missing = v3.delta_from(2)
    assert missing is not None
    store.delete([missing.key])  # the object answers 404: the full file instead
    _run_until(daemon, lambda: installed(daemon, 3))
    assert server.served[v3.filter_key] == v3.size
    assert hashlib.sha256(daemon.layout.current_filter.read_bytes()).hexdigest() == v3.sha256
    fallbacks = daemon.metrics.registry.get_sample_value(
        "bloomswarm_agent_delta_fallbacks_total", {"reason": "missing"})
    assert fallbacks == 1
