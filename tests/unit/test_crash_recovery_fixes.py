"""Recovery after a crash at the points a review found unrecovered.

Each test puts the data directory in the state a kill leaves at that point (or simulates
the kill inside the call), then checks that the agent, or the next collection, recovers
on its own: a read-only staged file made writable again, no half-deleted version, a
partial full-file download kept beside a stale delta torrent, a state.json message that
says what to do, and the temporary files of atomic writes collected at start.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent import daemon as daemon_module
from bloomswarm.agent import gc as gc_module
from bloomswarm.agent import install as install_module
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.gc import collect_garbage, installed_versions
from bloomswarm.agent.install import (
    InstalledDocuments,
    activate,
    install_version,
    prepare_data_dir,
    read_last_sequence,
    write_last_sequence,
)
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.common.atomic_file import write_new_file
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import FormatError
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    agent_config,
    install_fake_versions,
    installed,
    make_daemon,
    metric,
    point_latest,
    publish,
    run_until,
    stage_file,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps

DOCUMENTS = InstalledDocuments(manifest=b"{}", manifest_signature=b"sig", torrent=b"t")


class _Killed(BaseException):
    """Stands for SIGKILL inside a call: nothing after it runs, no handler cleans up."""


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    prepare_data_dir(d)
    return d


def _agent(tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
           transfer: MemoryTransfer | None = None, **changes: Any) -> AgentDaemon:
    daemon = make_daemon(agent_config(tmp_path, **changes), origin, transfer=transfer)
    daemons.append(daemon)
    return daemon


def _interrupted_download(tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin,
                          daemons: list[AgentDaemon]) -> tuple[Manifest, Path]:
    """An agent shut down in the middle of v1's download (about 1.8 MB, 256 KiB pieces):
    v1's manifest and the partial staged file."""
    manifest = publish(store, ["a"], capacity=1_500_000)
    daemon = _agent(tmp_path, origin, daemons, transfer=MemoryTransfer(origin, pieces_per_poll=1))
    partial = daemon.layout.staged_file(1)
    run_until(daemon, lambda: partial.is_file() and partial.stat().st_size >= 256 * 1024)
    daemon.shutdown()
    daemons.remove(daemon)
    assert daemon.layout.resume_in(partial.parent).is_file()
    assert partial.stat().st_size < manifest.size
    return manifest, partial


# -- 1: a staged file made read-only by an install a crash interrupted ----------------------


def test_restart_gives_a_read_only_staged_file_its_write_bit_back(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
) -> None:
    manifest, partial = _interrupted_download(tmp_path, store, origin, daemons)
    os.chmod(partial, 0o444)  # install_version's chmod ran, the kill came before its link
    again = _agent(tmp_path, origin, daemons)
    assert again.target_version == 1
    # Root ignores modes, so the mode itself is what is checked: a non-root agent's
    # transfer opens the file for writing (direct: "ab"), which 0444 refuses.
    assert stat.S_IMODE(partial.stat().st_mode) == 0o644
    run_until(again, lambda: installed(again, 1))
    assert hashlib.sha256(again.layout.current_filter.read_bytes()).hexdigest() == manifest.sha256
    assert stat.S_IMODE(again.layout.filter_file(1).stat().st_mode) == 0o444


def test_make_owner_writable_changes_only_a_read_only_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"x")
    os.chmod(target, 0o440)
    assert install_module.make_owner_writable(target) is True
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert install_module.make_owner_writable(target) is False  # already writable
    assert install_module.make_owner_writable(tmp_path / "missing") is False
    link = tmp_path / "link"
    link.symlink_to(target)
    os.chmod(target, 0o444)
    assert install_module.make_owner_writable(link) is False  # a link is not followed
    assert stat.S_IMODE(target.stat().st_mode) == 0o444


