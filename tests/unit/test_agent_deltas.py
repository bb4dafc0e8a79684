"""The agent's delta path, in-process (memory store, MemoryOrigin, MemoryTransfer).

An agent on v1 that sees v2's manifest list a delta from v1 fetches the delta, checks and
applies it, and installs the result through the usual gate; it keeps the delta beside v2
and seeds it. Every failure of that path falls back to the full file, counted by reason
and logged once, and nothing bad is installed. Nothing opens a socket or sleeps.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.agent.config import InstallConfig
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.deltas import (
    FALLBACK_REASONS,
    DeltaFallback,
    DeltaPlan,
    apply_fetched_delta,
    choose_delta,
)
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryPeers, MemoryTransfer
from bloomswarm.agent.transfer import DeltaKey
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.live import LiveFilter
from bloomswarm.common.manifest import DeltaEntry, Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    agent_config,
    installed,
    make_daemon,
    metric,
    publish,
    resign_delta,
    run_until,
    served_delta_bytes,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps

KEYS_1 = [f"key-{i}" for i in range(300)]
KEYS_2 = KEYS_1[5:] + [f"new-{i}" for i in range(5)]  # a few keys out, a few in


def _agent(directory: Path, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
           transfer: MemoryTransfer | None = None, **changes: Any) -> AgentDaemon:
    directory.mkdir(parents=True, exist_ok=True)
    daemon = make_daemon(agent_config(directory, **changes), origin, transfer=transfer)
    daemons.append(daemon)
    return daemon


def _on_v1(directory: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
           **options: Any) -> AgentDaemon:
    """An agent that installed v1 (published here)."""
    publish(store, KEYS_1, deltas=True)
    daemon = _agent(directory, origin, daemons, **options)
    run_until(daemon, lambda: installed(daemon, 1))
    return daemon


def _delta(manifest: Manifest, base: int) -> DeltaEntry:
    entry = manifest.delta_from(base)
    assert entry is not None, f"v{manifest.version} lists no delta from v{base}"
    return entry


def _serves(daemon: AgentDaemon, manifest: Manifest) -> bool:
    return (installed(daemon, manifest.version)
            and hashlib.sha256(daemon.layout.current_filter.read_bytes()).hexdigest() == manifest.sha256)


def _fallbacks(daemon: AgentDaemon) -> dict[str, float]:
    counts = {r: metric(daemon, "delta_fallbacks_total", reason=r) for r in FALLBACK_REASONS}
    return {r: n for r, n in counts.items() if n}


def test_an_agent_on_v1_gets_v2_by_delta_keeps_it_and_seeds_it(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    daemon = _on_v1(tmp_path, store, origin, daemons)
    v1_bytes = metric(daemon, "bytes_from_origin_total")
    live = LiveFilter(daemon.data_dir, watch=False, poll_interval=0.01)
    try:
        v2 = publish(store, KEYS_2, deltas=True)
        entry = _delta(v2, 1)
        run_until(daemon, lambda: installed(daemon, 2))
        assert _serves(daemon, v2)
        assert origin.served[v2.filter_key] == 0  # not one byte of the file
        assert served_delta_bytes(origin) == entry.size
        assert metric(daemon, "delta_installs_total") == 1
        assert metric(daemon, "delta_bytes_total") == entry.size
        assert metric(daemon, "bytes_from_origin_total") == v1_bytes + entry.size
        assert _fallbacks(daemon) == {}
        assert metric(daemon, "verification_failures_total", check="sha256") == 0
        kept = daemon.layout.delta_file(2, 1)
        assert hashlib.sha256(kept.read_bytes()).hexdigest() == entry.sha256
        assert stat.S_IMODE(kept.stat().st_mode) == 0o444
        assert daemon.layout.installed_deltas(2) == [1]
        assert DeltaKey(2, 1) in daemon.transfer.versions()
        status = daemon.status()
        assert status["seeding_deltas"] == ["v2-from-v1"] and status["seeding"] == [1, 2]
        assert status["last_swap"]["delta_from"] == 1
        assert status["last_swap"]["apply_s"] >= 0.0  # how long the apply took
        assert not any(daemon.layout.staging.iterdir())
        live.refresh()  # readers see a version like any other
        assert live.version == 2 and "new-1" in live
    finally:
        live.close()


def _tamper_delta(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    entry = _delta(v2, 1)
    stored = store.get(entry.key)
    assert stored is not None
    store.put(entry.key, stored.data[:-1] + bytes([stored.data[-1] ^ 0xFF]))  # same size


def _delete_delta(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    store.delete([_delta(v2, 1).key])


def _delete_delta_torrent(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    store.delete([_delta(v2, 1).torrent_key])


def _modify_base(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    base = daemon.layout.filter_file(1)
    os.chmod(base, 0o644)
    with base.open("r+b") as fh:  # the body changes under an unchanged header
        fh.seek(HEADER_SIZE + 17)
        byte = fh.read(1)
        fh.seek(HEADER_SIZE + 17)
        fh.write(bytes([byte[0] ^ 0x5A]))


def _modify_base_header(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    base = daemon.layout.filter_file(1)
    os.chmod(base, 0o644)
    with base.open("r+b") as fh:  # the header no longer reads (its checksum fails)
        fh.seek(40)
        byte = fh.read(1)
        fh.seek(40)
        fh.write(bytes([byte[0] ^ 0x5A]))


def _sign_corrupt_delta(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    stored = store.get(_delta(v2, 1).key)
    assert stored is not None
    data = bytearray(stored.data)
    middle = HEADER_SIZE + (len(data) - HEADER_SIZE) // 2
    data[middle:middle + 8] = bytes(b ^ 0xA5 for b in data[middle:middle + 8])
    resign_delta(store, 2, 1, bytes(data))


def _sign_truncated_delta(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    stored = store.get(_delta(v2, 1).key)
    assert stored is not None
    resign_delta(store, 2, 1, stored.data[:-7])


def _sign_delta_to_another_file(store: MemoryObjectStore, v2: Manifest, daemon: AgentDaemon) -> None:
    """A well-formed delta from v1 to another v2 (same parameters), signed as v2's."""
    other = MemoryObjectStore()
    publish(other, KEYS_1, deltas=True)
    other_v2 = publish(other, [*KEYS_1, "other"], deltas=True)
    stored = other.get(_delta(other_v2, 1).key)
    assert stored is not None
    resign_delta(store, 2, 1, stored.data)


