"""The agent under transfer faults injected by MemoryTransfer: corrupt bytes, failed
downloads, hash failures, and bytes counted by source when agents serve each other.

Whatever the transfer does, the installed version keeps serving until a download passes
the swap gate.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryPeers, MemoryTransfer
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    agent_config,
    installed,
    make_daemon,
    metric,
    publish,
    run_until,
    served_filter_bytes,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps


def _agent(directory: Path, origin: MemoryOrigin, daemons: list[AgentDaemon],
           transfer: MemoryTransfer) -> AgentDaemon:
    directory.mkdir(parents=True, exist_ok=True)
    daemon = make_daemon(agent_config(directory), origin, transfer=transfer)
    daemons.append(daemon)
    return daemon


def _serves(daemon: AgentDaemon, manifest: Manifest) -> bool:
    """The agent is ready and its current filter is ``manifest``'s file."""
    current = daemon.layout.current_filter
    return (daemon.metrics.is_ready and installed(daemon, manifest.version)
            and hashlib.sha256(current.read_bytes()).hexdigest() == manifest.sha256)


def test_corrupt_bytes_are_caught_by_the_gate_and_the_installed_version_keeps_serving(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    v1 = publish(store, ["a"])
    transfer = MemoryTransfer(origin)
    daemon = _agent(tmp_path, origin, daemons, transfer)
    run_until(daemon, lambda: installed(daemon, 1))
    v2 = publish(store, ["a", "b"])
    transfer.inject_corruption(2, times=2)
    run_until(daemon, lambda: metric(daemon, "verification_failures_total", check="sha256") >= 2)
    assert _serves(daemon, v1)
    assert not daemon.layout.version_dir(2).exists() and not daemon.layout.staging_dir(2).exists()
    status = daemon.status()
    assert "SHA-256" in status["last_error"] and status["download"]["version"] == 2
    run_until(daemon, lambda: installed(daemon, 2))  # the corruption is used up: the retry passes
    assert _serves(daemon, v2) and metric(daemon, "swaps_total") == 2
    assert metric(daemon, "verification_failures_total", check="sha256") == 2


def test_a_failed_download_is_retried_and_the_installed_version_keeps_serving(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    v1 = publish(store, ["a"])
    transfer = MemoryTransfer(origin)
    daemon = _agent(tmp_path, origin, daemons, transfer)
    run_until(daemon, lambda: installed(daemon, 1))
    v2 = publish(store, ["a", "b"])
    transfer.inject_error(2, "tracker unreachable", times=3)
    run_until(daemon, lambda: metric(daemon, "transfer_errors_total") >= 3)
    assert _serves(daemon, v1) and "tracker unreachable" in daemon.status()["last_error"]
    assert daemon.status()["download"]["failures"] == 3
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2) and metric(daemon, "transfer_errors_total") == 3


def test_hash_failures_are_counted_and_the_download_still_installs(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    v1 = publish(store, ["a"])  # one piece
    transfer = MemoryTransfer(origin)
    transfer.inject_hash_failures(1, 3)
    daemon = _agent(tmp_path, origin, daemons, transfer)
    run_until(daemon, lambda: installed(daemon, 1))
    assert _serves(daemon, v1)
    assert metric(daemon, "hash_failures_total") == 3
    assert metric(daemon, "verification_failures_total", check="sha256") == 0
    assert metric(daemon, "bytes_from_origin_total") == 4 * v1.size == served_filter_bytes(origin)


def test_agents_of_one_group_take_the_file_from_each_other(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    v1 = publish(store, ["a"], capacity=400_000)
    peers = MemoryPeers()
    first = _agent(tmp_path / "first", origin, daemons, MemoryTransfer(origin, peers=peers))
    run_until(first, lambda: installed(first, 1))
    second = _agent(tmp_path / "second", origin, daemons, MemoryTransfer(origin, peers=peers))
    run_until(second, lambda: installed(second, 1))
    # The first agent counts what it sent at its next refresh of the metrics.
    run_until(first, lambda: metric(first, "bytes_uploaded_total") == v1.size)
    assert _serves(second, v1)
    assert metric(second, "bytes_from_peers_total") == v1.size
    assert metric(second, "bytes_from_origin_total") == 0
    assert metric(first, "bytes_uploaded_total") == v1.size
    assert metric(first, "bytes_from_origin_total") == v1.size == served_filter_bytes(origin)
    assert metric(first, "peers") == 1 and first.status()["seeding"] == [1]
