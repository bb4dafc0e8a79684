"""Parquet inputs (publisher/source_parquet.py through publisher/sources.py).

Everything but the missing-pyarrow test needs pyarrow and is skipped without it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import INT64_MAX, INT64_MIN, Key
from bloomswarm.common.params import Layout
from bloomswarm.main import main
from bloomswarm.publisher import source_parquet
from bloomswarm.publisher.build import BuildSpec, build_filter
from bloomswarm.publisher.sources import (
    KeyType,
    LocalInput,
    Partition,
    SourceSpec,
    iter_key_batches,
    iter_keys,
    iter_partition_batches,
    parquet_row_group_sizes,
)


def _pyarrow() -> tuple[Any, Any]:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    return pa, pq


def write_table(path: Path, columns: dict[str, Any], *, row_group_size: int | None = None) -> Path:
    """Write ``columns`` (name -> pyarrow array or list) as a Parquet file."""
    pa, pq = _pyarrow()
    table = pa.table(columns)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def read(*paths: Path | str, key_type: KeyType = "str", column: str | None = None,
         csv_column: str | None = None) -> list[Key]:
    spec = SourceSpec([str(p) for p in paths], key_type=key_type, parquet_column=column,
                      csv_column=csv_column)
    return list(iter_keys(spec))


def one_line_error(excinfo: pytest.ExceptionInfo[InputError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# -- values and types --------------------------------------------------------------------


def test_string_column_streams_in_bounded_batches_and_skips_nulls(tmp_path: Path) -> None:
    pa, _ = _pyarrow()
    values = [f"key-{i}" if i % 7 else None for i in range(150_000)]
    values[3] = ""  # empty values are not keys, as blank lines are not
    path = write_table(tmp_path / "k.parquet", {"id": pa.array(range(150_000)), "name": values},
                       row_group_size=40_000)
    expected = [v for v in values if v]
    spec = SourceSpec([str(path)], parquet_column="name")
    batches = list(iter_key_batches(spec))
    assert len(batches) >= 4 and all(len(b) <= source_parquet.BATCH_ROWS for b in batches)
    assert read(path, column="name") == expected
    assert read(path, column="name", key_type="bytes") == [v.encode() for v in expected]


def test_int_columns_give_int_keys_identical_to_text_ints(tmp_path: Path) -> None:
    pa, _ = _pyarrow()
    ints = [0, 1, -1, INT64_MIN, INT64_MAX, 42, 7]
    path = write_table(tmp_path / "ints.parquet", {
        "i64": pa.array(ints, pa.int64()),
        "i32": pa.array([5, -5, None, 0, 1, 2, 3], pa.int32()),
        "u64": pa.array([0, 1, 2**63 - 1, None, 3, 4, 5], pa.uint64()),
        "u8": pa.array([255, 0, 1, 2, 3, 4, 5], pa.uint8()),
    })
    assert read(path, column="i64", key_type="int") == ints
    assert read(path, column="i32", key_type="int") == [5, -5, 0, 1, 2, 3]
    assert read(path, column="u64", key_type="int") == [0, 1, 2**63 - 1, 3, 4, 5]
    assert read(path, column="u8", key_type="int") == [255, 0, 1, 2, 3, 4, 5]

    text = tmp_path / "ints.txt"
    text.write_text("".join(f"{v}\n" for v in ints))
    for layout in (Layout.BLOCKED, Layout.STANDARD):
        spec = BuildSpec(layout=layout, expected_keys=100, progress=False)
        from_parquet = build_filter(SourceSpec([str(path)], key_type="int", parquet_column="i64"), spec)
        from_text = build_filter(SourceSpec([str(text)], key_type="int"), spec)
        assert from_parquet.key_count == from_text.key_count == len(ints)
        assert bytes(from_parquet.body) == bytes(from_text.body)


def test_string_column_parsed_as_int_keys(tmp_path: Path) -> None:
    path = write_table(tmp_path / "s.parquet", {"n": ["12", "-3", None, "x9", "4"]})
    with pytest.raises(InputError) as excinfo:
        read(path, column="n", key_type="int")
    assert one_line_error(excinfo).startswith(f"{path}:4: not an integer")
    good = write_table(tmp_path / "g.parquet", {"n": ["12", "-3", None, "", "4"]})
    assert read(good, column="n", key_type="int") == [12, -3, 4]


def test_binary_and_dictionary_columns(tmp_path: Path) -> None:
    pa, _ = _pyarrow()
    path = write_table(tmp_path / "b.parquet", {
        "raw": pa.array([b"\x00\xff", b"ok", None], pa.binary()),
        "fixed": pa.array([b"abc", b"def", b"ghi"], pa.binary(3)),
        "dict": pa.array(["x", "y", "x"]).dictionary_encode(),
    })
    assert read(path, column="raw", key_type="bytes") == [b"\x00\xff", b"ok"]
    assert read(path, column="fixed") == ["abc", "def", "ghi"]
    assert read(path, column="dict") == ["x", "y", "x"]
    with pytest.raises(InputError) as excinfo:
        read(path, column="raw", key_type="str")
    assert "b.parquet:1: not valid UTF-8" in one_line_error(excinfo)


def test_row_numbers_in_errors_count_over_the_whole_file(tmp_path: Path) -> None:
    values = [str(i) for i in range(100)]
    values[77] = "seventy-seven"
    path = write_table(tmp_path / "r.parquet", {"n": values}, row_group_size=10)
    with pytest.raises(InputError) as excinfo:
        read(path, column="n", key_type="int")
    assert one_line_error(excinfo).startswith(f"{path}:78: not an integer")


# -- errors --------------------------------------------------------------------------------


def test_wrong_column_lists_the_columns(tmp_path: Path) -> None:
    path = write_table(tmp_path / "k.parquet", {"id": [1, 2], "name": ["a", "b"]})
    with pytest.raises(InputError) as excinfo:
        read(path, column="nope")
    assert one_line_error(excinfo) == f"{path}: no column 'nope'; columns are id, name"


def test_column_choice_default(tmp_path: Path) -> None:
    single = write_table(tmp_path / "one.parquet", {"only": ["a", "b"]})
    assert read(single) == ["a", "b"]
    several = write_table(tmp_path / "two.parquet", {"id": [1, 2], "name": ["a", "b"]})
    with pytest.raises(InputError) as excinfo:
        read(several)
    assert "--parquet-column" in one_line_error(excinfo) and "columns are id, name" in str(excinfo.value)


@pytest.mark.parametrize(("column", "key_type", "message"), [
    ("i", "str", "holds integers (int64); read it with --key-type int"),
    ("i", "bytes", "holds integers (int64); read it with --key-type int"),
    ("f", "int", "has type double; keys must be integers, strings or binary"),
    ("big", "int", "big.parquet:2: integer 9223372036854775808 outside the 64-bit signed range"),
])
def test_bad_types(tmp_path: Path, column: str, key_type: KeyType, message: str) -> None:
    pa, _ = _pyarrow()
    path = write_table(tmp_path / "big.parquet", {
        "i": pa.array([1, 2], pa.int64()),
        "f": pa.array([1.5, 2.5]),
        "big": pa.array([1, 2**63], pa.uint64()),
    })
    with pytest.raises(InputError) as excinfo:
        read(path, column=column, key_type=key_type)
    assert message in one_line_error(excinfo)


def test_format_is_detected_by_content_not_name(tmp_path: Path) -> None:
    disguised = write_table(tmp_path / "keys.txt", {"k": ["p", "q"]})
    assert read(disguised) == ["p", "q"]
    text = tmp_path / "keys.parquet"
    text.write_text("a\nb\n")
    assert read(text) == ["a", "b"]
    with pytest.raises(InputError) as excinfo:
        read(text, column="k")
    assert one_line_error(excinfo).startswith(f"{text} is not a Parquet file")
    # with a CSV column too, text inputs are CSV and Parquet inputs use the Parquet column
    csv_file = tmp_path / "c.csv"
    csv_file.write_text("k\nr\n")
    assert read(csv_file, disguised, column="k", csv_column="k") == ["r", "p", "q"]


def test_corrupt_parquet_is_one_line_input_error(tmp_path: Path) -> None:
    _pyarrow()
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1" + b"\x00" * 100)
    with pytest.raises(InputError) as excinfo:
        read(bad)
    assert one_line_error(excinfo).startswith(f"cannot read {bad} as Parquet")
    good = write_table(tmp_path / "good.parquet", {"k": [f"v{i}" for i in range(1000)]})
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[:-200])
    with pytest.raises(InputError) as excinfo:
        read(truncated)
    one_line_error(excinfo)


def test_missing_pyarrow_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 16 + b"PAR1")
    for name in ("pyarrow", "pyarrow.parquet", "pyarrow.compute"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import pyarrow` raise ImportError
    with pytest.raises(InputError) as excinfo:
        read(path)
    assert "install bloomswarm[parquet]" in one_line_error(excinfo)


# -- partitions by row group -----------------------------------------------------------------


def test_row_group_partitions_cover_every_row_once(tmp_path: Path) -> None:
    values = [f"r{i}" for i in range(1000)]
    path = write_table(tmp_path / "p.parquet", {"k": values}, row_group_size=90)
    spec = SourceSpec([str(path)], parquet_column="k")
    sizes = parquet_row_group_sizes(LocalInput(path), spec)
    assert len(sizes) == 12 and all(s > 0 for s in sizes)
    keys: list[Key] = []
    for groups in ((0, 1, 2), (3,), (4, 5, 6, 7, 8, 9, 10), (11,)):
        for batch in iter_partition_batches(Partition(LocalInput(path), row_groups=groups), spec):
            keys.extend(b.decode() for b in batch)
    assert keys == values


# -- command line --------------------------------------------------------------------------------


def test_cli_build_from_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    columns = {"id": list(range(500)), "name": [f"n{i}" for i in range(500)]}
    path = write_table(tmp_path / "k.parquet", columns)
    out = tmp_path / "f.bsf"
    assert main(["-q", "build", str(path), "--parquet-column", "id", "--key-type", "int",
                 "-o", str(out)]) == 0
    assert "500 keys" in capsys.readouterr().out
    assert main(["-q", "build", str(path), "--parquet-column", "nope", "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"bloomswarm build: error: {path}: no column 'nope'; columns are id, name"
