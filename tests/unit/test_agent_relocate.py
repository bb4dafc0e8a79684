"""A finished download keeps its transfer across the install: the file is hard-linked into
versions/vN, the transfer switched to that name (``Transfer.relocate``), staging deleted.

Checked here in-process (MemoryTransfer, DirectTransfer, the install functions and the
daemon); the same with libtorrent sessions is in tests/functional/test_swarm_relocate.py.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent import daemon as daemon_module
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.direct import DirectTransfer
from bloomswarm.agent.install import InstalledDocuments, install_delta, install_version, prepare_data_dir
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryPeers, MemoryTransfer
from bloomswarm.agent.transfer import DeltaKey, TransferKey, TransferStatus, same_file
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import agent_config, installed, make_daemon, publish, run_until, stage_file

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps

_DOCUMENTS = InstalledDocuments(manifest=b"{}", manifest_signature=b"sig", torrent=b"t")


def _torrent(store: MemoryObjectStore, key: str) -> bytes:
    stored = store.get(key)
    assert stored is not None
    return stored.data


def _status(transfer: MemoryTransfer | DirectTransfer, key: int | DeltaKey) -> TransferStatus:
    status = transfer.status(key)
    assert status is not None
    return status



# -- install with keep_staged --------------------------------------------------------------


def test_keep_staged_links_the_file_into_place_read_only(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    staged = stage_file(tmp_path, 3, b"filter bytes")
    target = install_version(tmp_path, 3, staged, _DOCUMENTS, keep_staged=True)
    assert same_file(staged, target) and target.read_bytes() == b"filter bytes"
    assert os.stat(target).st_mode & 0o777 == 0o444 and os.stat(target).st_nlink == 2
    assert (target.parent / "filter.torrent").read_bytes() == b"t"
    shutil.rmtree(staged.parent)  # the caller deletes staging once nothing reads it
    assert target.read_bytes() == b"filter bytes" and os.stat(target).st_nlink == 1


def test_keep_staged_leaves_an_installed_version_and_the_staged_file_alone(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    install_version(tmp_path, 1, stage_file(tmp_path, 1, b"first"), _DOCUMENTS)
    staged = tmp_path / "staging" / "v1" / "filter.bsf"
    staged.write_bytes(b"second")
    target = install_version(tmp_path, 1, staged, _DOCUMENTS, keep_staged=True)
    assert target.read_bytes() == b"first" and staged.read_bytes() == b"second"
    assert not same_file(staged, target)  # so no transfer is switched to it


def test_keep_staged_renames_where_the_file_system_refuses_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "links not supported")

    prepare_data_dir(tmp_path)
    staged = stage_file(tmp_path, 2, b"filter bytes")
    monkeypatch.setattr(os, "link", refuse)
    target = install_version(tmp_path, 2, staged, _DOCUMENTS, keep_staged=True)
    assert target.read_bytes() == b"filter bytes" and not staged.exists()


def test_a_failing_link_installs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "no space left on device")

    prepare_data_dir(tmp_path)
    staged = stage_file(tmp_path, 2, b"filter bytes")
    monkeypatch.setattr(os, "link", full)
    with pytest.raises(OSError):
        install_version(tmp_path, 2, staged, _DOCUMENTS, keep_staged=True)
    assert not DataDir(tmp_path).filter_file(2).exists() and staged.read_bytes() == b"filter bytes"


def test_install_delta_keep_staged_links_the_delta(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    layout = DataDir(tmp_path)
    install_version(tmp_path, 2, stage_file(tmp_path, 2, b"filter"), _DOCUMENTS, keep_staged=True)
    staged_delta = layout.staged_delta(2, 1)
    staged_delta.write_bytes(b"delta")
    install_delta(tmp_path, 2, 1, staged_delta, b"delta torrent", keep_staged=True)
    assert same_file(staged_delta, layout.delta_file(2, 1))
    assert layout.delta_torrent_file(2, 1).read_bytes() == b"delta torrent"


# -- the transfers' relocate -------------------------------------------------------------


def test_memory_transfer_relocate_keeps_the_job_and_its_counts(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"], capacity=1_500_000)
    torrent, url = _torrent(store, manifest.torrent_key), origin.url_factory(manifest.filter_key)
    peers = MemoryPeers()
    first = MemoryTransfer(origin, peers=peers)
    second = MemoryTransfer(origin, peers=peers, pieces_per_poll=2)
    staging, versions = tmp_path / "staging", tmp_path / "versions"
    versions.mkdir()
    first.start_download(1, torrent, staging, url)
    assert not first.relocate(1, versions)  # not finished
    first.poll()
    second.start_download(1, torrent, tmp_path / "b", None)  # peers only
    second.poll()
    before = _status(first, 1)
    assert before.bytes_from_origin == manifest.size and before.bytes_uploaded > 0
    shutil.copy(staging / "filter.bsf", versions / "filter.bsf")
    assert not first.relocate(1, versions)  # a copy is not the same file
    assert not first.relocate(2, versions)  # not transferred
    os.unlink(versions / "filter.bsf")
    os.link(staging / "filter.bsf", versions / "filter.bsf")
    assert first.relocate(1, versions)
    shutil.rmtree(staging)
    assert _status(first, 1) == before  # the same transfer: same counts, still seeding
    while not _status(second, 1).finished:
        second.poll()  # served from versions/ now
    assert (tmp_path / "b" / "filter.bsf").read_bytes() == (versions / "filter.bsf").read_bytes()
    assert _status(first, 1).bytes_uploaded == manifest.size
    assert _status(second, 1).bytes_from_peers == manifest.size


def test_direct_transfer_relocate_keeps_the_job(tmp_path: Path, store: MemoryObjectStore) -> None:
    manifest = publish(store, ["a"])
    torrent = _torrent(store, manifest.torrent_key)
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "filter.bsf").write_bytes(_torrent(store, manifest.filter_key))
    transfer = DirectTransfer()
    transfer.seed(1, torrent, old)
    before = _status(transfer, 1)
    assert not transfer.relocate(1, new)  # nothing there
    os.link(old / "filter.bsf", new / "filter.bsf")
    assert not transfer.relocate(2, new) and transfer.relocate(1, new)
    assert _status(transfer, 1) == before
    transfer.close()


# -- the daemon ----------------------------------------------------------------------------


def _agent(tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
           transfer: MemoryTransfer | None = None, **changes: Any) -> AgentDaemon:
    tmp_path.mkdir(parents=True, exist_ok=True)
    daemon = make_daemon(agent_config(tmp_path, **changes), origin, transfer=transfer)
    daemons.append(daemon)
    return daemon


class _NoRelocate(MemoryTransfer):
    """A transfer that cannot switch a download's directory (the fallback)."""

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        return False


