"""Bad key inputs the source readers must refuse in one line, or read right: a CSV quote
that never closes, corrupt gzip data (locally and on S3, for build and publish), S3
folder markers, lines too long to be keys, compressed files too short for their format,
and file names that hold glob characters."""

from __future__ import annotations

import csv
import gzip
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
import zstandard
from moto import mock_aws

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import Key
from bloomswarm.main import main
from bloomswarm.publisher import source_text
from bloomswarm.publisher.source_inputs import LocalInput, store_for
from bloomswarm.publisher.source_text import BLOCK_SIZE, MAX_KEY_BYTES, line_batches
from bloomswarm.publisher.sources import (
    KeyType,
    Partition,
    SourceSpec,
    iter_keys,
    iter_partition_batches,
)
from tests.unit import publishing_helpers

clean_env = publishing_helpers.clean_env  # a fixture

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def keys(*paths: str | Path, key_type: KeyType = "str", csv_column: str | None = None) -> list[Key]:
    return list(iter_keys(SourceSpec([str(p) for p in paths], key_type=key_type,
                                     csv_column=csv_column)))


def run(argv: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """``bloomswarm ARGV`` in this process: the exit code and the stderr lines."""
    monkeypatch.setattr(logging.root, "handlers", [])  # so main's basicConfig logs to capsys
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.splitlines()




@pytest.fixture
def s3(clean_env: None) -> Iterator[S3Client]:
    """moto's in-process S3 with a bucket "src"; yields a boto3 client."""
    store_for.cache_clear()
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="src")
        yield client
    store_for.cache_clear()


def _corrupt_gzip() -> bytes:
    """gzip whose header and CRC trailer are fine but whose deflate data is not (zlib.error)."""
    data = bytearray(gzip.compress("".join(f"{i}\n" for i in range(100_000)).encode(), 6))
    data[100] ^= 0xFF
    return bytes(data)


# -- 1. CSV is parsed strictly ---------------------------------------------------------------


def test_an_unterminated_csv_quote_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_bytes(b'id,name\n1,a\n2,"unterminated\n3,c\n4,d\n')
    with pytest.raises(InputError) as excinfo:
        keys(path, csv_column="name")
    message = str(excinfo.value)
    assert message == (f"cannot read {path}: the CSV row starting on line 3 has a quoted "
                       "field that never ends (a \" without its closing \")")


def test_an_unterminated_quote_fails_the_build_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "q.csv"
    path.write_bytes(b'id,name\n1,a\n2,"unterminated\n3,c\n4,d\n')
    out = tmp_path / "q.bsf"
    code, lines = run(["-q", "build", str(path), "--csv-column", "name", "-o", str(out)],
                      capsys, monkeypatch)
    assert code == 1
    assert len(lines) == 1 and "q.csv" in lines[0] and "line 3" in lines[0]
    assert not out.exists()


def test_text_after_a_closing_quote_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    # The bad row starts on line 4: the row before it spans lines 2 and 3.
    path.write_bytes(b'k,v\n"multi\nline",1\n"ab"c,2\nd,3\n')
    with pytest.raises(InputError, match=r"t\.csv: the CSV row starting on line 4 is malformed: "):
        keys(path, csv_column="k")


def test_a_bad_row_after_the_first_batch_names_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_text, "CSV_BATCH_ROWS", 3)
    path = tmp_path / "b.csv"
    path.write_bytes(b"k\n" + b"".join(b"r%d\n" % i for i in range(7)) + b'"open\nx\n')
    with pytest.raises(InputError, match="starting on line 9 has a quoted field that never ends"):
        keys(path, csv_column="k")


def test_an_unterminated_quote_in_the_header_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_bytes(b'"k\n1\n2\n')
    with pytest.raises(InputError, match="starting on line 1 has a quoted field that never ends"):
        keys(path, csv_column="k")


