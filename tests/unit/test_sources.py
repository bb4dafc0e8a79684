"""Reading keys (publisher/sources.py) and the local build (publisher/build.py)."""

from __future__ import annotations

import csv
import gzip
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
import zstandard

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import INT64_MAX, INT64_MIN, Key
from bloomswarm.common.params import Layout
from bloomswarm.common.reader import Filter
from bloomswarm.publisher.build import BuildSpec, build_filter, count_keys
from bloomswarm.publisher.sources import (
    KeyType,
    SourceSpec,
    convert_key,
    expand_paths,
    iter_keys,
)

WORDS = ["alpha", "beta", "gamma", "δέλτα", "key with spaces", "tab\tinside", "ünïcødé ✓"]


def text(lines: Sequence[str], ending: str = "\n") -> bytes:
    return "".join(line + ending for line in lines).encode("utf-8")


def keys(*paths: str | Path, key_type: KeyType = "str", csv_column: str | None = None) -> list[Key]:
    return list(iter_keys(SourceSpec([str(p) for p in paths], key_type=key_type,
                                     csv_column=csv_column)))


# -- formats -----------------------------------------------------------------------------


def _write_plain(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _write_gzip(path: Path, data: bytes) -> None:
    path.write_bytes(gzip.compress(data))


def _write_zstd(path: Path, data: bytes) -> None:
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(data))


def _write_zstd_stream(path: Path, data: bytes) -> None:
    # A streamed frame has no content size in its header, like `zstd` on a pipe.
    with open(path, "wb") as fh, zstandard.ZstdCompressor().stream_writer(fh) as writer:
        writer.write(data)


def _write_zstd_two_frames(path: Path, data: bytes) -> None:
    half = data.index(b"\n", len(data) // 2) + 1
    compressor = zstandard.ZstdCompressor()
    path.write_bytes(compressor.compress(data[:half]) + compressor.compress(data[half:]))


def _write_gzip_two_members(path: Path, data: bytes) -> None:
    half = data.index(b"\n", len(data) // 2) + 1
    path.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))


FORMATS = [
    pytest.param(_write_plain, id="plain"),
    pytest.param(_write_gzip, id="gzip"),
    pytest.param(_write_gzip_two_members, id="gzip-two-members"),
    pytest.param(_write_zstd, id="zstd"),
    pytest.param(_write_zstd_stream, id="zstd-streamed"),
    pytest.param(_write_zstd_two_frames, id="zstd-two-frames"),
]


@pytest.mark.parametrize("write", FORMATS)
@pytest.mark.parametrize("ending", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_formats_and_line_endings(tmp_path: Path, write: object, ending: str) -> None:
    assert callable(write)
    many = [f"k{i}" for i in range(5000)]
    # The name says nothing: the compression is detected from the first bytes.
    path = tmp_path / "input.dat"
    write(path, text(WORDS + many, ending))
    assert keys(path) == WORDS + many


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "k.txt"
    path.write_bytes(b"\n\na\r\n\r\n\nb\n   \n\nc")
    # Only empty lines are skipped; whitespace is part of a key; the last line needs no newline.
    assert keys(path) == ["a", "b", "   ", "c"]


def test_empty_file_has_no_keys(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "empty.gz").write_bytes(gzip.compress(b""))
    (tmp_path / "empty.zst").write_bytes(zstandard.ZstdCompressor().compress(b""))
    assert keys(tmp_path / "empty.txt", tmp_path / "empty.gz", tmp_path / "empty.zst") == []


# -- directories and globs ------------------------------------------------------------------


def test_directory_is_read_in_sorted_order_without_subdirectories(tmp_path: Path) -> None:
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / "b.txt").write_bytes(b"b1\nb2\n")
    _write_gzip(d / "a.gz", b"a1\na2\n")
    _write_zstd(d / "c.zst", b"c1\n")
    (d / "sub" / "0.txt").write_bytes(b"nested\n")
    assert expand_paths([str(d)]) == [d / "a.gz", d / "b.txt", d / "c.zst"]
    assert keys(d) == ["a1", "a2", "b1", "b2", "c1"]


def test_globs_are_sorted_and_patterns_keep_their_order(tmp_path: Path) -> None:
    for name in ["part-10", "part-02", "part-1", "other"]:
        (tmp_path / f"{name}.txt").write_bytes(f"{name}\n".encode())
    (tmp_path / "part-dir.txt").mkdir()  # a directory matching the glob is not an input
    got = keys(tmp_path / "part-*.txt", tmp_path / "other.txt")
    assert got == ["part-02", "part-1", "part-10", "other"]


