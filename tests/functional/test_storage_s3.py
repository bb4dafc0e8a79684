"""S3ObjectStore against moto's real S3 server over HTTP on 127.0.0.1, with the real boto3 client.

moto 5.2 (checked here) honours conditional writes (IfNoneMatch='*', IfMatch → 412),
conditional GET (If-None-Match → 304) and SHA-256 checksums on multipart parts; the
tests below would fail if it stopped doing so.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore import exceptions as bx

from bloomswarm.common.errors import ObjectNotFound, PreconditionFailed, StorageError
from bloomswarm.common.storage import MIB, ObjectInfo, S3Config, S3ObjectStore, translate_boto_error


@pytest.fixture
def store(s3_bucket: S3Config) -> S3ObjectStore:
    return S3ObjectStore(s3_bucket)


def _raw_client(config: S3Config) -> Any:
    return boto3.client("s3", endpoint_url=config.endpoint_url, region_name="us-east-1")


def test_put_get_head_list_delete(store: S3ObjectStore, s3_bucket: S3Config) -> None:
    etag = store.put("v1/manifest.json", b'{"a":1}', content_type="application/json")
    got = store.get("v1/manifest.json")
    assert got is not None and got.data == b'{"a":1}' and got.etag == etag
    assert store.head("v1/manifest.json") == ObjectInfo(size=7, etag=etag)
    assert store.exists("v1/manifest.json") and not store.exists("v1/other")
    # keys live under the configured prefix in the bucket
    raw = _raw_client(s3_bucket).list_objects_v2(Bucket=s3_bucket.bucket)
    assert [o["Key"] for o in raw["Contents"]] == ["fleet-a/v1/manifest.json"]
    store.put("v10/manifest.json", b"")
    store.put("latest.json", b"")
    assert store.list() == ["latest.json", "v1/manifest.json", "v10/manifest.json"]
    assert store.list("v1") == ["v1/manifest.json", "v10/manifest.json"]
    store.delete(["v1/manifest.json", "v10/manifest.json", "never-existed"])
    assert store.list() == ["latest.json"]
    store.delete([])


def test_list_paginates_and_client_is_thread_safe(store: S3ObjectStore) -> None:
    keys = [f"v1/part-{i:04d}" for i in range(1005)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda key: store.put(key, key.encode()), keys))
    assert store.list("v1/") == keys
    store.delete(keys)
    assert store.list("v1/") == []


def test_missing_key(store: S3ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFound, match=r"v9/manifest\.json"):
        store.get("v9/manifest.json")
    with pytest.raises(ObjectNotFound):
        store.head("v9/manifest.json")
    with pytest.raises(ObjectNotFound):
        store.download_file("v9/manifest.json", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_conditional_get_returns_none_when_unchanged(store: S3ObjectStore) -> None:
    """moto answers GET with If-None-Match by 304, as S3 does."""
    etag = store.put("latest.json", b"one")
    assert store.get("latest.json", if_none_match=etag) is None
    store.put("latest.json", b"two")
    changed = store.get("latest.json", if_none_match=etag)
    assert changed is not None and changed.data == b"two"


def test_if_none_match_any_claims_once(store: S3ObjectStore) -> None:
    store.put("v1/manifest.json", b"first", if_none_match_any=True)
    with pytest.raises(PreconditionFailed):
        store.put("v1/manifest.json", b"second", if_none_match_any=True)
    got = store.get("v1/manifest.json")
    assert got is not None and got.data == b"first"


def test_if_match_compare_and_swap(store: S3ObjectStore) -> None:
    old = store.put("latest.json", b"1")
    new = store.put("latest.json", b"2", if_match=old)
    with pytest.raises(PreconditionFailed):
        store.put("latest.json", b"3", if_match=old)
    store.put("latest.json", b"3", if_match=new)
    got = store.get("latest.json")
    assert got is not None and got.data == b"3"
    with pytest.raises(ObjectNotFound):  # If-Match on a missing key: 404 NoSuchKey
        store.put("absent.json", b"x", if_match=new)


def _write_random(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


def test_multipart_upload_and_download(s3_bucket: S3Config, tmp_path: Path) -> None:
    store = S3ObjectStore(dataclasses.replace(s3_bucket, part_size=5 * MIB))
    src = tmp_path / "filter.bsf"
    data = _write_random(src, 20 * MIB + 12345)
    progress: list[int] = []
    etag = store.upload_file("v1/filter.bsf", src, progress=progress.append)
    assert etag.endswith('-5"')  # five parts: 4 x 5 MiB + remainder
    assert sum(progress) == len(data) and len(progress) == 5
    assert store.head("v1/filter.bsf").size == len(data)
    dst = tmp_path / "out" / "filter.bsf"
    store.download_file("v1/filter.bsf", dst)
    assert dst.read_bytes() == data
    assert sorted(p.name for p in dst.parent.iterdir()) == ["filter.bsf"]
    head = _raw_client(s3_bucket).head_object(
        Bucket=s3_bucket.bucket, Key="fleet-a/v1/filter.bsf", ChecksumMode="ENABLED"
    )
    assert head.get("ChecksumSHA256")  # moto stores the SHA-256 composite checksum


def test_multipart_without_checksums(s3_bucket: S3Config, tmp_path: Path) -> None:
    config = dataclasses.replace(s3_bucket, part_size=5 * MIB, checksum_sha256=False)
    src = tmp_path / "f"
    data = _write_random(src, 11 * MIB)
    S3ObjectStore(config).upload_file("v2/filter.bsf", src)
    got = S3ObjectStore(config).get("v2/filter.bsf")
    assert got is not None and got.data == data


def test_unreadable_upload_source_is_storage_error(store: S3ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot read"):
        store.upload_file("v1/x", tmp_path / "absent")
    with pytest.raises(StorageError, match="cannot read"):
        store.upload_file("v1/x", tmp_path)  # a directory


def test_small_file_upload_is_single_put(store: S3ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "small"
    data = _write_random(src, 1000)
    etag = store.upload_file("v1/filter.torrent", src)
    assert "-" not in etag
    got = store.get("v1/filter.torrent")
    assert got is not None and got.data == data


@pytest.mark.parametrize("error", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_failed_multipart_upload_is_aborted(
    s3_bucket: S3Config, tmp_path: Path, error: BaseException
) -> None:
    store = S3ObjectStore(dataclasses.replace(s3_bucket, part_size=5 * MIB))
    src = tmp_path / "big"
    _write_random(src, 12 * MIB)
    calls: list[int] = []

    def progress(n: int) -> None:
        calls.append(n)
        if len(calls) == 2:
            raise error

    with pytest.raises(type(error)):
        store.upload_file("v1/filter.bsf", src, progress=progress)
    client = _raw_client(s3_bucket)
    assert client.list_multipart_uploads(Bucket=s3_bucket.bucket).get("Uploads", []) == []
    assert not store.exists("v1/filter.bsf")


def _flaky_upload_part(
    store: S3ObjectStore, failures: int, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """Make the first ``failures`` UploadPart calls fail as if the connection dropped."""
    real = store._client.upload_part
    calls: list[int] = []

    def upload_part(**kwargs: Any) -> Any:
        calls.append(kwargs["PartNumber"])
        if len(calls) <= failures:
            raise bx.EndpointConnectionError(endpoint_url=store.config.endpoint_url or "")
        return real(**kwargs)

    monkeypatch.setattr(store._client, "upload_part", upload_part)
    return calls


def test_failed_part_is_retried(
    s3_bucket: S3Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3ObjectStore(dataclasses.replace(s3_bucket, part_size=5 * MIB, part_attempts=3))
    src = tmp_path / "big"
    data = _write_random(src, 11 * MIB)
    calls = _flaky_upload_part(store, 2, monkeypatch)
    store.upload_file("v1/filter.bsf", src)
    assert calls == [1, 1, 1, 2, 3]
    got = store.get("v1/filter.bsf")
    assert got is not None and got.data == data


def test_part_retries_are_bounded(
    s3_bucket: S3Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3ObjectStore(dataclasses.replace(s3_bucket, part_size=5 * MIB, part_attempts=2))
    src = tmp_path / "big"
    _write_random(src, 11 * MIB)
    calls = _flaky_upload_part(store, 2, monkeypatch)
    with pytest.raises(StorageError, match="cannot reach"):
        store.upload_file("v1/filter.bsf", src)
    assert calls == [1, 1]
    client = _raw_client(s3_bucket)
    assert client.list_multipart_uploads(Bucket=s3_bucket.bucket).get("Uploads", []) == []


def test_missing_bucket(s3_bucket: S3Config) -> None:
    store = S3ObjectStore(dataclasses.replace(s3_bucket, bucket="no-such-bucket-here"))
    with pytest.raises(ObjectNotFound, match="no-such-bucket-here"):
        store.get("latest.json")
    with pytest.raises(ObjectNotFound, match="no-such-bucket-here"):
        store.head("latest.json")
    with pytest.raises(ObjectNotFound, match="no-such-bucket-here"):
        store.exists("latest.json")
    with pytest.raises(ObjectNotFound, match="no-such-bucket-here"):
        store.put("latest.json", b"x")
    with pytest.raises(ObjectNotFound, match="no-such-bucket-here"):
        store.list()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_endpoint_fails_fast_with_storage_error(s3_server: str) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    store = S3ObjectStore(
        S3Config(bucket="whatever", endpoint_url=endpoint, region="us-east-1", connect_timeout_s=1)
    )
    start = time.monotonic()
    with pytest.raises(StorageError, match="cannot reach S3 endpoint") as info:
        store.get("latest.json")
    assert endpoint in str(info.value)
    assert time.monotonic() - start < 10
    assert not isinstance(info.value, ObjectNotFound)


def test_presigned_url_is_fetchable(store: S3ObjectStore) -> None:
    store.put("v1/filter.bsf", b"filter bytes")
    url = store.presigned_get_url("v1/filter.bsf", 300)
    assert url.startswith(store.config.endpoint_url or "")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        assert response.read() == b"filter bytes"
    assert store.public_url("v1/filter.bsf") is None


def test_public_url_uses_configured_base(s3_bucket: S3Config) -> None:
    store = S3ObjectStore(dataclasses.replace(s3_bucket, public_base_url="https://cdn.test/f/"))
    assert store.public_url("v1/filter.bsf") == "https://cdn.test/f/v1/filter.bsf"


# --- error translation: nothing from botocore escapes unmapped ---------------------------


def _client_error(code: str, status: int) -> bx.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return bx.ClientError(response, "GetObject")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (_client_error("NoSuchKey", 404), ObjectNotFound),
        (_client_error("404", 404), ObjectNotFound),
        (_client_error("NoSuchBucket", 404), ObjectNotFound),
        (_client_error("PreconditionFailed", 412), PreconditionFailed),
        (_client_error("ConditionalRequestConflict", 409), PreconditionFailed),
        (_client_error("AccessDenied", 403), StorageError),
        (_client_error("SlowDown", 503), StorageError),
        (bx.EndpointConnectionError(endpoint_url="http://x"), StorageError),
        (bx.ConnectTimeoutError(endpoint_url="http://x"), StorageError),
        (bx.ReadTimeoutError(endpoint_url="http://x"), StorageError),
        (bx.ConnectionClosedError(endpoint_url="http://x"), StorageError),
        (bx.NoCredentialsError(), StorageError),
        (bx.IncompleteReadError(actual_bytes=1, expected_bytes=2), StorageError),
        (bx.ParamValidationError(report="bad"), StorageError),
    ],
)
def test_translate_boto_error(exc: BaseException, expected: type[StorageError]) -> None:
    config = S3Config(bucket="bucket-x", endpoint_url="http://127.0.0.1:9")
    err = translate_boto_error(exc, config=config, key="k")
    assert type(err) is expected
    if expected is StorageError and isinstance(exc, bx.ClientError):
        assert "s3://bucket-x/k" in str(err)


def test_bucket_name_in_no_such_bucket_message() -> None:
    config = S3Config(bucket="bucket-x", endpoint_url="http://127.0.0.1:9")
    err = translate_boto_error(_client_error("NoSuchBucket", 404), config=config, key="k")
    assert "bucket-x" in str(err) and "127.0.0.1:9" in str(err)
