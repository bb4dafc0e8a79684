"""Swarm.wait: the agent's loop sleeps in libtorrent's alert wait, so an event (a torrent
added or finished, a tracker answer) wakes it at once instead of at the next tick."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.swarm import Swarm
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import publish

store = agent_helpers.store  # the shared pytest fixture


def _offline_swarm() -> Swarm:
    return Swarm(SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, enable_lsd=False))


def _quiet(swarm: Swarm) -> float:
    """Seconds one ``wait(0.5)`` lasted once the start-up events are taken (the longest of
    three tries: a late start-up event may end one early)."""
    longest = 0.0
    for _ in range(3):
        swarm.poll()
        began = time.monotonic()
        swarm.wait(0.5)
        longest = max(longest, time.monotonic() - began)
    return longest


def test_wait_returns_on_an_event_and_not_before(tmp_path: Path, store: MemoryObjectStore) -> None:
    manifest = publish(store, ["a"], capacity=200_000)
    stored = store.get(manifest.filter_key), store.get(manifest.torrent_key)
    assert stored[0] is not None and stored[1] is not None
    (tmp_path / "filter.bsf").write_bytes(stored[0].data)
    with _offline_swarm() as swarm:
        assert _quiet(swarm) >= 0.45  # no event: it waits its timeout (never less)
        returned = threading.Event()

        def wait() -> None:
            swarm.wait(600.0)
            returned.set()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        swarm.seed(1, stored[1].data, tmp_path)  # an event: the torrent is added
        assert returned.wait(60.0), "wait() did not return on an event"
        waiter.join(5.0)


def test_wait_on_a_closed_swarm_returns_at_once() -> None:
    swarm = _offline_swarm()
    swarm.close()
    swarm.wait(600.0)
