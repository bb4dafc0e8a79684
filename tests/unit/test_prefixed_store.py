"""PrefixedStore: one folder of a store seen as a whole store, conditions and errors kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.common.errors import ObjectNotFound, PreconditionFailed
from bloomswarm.common.memory_store import MemoryObjectStore
from bloomswarm.common.object_store import ObjectStore
from bloomswarm.common.prefixed_store import PrefixedStore


def test_keys_are_prefixed_and_listing_strips_the_prefix() -> None:
    inner = MemoryObjectStore()
    store = PrefixedStore(inner, "filters/a")
    assert isinstance(store, ObjectStore)
    store.put("latest.json", b"x")
    store.put("v1/manifest.json", b"m")
    inner.put("filters/ab/latest.json", b"other")  # a sibling whose name starts the same
    inner.put("latest.json", b"root")
    assert inner.get("filters/a/latest.json").data == b"x"  # type: ignore[union-attr]
    assert store.list() == ["latest.json", "v1/manifest.json"]
    assert store.list("v") == ["v1/manifest.json"]
    assert store.get("latest.json").data == b"x"  # type: ignore[union-attr]
    assert store.exists("v1/manifest.json") and not store.exists("v2/manifest.json")
    assert store.head("latest.json").size == 1
    store.delete(["latest.json", "nothing"])
    assert inner.list() == ["filters/a/v1/manifest.json", "filters/ab/latest.json", "latest.json"]


def test_conditions_and_errors_pass_through() -> None:
    store = PrefixedStore(MemoryObjectStore(), "/filters/a/")
    assert store.prefix == "filters/a"
    etag = store.put("latest.json", b"1", if_none_match_any=True)
    with pytest.raises(PreconditionFailed):
        store.put("latest.json", b"2", if_none_match_any=True)
    with pytest.raises(PreconditionFailed):
        store.put("latest.json", b"2", if_match='"other"')
    new = store.put("latest.json", b"2", if_match=etag)
    assert store.get("latest.json", if_none_match=new) is None
    with pytest.raises(ObjectNotFound, match="filters/a/missing"):
        store.get("missing")
    with pytest.raises(ValueError):
        store.get("/absolute")
    with pytest.raises(ValueError):
        store.get("")


def test_files_urls_and_uploads(tmp_path: Path) -> None:
    inner = MemoryObjectStore(public_base_url="https://cdn.example.com/base")
    store = PrefixedStore(inner, "filters/a")
    source = tmp_path / "in.bin"
    source.write_bytes(b"payload")
    sent: list[int] = []
    store.upload_file("v1/f.bsf", source, progress=sent.append)
    assert sum(sent) == 7 and inner.exists("filters/a/v1/f.bsf")
    store.download_file("v1/f.bsf", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == b"payload"
    assert store.public_url("v1/f.bsf") == "https://cdn.example.com/base/filters/a/v1/f.bsf"
    assert "filters/a/v1/f.bsf" in store.presigned_get_url("v1/f.bsf", 60)
    assert store.list_multipart_uploads() == []
    store.abort_multipart_upload("v1/f.bsf", "id")


def test_an_empty_prefix_is_the_inner_store() -> None:
    inner = MemoryObjectStore()
    store = PrefixedStore(inner, "")
    store.put("latest.json", b"x")
    assert inner.list() == ["latest.json"] == store.list()


@pytest.mark.parametrize("prefix", ["a/../b", "..", "a//b", "a\\b", "./a"])
def test_prefixes_that_escape_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        PrefixedStore(MemoryObjectStore(), prefix)


def test_publishing_through_a_prefixed_store_leaves_the_layout_of_one_filter() -> None:
    """The single-filter code runs unchanged in a folder (the latest.json CAS here)."""
    from bloomswarm.publisher.latest import Target, swap_latest
    from tests.unit.publishing_helpers import new_key

    inner = MemoryObjectStore()
    key = new_key()
    for name in ("a", "b"):
        outcome = swap_latest(PrefixedStore(inner, f"filters/{name}"), lambda _p: Target(1), key, "t")
        assert outcome.written
    assert inner.list() == ["filters/a/latest.json", "filters/b/latest.json"]
