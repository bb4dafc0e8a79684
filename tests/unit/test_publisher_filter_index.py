"""sync_index: index.json follows every named filter's latest.json, by compare-and-swap,
monotonically, under racing publishers of different filters."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY, signature_key_of
from bloomswarm.common.errors import FormatError, PreconditionFailed, StorageError
from bloomswarm.common.filter_index import FilterIndex, open_index, read_index_unverified
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.manifest import verify_manifest
from bloomswarm.common.pointer import open_pointer
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signed_envelope import seal_envelope
from bloomswarm.common.storage import MemoryObjectStore, ObjectStore
from bloomswarm.publisher import filter_index
from bloomswarm.publisher.filter_index import (
    backoff_s,
    filter_names_in,
    merge_entries,
    read_entry,
    sync_index,
)
from bloomswarm.publisher.pinning import pin
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.versions import read_manifest
from tests.unit.publishing_helpers import make_builder, make_config, new_key

KEY = new_key()
PUBLIC = [KEY.public_key()]
CONFIG = make_config()


def publish(root: ObjectStore, name: str, *keys: str) -> int:
    """Publish a small filter as the next version of filter ``name``; its version."""
    store = PrefixedStore(root, filter_prefix(name))
    result = publish_filter(store, CONFIG, make_builder(list(keys) or [name]), KEY, "f",
                            progress=False, force=True)
    return result.version


def read_index(root: ObjectStore) -> FilterIndex:
    stored = root.get(INDEX_KEY)
    assert stored is not None
    return open_index(stored.data, PUBLIC)


def no_sleep(_seconds: float) -> None:
    pass


def test_an_entry_holds_the_filters_objects_byte_for_byte() -> None:
    root = MemoryObjectStore()
    publish(root, "blocklist")
    written = sync_index(root, ["blocklist"], KEY, "indexer", now=lambda: 1_700_000_000)
    assert written is not None and written == read_index(root)
    assert (written.sequence, written.issued_at, written.publisher_id) == (1, 1_700_000_000, "indexer")
    entry = written.filters["blocklist"]
    folder = PrefixedStore(root, "filters/blocklist")
    latest = folder.get(LATEST_KEY)
    assert latest is not None and entry.pointer == latest.data
    pointer = open_pointer(entry.pointer, PUBLIC)
    manifest = verify_manifest(entry.manifest, entry.manifest_signature, PUBLIC,
                               expected_version=pointer.version)
    assert entry.manifest_signature == folder.get(signature_key_of(pointer.manifest_key)).data  # type: ignore[union-attr]
    assert entry.torrent == folder.get(manifest.torrent_key).data  # type: ignore[union-attr]
    assert sync_index(root, ["blocklist"], KEY, "indexer") is None  # nothing changed
    assert read_index(root).sequence == 1


def test_each_write_of_a_filter_moves_its_entry_and_keeps_the_others() -> None:
    root = MemoryObjectStore()
    publish(root, "a")
    publish(root, "b")
    first = sync_index(root, ["a", "b"], KEY, "p")
    assert first is not None
    publish(root, "a", "changed")
    index = sync_index(root, ["a"], KEY, "p")
    assert index is not None and index.sequence == first.sequence + 1
    assert open_pointer(index.filters["a"].pointer, PUBLIC).version == 2
    assert open_pointer(index.filters["b"].pointer, PUBLIC).version == 1
    pin(PrefixedStore(root, filter_prefix("a")), 1, KEY, PUBLIC, "operator")
    index = sync_index(root, ["a"], KEY, "p")
    assert index is not None
    pointer = open_pointer(index.filters["a"].pointer, PUBLIC)
    assert (pointer.version, pointer.pinned, index.sequence) == (1, True, first.sequence + 2)


def test_an_older_entry_never_replaces_a_newer_one() -> None:
    """A slow publisher that read its filter before a faster one synced a newer pointer."""
    root = MemoryObjectStore()
    publish(root, "a")
    stale = read_entry(root, "a")
    assert stale is not None
    publish(root, "a", "newer")
    newer = sync_index(root, ["a"], KEY, "fast")
    assert newer is not None
    assert merge_entries(newer, {"a": stale}) is None
    assert merge_entries(None, {"a": stale}) == {"a": stale}
    assert merge_entries(newer, {"b": stale}) == {**newer.filters, "b": stale}


def test_a_filter_without_latest_json_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    root = MemoryObjectStore()
    with caplog.at_level(logging.INFO, logger="bloomswarm.filter_index"):
        assert sync_index(root, ["ghost"], KEY, "p") is None
    assert "filter 'ghost' has no latest.json yet; skipped" in caplog.text
    assert not root.exists(INDEX_KEY)
    publish(root, "real")
    index = sync_index(root, ["ghost", "real"], KEY, "p")
    assert index is not None and list(index.filters) == ["real"]


def test_a_large_torrent_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    root = MemoryObjectStore()
    publish(root, "big")
    monkeypatch.setattr(filter_index, "INLINE_TORRENT_MAX", 10)
    index = sync_index(root, ["big"], KEY, "p")
    assert index is not None and index.filters["big"].torrent is None


def test_invalid_names_are_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("filter name '../x'")):
        sync_index(MemoryObjectStore(), ["../x"], KEY, "p")


def test_a_malformed_index_is_reported() -> None:
    root = MemoryObjectStore()
    publish(root, "a")
    root.put(INDEX_KEY, b"{not json")
    with pytest.raises(FormatError, match="index envelope is not valid JSON"):
        sync_index(root, ["a"], KEY, "p")


def test_an_entry_that_does_not_parse_is_carried_over_until_its_filter_is_synced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A writer that finds an entry it cannot read (a newer writer's, or a broken one)
    neither fails nor drops it: the other filters' syncs carry it verbatim."""
    root = MemoryObjectStore()
    publish(root, "a")
    publish(root, "b")
    written = sync_index(root, ["a", "b"], KEY, "p")
    assert written is not None
    payload = written.to_dict()
    payload["filters"]["b"] = {"pointer": 5}
    payload["filters"]["Upper"] = "not an entry"
    root.put(INDEX_KEY, seal_envelope("index", payload, KEY))
    publish(root, "a", "changed")
    with caplog.at_level(logging.WARNING, logger="bloomswarm.filter_index"):
        index = sync_index(root, ["a"], KEY, "p")
    assert index is not None and index.sequence == written.sequence + 1
    assert open_pointer(index.filters["a"].pointer, PUBLIC).version == 2
    assert read_index(root).unreadable == index.unreadable
    carried = {n: bad.raw for n, bad in index.unreadable.items()}
    assert carried == {"b": {"pointer": 5}, "Upper": "not an entry"}
    assert "entry 'b' does not parse" in caplog.text
    index = sync_index(root, ["b"], KEY, "p")
    assert index is not None and sorted(index.filters) == ["a", "b"] and list(index.unreadable) == ["Upper"]


