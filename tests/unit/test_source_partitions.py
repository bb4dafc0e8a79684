"""Batch conversion, byte-range partitions and partition planning (no Dask needed)."""

from __future__ import annotations

import gzip
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common.errors import InputError
from bloomswarm.publisher import source_text
from bloomswarm.publisher.distributed import group_partitions, plan_partitions
from bloomswarm.publisher.source_keys import KeyType, convert_fields, convert_key
from bloomswarm.publisher.sources import (
    LocalInput,
    Partition,
    SourceSpec,
    iter_keys,
    iter_partition_batches,
)


def _one_by_one(fields: list[bytes], key_type: KeyType) -> list[object]:
    return [convert_key(f, key_type, "f", i + 1) for i, f in enumerate(fields) if f]


def _error_of(call: object) -> str | None:
    try:
        call()  # type: ignore[operator]
    except InputError as exc:
        return str(exc)
    return None


FIELD = st.one_of(
    st.binary(max_size=6),
    st.from_regex(rb"\A-?[0-9]{1,21}\Z"),
    st.sampled_from([b"", b"-", b"--1", b"+1", b" 1", b"1_0", b"9223372036854775808", b"\xc3\xa9",
                     b"\xc3", b"-9223372036854775808", b"0" * 30 + b"1", b"\xed\xa0\x80"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(FIELD, max_size=12), st.sampled_from(["str", "bytes", "int"]))
def test_batch_conversion_equals_key_by_key(fields: list[bytes], key_type: KeyType) -> None:
    """convert_fields gives the keys convert_key gives, or the same first error."""
    expected_error = _error_of(lambda: _one_by_one(fields, key_type))
    batch_error = _error_of(lambda: convert_fields(fields, key_type, "f", 1))
    assert batch_error == expected_error
    if expected_error is None:
        batch = convert_fields(fields, key_type, "f", 1)
        expected = _one_by_one(fields, key_type)
        if key_type == "int":
            assert isinstance(batch, np.ndarray) and batch.tolist() == expected
        elif key_type == "str":
            assert [b.decode() for b in batch] == expected
        else:
            assert batch == expected


def _ranged_lines(path: Path, cuts: list[int]) -> list[bytes]:
    spec = SourceSpec([str(path)], key_type="bytes")
    out: list[bytes] = []
    for start, end in pairwise(cuts):
        for batch in iter_partition_batches(Partition(LocalInput(path), byte_range=(start, end)), spec):
            out.extend(batch)
    return out


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=9).map(lambda b: b.replace(b"\n", b"")), max_size=40),
    ending=st.sampled_from([b"\n", b"\r\n"]),
    final_newline=st.booleans(),
    fractions=st.lists(st.floats(min_value=0, max_value=1), max_size=8),
    block=st.integers(min_value=1, max_value=7),
)
def test_byte_ranges_own_every_line_exactly_once(
    tmp_path_factory: pytest.TempPathFactory, *, lines: list[bytes], ending: bytes,
    final_newline: bool, fractions: list[float], block: int,
) -> None:
    path = tmp_path_factory.mktemp("ranges") / "keys.txt"
    lines = [b"head", *lines]  # a fixed first line: no gzip, zstd or Parquet magic by chance
    data = ending.join(lines) + (ending if final_newline else b"")
    path.write_bytes(data)
    size = len(data)
    cuts = sorted({0, size, *(int(f * size) for f in fractions)})
    whole = list(iter_keys(SourceSpec([str(path)], key_type="bytes")))
    original = source_text.BLOCK_SIZE
    source_text.BLOCK_SIZE = block  # tiny blocks exercise lines that straddle reads
    try:
        assert _ranged_lines(path, cuts) == whole
    finally:
        source_text.BLOCK_SIZE = original


def test_byte_range_errors_name_the_range(tmp_path: Path) -> None:
    path = tmp_path / "ints.txt"
    path.write_bytes(b"1\n2\n3\nx\n5\n")
    part = Partition(LocalInput(path), byte_range=(4, 10))
    with pytest.raises(InputError, match=r"ints\.txt\[bytes 4-10\]:2: not an integer"):
        list(iter_partition_batches(part, SourceSpec([str(path)], key_type="int")))


def test_plan_splits_only_plain_text(tmp_path: Path) -> None:
    plain = tmp_path / "a-plain.txt"
    plain.write_bytes(b"".join(b"%08d\n" % i for i in range(1000)))  # 9000 bytes
    packed = tmp_path / "b-packed.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    csv_file = tmp_path / "c.csv"
    csv_file.write_bytes(b"k\n" + plain.read_bytes())
    (tmp_path / "d-empty.txt").write_bytes(b"")
    plan = plan_partitions(SourceSpec([str(tmp_path)]), split_bytes=2000)
    ranges = [p.byte_range for p, _ in plan if p.source == LocalInput(plain)]
    assert ranges == [(0, 1800), (1800, 3600), (3600, 5400), (5400, 7200), (7200, 9000)]
    assert [p.byte_range for p, _ in plan if p.source == LocalInput(packed)] == [None]
    assert len([p for p, _ in plan if p.source == LocalInput(csv_file)]) == 5  # lines, not CSV
    assert {p.source for p, _ in plan} == {LocalInput(plain), LocalInput(packed), LocalInput(csv_file)}
    assert sum(w for _, w in plan) == 9000 + packed.stat().st_size + csv_file.stat().st_size
    with_csv = plan_partitions(SourceSpec([str(csv_file)], csv_column="k"), split_bytes=2000)
    assert [p.byte_range for p, _ in with_csv] == [None]  # CSV rows may span lines: never split


def test_group_partitions_balances_and_keeps_order() -> None:
    parts = [(Partition(LocalInput(Path(f"f{i}"))), w) for i, w in enumerate([10, 1, 1, 1, 7, 3])]
    groups = group_partitions(parts, 3)
    assert sorted(str(p.source) for g in groups for p in g) == [f"f{i}" for i in range(6)]
    loads = sorted(sum(dict((p, w) for p, w in parts)[q] for q in g) for g in groups)
    assert loads == [7, 7, 9] or max(loads) <= 10
    for group in groups:  # each group reads its partitions in input order
        names = [str(p.source) for p in group]
        assert names == sorted(names)
    assert len(group_partitions(parts[:2], 8)) == 2
    with pytest.raises(ValueError):
        group_partitions(parts, 0)
