"""MemoryTransfer and MemoryOrigin: the in-memory twin of the transfers, as a Transfer.

Downloads complete on poll(), piece by piece when asked to; bytes are counted by source;
peers of one group serve each other; injected errors, corruption and hash failures show
where the real transfers show them.
"""

from __future__ import annotations

import functools
import hashlib
import socket
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.agent.memory_transfer import (
    MemoryOrigin,
    MemoryPeers,
    MemoryTransfer,
    memory_url_key,
)
from bloomswarm.agent.origin import Origin, S3Origin
from bloomswarm.agent.transfer import DeltaKey, OriginURL, Transfer, TransferStatus
from bloomswarm.common.errors import ObjectNotFound, StorageError
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import publish

store, origin = agent_helpers.store, agent_helpers.origin  # the shared pytest fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps

PIECE = 256 * 1024
"""The piece size of the filters published here."""


def _torrent(store: MemoryObjectStore, manifest: Manifest) -> bytes:
    stored = store.get(manifest.torrent_key)
    assert stored is not None
    return stored.data


def _content(store: MemoryObjectStore, manifest: Manifest) -> bytes:
    stored = store.get(manifest.filter_key)
    assert stored is not None
    return stored.data


def _status(transfer: MemoryTransfer, version: int) -> TransferStatus:
    status = transfer.status(version)
    assert status is not None
    return status


def test_implements_the_transfer_and_origin_protocols(origin: MemoryOrigin) -> None:
    transfer: Transfer = MemoryTransfer(origin)
    seam: Origin = origin
    assert transfer.versions() == [] and transfer.status(1) is None
    assert seam.url_factory("v1/a b/filter.bsf")() == OriginURL("memory://v1/a%20b/filter.bsf")
    assert memory_url_key("memory://v1/a%20b/filter.bsf?expires=60") == "v1/a b/filter.bsf"
    for bad in ("http://x/v1/filter.bsf", "memory://", "memory://?expires=1"):
        with pytest.raises(ValueError):
            memory_url_key(bad)
    transfer.close()


def test_downloads_the_whole_file_on_one_poll(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"], capacity=200_000)
    transfer = MemoryTransfer(origin)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, origin.url_factory(manifest.filter_key))
    status = _status(transfer, 1)
    assert (status.state, status.progress, status.finished) == ("downloading", 0.0, False)
    assert not (tmp_path / "filter.bsf").exists()  # nothing moves before a poll
    transfer.poll()
    status = _status(transfer, 1)
    assert (status.state, status.progress, status.total_bytes) == ("seeding", 1.0, manifest.size)
    assert status.finished and status.error is None and status.peers == 0
    assert status.bytes_from_origin == manifest.size == origin.served[manifest.filter_key]
    assert status.bytes_from_peers == status.bytes_uploaded == status.hash_failures == 0
    assert hashlib.sha256((tmp_path / "filter.bsf").read_bytes()).hexdigest() == manifest.sha256
    assert transfer.save_resume_data() == {}  # nothing unfinished
    transfer.remove(1)
    assert transfer.status(1) is None and transfer.versions() == []