@pytest.mark.parametrize(("damage", "reason"), [
    (_tamper_delta, "delta_hash"),
    (_delete_delta, "missing"),
    (_delete_delta_torrent, "missing"),
    (_modify_base, "base_modified"),
    (_modify_base_header, "base_modified"),
    (_sign_corrupt_delta, "corrupt"),
    (_sign_truncated_delta, "corrupt"),
    (_sign_delta_to_another_file, "wrong_result"),
], ids=lambda value: getattr(value, "__name__", value))
def test_every_failure_of_the_delta_falls_back_to_the_full_file(
    *, tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[MemoryObjectStore, Manifest, AgentDaemon], None], reason: str,
) -> None:
    daemon = _on_v1(tmp_path, store, origin, daemons)
    v2 = publish(store, KEYS_2, deltas=True)
    damage(store, v2, daemon)
    caplog.set_level(logging.INFO, logger="bloomswarm.agent")
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2)  # the full file: nothing bad installed
    assert origin.served[v2.filter_key] == v2.size
    assert _fallbacks(daemon) == {reason: 1}
    assert metric(daemon, "delta_installs_total") == 0
    assert metric(daemon, "verification_failures_total", check="sha256") == 0  # not an error
    assert [r for r in caplog.messages if "event=delta_fallback" in r and f"reason={reason}" in r] != []
    assert sum("event=delta_fallback" in m for m in caplog.messages) == 1  # logged once
    assert daemon.layout.installed_deltas(2) == []
    assert not any(key for key in daemon.transfer.versions() if isinstance(key, DeltaKey))
    assert not any(daemon.layout.staging.iterdir())


def test_install_max_file_size_bounds_the_file_not_the_file_and_its_delta(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
) -> None:
    """A limit the file meets lets its delta in too (it was refused, retried for ever)."""
    other = MemoryObjectStore()
    publish(other, KEYS_1, deltas=True)
    size = publish(other, KEYS_2, deltas=True).size  # v2's size, to set the limit to
    daemon = _on_v1(tmp_path, store, origin, daemons,
                    install=InstallConfig(disk_margin_bytes=0, max_file_size=size))
    v2 = publish(store, KEYS_2, deltas=True)
    assert v2.size == size
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2) and metric(daemon, "delta_installs_total") == 1
    assert metric(daemon, "refusals_total", reason="file_too_large") == 0