VALID_CSV = (
    '\ufeffid,key,note\r\n'
    '1,plain,x\r\n'
    '2,"with, comma","multi\r\nline\nnote"\r\n'
    '3,"doubled ""quotes"" inside",\r\n'
    '4,"",empty key skipped\r\n'
    '5\r\n'
    '6,"ends with newline\n",z\n'
    '7,\'single\' and x"y,"a""b"\n'
    '8,é ✓,last row without a line end'
)


def test_valid_csv_reads_as_the_csv_module_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_bytes(VALID_CSV.encode("utf-8"))
    rows = list(csv.reader(io.StringIO(VALID_CSV.removeprefix("\ufeff"), newline="")))
    expected = [row[1] for row in rows[1:] if len(row) > 1 and row[1]]
    assert expected[1:3] == ["with, comma", 'doubled "quotes" inside']
    assert keys(path, csv_column="key") == expected
    assert keys(path, csv_column="id", key_type="int") == [1, 2, 3, 4, 5, 6, 7, 8]
    gz = tmp_path / "ok.csv.gz"
    gz.write_bytes(gzip.compress(VALID_CSV.encode("utf-8")))
    assert keys(gz, csv_column="key") == expected


def test_a_csv_line_over_the_limit_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_text, "MAX_CSV_LINE_CHARS", 100)
    path = tmp_path / "wide.csv"
    path.write_bytes(b"k,v\n" + b"a," * 49 + b"\r\n" + b"x,y\n")  # 98 characters + "\r\n": fits
    assert keys(path, csv_column="k") == ["a", "x"]
    path.write_bytes(b"k,v\n1,2\n" + b"a," * 10_000 + b"\n")
    with pytest.raises(InputError, match=r"wide\.csv: line 3 is longer than 100 characters"):
        keys(path, csv_column="k")


# -- 2. corrupt compressed data is bad input, not a bug ---------------------------------------


def test_corrupt_deflate_data_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "z.gz"
    path.write_bytes(_corrupt_gzip())
    with pytest.raises(InputError, match=r"cannot read .*z\.gz: .*while decompressing data"):
        keys(path)
    with pytest.raises(InputError, match=r"cannot read .*z\.gz"):
        keys(path, csv_column="1")


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_corrupt_gzip_fails_the_build_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    engine: str,
) -> None:
    if engine == "dask":
        pytest.importorskip("dask.distributed")
    path = tmp_path / "z.gz"
    path.write_bytes(_corrupt_gzip())
    argv = ["-q", "build", str(path), "-o", str(tmp_path / "z.bsf"), "--engine", engine]
    if engine == "dask":
        argv += ["--workers", "1"]
    code, lines = run(argv, capsys, monkeypatch)
    assert code == 1
    if engine == "dask":  # the cluster logs its start and stop; the error is one line
        lines = [line for line in lines if line.startswith("bloomswarm build:")]
    assert len(lines) == 1 and f"bloomswarm build: error: cannot read {path}: " in lines[0]


def test_corrupt_gzip_on_s3_is_an_input_error(s3: S3Client) -> None:
    client = s3
    client.put_object(Bucket="src", Key="in/z.gz", Body=_corrupt_gzip())
    with pytest.raises(InputError, match=r"cannot read s3://src/in/z\.gz: "):
        keys("s3://src/in")


