"""The distributed build on a real Dask LocalCluster (worker processes, TCP on loopback).

The result must be bit-identical to the local build: same body, same key count, same
header but for the creation time. One cluster of 2 worker processes serves the module
and is closed at its end; the CLI tests start and stop their own.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
import zstandard

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.errors import ConfigError, InputError
from bloomswarm.common.params import Layout
from bloomswarm.common.reader import Filter
from bloomswarm.common.storage import S3Config
from bloomswarm.main import main
from bloomswarm.publisher import distributed
from bloomswarm.publisher.build import BuildSpec, build_filter
from bloomswarm.publisher.source_inputs import ENDPOINT_ENV
from bloomswarm.publisher.source_keys import KeyType
from bloomswarm.publisher.sources import SourceSpec

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def scheduler(s3_server: str) -> Iterator[str]:
    """A LocalCluster of 2 worker processes, as ``--engine dask`` starts it; yields its
    scheduler address.

    Depends on the S3 server fixture so that the workers inherit its credentials.
    """
    cluster = distributed.start_local_cluster(2)
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


@pytest.fixture
def small_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split plain-text inputs into byte ranges of 20 kB, so one file spans many tasks."""
    monkeypatch.setattr(distributed, "SPLIT_BYTES", 20_000)


def _keys(kind: KeyType, index: int, count: int) -> list[bytes]:
    if kind == "int":
        return [b"%d" % ((i * 7919 + index) * (-1) ** i) for i in range(count)]
    return [f"file{index}-κλειδί-{i}".encode() for i in range(count)]


def write_inputs(root: Path, kind: KeyType) -> Path:
    """Five inputs: two plain (one big enough to split), gzip, zstd, and Parquet or CSV."""
    root.mkdir()
    (root / "a.txt").write_bytes(b"\n".join(_keys(kind, 0, 12_000)) + b"\n")
    (root / "b.txt").write_bytes(b"\r\n".join(_keys(kind, 1, 300)))
    (root / "c.gz").write_bytes(gzip.compress(b"\n".join(_keys(kind, 2, 3000)) + b"\n"))
    (root / "d.zst").write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(_keys(kind, 3, 2000))))
    (root / "e.txt").write_bytes(b"")
    (root / "f.txt").write_bytes(b"\n\n" + b"\n".join(_keys(kind, 0, 500)) + b"\n")  # duplicates
    return root


def same_filter(a: FilterBuilder, b: FilterBuilder) -> None:
    assert a.params == b.params
    assert a.key_count == b.key_count > 0
    assert hashlib.sha256(a.body).digest() == hashlib.sha256(b.body).digest()
    assert a.header(created_at=0).pack() == b.header(created_at=0).pack()


@pytest.mark.usefixtures("small_splits")
@pytest.mark.parametrize("layout", [Layout.BLOCKED, Layout.STANDARD], ids=["blocked", "standard"])
@pytest.mark.parametrize("kind", ["str", "int"])
@pytest.mark.parametrize("expected_keys", [None, 50_000], ids=["counted", "expected"])
def test_dask_build_is_bit_identical_to_local(
    tmp_path: Path, scheduler: str, *, layout: Layout, kind: KeyType, expected_keys: int | None,
) -> None:
    source = SourceSpec([str(write_inputs(tmp_path / "in", kind))], key_type=kind)
    plan = distributed.plan_partitions(source, distributed.SPLIT_BYTES)
    assert len(plan) > 6  # a.txt is split into byte ranges
    spec = BuildSpec(layout=layout, hash_seed=7, target_fpp=0.001, expected_keys=expected_keys,
                     progress=False)
    local = build_filter(source, spec)
    remote = build_filter(source, dataclasses.replace(spec, engine="dask", scheduler=scheduler))
    same_filter(local, remote)
    assert local.key_count == 12_000 + 300 + 3000 + 2000 + 500


def test_parquet_and_csv_inputs(tmp_path: Path, scheduler: str) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path / "in"
    root.mkdir()
    pq.write_table(pa.table({"k": [f"pq-{i}" for i in range(20_000)]}), root / "a.parquet",
                   row_group_size=1500)
    pq.write_table(pa.table({"k": [f"pq2-{i}" for i in range(100)]}), root / "b.parquet")
    (root / "c.csv").write_text("x,k\n" + "".join(f"{i},csv-{i}\n" for i in range(3000)))
    source = SourceSpec([str(root)], csv_column="k", parquet_column="k")
    original = distributed.SPLIT_BYTES
    distributed.SPLIT_BYTES = 10_000  # several row-group partitions for a.parquet
    try:
        assert len(distributed.plan_partitions(source, distributed.SPLIT_BYTES)) > 3
        local = build_filter(source, BuildSpec(progress=False))
        remote = build_filter(source, BuildSpec(engine="dask", scheduler=scheduler, progress=False))
    finally:
        distributed.SPLIT_BYTES = original
    same_filter(local, remote)
    assert local.key_count == 23_100