def test_recursive_glob(tmp_path: Path) -> None:
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "1.keys").write_bytes(b"one\n")
    (tmp_path / "x" / "y" / "2.keys").write_bytes(b"two\n")
    (tmp_path / "x" / "y" / "ignored.txt").write_bytes(b"no\n")
    assert keys(f"{tmp_path}/**/*.keys") == ["one", "two"]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("missing.txt", "input not found"),
        ("*.nothing", "no files match"),
        ("emptydir", "no input files"),
    ],
    ids=["missing-file", "glob-without-match", "empty-directory"],
)
def test_inputs_that_name_no_file(tmp_path: Path, pattern: str, message: str) -> None:
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(InputError, match=message):
        expand_paths([str(tmp_path / pattern)])
    with pytest.raises(InputError, match=message):
        keys(tmp_path / pattern)


# -- CSV --------------------------------------------------------------------------------------


def test_csv_column_by_name(tmp_path: Path) -> None:
    path = tmp_path / "users.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\r\n")
        writer.writerow(["id", "email", "note"])
        writer.writerow(["1", "a@example.com", "plain"])
        writer.writerow(["2", "", "empty cell is skipped"])
        writer.writerow(["3"])  # short row: skipped
        writer.writerow(["4", "d,quoted@example.com", "comma, inside"])
        writer.writerow(["5", "é@example.com", "multi\nline"])
    emails = ["a@example.com", "d,quoted@example.com", "é@example.com"]
    assert keys(path, csv_column="email") == emails
    assert keys(path, csv_column="id", key_type="int") == [1, 2, 3, 4, 5]
    assert keys(path, csv_column="email", key_type="bytes")[2] == "é@example.com".encode()


def test_csv_compressed(tmp_path: Path) -> None:
    _write_gzip(tmp_path / "a.csv.gz", b"key,x\nk1,1\nk2,2\n")
    _write_zstd(tmp_path / "b.csv.zst", b"x,key\n1,k3\n")
    assert keys(tmp_path, csv_column="key") == ["k1", "k2", "k3"]


def test_csv_empty_file_has_no_keys(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_bytes(b"")
    assert keys(tmp_path / "e.csv", csv_column="key") == []


def test_csv_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_bytes(b"id,name\n1,x\n")
    with pytest.raises(InputError, match=r"w\.csv: no column 'email'; columns are id, name"):
        keys(path, csv_column="email")


def test_csv_int_error_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "n.csv"
    path.write_bytes(b"n\n1\n2\nthree\n")
    with pytest.raises(InputError, match=r"n\.csv:4: not an integer"):
        keys(path, csv_column="n", key_type="int")


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"key\n" + b"x" * (2 << 20) + b"\n", r"cannot read .*bad\.csv.*field limit"),
     (b"key\ncaf\xe9\n", r"bad\.csv:2: not valid UTF-8")],
    ids=["field-over-csv-limit", "invalid-utf8"],
)
def test_unreadable_csv_is_an_input_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        keys(path, csv_column="key")


# -- key types --------------------------------------------------------------------------------


def test_bytes_keys_are_raw(tmp_path: Path) -> None:
    path = tmp_path / "raw"
    path.write_bytes(b"\xff\xfe\r\ncaf\xc3\xa9\n\x00nul\n")
    assert keys(path, key_type="bytes") == [b"\xff\xfe", "café".encode(), b"\x00nul"]


def test_int_keys_including_the_bounds(tmp_path: Path) -> None:
    path = tmp_path / "ints"
    values = [0, -1, 1, 42, INT64_MIN, INT64_MAX, -(2**31), 2**32]
    path.write_bytes(text([str(v) for v in values], "\r\n"))
    got = keys(path, key_type="int")
    assert got == values
    assert all(type(v) is int for v in got)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (str(INT64_MAX + 1), f"integer {INT64_MAX + 1} outside the 64-bit signed range"),
        (str(INT64_MIN - 1), f"integer {INT64_MIN - 1} outside the 64-bit signed range"),
        (str(2**64), "outside the 64-bit signed range"),
        ("12abc", "not an integer"),
        ("1.5", "not an integer"),
        ("0x10", "not an integer"),
    ],
    ids=["max+1", "min-1", "2**64", "trailing-garbage", "float", "hex"],
)
def test_bad_int_key_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "ints.gz"
    _write_gzip(path, text(["1", "", "2", line, "3"]))
    with pytest.raises(InputError) as excinfo:
        keys(path, key_type="int")
    assert f"{path}:4: " in str(excinfo.value)  # the blank line still counts as a line
    assert message in str(excinfo.value)


def test_invalid_utf8_in_str_mode(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"fine\ncaf\xe9\n")
    with pytest.raises(InputError, match=r"latin1\.txt:2: not valid UTF-8"):
        keys(path)
    assert keys(path, key_type="bytes") == [b"fine", b"caf\xe9"]


