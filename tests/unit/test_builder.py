"""FilterBuilder: add, merge, atomic writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from bloomswarm.common import Filter, FilterBuilder, FilterParams, Layout, read_header


def test_merge_is_a_bitwise_or_of_partitions(tmp_path: Path) -> None:
    whole = FilterBuilder.for_capacity(30000, 0.01, seed=9)
    parts = [FilterBuilder(whole.params) for _ in range(3)]
    keys = np.arange(30000, dtype=np.uint64)
    for i, part in enumerate(parts):
        part.add_many(keys[i::3])
    whole.add_many(keys)
    merged = FilterBuilder(whole.params)
    for part in parts:
        merged.merge(part)
    assert bytes(merged.body) == bytes(whole.body)
    assert merged.key_count == whole.key_count == 30000


@pytest.mark.parametrize(
    "other",
    [
        FilterParams(Layout.BLOCKED, 512 * 11, 6, 0),
        FilterParams(Layout.BLOCKED, 512 * 10, 5, 0),
        FilterParams(Layout.BLOCKED, 512 * 10, 6, 1),
        FilterParams(Layout.STANDARD, 512 * 10, 6, 0),
    ],
    ids=["size", "probes", "seed", "layout"],
)
def test_merge_refuses_different_parameters(other: FilterParams) -> None:
    builder = FilterBuilder(FilterParams(Layout.BLOCKED, 512 * 10, 6, 0))
    with pytest.raises(ValueError, match="different parameters"):
        builder.merge(FilterBuilder(other))


def test_write_is_atomic_read_only_and_leaves_no_temporary(tmp_path: Path) -> None:
    builder = FilterBuilder.for_capacity(1000, 0.01)
    builder.add_many(range(1000))
    path = tmp_path / "f.bsf"
    header = builder.write(path, version=7, created_at=123)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444
    assert os.listdir(tmp_path) == ["f.bsf"]
    assert read_header(str(path)) == header
    builder.add("more")
    builder.write(path, version=8)  # replaces the read-only file by rename
    with Filter.open(path) as f:
        assert f.version == 8 and "more" in f and f.key_count == 1001


def test_failed_write_leaves_target_untouched(tmp_path: Path) -> None:
    builder = FilterBuilder.for_capacity(1000, 0.01)
    path = tmp_path / "f.bsf"
    builder.write(path, version=1)
    before = path.read_bytes()

    class Boom(Exception):
        pass

    from bloomswarm.common import atomic_file

    def parts() -> object:
        yield b"partial"
        raise Boom

    with pytest.raises(Boom):
        atomic_file.write_atomically(path, parts())  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["f.bsf"]


def test_builder_from_body_round_trips() -> None:
    builder = FilterBuilder.for_capacity(100, 0.01)
    builder.add_many(["a", "b"])
    copy = FilterBuilder(builder.params, body=bytes(builder.body), key_count=2)
    assert bytes(copy.body) == bytes(builder.body) and copy.key_count == 2
    with pytest.raises(ValueError, match="bytes"):
        FilterBuilder(builder.params, body=b"short")


def test_bad_batch_arrays_are_rejected() -> None:
    builder = FilterBuilder.for_capacity(100, 0.01)
    with pytest.raises(TypeError, match="uint64"):
        builder.add_many(np.zeros(3, dtype=np.float64))
    with pytest.raises(TypeError, match="uint64"):
        builder.add_many(np.zeros((2, 2), dtype=np.uint64))
