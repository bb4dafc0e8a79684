"""DirectTransfer: plain HTTP download from the origin, with Range resume, as a Transfer."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bloomswarm.agent.config import DirectConfig
from bloomswarm.agent.direct import DirectTransfer
from bloomswarm.agent.transfer import OriginURL, Transfer, TransferStatus
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import StoreServer, publish

store, server = agent_helpers.store, agent_helpers.server  # the shared pytest fixtures


@pytest.fixture
def transfer() -> Iterator[DirectTransfer]:
    transfer = DirectTransfer(DirectConfig(timeout_s=5.0, chunk_size=64 * 1024))
    yield transfer
    transfer.close()


def _torrent(store: MemoryObjectStore, manifest: Manifest) -> bytes:
    stored = store.get(manifest.torrent_key)
    assert stored is not None
    return stored.data


def _origin(server: StoreServer, key: str) -> Callable[[], OriginURL]:
    return lambda: OriginURL(f"{server.url}/{key}")


def _wait(transfer: DirectTransfer, version: int, done: Callable[[TransferStatus], bool]) -> TransferStatus:
    deadline = time.monotonic() + 30
    while True:
        status = transfer.status(version)
        assert status is not None
        if done(status):
            return status
        assert time.monotonic() < deadline, f"not reached: {status}"
        time.sleep(0.01)


def test_implements_the_transfer_protocol() -> None:
    transfer: Transfer = DirectTransfer()
    assert transfer.versions() == []
    transfer.close()


def test_downloads_the_whole_file(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, transfer: DirectTransfer
) -> None:
    manifest = publish(store, ["a"], capacity=200_000)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, _origin(server, manifest.filter_key))
    status = _wait(transfer, 1, lambda s: s.finished)
    assert (status.state, status.progress, status.total_bytes) == ("seeding", 1.0, manifest.size)
    assert status.bytes_from_origin == manifest.size and status.bytes_from_peers == 0
    assert hashlib.sha256((tmp_path / "filter.bsf").read_bytes()).hexdigest() == manifest.sha256
    assert transfer.save_resume_data() == {}  # nothing unfinished
    transfer.remove(1)
    assert transfer.status(1) is None and transfer.versions() == []


def test_continues_from_the_bytes_on_disk(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, transfer: DirectTransfer
) -> None:
    manifest = publish(store, ["a"], capacity=200_000)
    data = store.get(manifest.filter_key)
    assert data is not None
    (tmp_path / "filter.bsf").write_bytes(data.data[:100_000])
    transfer.start_download(1, _torrent(store, manifest), tmp_path, _origin(server, manifest.filter_key),
                            resume_data=b'{"offset": 100000}')
    status = _wait(transfer, 1, lambda s: s.finished)
    assert status.bytes_from_origin == manifest.size - 100_000
    assert server.requests[-1][1]["Range"] == "bytes=100000-"
    assert (tmp_path / "filter.bsf").read_bytes() == data.data


def test_starts_over_when_the_server_ignores_the_range(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, transfer: DirectTransfer
) -> None:
    manifest = publish(store, ["a"], capacity=50_000)
    data = store.get(manifest.filter_key)
    assert data is not None
    (tmp_path / "filter.bsf").write_bytes(b"stale bytes that must go")
    server.ignore_range = True
    transfer.start_download(1, _torrent(store, manifest), tmp_path, _origin(server, manifest.filter_key))
    _wait(transfer, 1, lambda s: s.finished)
    assert (tmp_path / "filter.bsf").read_bytes() == data.data


def test_a_complete_file_on_disk_needs_no_bytes(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, transfer: DirectTransfer
) -> None:
    manifest = publish(store, ["a"])
    data = store.get(manifest.filter_key)
    assert data is not None
    (tmp_path / "filter.bsf").write_bytes(data.data)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, _origin(server, manifest.filter_key))
    status = _wait(transfer, 1, lambda s: s.finished)
    assert status.bytes_from_origin == 0


def test_failures_show_in_the_status(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, transfer: DirectTransfer
) -> None:
    manifest = publish(store, ["a"])
    torrent = _torrent(store, manifest)
    transfer.start_download(1, torrent, tmp_path, _origin(server, "missing/filter.bsf"))
    status = _wait(transfer, 1, lambda s: s.state == "error")
    assert status.error == "HTTP 404 Not Found" and not status.finished
    transfer.start_download(2, torrent, tmp_path, None)
    status = _wait(transfer, 2, lambda s: s.state == "error")
    assert "origin" in (status.error or "")
    transfer.start_download(3, b"not a torrent", tmp_path, _origin(server, manifest.filter_key))
    assert (transfer.status(3) or status).state == "error"


def test_remove_stops_a_download_and_seed_records_the_version(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer
) -> None:
    manifest = publish(store, ["a"], capacity=1_000_000)
    slow = DirectTransfer(DirectConfig(chunk_size=16 * 1024, rate_limit_bytes_per_s=200_000))
    try:
        slow.start_download(1, _torrent(store, manifest), tmp_path, _origin(server, manifest.filter_key))
        _wait(slow, 1, lambda s: s.bytes_from_origin > 0)
        resume = slow.save_resume_data()
        assert set(resume) == {1} and b"offset" in resume[1]
        slow.remove(1)
        size = (tmp_path / "filter.bsf").stat().st_size
        time.sleep(0.2)
        assert (tmp_path / "filter.bsf").stat().st_size == size < manifest.size
        slow.seed(1, _torrent(store, manifest), tmp_path)
        status = slow.status(1)
        assert status is not None and status.state == "seeding" and status.finished
    finally:
        slow.close()
    assert slow.versions() == []


def test_wait_returns_when_a_download_finishes(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer, transfer: DirectTransfer
) -> None:
    manifest = publish(store, ["a"], capacity=200_000)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, _origin(server, manifest.filter_key))
    for _ in range(100):  # each wait ends on news (a state change), long before its 60 s
        status = transfer.status(1)
        assert status is not None
        if status.finished:
            break
        transfer.wait(60.0)
    else:
        raise AssertionError("the download never finished")


def _queued(store: MemoryObjectStore, server: StoreServer, tmp_path: Path, versions: int, *,
            rate: int, concurrency: int) -> tuple[DirectTransfer, Manifest]:
    """A rate-capped transfer given ``versions`` downloads of one file (into tmp_path/N)
    at once, returned once the first has bytes."""
    manifest = publish(store, ["a"], capacity=1_000_000)
    torrent, origin = _torrent(store, manifest), _origin(server, manifest.filter_key)
    config = DirectConfig(chunk_size=16 * 1024, rate_limit_bytes_per_s=rate, concurrency=concurrency)
    slow = DirectTransfer(config)
    for version in range(1, versions + 1):
        slow.start_download(version, torrent, tmp_path / str(version), origin)
    _wait(slow, 1, lambda s: s.bytes_from_origin > 0)
    return slow, manifest


def test_downloads_beyond_the_concurrency_wait_their_turn_and_all_finish(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer
) -> None:
    slow, manifest = _queued(store, server, tmp_path, 5, rate=2_000_000, concurrency=2)
    try:
        started = [v for v in range(1, 6) if (s := slow.status(v)) is not None and s.bytes_from_origin]
        assert len(started) <= 2  # two workers: the others have not begun
        slow.remove(5)  # removed while it waits for a worker: it never starts
        for version in range(1, 5):
            assert _wait(slow, version, lambda s: s.finished).bytes_from_origin == manifest.size
            digest = hashlib.sha256((tmp_path / str(version) / "filter.bsf").read_bytes()).hexdigest()
            assert digest == manifest.sha256
        assert not (tmp_path / "5" / "filter.bsf").exists()
        assert slow._workers.threads <= 2
    finally:
        slow.close()


def test_closing_with_downloads_still_waiting_for_a_worker_returns_at_once(
    tmp_path: Path, store: MemoryObjectStore, server: StoreServer
) -> None:
    slow, _ = _queued(store, server, tmp_path, 40, rate=100_000, concurrency=1)
    began = time.monotonic()
    slow.close()
    assert time.monotonic() - began < 5.0  # 2 s at most for the running one, none for the 39 waiting
    assert slow.versions() == []
    assert not any((tmp_path / str(v)).exists() for v in range(2, 41))
