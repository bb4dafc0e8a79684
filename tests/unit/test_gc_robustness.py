"""Garbage collection is best effort and deletes only what the agent made.

What cannot be deleted (an immutable file, a permission) is logged with its full path and
left for the next collection, the rest is collected and the agent's start and installs go
on; a symbolic link in ``versions/`` or ``staging/`` is removed as a link, never followed;
only canonical ``vN`` names in ``versions/`` are ever deleted. An undeletable file is
simulated by making the deletion of one path raise PermissionError.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from bloomswarm.agent import daemon as daemon_module
from bloomswarm.agent import gc as gc_module
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.gc import collect_garbage, installed_versions
from bloomswarm.agent.install import (
    activate,
    prepare_data_dir,
    remove_tree,
)
from bloomswarm.agent.memory_transfer import MemoryOrigin
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    agent_config,
    install_fake_versions,
    installed,
    make_daemon,
    publish,
    run_until,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline

@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    prepare_data_dir(d)
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the data directory, with a file that must survive."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    return d


def _undeletable(monkeypatch: pytest.MonkeyPatch, victim: Path, module: object = gc_module) -> None:
    """Make ``module``'s deletion of ``victim`` fail as an immutable file below it would."""
    def remove_tree_failing(path: Path) -> None:
        if path == victim:
            raise PermissionError(errno.EPERM, "Operation not permitted", str(victim / "manifest.json"))
        remove_tree(path)

    monkeypatch.setattr(module, "remove_tree", remove_tree_failing)


