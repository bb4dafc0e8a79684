"""Background polls: a hung announcement source never holds up the agent's loop.

With ``background_polls`` (what ``bloomswarm agent run`` uses), ``source.latest()`` runs on
a thread of its own; the loop keeps ticking the transfer and takes the poll's outcome, an
announcement or an error, at a later step.
"""

from __future__ import annotations

import threading
from pathlib import Path

from bloomswarm.agent.announcements import Announcement, HttpAnnouncements
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.direct import DirectTransfer
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.origin import CdnOrigin
from bloomswarm.common.errors import StorageError
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    PUBLIC,
    StoreServer,
    agent_config,
    installed,
    metric,
    publish,
    run_until,
)

store, server = agent_helpers.store, agent_helpers.server  # fixtures


class GatedSource:
    """An announcement source whose ``latest()`` blocks until the test opens the gate,
    then answers from the real source (or raises ``error``)."""

    def __init__(self, real: HttpAnnouncements) -> None:
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


class CountingTransfer(DirectTransfer):
    """A DirectTransfer that counts the loop's ticks (calls to poll())."""

    ticks = 0

    def poll(self) -> None:
        self.ticks += 1
        super().poll()


def _daemon(tmp_path: Path, server: StoreServer, source: GatedSource) -> tuple[AgentDaemon, CountingTransfer]:
    config = agent_config(tmp_path, server.url)
    transfer = CountingTransfer(config.direct)
    daemon = AgentDaemon(config, source, transfer, CdnOrigin(server.url), list(PUBLIC),
                         metrics=AgentMetrics(), background_polls=True)
    daemon.start()
    return daemon, transfer


def test_the_loop_ticks_while_a_poll_hangs_and_takes_its_announcement_later(
        tmp_path: Path, store: MemoryObjectStore, server: StoreServer) -> None:
    publish(store, ["a", "b"])
    source = GatedSource(HttpAnnouncements(server.url, list(PUBLIC), timeout_s=5.0))
    daemon, transfer = _daemon(tmp_path, server, source)
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
        run_until(daemon, lambda: installed(daemon, 1))
        run_until(daemon, lambda: daemon.status()["poll_in_flight_s"] is None
                  or daemon.status()["poll_in_flight_s"] < 1.0)
    finally:
        source.gate.set()
        daemon.shutdown()


def test_a_background_poll_error_is_counted_like_a_foreground_one(
        tmp_path: Path, store: MemoryObjectStore, server: StoreServer) -> None:
    publish(store, ["a"])
    source = GatedSource(HttpAnnouncements(server.url, list(PUBLIC), timeout_s=5.0))
    source.error = StorageError("origin unreachable (test)")
    daemon, _ = _daemon(tmp_path, server, source)
    try:
        source.gate.set()
        run_until(daemon, lambda: metric(daemon, "origin_errors_total") >= 1)
        assert daemon.status()["last_error"] is not None
        source.error = None
        run_until(daemon, lambda: installed(daemon, 1))  # the next poll recovers
    finally:
        daemon.shutdown()