def test_a_newer_writers_top_level_fields_are_carried_over() -> None:
    """Unknown top-level fields of the index (a newer publisher's) survive an older
    writer's sync, as entries it cannot read do."""
    root = MemoryObjectStore()
    publish(root, "a")
    written = sync_index(root, ["a"], KEY, "p")
    assert written is not None
    payload = written.to_dict()
    payload["mirrors"] = ["https://cdn.example/"]
    root.put(INDEX_KEY, seal_envelope("index", payload, KEY))
    publish(root, "a", "changed")
    index = sync_index(root, ["a"], KEY, "p")
    assert index is not None and index.sequence == written.sequence + 1
    assert dict(read_index(root).extra) == {"mirrors": ["https://cdn.example/"]}


def test_missing_objects_under_latest_json_raise_storage_error() -> None:
    root = MemoryObjectStore()
    publish(root, "a")
    folder = PrefixedStore(root, filter_prefix("a"))
    folder.delete([read_manifest(folder, 1).torrent_key])
    with pytest.raises(StorageError, match=re.escape("latest.json names v1, but its objects are missing")):
        sync_index(root, ["a"], KEY, "p")


class _Interfering:
    """A store where another writer moves index.json just before each of our first
    ``times`` conditional writes of it."""

    def __init__(self, inner: MemoryObjectStore, times: int) -> None:
        self.inner = inner
        self.times = times

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def put(self, key: str, data: bytes, **kwargs: object) -> str:
        if key == INDEX_KEY and self.times > 0:
            self.times -= 1
            raise PreconditionFailed("moved meanwhile")
        return self.inner.put(key, data, **kwargs)  # type: ignore[arg-type]


