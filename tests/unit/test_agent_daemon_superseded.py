"""A download that finished while the agent's poll was blocked is installed, not dropped.

Found by the soak (benchmarks/soak.py): with the origin stalling, one poll of latest.json
can block the agent's loop for many seconds; a download finishing meanwhile was
abandoned when that poll returned a newer version, so the agent skipped a version it
already had on disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import agent_config, make_daemon, metric, publish, run_until

store, origin = agent_helpers.store, agent_helpers.origin  # the shared pytest fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps


@pytest.fixture
def transfer(origin: MemoryOrigin) -> MemoryTransfer:
    return MemoryTransfer(origin)


@pytest.fixture
def daemon(tmp_path: Path, origin: MemoryOrigin, transfer: MemoryTransfer) -> Iterator[AgentDaemon]:
    agent = make_daemon(agent_config(tmp_path), origin, transfer=transfer)
    yield agent
    agent.shutdown()


def test_a_finished_download_is_installed_before_a_newer_version_replaces_it(
    store: MemoryObjectStore, transfer: MemoryTransfer, daemon: AgentDaemon
) -> None:
    publish(store, ["a"])
    run_until(daemon, lambda: daemon.layout.current_version() == 1)
    publish(store, ["a", "b"])
    run_until(daemon, lambda: (s := daemon.status()["download"]) is not None and s["version"] == 2
              and s["state"] != "waiting")
    status = transfer.status(2)
    assert status is not None and not status.finished
    transfer.poll()  # the transfer finishes on its own (its threads); the loop is not stepped
    status = transfer.status(2)
    assert status is not None and status.finished
    publish(store, ["a", "b", "c"])
    daemon._next_poll = 0.0  # the next step polls first, as when the poll returns late
    daemon.step()
    assert daemon.status()["last_swap"]["version"] == 2  # installed, not abandoned
    assert metric(daemon, "swaps_total") == 2
    run_until(daemon, lambda: daemon.layout.current_version() == 3)