def test_moves_a_bounded_number_of_pieces_per_poll(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"], capacity=1_500_000)  # 8 pieces
    pieces = -(-manifest.size // PIECE)
    transfer = MemoryTransfer(origin, pieces_per_poll=3)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, origin.url_factory(manifest.filter_key))
    transfer.poll()
    status = _status(transfer, 1)
    assert status.state == "downloading" and status.bytes_from_origin == 3 * PIECE
    assert status.progress == 3 * PIECE / manifest.size
    assert (tmp_path / "filter.bsf").stat().st_size == 3 * PIECE
    assert transfer.save_resume_data() == {1: b'{"offset": 786432}'}
    polls = 1
    while not _status(transfer, 1).finished:
        transfer.poll()
        polls += 1
    assert polls == -(-pieces // 3)
    assert (tmp_path / "filter.bsf").read_bytes() == _content(store, manifest)


@functools.cache
def _published() -> tuple[MemoryObjectStore, Manifest]:
    """A store holding one version of 2 pieces and a bit (shared: never written to)."""
    store = MemoryObjectStore()
    return store, publish(store, ["a"], capacity=400_000)


@settings(max_examples=25, deadline=None)
@given(on_disk=st.integers(min_value=0, max_value=2 * PIECE + 10), per_poll=st.sampled_from([None, 1, 2]))
def test_continues_from_the_bytes_on_disk(on_disk: int, per_poll: int | None) -> None:
    store, manifest = _published()
    origin = MemoryOrigin(store)
    content = _content(store, manifest)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "filter.bsf"
        path.write_bytes(content[:on_disk] if on_disk <= manifest.size else b"x" * on_disk)
        transfer = MemoryTransfer(origin, pieces_per_poll=per_poll)
        url = origin.url_factory(manifest.filter_key)
        transfer.start_download(1, _torrent(store, manifest), Path(tmp), url, resume_data=b'{"offset": 0}')
        for _ in range(5):
            transfer.poll()
        status = _status(transfer, 1)
        assert status.finished and path.read_bytes() == content
        kept = on_disk if on_disk <= manifest.size else 0  # a longer file is not this one
        assert status.bytes_from_origin == manifest.size - kept == origin.served[manifest.filter_key]


def test_without_an_origin_or_a_peer_a_download_waits(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"])
    for transfer in (MemoryTransfer(origin), MemoryTransfer(None)):
        factory = None if transfer.origin is not None else origin.url_factory(manifest.filter_key)
        transfer.start_download(1, _torrent(store, manifest), tmp_path, factory)
        for _ in range(3):
            transfer.poll()
        status = _status(transfer, 1)
        assert (status.state, status.progress, status.error) == ("downloading", 0.0, None)
    assert origin.served[manifest.filter_key] == 0


def test_peers_of_one_group_serve_each_other(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"], capacity=1_500_000)
    torrent, url = _torrent(store, manifest), origin.url_factory(manifest.filter_key)
    peers = MemoryPeers()
    first, second, third = (MemoryTransfer(origin, peers=peers, pieces_per_poll=2) for _ in range(3))
    stranger = MemoryTransfer(origin)  # in no group
    first.start_download(1, torrent, tmp_path / "a", url)
    first.poll()  # two pieces from the origin
    second.start_download(1, torrent, tmp_path / "b", url)
    second.poll()  # the same two from the first, at once
    assert _status(second, 1).bytes_from_peers == 2 * PIECE and _status(second, 1).bytes_from_origin == 0
    assert _status(first, 1).bytes_uploaded == 2 * PIECE
    assert _status(first, 1).peers == _status(second, 1).peers == 1
    while not _status(first, 1).finished:
        first.poll()
    while not _status(second, 1).finished:
        second.poll()
    assert _status(second, 1).bytes_from_peers == manifest.size  # the first was always ahead
    assert origin.served[manifest.filter_key] == manifest.size  # the origin sent the file once
    first.remove(1)
    first.seed(1, torrent, tmp_path / "a")  # an installed version, seeded
    third.start_download(1, torrent, tmp_path / "c", None)  # peers only
    while not _status(third, 1).finished:
        third.poll()
    assert _status(third, 1).bytes_from_peers == manifest.size and _status(third, 1).peers == 2
    assert (tmp_path / "c" / "filter.bsf").read_bytes() == _content(store, manifest)
    stranger.start_download(1, torrent, tmp_path / "d", None)
    stranger.poll()
    assert _status(stranger, 1).peers == 0 and _status(stranger, 1).progress == 0.0
    third.close()
    assert _status(first, 1).peers == 1  # the third left the group


def test_an_injected_error_ends_the_next_downloads_in_the_error_state(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"])
    torrent, url = _torrent(store, manifest), origin.url_factory(manifest.filter_key)
    transfer = MemoryTransfer(origin)
    transfer.inject_error(1, "disk on fire", times=2)
    for _ in range(2):
        transfer.start_download(1, torrent, tmp_path, url)
        transfer.poll()
        status = _status(transfer, 1)
        assert (status.state, status.error, status.finished) == ("error", "disk on fire", False)
    transfer.start_download(1, torrent, tmp_path, url)
    transfer.poll()
    assert _status(transfer, 1).finished  # the faults are used up
    transfer.start_download(2, torrent, tmp_path / "other", url)
    transfer.poll()
    assert _status(transfer, 2).finished  # another version never met them


def test_injected_corruption_finishes_with_one_wrong_byte(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"])
    torrent, url = _torrent(store, manifest), origin.url_factory(manifest.filter_key)
    content = _content(store, manifest)
    transfer = MemoryTransfer(origin)
    transfer.inject_corruption(1)
    transfer.start_download(1, torrent, tmp_path, url)
    transfer.poll()
    assert _status(transfer, 1).finished  # the transfer does not notice: the daemon's gate must
    written = (tmp_path / "filter.bsf").read_bytes()
    assert len(written) == len(content) and written != content
    assert written[:-1] == content[:-1] and written[-1] == content[-1] ^ 0xFF
    (tmp_path / "filter.bsf").unlink()
    transfer.start_download(1, torrent, tmp_path, url)
    transfer.poll()
    assert (tmp_path / "filter.bsf").read_bytes() == content


def test_injected_hash_failures_are_counted_and_the_pieces_fetched_again(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"], capacity=1_500_000)
    transfer = MemoryTransfer(origin, pieces_per_poll=1)
    transfer.inject_hash_failures(1, 2)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, origin.url_factory(manifest.filter_key))
    transfer.poll()
    status = _status(transfer, 1)
    assert status.hash_failures == 2 and status.progress == PIECE / manifest.size
    assert status.bytes_from_origin == 3 * PIECE  # the first piece, received three times
    while not _status(transfer, 1).finished:
        transfer.poll()
    status = _status(transfer, 1)
    assert status.hash_failures == 2 and status.bytes_from_origin == manifest.size + 2 * PIECE
    assert origin.served[manifest.filter_key] == status.bytes_from_origin
    assert (tmp_path / "filter.bsf").read_bytes() == _content(store, manifest)


def test_failures_show_in_the_status_and_are_never_raised(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"])
    torrent = _torrent(store, manifest)
    transfer = MemoryTransfer(origin)
    transfer.start_download(1, torrent, tmp_path, origin.url_factory("missing/filter.bsf"))
    transfer.start_download(2, torrent, tmp_path, lambda: OriginURL("http://127.0.0.1:9/filter.bsf"))
    transfer.start_download(3, b"not a torrent", tmp_path, origin.url_factory(manifest.filter_key))
    store.put("short/filter.bsf", b"too short")
    transfer.start_download(4, torrent, tmp_path, origin.url_factory("short/filter.bsf"))
    transfer.poll()
    errors = {v: (_status(transfer, v).state, _status(transfer, v).error or "") for v in (1, 2, 3, 4)}
    assert errors[1][0] == "error" and "not found" in errors[1][1]
    assert errors[2][0] == "error" and "not a memory:// URL" in errors[2][1]
    assert errors[3][0] == "error" and "torrent" in errors[3][1]
    assert errors[4][0] == "error" and "ends at byte 9" in errors[4][1]
    origin.failing = True
    transfer.start_download(5, torrent, tmp_path, origin.url_factory(manifest.filter_key))
    transfer.poll()
    assert "unavailable" in (_status(transfer, 5).error or "")
    with pytest.raises(StorageError, match="unavailable"):
        origin.get(manifest.filter_key)
    origin.failing = False
    with pytest.raises(ObjectNotFound):
        origin.get("missing")


def test_an_expiring_url_is_asked_for_again_once_it_expired(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"], capacity=1_500_000)
    now = [1_800_000_000.0]
    presigned = S3Origin(store, expiry_s=120, clock=lambda: now[0])  # URLs good for 60 s
    transfer = MemoryTransfer(origin, pieces_per_poll=1, clock=lambda: now[0])
    url = presigned.url_factory(manifest.filter_key)
    transfer.start_download(1, _torrent(store, manifest), tmp_path, url)
    transfer.poll()
    transfer.poll()
    assert transfer.url_requests == 1
    now[0] += 60
    transfer.poll()
    assert transfer.url_requests == 2
    while not _status(transfer, 1).finished:
        transfer.poll()
    assert (tmp_path / "filter.bsf").read_bytes() == _content(store, manifest)


def test_seed_reports_a_finished_version_and_remove_forgets_it(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    manifest = publish(store, ["a"])
    transfer = MemoryTransfer(origin)
    transfer.seed(3, _torrent(store, manifest), tmp_path)
    status = _status(transfer, 3)
    assert (status.state, status.finished, status.progress, status.total_bytes) == (
        "seeding", True, 1.0, manifest.size)
    assert status.bytes_from_origin == 0 and transfer.versions() == [3]
    transfer.seed(4, b"not a torrent", tmp_path)
    assert _status(transfer, 4).state == "error"
    transfer.close()
    assert transfer.versions() == []
    with pytest.raises(ValueError):
        MemoryTransfer(origin, pieces_per_poll=0)


def test_these_tests_can_open_no_socket_and_cannot_sleep() -> None:
    with pytest.raises(AssertionError, match="socket"):
        socket.socket()
    with pytest.raises(AssertionError, match="sleep"):
        time.sleep(0)


def test_a_delta_is_a_transfer_of_its_own_beside_its_versions_file(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin
) -> None:
    publish(store, ["a", "b"], deltas=True)
    v2 = publish(store, ["a", "c"], deltas=True)
    entry = v2.delta_from(1)
    assert entry is not None
    delta_torrent = store.get(entry.torrent_key)
    assert delta_torrent is not None
    key = DeltaKey(2, 1)
    transfer = MemoryTransfer(origin)
    transfer.start_download(key, delta_torrent.data, tmp_path, origin.url_factory(entry.key))
    transfer.start_download(2, _torrent(store, v2), tmp_path, origin.url_factory(v2.filter_key))
    assert transfer.versions() == [2, key]
    transfer.inject_error(key)  # faults are per key: the file's download is untouched
    transfer.poll()
    delta, file = transfer.status(key), _status(transfer, 2)
    assert delta is not None and delta.key == key and delta.base == 1 and delta.state == "error"
    assert file.key == 2 and file.base is None and file.finished
    transfer.start_download(key, delta_torrent.data, tmp_path, origin.url_factory(entry.key))
    transfer.poll()
    stored = store.get(entry.key)
    assert stored is not None and (tmp_path / "delta-from-v1.bsd").read_bytes() == stored.data
    assert transfer.save_resume_data() == {}
    transfer.remove(2)
    assert transfer.versions() == [key]
