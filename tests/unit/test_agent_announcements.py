"""Announcement sources: conditional polling, verification of everything, error translation."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from bloomswarm.agent.announcements import (
    HttpAnnouncements,
    HttpDocumentReader,
    ObjectStoreAnnouncements,
    open_announcement,
)
from bloomswarm.agent.memory_transfer import MemoryOrigin
from bloomswarm.agent.verify import CheckFailed
from bloomswarm.common.bucket_layout import LATEST_KEY, signature_key
from bloomswarm.common.errors import ObjectNotFound, StorageError
from bloomswarm.common.storage import MemoryObjectStore, StoredObject
from tests.unit import agent_helpers
from tests.unit.agent_helpers import PUBLIC, ROGUE_KEY, StoreServer, point_latest, publish

store, server = agent_helpers.store, agent_helpers.server  # the shared pytest fixtures


@pytest.fixture(params=["store", "memory_origin", "http"])
def source(request: pytest.FixtureRequest, store: MemoryObjectStore) -> Iterator[ObjectStoreAnnouncements]:
    if request.param == "store":
        yield ObjectStoreAnnouncements(store, PUBLIC)
        return
    if request.param == "memory_origin":  # what the daemon's unit tests read through
        yield ObjectStoreAnnouncements(MemoryOrigin(store), PUBLIC)
        return
    server = StoreServer(store).start()
    try:
        yield HttpAnnouncements(server.url, PUBLIC, timeout_s=5.0)
    finally:
        server.stop()


def test_new_pointer_then_not_modified(store: MemoryObjectStore, source: ObjectStoreAnnouncements) -> None:
    v1 = publish(store, ["a"])
    first = source.latest()
    assert first is not None and first.version == 1 and first.manifest == v1
    assert first.pointer.sequence == 1
    assert source.latest() is None  # 304 / same ETag
    publish(store, ["a", "b"])
    second = source.latest()
    assert second is not None and second.version == 2
    assert source.latest() is None
    again = open_announcement(second.documents, PUBLIC)  # stored documents verify again
    assert again == second


def test_nothing_published_is_object_not_found(source: ObjectStoreAnnouncements) -> None:
    with pytest.raises(ObjectNotFound):
        source.latest()


def test_a_pointer_rewritten_unchanged_is_not_news(store: MemoryObjectStore) -> None:
    publish(store, ["a"])
    source = ObjectStoreAnnouncements(store, PUBLIC)
    assert source.latest() is not None
    latest = store.get(LATEST_KEY)
    assert latest is not None
    store.put(LATEST_KEY, latest.data + b" ")  # new ETag, same signed pointer
    assert source.latest() is None


def test_untrusted_pointer_signature(store: MemoryObjectStore, source: ObjectStoreAnnouncements) -> None:
    publish(store, ["a"], key=ROGUE_KEY)
    with pytest.raises(CheckFailed) as info:
        source.latest()
    assert info.value.check == "pointer_signature"
    with pytest.raises(CheckFailed):  # a failure is not remembered as "seen": tried again
        source.latest()


def test_tampered_manifest(store: MemoryObjectStore, source: ObjectStoreAnnouncements) -> None:
    manifest = publish(store, ["a"])
    store.put("v1/manifest.json", dataclasses.replace(manifest, size=manifest.size + 1).to_bytes())
    with pytest.raises(CheckFailed) as info:
        source.latest()
    assert info.value.check == "manifest_signature"


def test_manifest_signed_by_another_key(store: MemoryObjectStore, source: ObjectStoreAnnouncements) -> None:
    publish(store, ["a"], key=ROGUE_KEY)
    point_latest(store, 1)  # the pointer is trusted, the manifest is not
    with pytest.raises(CheckFailed) as info:
        source.latest()
    assert info.value.check == "manifest_signature"


def test_malformed_pointer(store: MemoryObjectStore, source: ObjectStoreAnnouncements) -> None:
    store.put(LATEST_KEY, b'{"not": "an envelope"}')
    with pytest.raises(CheckFailed) as info:
        source.latest()
    assert info.value.check == "format"


def test_torrent_that_does_not_match(store: MemoryObjectStore, source: ObjectStoreAnnouncements) -> None:
    v1 = publish(store, ["a"])
    v2 = publish(store, ["b"])
    torrent = store.get(v2.torrent_key)
    assert torrent is not None
    store.put(v1.torrent_key, torrent.data)
    point_latest(store, 1, pinned=True)
    with pytest.raises(CheckFailed) as info:
        source.latest()
    assert info.value.check == "info_hash"


def test_missing_manifest_is_a_storage_error_not_nothing_published(
    store: MemoryObjectStore, source: ObjectStoreAnnouncements
) -> None:
    publish(store, ["a"])
    store.delete([signature_key(1)])
    with pytest.raises(StorageError) as info:
        source.latest()
    assert not isinstance(info.value, ObjectNotFound) and "missing" in str(info.value)


def test_http_errors_are_translated(store: MemoryObjectStore) -> None:
    server = StoreServer(store).start()
    try:
        reader = HttpDocumentReader(server.url, timeout_s=5.0)
        with pytest.raises(ObjectNotFound):
            reader.get("absent.json")
        server.failing = True
        with pytest.raises(StorageError, match="HTTP 503"):
            reader.get(LATEST_KEY)
    finally:
        server.stop()
    with pytest.raises(StorageError, match="failed"):  # nothing listens there any more
        HttpDocumentReader(server.url, timeout_s=1.0).get(LATEST_KEY)


def test_http_reader_sends_if_none_match(store: MemoryObjectStore, server: StoreServer) -> None:
    publish(store, ["a"])
    source = HttpAnnouncements(server.url, PUBLIC, timeout_s=5.0)
    assert source.latest() is not None
    assert source.latest() is None
    latest_requests = [headers for key, headers in server.requests if key == LATEST_KEY]
    assert "If-None-Match" not in latest_requests[0]
    assert latest_requests[1]["If-None-Match"] == store.head(LATEST_KEY).etag


def test_sources_need_a_key_and_an_http_url() -> None:
    with pytest.raises(ValueError):
        ObjectStoreAnnouncements(MemoryObjectStore(), [])
    with pytest.raises(ValueError):
        HttpDocumentReader("ftp://example.com")


class _CountingReader:
    """A DocumentReader over a store that fails the GETs of chosen keys and counts GETs."""

    def __init__(self, store: MemoryObjectStore) -> None:
        self.store = store
        self.failing: set[str] = set()
        self.gets: list[str] = []

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        self.gets.append(key)
        if key in self.failing:
            raise StorageError(f"injected failure for {key}")
        return self.store.get(key, if_none_match=if_none_match)


def test_a_verified_manifest_is_not_fetched_again_after_a_failed_torrent_get(
    store: MemoryObjectStore,
) -> None:
    v1 = publish(store, ["a"])
    reader = _CountingReader(store)
    source = ObjectStoreAnnouncements(reader, PUBLIC)
    reader.failing.add(v1.torrent_key)
    with pytest.raises(StorageError):
        source.latest()
    reader.failing.clear()
    reader.gets.clear()
    announcement = source.latest()
    assert announcement is not None and announcement.manifest == v1
    assert reader.gets == [LATEST_KEY, v1.torrent_key]  # the manifest and .sig were kept
    assert open_announcement(announcement.documents, PUBLIC) == announcement


def test_a_manifest_that_failed_verification_is_fetched_again(store: MemoryObjectStore) -> None:
    publish(store, ["a"])
    good = store.get(signature_key(1))
    assert good is not None
    store.put(signature_key(1), b"\0" * 64)
    reader = _CountingReader(store)
    source = ObjectStoreAnnouncements(reader, PUBLIC)
    with pytest.raises(CheckFailed):
        source.latest()
    store.put(signature_key(1), good.data)  # repaired in place
    announcement = source.latest()
    assert announcement is not None and announcement.version == 1
