"""The transfer adapters: ScopedTransfer (one shared transfer, keys per filter) and
SizeRoutedTransfer (small filter files from the origin, the rest through the swarm), over
the in-memory transfer."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.agent.scoped_transfer import ScopedTransfer
from bloomswarm.agent.size_routed_transfer import DIRECT_WAIT_S, SizeRoutedTransfer
from bloomswarm.agent.transfer import (
    DeltaKey,
    ScopedKey,
    Transfer,
    TransferKey,
    TransferStatus,
    key_base,
    key_label,
    key_order,
    key_version,
    unscoped,
)
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import publish

store, origin = agent_helpers.store, agent_helpers.origin
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")


def _torrent(store: MemoryObjectStore, manifest: Manifest) -> bytes:
    stored = store.get(manifest.torrent_key)
    assert stored is not None
    return stored.data


versions = st.integers(min_value=1, max_value=2**40)
version_keys = st.one_of(versions, st.builds(DeltaKey, versions, versions))


@given(st.text(min_size=1, max_size=10), version_keys)
def test_a_scoped_key_reads_as_the_key_inside_it(scope: str, key: int | DeltaKey) -> None:
    scoped = ScopedKey(scope, key)
    assert unscoped(scoped) == key and unscoped(key) == key
    assert key_version(scoped) == key_version(key)
    assert key_base(scoped) == key_base(key)
    assert key_order(scoped) == key_order(key)
    assert key_label(scoped) == f"{scope}/{key_label(key)}"


def test_two_filters_share_one_transfer_without_seeing_each_other(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    manifest = publish(store, ["k"])
    torrent = _torrent(store, manifest)
    shared = MemoryTransfer(origin)
    a: Transfer = ScopedTransfer(shared, "a")
    b: Transfer = ScopedTransfer(shared, "b")
    factory = origin.url_factory(manifest.filter_key)
    a.start_download(1, torrent, tmp_path / "a", factory)
    b.start_download(1, torrent, tmp_path / "b", factory)
    assert shared.versions() == [ScopedKey("a", 1), ScopedKey("b", 1)]
    assert a.versions() == [1] and b.versions() == [1]
    shared.poll()
    status = a.status(1)
    assert status is not None and status.finished and status.key == 1
    assert (tmp_path / "a" / "filter.bsf").read_bytes() == (tmp_path / "b" / "filter.bsf").read_bytes()
    a.close()  # only a's transfers stop
    assert shared.versions() == [ScopedKey("b", 1)] and a.versions() == []
    assert b.status(1) is not None
    with pytest.raises(ValueError, match="own keys"):
        b.remove(ScopedKey("b", 1))


def test_resume_data_is_handed_back_by_the_filters_own_keys(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    manifest = publish(store, ["k"])
    shared = MemoryTransfer(origin, pieces_per_poll=1)
    a, b = ScopedTransfer(shared, "a"), ScopedTransfer(shared, "b")
    a.start_download(1, _torrent(store, manifest), tmp_path / "a", None)  # no origin: stays unfinished
    b.start_download(2, _torrent(store, manifest), tmp_path / "b", None)
    assert set(shared.save_resume_data()) == {ScopedKey("a", 1), ScopedKey("b", 2)}
    asked: list[object] = []
    save = shared.save_resume_data

    def spy(timeout: float = 10.0, keys: Collection[TransferKey] | None = None) -> dict[TransferKey, bytes]:
        asked.append(keys)
        return save(timeout, keys)

    shared.save_resume_data = spy  # type: ignore[method-assign]
    assert set(a.save_resume_data()) == {1}
    assert set(b.save_resume_data(keys=[2])) == {2}
    assert asked == [[ScopedKey("a", 1)], [ScopedKey("b", 2)]]  # each filter asks for its own keys alone


def test_small_files_go_direct_and_large_ones_to_the_swarm(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    small = publish(store, ["s"], capacity=100)
    large = publish(store, ["l"], capacity=200_000)
    assert small.size < large.size
    swarm, direct = MemoryTransfer(origin), MemoryTransfer(origin)
    routed = SizeRoutedTransfer(swarm, direct, max_direct=small.size)
    routed.start_download(1, _torrent(store, small), tmp_path / "1", origin.url_factory(small.filter_key))
    routed.start_download(2, _torrent(store, large), tmp_path / "2", origin.url_factory(large.filter_key))
    assert direct.versions() == [1] and swarm.versions() == [2]
    assert routed.versions() == [1, 2]
    routed.poll()
    assert all((s := routed.status(k)) is not None and s.finished for k in (1, 2))
    routed.remove(1)
    assert direct.versions() == [] and routed.status(1) is None
    routed.close()
    assert swarm.versions() == []


def test_deltas_are_routed_by_their_own_size_and_downloads_without_an_origin_use_the_swarm(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    manifest = publish(store, ["s"], capacity=100)
    torrent = _torrent(store, manifest)
    swarm, direct = MemoryTransfer(origin), MemoryTransfer(origin)
    routed = SizeRoutedTransfer(swarm, direct, max_direct=manifest.size)
    routed.start_download(DeltaKey(2, 1), torrent, tmp_path / "d", origin.url_factory(manifest.filter_key))
    routed.start_download(3, torrent, tmp_path / "3", None)
    assert direct.versions() == [DeltaKey(2, 1)] and swarm.versions() == [3]
    assert SizeRoutedTransfer(swarm, direct, manifest.size - 1).route(DeltaKey(4, 3), torrent) is swarm
    assert routed.route(4, b"not a torrent") is swarm
    assert SizeRoutedTransfer(swarm, direct, 0).route(5, torrent) is swarm
    with pytest.raises(ValueError):
        SizeRoutedTransfer(swarm, direct, -1)


def test_a_key_keeps_its_route_once_started(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    small = publish(store, ["s"], capacity=100)
    swarm, direct = MemoryTransfer(origin), MemoryTransfer(origin)
    routed = SizeRoutedTransfer(swarm, direct, max_direct=small.size)
    routed.start_download(1, _torrent(store, small), tmp_path / "1", origin.url_factory(small.filter_key))
    routed.poll()
    routed.max_direct = 0  # the route was decided when the download started
    routed.seed(1, _torrent(store, small), tmp_path / "1")
    assert direct.versions() == [1] and swarm.versions() == []


def test_small_files_fetched_directly_keep_no_resume_data(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    small = publish(store, ["s"], capacity=100)
    large = publish(store, ["l"], capacity=200_000)
    swarm, direct = MemoryTransfer(origin), MemoryTransfer(origin)
    routed = SizeRoutedTransfer(swarm, direct, max_direct=small.size)
    routed.start_download(1, _torrent(store, small), tmp_path / "1", origin.url_factory(small.filter_key))
    routed.start_download(2, _torrent(store, large), tmp_path / "2", origin.url_factory(large.filter_key))
    assert set(direct.save_resume_data()) == {1}  # the direct transfer has some: not asked
    assert set(routed.save_resume_data()) == {2}
    assert set(routed.save_resume_data(keys=[1, 2])) == {2}
    assert routed.save_resume_data(keys=[1]) == {}


class _Recording(MemoryTransfer):
    """A MemoryTransfer that records the timeouts it is waited with and the keys asked for."""

    def __init__(self, origin: MemoryOrigin) -> None:
        super().__init__(origin)
        self.waits: list[float] = []
        self.asked: list[TransferKey] = []

    def wait(self, timeout: float) -> None:
        self.waits.append(timeout)

    def status(self, key: TransferKey) -> TransferStatus | None:
        self.asked.append(key)
        return super().status(key)


def test_wait_waits_on_the_direct_transfer_only_while_one_of_its_downloads_is_under_way(
    store: MemoryObjectStore, origin: MemoryOrigin, tmp_path: Path
) -> None:
    small = publish(store, ["s"], capacity=100)
    torrent = _torrent(store, small)
    swarm, direct = _Recording(origin), _Recording(origin)
    routed = SizeRoutedTransfer(swarm, direct, max_direct=small.size)
    for seeded in (11, 12, 13):  # files held, not downloading: never looked at by wait
        routed.seed(seeded, torrent, tmp_path / str(seeded))
    routed.start_download(1, torrent, tmp_path / "1", origin.url_factory(small.filter_key))
    routed.wait(5.0)
    assert direct.waits == [DIRECT_WAIT_S] and swarm.waits == [0.0]
    assert direct.asked == [1]
    routed.poll()  # the download finishes
    routed.wait(5.0)
    routed.wait(5.0)
    assert direct.waits == [DIRECT_WAIT_S] and swarm.waits == [0.0, 5.0, 5.0]
    assert direct.asked == [1, 1]  # once to see it finished, then forgotten