def test_install_leaves_the_staged_file_writable_until_its_link_step(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    staged = stage_file(data_dir, 3, b"v3")
    real_write = write_new_file

    def killed_at_the_torrent(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
        if os.fspath(path).endswith("filter.torrent"):
            raise _Killed
        real_write(path, data, mode=mode)

    monkeypatch.setattr(install_module, "write_new_file", killed_at_the_torrent)
    with pytest.raises(_Killed):
        install_version(data_dir, 3, staged, DOCUMENTS, keep_staged=True)
    assert stat.S_IMODE(staged.stat().st_mode) & stat.S_IWUSR
    monkeypatch.undo()
    install_version(data_dir, 3, staged, DOCUMENTS, keep_staged=True)
    assert stat.S_IMODE(DataDir(data_dir).filter_file(3).stat().st_mode) == 0o444


# -- 2: a kill during garbage collection's deletion of a version ---------------------------


def test_a_kill_while_a_version_is_deleted_leaves_no_half_version(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_versions(data_dir, 1, 2, 3)
    activate(data_dir, 3)
    layout = DataDir(data_dir)

    def killed_midway(path: Path) -> None:  # the torrent went first, then the kill
        (path / "filter.torrent").unlink()
        raise _Killed

    monkeypatch.setattr(gc_module, "remove_tree", killed_midway)
    with pytest.raises(_Killed):
        collect_garbage(data_dir, 2, lambda _v: None, leftovers=False)
    monkeypatch.undo()
    assert installed_versions(data_dir) == [2, 3]  # v1 is gone whole, not half
    assert not layout.version_dir(1).exists()
    [trash] = layout.trash_leftovers()
    assert (trash / "filter.bsf").is_file()
    collected = collect_garbage(data_dir, 2, lambda _v: None)  # the restart's collection
    assert collected.leftovers == [str(trash.relative_to(data_dir))]
    assert layout.trash_leftovers() == []
    assert sorted(os.listdir(layout.versions)) == ["v2", "v3"]
    assert (data_dir / "current" / "filter.bsf").read_bytes() == b"v3"


def test_the_current_version_is_never_renamed_away(data_dir: Path) -> None:
    install_fake_versions(data_dir, 1, 2, 3)
    activate(data_dir, 1)  # a rollback: the oldest is current
    collected = collect_garbage(data_dir, 1, lambda _v: None)
    assert sorted(collected.versions) == [2, 3]
    assert os.listdir(DataDir(data_dir).versions) == ["v1"]
    assert (data_dir / "current" / "filter.bsf").read_bytes() == b"v1"


# -- 3: a stale delta torrent beside a full-file download ------------------------------------


@pytest.mark.parametrize("deltas", [True, False])
def test_a_stale_delta_torrent_does_not_discard_the_partial_file(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    deltas: bool,
) -> None:
    manifest, partial = _interrupted_download(tmp_path, store, origin, daemons)
    on_disk = partial.stat().st_size
    (partial.parent / ".delta-from-v7.torrent").write_bytes(b"d4:infod6:lengthi1eee")
    (partial.parent / ".tmp-filter.bsf.abc123").write_bytes(b"an apply's temporary")
    config = agent_config(tmp_path)
    again = _agent(tmp_path, origin, daemons,
                   install=dataclasses.replace(config.install, deltas=deltas))
    assert again.target_version == 1
    assert partial.stat().st_size == on_disk  # kept: the full file's download resumes
    assert not (partial.parent / ".tmp-filter.bsf.abc123").exists()
    run_until(again, lambda: installed(again, 1))
    assert metric(again, "bytes_from_origin_total") == manifest.size - on_disk
    assert hashlib.sha256(again.layout.current_filter.read_bytes()).hexdigest() == manifest.sha256


# -- 4: a malformed state.json ------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"{not json", b"{}", b'{"last_sequence": "7"}', b"[1]"])
def test_a_malformed_state_file_says_how_to_recover_in_one_line(
    data_dir: Path, content: bytes,
) -> None:
    DataDir(data_dir).state_file.write_bytes(content)
    with pytest.raises(FormatError) as caught:
        read_last_sequence(data_dir)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{DataDir(data_dir).state_file} is malformed (")
    assert message.endswith("): delete it to accept any pointer sequence again")
    DataDir(data_dir).state_file.unlink()  # the remedy the message names
    assert read_last_sequence(data_dir) is None


# -- 5: temporary files of atomic writes a crash interrupted --------------------------------


def test_start_collects_the_temporary_files_of_interrupted_atomic_writes(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
) -> None:
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    daemon.shutdown()
    daemons.remove(daemon)
    data = daemon.data_dir
    leftovers = [data / ".tmp-state.json.k1ll3d", data / "versions" / "v1" / ".tmp-delta-from-v0.torrent.x"]
    for path in leftovers:
        path.write_bytes(b"{")
    (data / ".tmp-not-a-file").mkdir()  # only files are an atomic write's
    again = _agent(tmp_path, origin, daemons)
    assert [p for p in leftovers if p.exists()] == []
    assert (data / ".tmp-not-a-file").is_dir()
    assert read_last_sequence(data) is not None and installed(again, 1)


def test_collection_removes_temporaries_only_when_asked(data_dir: Path) -> None:
    install_fake_versions(data_dir, 1)
    activate(data_dir, 1)
    write_last_sequence(data_dir, 4)
    tmp = data_dir / ".tmp-state.json.abc"
    tmp.write_bytes(b"")
    collect_garbage(data_dir, 2, lambda _v: None)  # after a rollback: a writer may be at work
    assert tmp.exists()
    collected = collect_garbage(data_dir, 2, lambda _v: None, temporaries=True)
    assert collected.leftovers == [".tmp-state.json.abc"]
    assert not tmp.exists() and read_last_sequence(data_dir) == 4



def test_a_version_that_cannot_be_renamed_away_stays_installed_whole(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_versions(data_dir, 1, 2, 3)
    activate(data_dir, 3)

    def refused(layout: DataDir, version: int) -> Path:
        raise PermissionError(13, "Permission denied", str(layout.version_dir(version)))

    monkeypatch.setattr(gc_module, "retire_version", refused)
    collected = collect_garbage(data_dir, 2, lambda _v: None)
    assert collected.versions == [] and collected.failed == ["versions/v1"]
    assert installed_versions(data_dir) == [1, 2, 3]
    assert (DataDir(data_dir).torrent_file(1)).is_file()


@pytest.mark.parametrize("rename_fails", [False, True])
def test_a_corrupt_installed_version_is_renamed_away_before_it_is_deleted(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
    monkeypatch: pytest.MonkeyPatch, rename_fails: bool,
) -> None:
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    publish(store, ["a", "b"])
    run_until(daemon, lambda: installed(daemon, 2))
    old = daemon.layout.filter_file(1)
    os.chmod(old, 0o644)
    with open(old, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    if rename_fails:
        def refused(layout: DataDir, version: int) -> Path:
            raise PermissionError(13, "Permission denied", str(layout.version_dir(version)))

        monkeypatch.setattr(daemon_module, "retire_version", refused)
    point_latest(store, 1, pinned=True)  # a rollback to the corrupt copy
    run_until(daemon, lambda: metric(daemon, "verification_failures_total", check="sha256") >= 1)
    assert daemon.layout.current_version() == 2
    assert daemon.layout.trash_leftovers() == []
    assert daemon.layout.version_dir(1).exists() == rename_fails  # left whole, or gone whole
    assert "installed copy" in (daemon.status()["last_error"] or "")