def test_a_delta_without_room_beside_its_result_falls_back_to_the_full_file(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The disk holds the file but not the file and the delta at once: the file, at once."""
    daemon = _on_v1(tmp_path, store, origin, daemons)
    v2 = publish(store, KEYS_2, deltas=True)
    free = v2.size + _delta(v2, 1).size // 2
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=free))
    caplog.set_level(logging.INFO, logger="bloomswarm.agent")
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2) and _fallbacks(daemon) == {"no_room": 1}
    assert origin.served[v2.filter_key] == v2.size
    assert sum("event=delta_fallback" in m for m in caplog.messages) == 1


def test_a_delta_that_stalls_falls_back_to_the_full_file(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    transfer = MemoryTransfer(origin)
    daemon = _on_v1(tmp_path, store, origin, daemons, transfer=transfer,
                    install=InstallConfig(disk_margin_bytes=0, delta_stall_s=1.0))
    transfer.inject_stall(DeltaKey(2, 1))  # its peers and origin are silent
    v2 = publish(store, KEYS_2, deltas=True)
    run_until(daemon, lambda: daemon.status()["download"] is not None
              and daemon.status()["download"]["delta_from"] == 1)
    assert daemon.layout.current_version() == 1
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2) and _fallbacks(daemon) == {"stalled": 1}


def test_deltas_off_fetches_the_full_file(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    daemon = _on_v1(tmp_path, store, origin, daemons,
                    install=InstallConfig(disk_margin_bytes=0, deltas=False))
    v2 = publish(store, KEYS_2, deltas=True)
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2) and origin.served[v2.filter_key] == v2.size
    assert served_delta_bytes(origin) == 0 and _fallbacks(daemon) == {}


def test_a_delta_download_interrupted_by_shutdown_resumes_after_restart(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    keys = [f"key-{i}" for i in range(20_000)]
    publish(store, keys, capacity=200_000, deltas=True)
    daemon = _agent(tmp_path, origin, daemons, transfer=MemoryTransfer(origin, pieces_per_poll=1))
    run_until(daemon, lambda: installed(daemon, 1))
    genuine = publish(store, keys + [f"new-{i}" for i in range(10_000)], capacity=200_000, deltas=True)
    stored = store.get(_delta(genuine, 1).key)
    assert stored is not None
    v2 = resign_delta(store, 2, 1, stored.data, piece_size=16 * 1024)  # the same bytes, more pieces
    entry = _delta(v2, 1)
    assert entry.size > 2 * 16 * 1024
    partial = daemon.layout.staged_delta(2, 1)
    run_until(daemon, lambda: partial.is_file() and partial.stat().st_size >= 16 * 1024)
    daemon.shutdown()
    daemons.remove(daemon)
    assert daemon.layout.delta_resume_file(2, 1).is_file()
    on_disk = partial.stat().st_size
    assert on_disk < entry.size and daemon.layout.current_version() == 1

    again = _agent(tmp_path, origin, daemons)
    assert again.target_version == 2  # recovered from staging before any poll, as a delta
    assert again.status()["download"]["delta_from"] == 1
    run_until(again, lambda: installed(again, 2))
    assert _serves(again, v2)
    assert metric(again, "delta_bytes_total") == entry.size - on_disk
    assert served_delta_bytes(origin) == entry.size  # every byte fetched once
    assert origin.served[v2.filter_key] == 0 and metric(again, "delta_installs_total") == 1


def test_agents_take_a_delta_from_the_agent_that_holds_it(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    peers = MemoryPeers()
    first = _on_v1(tmp_path / "first", store, origin, daemons, transfer=MemoryTransfer(origin, peers=peers))
    second = _agent(tmp_path / "second", origin, daemons, transfer=MemoryTransfer(origin, peers=peers))
    run_until(second, lambda: installed(second, 1))
    v2 = publish(store, KEYS_2, deltas=True)
    entry = _delta(v2, 1)
    run_until(first, lambda: installed(first, 2))
    run_until(second, lambda: installed(second, 2))
    first.step()  # the first agent counts what it sent
    assert _serves(second, v2) and metric(second, "delta_installs_total") == 1
    assert metric(second, "delta_bytes_total") == entry.size
    assert metric(second, "bytes_from_origin_total") == 0  # v1 and the delta from the first agent
    assert served_delta_bytes(origin) == entry.size  # the origin sent the delta once
    assert metric(first, "bytes_uploaded_total") >= entry.size


def test_kept_deltas_are_seeded_after_a_restart_and_collected_with_their_version(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    daemon = _on_v1(tmp_path, store, origin, daemons)
    publish(store, KEYS_2, deltas=True)
    run_until(daemon, lambda: installed(daemon, 2))
    daemon.shutdown()
    daemons.remove(daemon)

    again = _agent(tmp_path, origin, daemons)
    assert again.transfer.versions() == [1, 2, DeltaKey(2, 1)]
    publish(store, [*KEYS_2, "three"], deltas=True)
    run_until(again, lambda: installed(again, 3))
    assert again.transfer.versions() == [2, DeltaKey(2, 1), 3, DeltaKey(3, 2)]  # v1 collected
    publish(store, [*KEYS_2, "three", "four"], deltas=True)
    run_until(again, lambda: installed(again, 4))
    assert again.transfer.versions() == [3, DeltaKey(3, 2), 4, DeltaKey(4, 3)]
    assert not again.layout.version_dir(2).exists()
    assert metric(again, "delta_installs_total") == 2 and _fallbacks(again) == {}


def test_the_delta_from_current_is_chosen_else_the_newest_installed_one(store: MemoryObjectStore) -> None:
    for keys in (KEYS_1, KEYS_2, [*KEYS_2, "three"]):
        publish(store, keys, deltas=True)
    v4 = publish(store, [*KEYS_2, "three", "four"], deltas=True)
    assert [d.base_version for d in v4.deltas] == [3, 2, 1]
    assert choose_delta(v4, [1, 2, 3], current=2) == v4.delta_from(2)
    assert choose_delta(v4, [1, 2], current=None) == v4.delta_from(2)
    assert choose_delta(v4, [1, 9], current=9) == v4.delta_from(1)  # 9 is not a base: the newest that is
    assert choose_delta(v4, [9], current=9) is None
    assert choose_delta(v4, [3, 4], current=3) is None  # v4 itself is installed (a rollback)
    assert choose_delta(v4, [], current=None) is None


def test_a_base_gone_before_the_delta_is_applied_falls_back(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish(store, KEYS_1, deltas=True)
    v2 = publish(store, KEYS_2, deltas=True)
    entry = _delta(v2, 1)
    torrent = store.get(entry.torrent_key)
    assert torrent is not None
    plan = DeltaPlan(entry=entry, version=2, torrent=torrent.data)
    with pytest.raises(DeltaFallback) as caught:
        apply_fetched_delta(plan, v2, DataDir(tmp_path))
    assert caught.value.reason == "base_missing"
    assert not DataDir(tmp_path).staged_file(2).exists()


def test_a_finished_delta_is_applied_and_installed_before_a_newer_version_replaces_it(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    transfer = MemoryTransfer(origin, pieces_per_poll=1)
    daemon = _on_v1(tmp_path, store, origin, daemons, transfer=transfer)
    publish(store, KEYS_2, deltas=True)
    run_until(daemon, lambda: (s := daemon.status()["download"]) is not None and s["version"] == 2
              and s["state"] != "waiting")
    transfer.poll()  # the delta finishes on its own (a real transfer's threads); no step
    status = transfer.status(DeltaKey(2, 1))
    assert status is not None and status.finished
    publish(store, [*KEYS_2, "three"], deltas=True)
    daemon._next_poll = 0.0  # the next step polls first, as when the poll returns late
    daemon.step()
    assert daemon.status()["last_swap"]["version"] == 2  # applied and installed, not abandoned
    assert daemon.status()["last_swap"]["delta_from"] == 1
    run_until(daemon, lambda: installed(daemon, 3))
    assert metric(daemon, "delta_installs_total") == 2 and _fallbacks(daemon) == {}


@settings(max_examples=50, deadline=None)
@given(st.sets(st.integers(1, 10**12), max_size=5), st.sets(st.integers(1, 10**12), max_size=5),
       st.integers(1, 10**12))
def test_the_data_dir_finds_the_deltas_it_names(staged: set[int], kept: set[int], version: int) -> None:
    """Staged delta torrents (hidden) and kept deltas (file + torrent) are told apart, and
    every base the data directory names is the base it finds; a kept torrent without its
    file is not a kept delta."""
    with tempfile.TemporaryDirectory() as tmp:
        layout = DataDir(Path(tmp))
        layout.staging_dir(version).mkdir(parents=True)
        layout.version_dir(version).mkdir(parents=True)
        for base in staged:
            layout.staged_delta_torrent(version, base).write_bytes(b"t")
            layout.staged_delta(version, base).write_bytes(b"d")
        for base in kept:
            layout.delta_torrent_file(version, base).write_bytes(b"t")
            layout.delta_file(version, base).write_bytes(b"d")
        layout.delta_torrent_file(version, 10**13).write_bytes(b"t")  # its file is missing
        assert DataDir.staged_delta_bases(layout.staging_dir(version)) == sorted(staged)
        assert layout.installed_deltas(version) == sorted(kept)
