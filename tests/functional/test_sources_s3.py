"""``s3://bucket/prefix`` inputs against moto's S3 server on loopback (real HTTP, real boto3)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import zstandard
from botocore import exceptions as bx

from bloomswarm.common.errors import InputError, StorageError
from bloomswarm.common.storage import S3Config, S3ObjectStore
from bloomswarm.main import main
from bloomswarm.publisher.build import BuildSpec, build_filter
from bloomswarm.publisher.source_inputs import ENDPOINT_ENV, S3Input, store_for
from bloomswarm.publisher.sources import (
    Partition,
    SourceSpec,
    iter_keys,
    iter_partition_batches,
    resolve_inputs,
)


@pytest.fixture
def bucket(s3_bucket: S3Config, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test bucket's name, with $BLOOMSWARM_S3_ENDPOINT_URL pointing at moto."""
    assert s3_bucket.endpoint_url is not None
    monkeypatch.setenv(ENDPOINT_ENV, s3_bucket.endpoint_url)
    return s3_bucket.bucket


def client(config: S3Config) -> Any:
    return boto3.client("s3", endpoint_url=config.endpoint_url, region_name="us-east-1")


def lines(prefix: str, count: int) -> bytes:
    return b"".join(b"%s-%06d\n" % (prefix.encode(), i) for i in range(count))


def upload(config: S3Config, objects: dict[str, bytes]) -> None:
    raw = client(config)
    for key, data in objects.items():
        raw.put_object(Bucket=config.bucket, Key=key, Body=data)


def test_prefix_reads_every_object_sorted_and_decompressed(s3_bucket: S3Config, bucket: str) -> None:
    objects = {
        "data/b.txt.gz": gzip.compress(lines("b", 3000)),
        "data/a.txt": lines("a", 2000),
        "data/c.zst": zstandard.ZstdCompressor().compress(lines("c", 1000)),
        "data/sub/d.txt": b"d1\r\nd2\r\n\r\n",
        "data/marker/": b"",
        "database/not-under-the-prefix.txt": b"nope\n",
    }
    upload(s3_bucket, objects)
    keys = list(iter_keys(SourceSpec([f"s3://{bucket}/data"])))
    expected = (lines("a", 2000) + lines("b", 3000) + lines("c", 1000)).decode().split()
    assert keys == [*expected, "d1", "d2"]
    # a trailing slash means the same; a URL naming one object reads just that object
    assert list(iter_keys(SourceSpec([f"s3://{bucket}/data/"]))) == keys
    assert list(iter_keys(SourceSpec([f"s3://{bucket}/data/sub/d.txt"]))) == ["d1", "d2"]
    refs = resolve_inputs([f"s3://{bucket}/data"])
    assert [str(r) for r in refs] == [
        f"s3://{bucket}/data/{name}" for name in ("a.txt", "b.txt.gz", "c.zst", "sub/d.txt")
    ]


def test_csv_and_parquet_objects(s3_bucket: S3Config, bucket: str) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(5000)), "name": [f"n{i}" for i in range(5000)]}),
                   buffer, row_group_size=700)
    upload(s3_bucket, {"pq/k.parquet": buffer.getvalue(), "csv/k.csv": b"id,name\n1,x\n2,y\n"})
    ints = list(iter_keys(SourceSpec([f"s3://{bucket}/pq"], key_type="int", parquet_column="id")))
    assert ints == list(range(5000))
    names = list(iter_keys(SourceSpec([f"s3://{bucket}/csv"], csv_column="name")))
    assert names == ["x", "y"]
    # row-group partitions read only their row groups through ranged GETs
    ref = resolve_inputs([f"s3://{bucket}/pq/k.parquet"])[0]
    spec = SourceSpec([], key_type="int", parquet_column="id")
    part = Partition(ref, row_groups=(2, 3))
    got = [v for batch in iter_partition_batches(part, spec) for v in np.asarray(batch).tolist()]
    assert got == list(range(1400, 2800))


def test_byte_ranges_of_an_object(s3_bucket: S3Config, bucket: str) -> None:
    data = lines("r", 5000)
    upload(s3_bucket, {"ranges/k.txt": data})
    ref = resolve_inputs([f"s3://{bucket}/ranges"])[0]
    spec = SourceSpec([], key_type="bytes")
    cuts = [0, 1, 777, 20_000, 33_333, len(data)]
    got: list[bytes] = []
    for start, end in pairwise(cuts):
        for batch in iter_partition_batches(Partition(ref, byte_range=(start, end)), spec):
            got.extend(batch)
    assert got == data.split()