def test_convert_key_directly() -> None:
    assert convert_key(b"-9223372036854775808", "int", "f", 1) == INT64_MIN
    assert convert_key(b"\xc3\xa9", "str", "f", 1) == "é"
    assert convert_key(b"\xc3\xa9", "bytes", "f", 1) == b"\xc3\xa9"
    with pytest.raises(InputError, match="stdin:7: not valid UTF-8"):
        convert_key(b"\xc3", "str", "stdin", 7)


# -- damaged compressed input ------------------------------------------------------------


def _truncated_gzip(path: Path) -> None:
    data = gzip.compress(text([f"k{i}" for i in range(20000)]))
    path.write_bytes(data[: len(data) // 2])


def _gzip_bad_crc(path: Path) -> None:
    data = bytearray(gzip.compress(b"a\nb\n"))
    data[-8] ^= 0xFF  # the CRC-32 trailer
    path.write_bytes(bytes(data))


def _corrupt_zstd(path: Path) -> None:
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"this is not a zstd frame" * 10)


@pytest.mark.parametrize(
    "damage",
    [_truncated_gzip, _gzip_bad_crc, _corrupt_zstd],
    ids=["truncated-gzip", "gzip-bad-crc", "corrupt-zstd"],
)
def test_damaged_compressed_input_is_an_input_error(tmp_path: Path, damage: object) -> None:
    assert callable(damage)
    path = tmp_path / "damaged"
    damage(path)
    with pytest.raises(InputError, match=r"cannot read .*damaged"):
        keys(path)


def test_truncated_zstd_is_an_input_error(tmp_path: Path) -> None:
    data = zstandard.ZstdCompressor().compress(text([f"key-{i}" for i in range(100_000)]))
    path = tmp_path / "truncated.zst"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError):
        keys(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.txt"
    path.write_bytes(b"a\n")
    path.chmod(0)
    try:
        with pytest.raises(InputError, match="cannot open"):
            keys(path)
    finally:
        path.chmod(0o644)


# -- the local build ------------------------------------------------------------------------


def test_build_with_too_small_expected_keys_warns_and_keeps_every_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    all_keys = [f"user-{i}" for i in range(3000)]
    _write_zstd(tmp_path / "keys.zst", text(all_keys))
    source = SourceSpec([str(tmp_path / "keys.zst")])
    with caplog.at_level(logging.WARNING, logger="bloomswarm.build"):
        builder = build_filter(source, BuildSpec(expected_keys=100, progress=False))
    warnings = [r for r in caplog.records
                if r.levelno == logging.WARNING and r.name == "bloomswarm.build"]
    assert len(warnings) == 1
    assert "3000 keys" in warnings[0].getMessage()
    assert "sized for 100" in warnings[0].getMessage()
    assert builder.key_count == 3000
    assert builder.capacity == 100
    out = tmp_path / "f.bsf"
    builder.write(out)
    with Filter.open(out) as f:
        assert f.contains_many(all_keys).all()


@pytest.mark.parametrize("expected", [None, 3000, 10_000], ids=["counted", "exact", "larger"])
def test_build_without_overflow_does_not_warn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, expected: int | None
) -> None:
    all_keys = list(range(-1500, 1500))
    (tmp_path / "ints.txt").write_bytes(text([str(k) for k in all_keys]))
    source = SourceSpec([str(tmp_path / "ints.txt")], key_type="int")
    assert count_keys(source, progress=False) == 3000
    spec = BuildSpec(target_fpp=0.001, layout=Layout.STANDARD, hash_seed=99,
                     expected_keys=expected, progress=False)
    with caplog.at_level(logging.WARNING, logger="bloomswarm.build"):
        builder = build_filter(source, spec)
    assert not [r for r in caplog.records if r.name == "bloomswarm.build"]
    assert builder.capacity == (expected or 3000)
    assert builder.params.layout == Layout.STANDARD
    assert builder.params.hash_seed == 99
    assert builder.key_count == 3000
    out = tmp_path / "f.bsf"
    builder.write(out)
    with Filter.open(out) as f:
        assert f.contains_many(all_keys).all()


def test_build_from_empty_input(tmp_path: Path) -> None:
    (tmp_path / "none.txt").write_bytes(b"\n\n")
    builder = build_filter(SourceSpec([str(tmp_path / "none.txt")]), BuildSpec(progress=False))
    assert builder.key_count == 0
    assert not any(builder.body)


def test_build_propagates_input_errors(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_bytes(b"1\nx\n")
    with pytest.raises(InputError, match=r"k\.txt:2"):
        build_filter(SourceSpec([str(tmp_path / "k.txt")], key_type="int"),
                     BuildSpec(expected_keys=10, progress=False))
