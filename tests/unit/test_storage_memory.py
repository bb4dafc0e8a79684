"""MemoryObjectStore semantics (the same contract S3ObjectStore meets), S3 URL/config parsing."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from bloomswarm.common.errors import ConfigError, ObjectNotFound, PreconditionFailed, StorageError
from bloomswarm.common.storage import (
    MemoryObjectStore,
    ObjectInfo,
    ObjectStore,
    S3Config,
    S3ObjectStore,
    parse_s3_url,
)


@pytest.fixture
def store() -> MemoryObjectStore:
    return MemoryObjectStore(part_size=1024)


def test_both_implementations_satisfy_the_protocol() -> None:
    assert isinstance(MemoryObjectStore(), ObjectStore)
    s3 = S3ObjectStore(S3Config(bucket="some-bucket", region="us-east-1"))
    assert isinstance(s3, ObjectStore)


def test_put_get_head(store: MemoryObjectStore) -> None:
    etag = store.put("v1/manifest.json", b"hello")
    assert etag == '"' + hashlib.md5(b"hello").hexdigest() + '"'
    got = store.get("v1/manifest.json")
    assert got is not None
    assert (got.data, got.etag) == (b"hello", etag)
    assert store.head("v1/manifest.json") == ObjectInfo(size=5, etag=etag)
    assert store.exists("v1/manifest.json")
    assert not store.exists("v2/manifest.json")


def test_missing_key_raises_object_not_found(store: MemoryObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.get("nope")
    with pytest.raises(ObjectNotFound):
        store.head("nope")
    with pytest.raises(ObjectNotFound):
        store.download_file("nope", Path("/nonexistent/never-written"))


def test_conditional_get_returns_none_when_unchanged(store: MemoryObjectStore) -> None:
    etag = store.put("latest.json", b"1")
    assert store.get("latest.json", if_none_match=etag) is None
    store.put("latest.json", b"2")
    changed = store.get("latest.json", if_none_match=etag)
    assert changed is not None and changed.data == b"2"


def test_if_none_match_any_claims_a_key_once(store: MemoryObjectStore) -> None:
    store.put("v1/manifest.json", b"a", if_none_match_any=True)
    with pytest.raises(PreconditionFailed):
        store.put("v1/manifest.json", b"b", if_none_match_any=True)
    got = store.get("v1/manifest.json")
    assert got is not None and got.data == b"a"


def test_if_match_is_compare_and_swap(store: MemoryObjectStore) -> None:
    old = store.put("latest.json", b"1")
    new = store.put("latest.json", b"2", if_match=old)
    with pytest.raises(PreconditionFailed):
        store.put("latest.json", b"3", if_match=old)
    assert store.put("latest.json", b"3", if_match=new)
    with pytest.raises(ObjectNotFound):  # as S3 does: If-Match on a missing key is a 404
        store.put("absent.json", b"x", if_match=new)


def test_conditions_are_exclusive(store: MemoryObjectStore) -> None:
    with pytest.raises(ValueError, match="exclusive"):
        store.put("k", b"", if_none_match_any=True, if_match='"x"')


def test_only_one_racing_writer_wins(store: MemoryObjectStore) -> None:
    base = store.put("latest.json", b"0")
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            store.put("latest.json", str(i).encode(), if_match=base)
            wins.append(i)
        except PreconditionFailed:
            pass

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1


def test_upload_and_download_file(store: MemoryObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 20)
    seen: list[int] = []
    store.upload_file("v1/filter.bsf", src, progress=seen.append)
    assert sum(seen) == 5120 and len(seen) == 5
    dst = tmp_path / "out" / "filter.bsf"
    store.download_file("v1/filter.bsf", dst)
    assert dst.read_bytes() == src.read_bytes()
    assert [p.name for p in dst.parent.iterdir()] == ["filter.bsf"]


def test_failed_upload_leaves_nothing(store: MemoryObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * 4096)

    def boom(_: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.upload_file("v1/filter.bsf", src, progress=boom)
    assert not store.exists("v1/filter.bsf")


def test_upload_of_missing_file_is_storage_error(store: MemoryObjectStore, tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        store.upload_file("k", tmp_path / "absent")


def test_list_and_delete(store: MemoryObjectStore) -> None:
    for key in ("v10/a", "v9/a", "v9/b", "latest.json"):
        store.put(key, b"")
    assert store.list("v9/") == ["v9/a", "v9/b"]
    assert store.list() == ["latest.json", "v10/a", "v9/a", "v9/b"]
    store.delete(["v9/a", "v9/b", "never-existed"])
    assert store.list() == ["latest.json", "v10/a"]


def test_urls(store: MemoryObjectStore) -> None:
    store.put("v1/filter.bsf", b"x")
    assert store.presigned_get_url("v1/filter.bsf", 60).startswith("memory://v1/filter.bsf")
    assert store.public_url("v1/filter.bsf") is None
    cdn = MemoryObjectStore(public_base_url="https://cdn.example/fleet/")
    assert cdn.public_url("v1/filter.bsf") == "https://cdn.example/fleet/v1/filter.bsf"
    with pytest.raises(ConfigError):
        store.presigned_get_url("v1/filter.bsf", 0)


@pytest.mark.parametrize("key", ["", "/abs"])
def test_bad_keys_are_programming_errors(store: MemoryObjectStore, key: str) -> None:
    with pytest.raises(ValueError):
        store.put(key, b"")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket", ("bucket", "")),
        ("s3://my-bucket/", ("my-bucket", "")),
        ("s3://my.bucket/a/b/", ("my.bucket", "a/b")),
        (" s3://abc/prefix ", ("abc", "prefix")),
    ],
)
def test_parse_s3_url(url: str, expected: tuple[str, str]) -> None:
    assert parse_s3_url(url) == expected


@pytest.mark.parametrize(
    "url",
    ["", "bucket/prefix", "http://bucket/x", "s3://", "s3://Bad_Bucket/x", "s3://ab", "s3://b?x=1",
     "s3://user@bucket/x", "s3://a..b/x", "s3://bucket:abc/x", "s3://[::1/x"],
)
def test_parse_s3_url_rejects(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_s3_url(url)


def test_s3_config_validation_and_prefix_normalisation() -> None:
    config = S3Config.from_url("s3://bucket/fleet/", endpoint_url="http://127.0.0.1:1")
    assert config.prefix == "fleet"
    assert config.url == "s3://bucket/fleet"
    assert S3Config(bucket="bucket", prefix="/a/b/").prefix == "a/b"
    with pytest.raises(ConfigError):
        S3Config(bucket="bucket", part_size=1024)
    with pytest.raises(ConfigError):
        S3Config(bucket="bucket", max_attempts=0)
    with pytest.raises(ConfigError):
        S3Config(bucket="BAD")


def test_unknown_profile_is_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="profile"):
        S3ObjectStore(S3Config(bucket="bucket", profile="no-such-profile"))