def test_s3_inputs_read_on_the_workers(tmp_path: Path, scheduler: str, s3_bucket: S3Config,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert s3_bucket.endpoint_url is not None
    monkeypatch.setenv(ENDPOINT_ENV, s3_bucket.endpoint_url)
    root = write_inputs(tmp_path / "in", "str")
    client: Any = boto3.client("s3", endpoint_url=s3_bucket.endpoint_url, region_name="us-east-1")
    for path in sorted(root.iterdir()):
        client.put_object(Bucket=s3_bucket.bucket, Key=f"keys/{path.name}", Body=path.read_bytes())
    monkeypatch.setattr(distributed, "SPLIT_BYTES", 50_000)
    url = f"s3://{s3_bucket.bucket}/keys"
    local = build_filter(SourceSpec([str(root)]), BuildSpec(progress=False))
    remote = build_filter(SourceSpec([url]), BuildSpec(engine="dask", scheduler=scheduler, progress=False))
    same_filter(local, remote)


def test_worker_errors_reach_the_caller(tmp_path: Path, scheduler: str) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_text("1\n2\n")
    (root / "b.txt").write_text("3\nfour\n")
    with pytest.raises(InputError, match=r"b\.txt:2: not an integer: b'four'"):
        build_filter(SourceSpec([str(root)], key_type="int"),
                     BuildSpec(engine="dask", scheduler=scheduler, expected_keys=10, progress=False))


def test_empty_input_gives_an_empty_filter(tmp_path: Path, scheduler: str) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    source = SourceSpec([str(tmp_path / "empty.txt")])
    local = build_filter(source, BuildSpec(progress=False))
    remote = build_filter(source, BuildSpec(engine="dask", scheduler=scheduler, progress=False))
    assert remote.key_count == local.key_count == 0
    assert bytes(remote.body) == bytes(local.body)


def test_unreachable_scheduler_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text("a\n")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9"):
        build_filter(SourceSpec([str(tmp_path / "k.txt")]),
                     BuildSpec(engine="dask", scheduler="tcp://127.0.0.1:9", progress=False))
    assert time.monotonic() - started < 30


# -- command line -----------------------------------------------------------------------------


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_cli_engine_dask_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    small_splits: None) -> None:
    inputs = write_inputs(tmp_path / "in", "str")
    local_out, dask_out = tmp_path / "local.bsf", tmp_path / "dask.bsf"
    common = ["--fpp", "0.005", "--layout", "standard", "--seed", "3"]
    assert main(["-q", "build", str(inputs), "-o", str(local_out), *common]) == 0
    before = _children()
    assert main(["-q", "build", str(inputs), "-o", str(dask_out), *common,
                 "--engine", "dask", "--workers", "2"]) == 0
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children() - before, "the LocalCluster's worker processes outlived the build"
    with Filter.open(local_out, verify=True) as a, Filter.open(dask_out, verify=True) as b:
        assert a.header.key_count == b.header.key_count == 17_800
        assert a.header.body_sha256 == b.header.body_sha256
        assert a.params == b.params
    assert local_out.read_bytes()[4096:] == dask_out.read_bytes()[4096:]
    capsys.readouterr()


def test_cli_dask_errors_are_one_line(tmp_path: Path, scheduler: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "k.txt").write_text("1\nnope\n")
    out = tmp_path / "f.bsf"
    assert main(["-q", "build", str(tmp_path / "k.txt"), "-o", str(out), "--key-type", "int",
                 "--engine", "dask", "--scheduler", scheduler]) == 1
    err = capsys.readouterr().err
    assert err == f"bloomswarm build: error: {tmp_path / 'k.txt'}:2: not an integer: b'nope'\n"
    assert main(["-q", "build", str(tmp_path / "k.txt"), "-o", str(out), "--scheduler", scheduler]) == 1
    assert "--scheduler and --workers need --engine dask" in capsys.readouterr().err
    assert main(["-q", "build", str(tmp_path / "k.txt"), "-o", str(out), "--engine", "dask",
                 "--scheduler", scheduler, "--workers", "2"]) == 1
    assert "cannot be combined with --scheduler" in capsys.readouterr().err
    assert not out.exists()
