"""``current`` counts as installed only when it names a version installed here: a link left
dangling (its version deleted by hand) or pointing elsewhere is repaired by installing a
version again, never trusted, and nothing outside the data directory is touched."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import agent_config, installed, make_daemon, publish, run_until

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")


def _installed_v1(tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin,
                  daemons: list[AgentDaemon]) -> AgentDaemon:
    publish(store, ["a", "b"])
    daemon = make_daemon(agent_config(tmp_path), origin)
    daemons.append(daemon)
    run_until(daemon, lambda: installed(daemon, 1))
    daemon.shutdown()
    daemons.remove(daemon)
    return daemon


def _restart(tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon]) -> AgentDaemon:
    daemon = make_daemon(agent_config(tmp_path), origin)
    daemons.append(daemon)
    return daemon


@pytest.mark.parametrize("damage", ["version_deleted", "filter_file_deleted"])
def test_a_dangling_current_is_repaired_by_installing_again(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], damage: str
) -> None:
    first = _installed_v1(tmp_path, store, origin, daemons)
    layout = DataDir(first.data_dir)
    if damage == "version_deleted":
        shutil.rmtree(layout.version_dir(1))
    else:
        os.chmod(layout.filter_file(1), 0o644)
        layout.filter_file(1).unlink()
    assert layout.current_version() is None
    daemon = _restart(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    assert layout.filter_file(1).is_file() and daemon.metrics.is_ready


def test_a_current_pointing_outside_is_replaced_and_its_target_left_alone(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    first = _installed_v1(tmp_path, store, origin, daemons)
    layout = DataDir(first.data_dir)
    elsewhere = tmp_path / "elsewhere" / "v1"
    elsewhere.mkdir(parents=True)
    (elsewhere / "filter.bsf").write_bytes(b"not a filter")
    layout.current.unlink()
    layout.current.symlink_to(elsewhere)
    assert layout.current_version() is None
    daemon = _restart(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    assert os.readlink(layout.current) == "versions/v1"
    assert (elsewhere / "filter.bsf").read_bytes() == b"not a filter"


@pytest.mark.parametrize("target", ["versions/v1", "./versions/v1", "versions/v01", "other/v1", "v1"])
def test_only_the_link_flip_current_writes_names_an_installed_version(tmp_path: Path, target: str) -> None:
    layout = DataDir(tmp_path)
    layout.filter_file(1).parent.mkdir(parents=True)
    layout.filter_file(1).write_bytes(b"x")
    layout.current.symlink_to(target)
    assert layout.current_version() == (1 if target == "versions/v1" else None)