def test_build_from_s3_equals_local_build(s3_bucket: S3Config, bucket: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    local = tmp_path / "local"
    local.mkdir()
    for i in range(3):
        (local / f"part-{i}.txt").write_bytes(lines(f"p{i}", 4000))
        upload(s3_bucket, {f"build/part-{i}.txt": (local / f"part-{i}.txt").read_bytes()})
    spec = BuildSpec(progress=False)
    from_s3 = build_filter(SourceSpec([f"s3://{bucket}/build"]), spec)
    from_disk = build_filter(SourceSpec([str(local)]), spec)
    assert from_s3.key_count == from_disk.key_count == 12_000
    assert bytes(from_s3.body) == bytes(from_disk.body)
    out = tmp_path / "f.bsf"
    assert main(["-q", "build", f"s3://{bucket}/build", "-o", str(out)]) == 0
    assert "12,000 keys" in capsys.readouterr().out


@pytest.mark.parametrize(("url", "error", "message"), [
    ("s3://{bucket}/nothing-here", InputError, "no objects under s3://{bucket}/nothing-here"),
    ("s3://bsw-no-such-bucket-x1/data", StorageError, "bsw-no-such-bucket-x1"),
    ("s3://Bad_Bucket/x", InputError, "invalid bucket name"),
])
def test_bad_urls_fail_with_one_line(bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     *, url: str, error: type[Exception], message: str) -> None:
    url = url.format(bucket=bucket)
    with pytest.raises(error) as excinfo:
        list(iter_keys(SourceSpec([url])))
    assert message.format(bucket=bucket) in str(excinfo.value) and "\n" not in str(excinfo.value)
    assert main(["-q", "build", url, "-o", str(tmp_path / "f.bsf")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bloomswarm build: error: ") and err.count("\n") == 1


def test_unreachable_endpoint_fails_in_bounded_time(s3_bucket: S3Config) -> None:
    template = dataclasses.replace(
        s3_bucket, endpoint_url="http://127.0.0.1:9", connect_timeout_s=0.5, read_timeout_s=1.0,
        max_attempts=2,
    )
    started = time.monotonic()
    with pytest.raises(StorageError) as excinfo:
        list(iter_keys(SourceSpec(["s3://some-bucket/data"], s3_config=template)))
    assert "\n" not in str(excinfo.value)
    assert time.monotonic() - started < 30


# -- streaming reads that fail half-way --------------------------------------------------------


class _FlakyBody:
    """A response body that raises a read timeout after ``good`` bytes."""

    def __init__(self, body: Any, good: int) -> None:
        self._body = body
        self._left = good

    def read(self, amount: int | None = None) -> bytes:
        if self._left <= 0:
            raise bx.ReadTimeoutError(endpoint_url="http://test")
        data: bytes = self._body.read(min(amount or self._left, self._left))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._body.close()


def _flaky(store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch, *, failures: int,
           requests: list[dict[str, Any]], before_retry: Any = None, good: int = 100_000) -> None:
    real = store._client.get_object
    state = {"left": failures}

    def get_object(**kwargs: Any) -> Any:
        requests.append(kwargs)
        if len(requests) > 1 and before_retry is not None:
            before_retry()
        response: Any = real(**kwargs)
        if state["left"] > 0:
            state["left"] -= 1
            response["Body"] = _FlakyBody(response["Body"], good=good)
        return response

    monkeypatch.setattr(store._client, "get_object", get_object)


def test_stream_resumes_after_a_failed_read(s3_bucket: S3Config, bucket: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = lines("s", 50_000)
    upload(s3_bucket, {"flaky/k.txt": data})
    ref = resolve_inputs([f"s3://{bucket}/flaky"])[0]
    assert isinstance(ref, S3Input)
    requests: list[dict[str, Any]] = []
    _flaky(store_for(ref.config), monkeypatch, failures=2, requests=requests)
    assert list(iter_keys(SourceSpec([f"s3://{bucket}/flaky"], key_type="bytes"))) == data.split()
    resumed = [r for r in requests if "Range" in r and r.get("IfMatch")]
    assert [r["Range"] for r in resumed] == ["bytes=100000-", "bytes=200000-"]


def test_stream_refuses_an_object_that_changed(s3_bucket: S3Config, bucket: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    upload(s3_bucket, {"changing/k.txt": lines("v1", 50_000)})
    ref = resolve_inputs([f"s3://{bucket}/changing"])[0]
    assert isinstance(ref, S3Input)
    requests: list[dict[str, Any]] = []
    _flaky(store_for(ref.config), monkeypatch, failures=1, requests=requests,
           before_retry=lambda: upload(s3_bucket, {"changing/k.txt": lines("v2", 50_000)}))
    with pytest.raises(StorageError, match="changed while it was being read"):
        list(iter_keys(SourceSpec([f"s3://{bucket}/changing"])))


def test_stream_gives_up_after_bounded_retries(s3_bucket: S3Config, bucket: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    upload(s3_bucket, {"broken/k.txt": lines("b", 50_000)})
    ref = resolve_inputs([f"s3://{bucket}/broken"])[0]
    assert isinstance(ref, S3Input)
    requests: list[dict[str, Any]] = []
    _flaky(store_for(ref.config), monkeypatch, failures=100, requests=requests, good=0)
    with pytest.raises(StorageError) as excinfo:
        list(iter_keys(SourceSpec([f"s3://{bucket}/broken"])))
    assert "\n" not in str(excinfo.value)
    assert len(requests) == ref.config.part_attempts