def _undeletable_version(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Make the deletion of version ``version``'s directory fail: of its trash, the name
    collection renames it to before deleting it."""
    def remove_tree_failing(path: Path) -> None:
        if path.name.startswith(f".trash-v{version}-"):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path / "manifest.json"))
        remove_tree(path)

    monkeypatch.setattr(gc_module, "remove_tree", remove_tree_failing)


def _agent_on_v1(tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin,
                 daemons: list[AgentDaemon]) -> AgentDaemon:
    publish(store, ["a"])
    daemon = make_daemon(agent_config(tmp_path), origin)
    daemons.append(daemon)
    run_until(daemon, lambda: installed(daemon, 1))
    return daemon


def _warnings(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and f"event={event}" in r.getMessage()]


# -- remove_tree ------------------------------------------------------------------------


def test_remove_tree_removes_a_link_to_a_directory_as_a_link(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(outside)
    remove_tree(link)
    assert not os.path.lexists(link)
    assert (outside / "keep.txt").read_text() == "mine"


def test_remove_tree_deletes_what_it_can_and_names_the_failure_fully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree = tmp_path / "v7"
    (tree / "sub").mkdir(parents=True)
    for name in ("filter.bsf", "undeletable.bin", "sub/other"):
        (tree / name).write_bytes(b"x")
    real_unlink = os.unlink

    def unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if os.path.basename(os.fsdecode(path)) == "undeletable.bin":
            raise PermissionError(errno.EPERM, "Operation not permitted", os.fsdecode(path))
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(PermissionError) as caught:
        remove_tree(tree)
    assert caught.value.filename == str(tree / "undeletable.bin")
    assert sorted(p.name for p in tree.rglob("*")) == ["undeletable.bin"]  # the rest went


# -- a symbolic link is removed as a link ------------------------------------------------


@pytest.mark.parametrize("with_filter", [False, True], ids=["no-filter", "with-filter"])
def test_symlinked_version_dir_is_unlinked_not_followed(
    data_dir: Path, outside: Path, with_filter: bool,
) -> None:
    install_fake_versions(data_dir, 1, 2)
    activate(data_dir, 2)
    if with_filter:
        (outside / "filter.bsf").write_bytes(b"not ours")
    (data_dir / "versions" / "v7").symlink_to(outside)
    assert installed_versions(data_dir) == [1, 2]  # a link is no installed version
    collected = collect_garbage(data_dir, 2, lambda _v: None)
    assert not os.path.lexists(data_dir / "versions" / "v7")
    assert sorted(p.name for p in outside.iterdir()) == (["filter.bsf", "keep.txt"] if with_filter
                                                          else ["keep.txt"])
    assert collected.leftovers == ["versions/v7"]
    assert collected.failed == []
    assert installed_versions(data_dir) == [1, 2]


def test_symlink_in_staging_is_unlinked_not_followed(data_dir: Path, outside: Path) -> None:
    (data_dir / "staging" / "v9").symlink_to(outside)
    (data_dir / "staging" / "stray").symlink_to(outside / "keep.txt")
    collected = collect_garbage(data_dir, 2, lambda _v: None)
    assert list((data_dir / "staging").iterdir()) == []
    assert (outside / "keep.txt").read_text() == "mine"
    assert sorted(collected.leftovers) == ["staging/stray", "staging/v9"]


# -- what cannot be deleted --------------------------------------------------------------


@pytest.mark.parametrize("where", ["staging/v9", "versions/v7"])
def test_undeletable_leftover_is_logged_and_the_rest_collected(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, where: str,
) -> None:
    install_fake_versions(data_dir, 1, 2, 3)
    activate(data_dir, 3)
    for leftover in ("staging/v8", "staging/v9", "versions/v6", "versions/v7"):
        (data_dir / leftover).mkdir()
        (data_dir / leftover / "manifest.json").write_bytes(b"x")
    _undeletable(monkeypatch, data_dir / where)
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        collected = collect_garbage(data_dir, 2, lambda _v: None)
    assert collected.failed == [where]
    assert collected.versions == [1]
    assert sorted(collected.leftovers) == sorted({"staging/v8", "staging/v9", "versions/v6",
                                                  "versions/v7"} - {where})
    assert (data_dir / where).exists()
    assert installed_versions(data_dir) == [2, 3]
    warnings = _warnings(caplog, "gc_delete_failed")
    assert len(warnings) == 1
    assert str(data_dir / where / "manifest.json") in warnings[0]
    assert "Operation not permitted" in warnings[0]


def test_undeletable_old_version_is_logged_and_retried(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    install_fake_versions(data_dir, 1, 2, 3, 4)
    activate(data_dir, 4)
    _undeletable_version(monkeypatch, 1)
    stopped: list[int] = []
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        collected = collect_garbage(data_dir, 2, stopped.append, leftovers=False)
    assert stopped == [1, 2]
    assert collected.versions == [1, 2]  # renamed away: no longer installed
    [trash] = DataDir(data_dir).trash_leftovers()
    assert collected.failed == [str(trash.relative_to(data_dir))]  # what is left of v1
    assert installed_versions(data_dir) == [3, 4]
    assert len(_warnings(caplog, "gc_delete_failed")) == 1
    monkeypatch.undo()  # the file became deletable: the next collection gets it
    collected = collect_garbage(data_dir, 2, stopped.append, leftovers=False)
    assert collected.versions == [] and collected.leftovers == [str(trash.relative_to(data_dir))]
    assert not trash.exists() and installed_versions(data_dir) == [3, 4]


# -- only canonical version names --------------------------------------------------------


def test_only_canonical_version_dirs_are_deleted(
    data_dir: Path, outside: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    install_fake_versions(data_dir, 1)
    activate(data_dir, 1)
    versions = data_dir / "versions"
    for name in ("v01", "v-1", "v0", "backup", "V3", "v3"):
        (versions / name).mkdir()
        (versions / name / "notes.txt").write_text("mine")
    (versions / "README").write_text("stray")
    (versions / "v02").symlink_to(outside)
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        collected = collect_garbage(data_dir, 2, lambda _v: None)
    assert collected.leftovers == ["versions/v3"]  # an interrupted install of v3
    assert sorted(p.name for p in versions.iterdir()) == ["README", "V3", "backup", "v-1", "v0",
                                                          "v01", "v02", "v1"]
    assert (outside / "keep.txt").exists()
    left_alone = _warnings(caplog, "gc_left_alone")
    assert len(left_alone) == 7
    assert any(str(versions / "v01") in message for message in left_alone)


# -- the agent survives it ---------------------------------------------------------------


def _through_v2(tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin,
                daemons: list[AgentDaemon]) -> Path:
    daemon = _agent_on_v1(tmp_path, store, origin, daemons)
    publish(store, ["a", "b"])
    run_until(daemon, lambda: installed(daemon, 2))
    daemon.shutdown()
    daemons.remove(daemon)
    return daemon.data_dir


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("hostile", ["symlink", "staging/v9", "versions/v7", "stray-dirs"])
def test_agent_starts_and_installs_despite_hostile_leftovers(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
    monkeypatch: pytest.MonkeyPatch, outside: Path, hostile: str,
) -> None:
    data = _through_v2(tmp_path, store, origin, daemons)
    if hostile == "symlink":
        (data / "versions" / "v7").symlink_to(outside)
    elif hostile == "stray-dirs":
        for name in ("v01", "v-1", "backup"):
            (data / "versions" / name).mkdir()
            (data / "versions" / name / "notes.txt").write_text("mine")
    else:
        (data / hostile).mkdir()
        (data / hostile / "manifest.json").write_bytes(b"x")
        _undeletable(monkeypatch, data / hostile)
    daemon = make_daemon(agent_config(tmp_path), origin)  # start() collects leftovers
    daemons.append(daemon)
    publish(store, ["a", "b", "c"])
    run_until(daemon, lambda: installed(daemon, 3))
    assert (outside / "keep.txt").read_text() == "mine"
    if hostile == "stray-dirs":
        assert {"v01", "v-1", "backup"} <= {p.name for p in (data / "versions").iterdir()}
    assert not os.path.lexists(data / "versions" / "v7") or hostile == "versions/v7"


@pytest.mark.usefixtures("offline")
def test_undeletable_old_version_does_not_stop_seeding_the_new_one(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    daemon = _agent_on_v1(tmp_path, store, origin, daemons)
    publish(store, ["a", "b"])
    run_until(daemon, lambda: installed(daemon, 2))
    _undeletable_version(monkeypatch, 1)
    publish(store, ["a", "b", "c"])
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        run_until(daemon, lambda: installed(daemon, 3))  # the install's GC fails on v1
        for _ in range(5):
            daemon.step()
    assert daemon.transfer.versions() == [2, 3]  # the new version is seeded, v1 no longer
    [trash] = daemon.layout.trash_leftovers()  # what is left of v1, no version any more
    assert not daemon.layout.version_dir(1).exists()
    assert any(str(trash) in message for message in _warnings(caplog, "gc_delete_failed"))


@pytest.mark.usefixtures("offline")
def test_an_undeletable_staging_directory_after_an_install_does_not_stop_seeding_the_new_version(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    daemon = _agent_on_v1(tmp_path, store, origin, daemons)
    staging = daemon.layout.staging_dir(2)
    _undeletable(monkeypatch, staging, daemon_module)
    publish(store, ["a", "b"])
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        run_until(daemon, lambda: installed(daemon, 2))
        for _ in range(5):
            daemon.step()
    assert daemon.transfer.versions() == [1, 2]
    assert daemon.status()["last_error"] is None
    assert any(str(staging) in message for message in _warnings(caplog, "cleanup_failed"))