def test_lost_races_are_retried_with_jittered_backoff_then_give_up() -> None:
    root = MemoryObjectStore()
    publish(root, "a")
    waits: list[float] = []
    index = sync_index(_Interfering(root, 3), ["a"], KEY, "p", sleep=waits.append)  # type: ignore[arg-type]
    assert index is not None and len(waits) == 3 and read_index(root).sequence == 1
    publish(root, "a", "next")
    with pytest.raises(StorageError, match="other writers moved it"):
        sync_index(_Interfering(root, 10_000), ["a"], KEY, "p", sleep=no_sleep,  # type: ignore[arg-type]
                   now=lambda: 2e9)


def test_backoff_bounds() -> None:
    assert backoff_s(1, lambda lo, hi: hi) == pytest.approx(0.01)
    assert backoff_s(3, lambda lo, hi: hi) == pytest.approx(0.04)
    assert backoff_s(60, lambda lo, hi: hi) == 2.0
    assert backoff_s(5, lambda lo, hi: lo) == 0.0


def test_twenty_publishers_of_different_filters_race_and_all_entries_land() -> None:
    root = MemoryObjectStore()
    names = [f"f{n:02d}" for n in range(20)]
    for name in names:
        publish(root, name)
    start = threading.Barrier(len(names))
    results: dict[str, FilterIndex | None] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            start.wait()
            results[name] = sync_index(root, [name], KEY, f"publisher-{name}", now=lambda: 1_700_000_000)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and all(not t.is_alive() for t in threads)
    index = read_index(root)
    assert sorted(index.filters) == names
    # One write per filter, none lost; the first write found 20 filters and no index: a
    # sequence from the clock (a bucket whose index was deleted looks the same).
    assert index.sequence == 1_700_000_000 + 19
    for name in names:
        assert open_pointer(index.filters[name].pointer, PUBLIC).version == 1
        assert results[name] is not None


def test_filter_names_in_the_bucket() -> None:
    root = MemoryObjectStore()
    publish(root, "b")
    publish(root, "a")
    root.put("filters/c/v1/manifest.json", b"{}")  # no latest.json: not a filter yet
    root.put("filters/UPPER/latest.json", b"{}")  # not a valid name: left out
    root.put("filters/x/y/latest.json", b"{}")  # nested: not filters/NAME/latest.json
    root.put("latest.json", b"{}")
    assert filter_names_in(root) == ["a", "b"]
    assert filter_names_in(PrefixedStore(root, "filters/a")) == []


def test_an_index_written_by_another_publisher_is_read_unverified_by_writers() -> None:
    root = MemoryObjectStore()
    publish(root, "a")
    other = new_key()
    sync_index(root, ["a"], other, "other")
    publish(root, "b")
    index = sync_index(root, ["b"], KEY, "p")
    assert index is not None and sorted(index.filters) == ["a", "b"] and index.sequence == 2
    stored = root.get(INDEX_KEY)
    assert stored is not None and read_index_unverified(stored.data) == index


def test_the_cli_config_of_a_named_filter(tmp_path: Path) -> None:
    from bloomswarm.common.storage import S3Config
    from bloomswarm.index_commands import filter_config
    from bloomswarm.publisher.config import DeltaConfig

    base = make_config(s3=S3Config(bucket="unit-test", prefix="fleet", public_base_url="https://cdn/x/"),
                       deltas=DeltaConfig(cache_dir=tmp_path))
    named = filter_config(base, "blocklist")
    assert (named.s3.prefix, named.s3.public_base_url) == ("fleet/filters/blocklist", "https://cdn/x/filters/blocklist")
    assert named.deltas.cache_dir == tmp_path / "filters" / "blocklist"
    assert filter_config(make_config(), "a").s3.prefix == "filters/a"
    assert filter_config(make_config(), "a").s3.public_base_url is None