def test_corrupt_gzip_fails_publish_in_one_line(
    s3: S3Client, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = s3
    client.create_bucket(Bucket="filters")
    client.put_object(Bucket="src", Key="in/z.gz", Body=_corrupt_gzip())
    local = tmp_path / "z.gz"
    local.write_bytes(_corrupt_gzip())
    key = tmp_path / "publisher.key"
    assert main(["keygen", str(key)]) == 0
    for source in (str(local), "s3://src/in"):
        code, lines = run(["-q", "publish", "--bucket", "filters", "--key", str(key), source],
                          capsys, monkeypatch)
        assert code == 1, lines
        assert len(lines) == 1 and "cannot read " in lines[0] and "z.gz: " in lines[0]


# -- 3. S3 folder markers ------------------------------------------------------------------


def test_s3_folder_markers_are_skipped(s3: S3Client) -> None:
    client = s3
    client.put_object(Bucket="src", Key="dir/", Body=b"")
    client.put_object(Bucket="src", Key="dir/k.txt", Body=b"a\nb\n")
    client.put_object(Bucket="src", Key="dir/sub/", Body=b"")
    client.put_object(Bucket="src", Key="dir/sub/m.txt", Body=b"c\n")
    assert keys("s3://src/dir") == ["a", "b", "c"]
    assert keys("s3://src/dir/") == ["a", "b", "c"]
    assert keys("s3://src") == ["a", "b", "c"]


def test_an_s3_folder_with_only_its_marker_has_no_objects(s3: S3Client) -> None:
    client = s3
    client.put_object(Bucket="src", Key="empty/", Body=b"")
    with pytest.raises(InputError, match=r"^no objects under s3://src/empty$"):
        keys("s3://src/empty")


def test_an_s3_folder_marker_does_not_fail_the_build(
    s3: S3Client, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = s3
    client.put_object(Bucket="src", Key="dir/", Body=b"")
    client.put_object(Bucket="src", Key="dir/k.txt", Body=b"a\n")
    code, lines = run(["-q", "build", "s3://src/dir", "-o", str(tmp_path / "m.bsf")],
                      capsys, monkeypatch)
    assert (code, lines) == (0, [])


def test_an_s3_key_with_an_empty_folder_name_is_an_input_error(s3: S3Client) -> None:
    client = s3
    client.put_object(Bucket="src", Key="dir//k.txt", Body=b"a\n")
    with pytest.raises(InputError, match=r"cannot read s3://src/dir//k\.txt: .*empty folder name"):
        keys("s3://src/dir")


# -- 4. a line too long to be a key ---------------------------------------------------------


def _lines_file(path: Path, long_at: int, length: int, total: int = 5) -> None:
    lines = [b"k%d" % i for i in range(total)]
    lines[long_at - 1] = b"x" * length
    path.write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("long_at", [1, 3, 5])
def test_a_line_of_the_limit_is_a_key_and_one_byte_more_is_refused(
    tmp_path: Path, long_at: int
) -> None:
    path = tmp_path / "k.txt"
    _lines_file(path, long_at, MAX_KEY_BYTES)
    got = keys(path, key_type="bytes")
    assert len(got) == 5 and got[long_at - 1] == b"x" * MAX_KEY_BYTES
    _lines_file(path, long_at, MAX_KEY_BYTES + 1)
    with pytest.raises(InputError) as excinfo:
        keys(path, key_type="bytes")
    assert str(excinfo.value) == (
        f"{path}:{long_at}: line longer than 1,048,576 bytes (1 MiB), the longest key "
        "allowed; is this a key file with one key per line?")


def test_a_long_line_inside_one_block_is_found(tmp_path: Path) -> None:
    # Short lines, then a 2 MiB line, all inside the first 4 MiB block.
    path = tmp_path / "k.txt"
    short = b"".join(b"key-%d\n" % i for i in range(1000))
    path.write_bytes(short + b"y" * (2 * MAX_KEY_BYTES) + b"\nlast\n")
    assert len(path.read_bytes()) < BLOCK_SIZE
    with pytest.raises(InputError, match=r"k\.txt:1001: line longer than"):
        keys(path)


def test_a_long_line_across_blocks_is_found(tmp_path: Path) -> None:
    path = tmp_path / "k.txt"
    filler = b"f" * 99 + b"\n"
    head = filler * (BLOCK_SIZE // len(filler))  # ends just before the first block's end
    path.write_bytes(head + b"z" * (MAX_KEY_BYTES + 10) + b"\nend\n")
    with pytest.raises(InputError, match=rf"k\.txt:{len(head) // 100 + 1}: line longer than"):
        keys(path)


def test_a_long_last_line_without_a_line_end_is_found(tmp_path: Path) -> None:
    path = tmp_path / "k.txt.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b"a\nb\n" + b"q" * (MAX_KEY_BYTES + 1)))
    with pytest.raises(InputError, match=r"k\.txt\.zst:3: line longer than"):
        keys(path)


def test_a_long_line_in_a_byte_range_is_found(tmp_path: Path) -> None:
    path = tmp_path / "k.txt"
    data = b"a\nb\n" + b"w" * (MAX_KEY_BYTES + 1) + b"\nc\n"
    path.write_bytes(data)
    part = Partition(LocalInput(path), byte_range=(2, len(data)))
    with pytest.raises(InputError, match=r"k\.txt\[bytes 2-\d+\]:2: line longer than"):
        list(iter_partition_batches(part, SourceSpec([str(path)])))


def test_a_line_without_end_is_refused_after_reading_about_the_limit() -> None:
    """A 200 MB line must not be held whole: reading stops soon after the limit."""
    read = 0

    def endless() -> Iterator[bytes]:
        nonlocal read
        for _ in range(200):  # 200 MiB, if it were all read
            read += 1 << 20
            yield b"a" * (1 << 20)

    with pytest.raises(InputError, match=r"^stream:1: line longer than"):
        list(line_batches(endless(), "bytes", "stream"))
    assert read <= MAX_KEY_BYTES + BLOCK_SIZE


def test_a_gzip_of_one_huge_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for _ in range(40):
            fh.write(b"a" * (1 << 20))
    with pytest.raises(InputError, match=r"l\.gz:1: line longer than"):
        keys(path)


# -- 5. short compressed files and glob characters in real names ----------------------------


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("k.gz", b"\x1f", "1 byte long, too short for a gzip file"),
        ("k.txt.GZ", b"a", "1 byte long, too short for a gzip file"),
        ("k.zst", b"\x28\xb5\x2f", "3 bytes long, too short for a zstd file"),
        ("k.zstd", b"ab", "2 bytes long, too short for a zstd file"),
    ],
    ids=["gz-1-byte", "GZ-1-byte", "zst-3-bytes", "zstd-2-bytes"],
)
def test_a_compressed_name_on_a_file_too_short_for_it_is_an_error(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError, match=rf"^{path}: {message} "):
        keys(path, key_type="bytes")
    with pytest.raises(InputError, match=message):
        keys(path, key_type="bytes", csv_column="k")


def test_short_files_with_other_names_and_empty_compressed_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"\x1f")
    (tmp_path / "b").write_bytes(b"xyz")
    (tmp_path / "c.gz").write_bytes(b"")  # empty: no keys, like any empty input
    (tmp_path / "d.gz").write_bytes(b"ab\n")  # not gzip at all: plain text, by its bytes
    assert keys(tmp_path, key_type="bytes") == [b"\x1f", b"xyz", b"ab"]


def test_a_short_gzip_on_s3_is_an_error(s3: S3Client) -> None:
    client = s3
    client.put_object(Bucket="src", Key="in/k.gz", Body=b"\x1f")
    with pytest.raises(InputError, match=r"^s3://src/in/k\.gz: 1 byte long, too short"):
        keys("s3://src/in")


def test_an_existing_path_with_glob_characters_is_taken_literally(tmp_path: Path) -> None:
    (tmp_path / "keys[1].txt").write_bytes(b"literal\n")
    (tmp_path / "keys1.txt").write_bytes(b"globbed\n")
    (tmp_path / "dir[x]").mkdir()
    (tmp_path / "dir[x]" / "k").write_bytes(b"in-dir\n")
    assert keys(tmp_path / "keys[1].txt") == ["literal"]
    assert keys(tmp_path / "dir[x]") == ["in-dir"]
    assert keys(tmp_path / "keys[12].txt") == ["globbed"]  # no such file: still a glob
    with pytest.raises(InputError, match=r"no files match .*keys\[9\]\.txt"):
        keys(tmp_path / "keys[9].txt")
