"""Background polls: a hung announcement source never holds up the agent's loop.

With ``background_polls`` (what ``bloomswarm agent run`` uses), ``source.latest()`` runs on
a thread of its own; the loop keeps ticking the transfer and takes the poll's outcome, an
announcement or an error, at a later step. The tests wait for that thread with events and
joins, never with sleeps.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bloomswarm.agent.announcements import Announcement, ObjectStoreAnnouncements
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.common.errors import StorageError
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    PUBLIC,
    agent_config,
    installed,
    make_daemon,
    metric,
    publish,
    run_until,
)

store, origin = agent_helpers.store, agent_helpers.origin  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps


class GatedSource:
    """An announcement source whose ``latest()`` blocks until the test opens the gate,
    then answers from the real source (or raises ``error``)."""

    def __init__(self, real: ObjectStoreAnnouncements) -> None:
        self.real = real
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        self.error: Exception | None = None

    def latest(self) -> Announcement | None:
        self.calls += 1
        self.entered.set()
        if not self.gate.wait(30):
            raise AssertionError("the test never opened the gate")
        if self.error is not None:
            raise self.error
        return self.real.latest()

    def document(self, key: str) -> bytes:
        return self.real.document(key)


class CountingTransfer(MemoryTransfer):
    """A MemoryTransfer that counts the loop's ticks (calls to poll())."""

    ticks = 0

    def poll(self) -> None:
        self.ticks += 1
        super().poll()


def _daemon(
    tmp_path: Path, origin: MemoryOrigin, source: GatedSource
) -> tuple[AgentDaemon, CountingTransfer]:
    transfer = CountingTransfer(origin)
    daemon = make_daemon(agent_config(tmp_path), origin, transfer=transfer, source=source,
                         background_polls=True)
    return daemon, transfer


def _join_polls() -> None:
    """Wait until every background poll thread has returned."""
    for thread in threading.enumerate():
        if thread.name == "bloomswarm-poll":
            thread.join(30)
            assert not thread.is_alive(), "a background poll never returned"


def test_the_loop_ticks_while_a_poll_hangs_and_takes_its_announcement_later(
        tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin) -> None:
    publish(store, ["a", "b"])
    source = GatedSource(ObjectStoreAnnouncements(origin, list(PUBLIC)))
    daemon, transfer = _daemon(tmp_path, origin, source)
    try:
        daemon.step()
        assert source.entered.wait(10)
        for _ in range(20):
            daemon.step()
        assert source.calls == 1  # one poll in flight: no second one piles up behind it
        assert transfer.ticks >= 20  # the loop went on
        assert daemon.status()["poll_in_flight_s"] is not None  # reported while it hangs
        assert not installed(daemon, 1)
        source.gate.set()
        _join_polls()
        run_until(daemon, lambda: installed(daemon, 1))
        run_until(daemon, lambda: daemon.status()["poll_in_flight_s"] is None
                  or daemon.status()["poll_in_flight_s"] < 1.0)
    finally:
        source.gate.set()
        daemon.shutdown()


def test_a_background_poll_error_is_counted_like_a_foreground_one(
        tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin) -> None:
    publish(store, ["a"])
    source = GatedSource(ObjectStoreAnnouncements(origin, list(PUBLIC)))
    source.error = StorageError("origin unreachable (test)")
    daemon, _ = _daemon(tmp_path, origin, source)
    try:
        source.gate.set()
        daemon.step()  # the first poll starts, and fails
        _join_polls()
        run_until(daemon, lambda: metric(daemon, "origin_errors_total") >= 1)
        assert daemon.status()["last_error"] is not None
        source.error = None
        run_until(daemon, lambda: daemon.status()["poll_in_flight_s"] is not None)  # after the backoff
        _join_polls()
        run_until(daemon, lambda: installed(daemon, 1))  # the next poll recovers
    finally:
        daemon.shutdown()
