"""A download that finished while the agent's poll was blocked is installed, not dropped.

Found by the soak (benchmarks/soak.py): with the origin stalling, one poll of latest.json
can block the agent's loop for many seconds; a download finishing meanwhile was
abandoned when that poll returned a newer version, so the agent skipped a version it
already had on disk.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.common.datadir import current_version
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import StoreServer, agent_config, make_daemon, metric, publish, run_until

store, server = agent_helpers.store, agent_helpers.server  # the shared pytest fixtures


@pytest.fixture
def daemon(tmp_path: Path, server: StoreServer) -> Iterator[AgentDaemon]:
    agent = make_daemon(agent_config(tmp_path, server.url))
    yield agent
    agent.shutdown()


def test_a_finished_download_is_installed_before_a_newer_version_replaces_it(
    store: MemoryObjectStore, server: StoreServer, daemon: AgentDaemon
) -> None:
    publish(store, ["a"])
    run_until(daemon, lambda: current_version(daemon.data_dir) == 1)
    publish(store, ["a", "b"])
    run_until(daemon, lambda: (s := daemon.status()["download"]) is not None and s["version"] == 2
              and s["state"] != "waiting")
    deadline = time.monotonic() + 30  # the transfer finishes on its own threads; the loop is not stepped
    while not ((s := daemon.transfer.status(2)) is not None and s.finished):
        assert time.monotonic() < deadline, "the download of v2 never finished"
        time.sleep(0.01)
    publish(store, ["a", "b", "c"])
    daemon._next_poll = 0.0  # the next step polls first, as when the poll returns late
    daemon.step()
    assert daemon.status()["last_swap"]["version"] == 2  # installed, not abandoned
    assert metric(daemon, "swaps_total") == 2
    run_until(daemon, lambda: current_version(daemon.data_dir) == 3)