class _Crash(BaseException):
    """The process dies here (not an Exception: the daemon's loop does not catch it)."""


def test_a_finished_download_goes_on_seeding_with_its_counts(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    caplog: pytest.LogCaptureFixture,
) -> None:
    manifest = publish(store, ["a", "b"])
    group = MemoryPeers()
    transfer = MemoryTransfer(origin, peers=group)
    daemon = _agent(tmp_path, origin, daemons, transfer=transfer)
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        run_until(daemon, lambda: installed(daemon, 1))
    status = _status(transfer, 1)
    assert (status.state, status.bytes_from_origin) == ("seeding", manifest.size)  # not a new seed
    assert "event=seeding version=v1" in caplog.text and "connections_kept=true" in caplog.text
    assert not any(daemon.layout.staging.iterdir())
    assert os.stat(daemon.layout.filter_file(1)).st_nlink == 1  # the staged link is gone
    peer = MemoryTransfer(peers=group)  # no origin: from the agent only
    peer.start_download(1, _torrent(store, manifest.torrent_key), tmp_path / "peer", None)
    peer.poll()  # read from versions/v1
    assert hashlib.sha256((tmp_path / "peer" / "filter.bsf").read_bytes()).hexdigest() == manifest.sha256
    assert _status(transfer, 1).bytes_uploaded == manifest.size


def test_without_relocate_the_download_is_removed_and_seeded_anew(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a", "b"])
    transfer = _NoRelocate(origin)
    daemon = _agent(tmp_path, origin, daemons, transfer=transfer)
    run_until(daemon, lambda: installed(daemon, 1))
    status = _status(transfer, 1)
    assert (status.state, status.bytes_from_origin) == ("seeding", 0)  # a new seed
    assert not any(daemon.layout.staging.iterdir())


@pytest.mark.parametrize("where", ["before_the_flip", "before_the_switch"])
def test_a_crash_during_the_install_loses_nothing(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    monkeypatch: pytest.MonkeyPatch, *, where: str,
) -> None:
    publish(store, ["a"])
    first = _agent(tmp_path, origin, daemons)
    run_until(first, lambda: installed(first, 1))
    v2 = publish(store, ["a", "b"])

    def crash(*args: Any, **kwargs: Any) -> bool:
        raise _Crash

    if where == "before_the_flip":
        monkeypatch.setattr(daemon_module, "activate", crash)
    else:
        monkeypatch.setattr(first.transfer, "relocate", crash)
    with pytest.raises(_Crash):
        run_until(first, lambda: False)
    layout = first.layout
    assert same_file(layout.staged_file(2), layout.filter_file(2))  # both names, one file
    assert layout.current_version() == (1 if where == "before_the_flip" else 2)
    daemons.remove(first)
    first.transfer.close()
    monkeypatch.undo()
    transfer = MemoryTransfer(origin)
    again = _agent(tmp_path, origin, daemons, transfer=transfer)  # the restart
    run_until(again, lambda: installed(again, 2) and not any(layout.staging.iterdir()))
    assert hashlib.sha256(layout.current_filter.read_bytes()).hexdigest() == v2.sha256
    assert _status(transfer, 2).state == "seeding"


def test_a_kept_delta_goes_on_seeding_with_its_counts(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    keys = [f"key-{i}" for i in range(300)]
    publish(store, keys, deltas=True)
    transfer = MemoryTransfer(origin)
    daemon = _agent(tmp_path, origin, daemons, transfer=transfer)
    run_until(daemon, lambda: installed(daemon, 1))
    v2 = publish(store, [*keys[5:], "new"], deltas=True)
    entry = v2.delta_from(1)
    assert entry is not None
    run_until(daemon, lambda: installed(daemon, 2))
    delta = _status(transfer, DeltaKey(2, 1))
    assert (delta.state, delta.bytes_from_origin) == ("seeding", entry.size)  # the download's own
    assert _status(transfer, 2).state == "seeding"
    assert not any(daemon.layout.staging.iterdir())
    assert os.stat(daemon.layout.delta_file(2, 1)).st_nlink == 1
