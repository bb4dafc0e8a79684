"""Freeze detection (watch.max_pointer_age_s): the rule on its own, then through an agent
reading an in-memory store, whose origin keeps serving one old signed latest.json."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bloomswarm.agent.config import WatchConfig
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.freshness import PointerFreshness
from bloomswarm.agent.memory_transfer import MemoryOrigin
from bloomswarm.agent_commands import format_status
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.pointer import Pointer
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.latest import Target, swap_latest
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    KEY,
    agent_config,
    installed,
    make_daemon,
    metric,
    publish,
    run_until,
    served_filter_bytes,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps

T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pointer(issued_at: float, sequence: int = 1, version: int = 1) -> Pointer:
    return Pointer(version=version, manifest_key=f"v{version}/manifest.json", sequence=sequence,
                   issued_at=int(issued_at), publisher_id="test")


# --- the rule ---------------------------------------------------------------------------------


def test_off_by_default_measures_the_age_but_never_turns_stale() -> None:
    assert WatchConfig().max_pointer_age_s == 0
    clock = Clock()
    freshness = PointerFreshness(WatchConfig().max_pointer_age_s, clock=clock)
    freshness.saw(pointer(T0 - 10 * 86400))
    assert freshness.update() is None and not freshness.stale
    assert freshness.age_s() == 10 * 86400


def test_nothing_seen_is_never_stale() -> None:
    freshness = PointerFreshness(60, clock=Clock(T0 + 10**6))
    assert freshness.update() is None and not freshness.stale
    assert freshness.age_s() is None and freshness.status() is None


def test_fresh_then_stale_once_then_fresh_again_once() -> None:
    clock = Clock()
    freshness = PointerFreshness(3600, clock=clock)
    freshness.saw(pointer(T0 - 60))
    assert freshness.update() is None and not freshness.stale
    clock.now = T0 - 60 + 3600  # exactly the limit: still fresh
    assert freshness.update() is None
    clock.now += 1
    change = freshness.update()
    assert change is not None and change.stale and change.age_s == 3601
    assert freshness.stale
    clock.now += 86400
    assert freshness.update() is None  # stays stale: one change, not one per poll
    freshness.saw(pointer(clock.now - 5, sequence=2))  # the publisher refreshed latest.json
    change = freshness.update()
    assert change is not None and not change.stale and change.age_s == 5
    assert change.pointer.sequence == 2
    assert freshness.update() is None


def test_a_replayed_older_pointer_does_not_make_the_view_younger_or_older() -> None:
    clock = Clock()
    freshness = PointerFreshness(100, clock=clock)
    freshness.saw(pointer(T0 - 10, sequence=5))
    freshness.saw(pointer(T0 - 1000, sequence=3))  # an old copy served again
    assert freshness.pointer is not None and freshness.pointer.sequence == 5
    assert freshness.update() is None and freshness.age_s() == 10


def test_a_pointer_from_the_future_has_age_zero() -> None:
    freshness = PointerFreshness(100, clock=Clock())
    freshness.saw(pointer(T0 + 500))
    assert freshness.age_s() == 0 and freshness.update() is None


def test_the_setting_refuses_negative_values() -> None:
    with pytest.raises(ConfigError, match=r"watch\.max_pointer_age_s must not be negative"):
        WatchConfig(max_pointer_age_s=-1)
    with pytest.raises(ValueError):
        PointerFreshness(-1)


# --- through the agent ------------------------------------------------------------------------


def _daemon(tmp_path: Path, origin: MemoryOrigin, clock: Clock, max_age_s: float) -> AgentDaemon:
    config = agent_config(tmp_path, watch=WatchConfig(
        poll_interval_s=0.02, poll_jitter_s=0.0, retry_initial_s=0.02, retry_max_s=0.1,
        max_pointer_age_s=max_age_s))
    return make_daemon(config, origin, wall_clock=clock)


def _refresh(store: MemoryObjectStore, now: float) -> Pointer:
    """What `bloomswarm refresh` writes: the same version re-signed, the next sequence."""
    outcome = swap_latest(store, lambda current: Target(current.version, current.pinned) if current else None,
                          KEY, "unit-test", now=lambda: now)
    assert outcome.pointer is not None
    return outcome.pointer


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if f"event={event} " in r.getMessage()]


def test_a_frozen_origin_is_reported_stale_once_and_the_agent_keeps_serving(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bloomswarm.agent")
    publish(store, ["a", "b"])
    issued = agent_helpers.point_latest(store, 1).issued_at  # a pointer issued now (real clock)
    clock = Clock(issued + 10)
    daemon = _daemon(tmp_path, origin, clock, max_age_s=3600)
    daemons.append(daemon)
    assert daemon.status()["pointer"] is None
    run_until(daemon, lambda: installed(daemon, 1))
    daemon.step()
    assert metric(daemon, "pointer_stale") == 0
    assert metric(daemon, "pointer_age_seconds") == 10
    assert metric(daemon, "pointer_issued_timestamp_seconds") == issued
    assert daemon.status()["pointer"]["stale"] is False

    clock.now = issued + 3601  # nothing new signed for an hour: the origin is frozen
    for _ in range(20):
        daemon.step()
    assert metric(daemon, "pointer_stale") == 1 and metric(daemon, "pointer_age_seconds") == 3601
    assert len(_events(caplog, "pointer_stale")) == 1  # once, not every poll
    assert _events(caplog, "pointer_stale")[0].levelno == logging.WARNING
    status = daemon.status()
    assert status["pointer"] == {"version": 1, "sequence": 2, "pinned": False, "issued_at": issued,
                                 "age_s": 3601.0, "max_age_s": 3600, "stale": True}
    assert status["ready"] is True and installed(daemon, 1)  # still serving, never un-installed
    assert "STALE" in format_status("http://x", status)

    # the publisher re-signs the same version: fresh again, without a download or a swap
    served, swaps = served_filter_bytes(origin), metric(daemon, "swaps_total")
    refreshed = _refresh(store, clock.now)
    run_until(daemon, lambda: metric(daemon, "pointer_stale") == 0)
    for _ in range(20):
        daemon.step()
    assert len(_events(caplog, "pointer_fresh")) == 1 and len(_events(caplog, "pointer_stale")) == 1
    assert daemon.status()["pointer"]["sequence"] == refreshed.sequence == 3
    assert daemon.status()["last_sequence"] == 3
    assert served_filter_bytes(origin) == served and metric(daemon, "swaps_total") == swaps
    assert installed(daemon, 1) and daemon.target_version is None
    assert "fresh (limit 1h00m)" in format_status("http://x", daemon.status())


def test_off_by_default_through_the_agent(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bloomswarm.agent")
    publish(store, ["a"])
    clock = Clock(T0 + 10**7)  # far beyond any pointer's issued_at
    daemon = _daemon(tmp_path, origin, clock, max_age_s=0)
    daemons.append(daemon)
    run_until(daemon, lambda: installed(daemon, 1))
    daemon.step()
    assert metric(daemon, "pointer_stale") == 0 and metric(daemon, "pointer_age_seconds") > 10**6
    assert not _events(caplog, "pointer_stale") and daemon.status()["pointer"]["stale"] is False
