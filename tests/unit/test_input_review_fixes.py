"""Fixes of reviewed input bugs: Dask logging, the Dask build's checks (count, Parquet
only), outputs matched by a glob input, byte order marks, CSV encoding and field size,
globs matching directories only, and the source fingerprint's use of ``is_s3_url``."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common.errors import ConfigError, InputError
from bloomswarm.common.keys import Key
from bloomswarm.main import library_warnings_only, main
from bloomswarm.output_files import check_output, glob_matches
from bloomswarm.publisher import distributed, fingerprint
from bloomswarm.publisher.build import BuildSpec, build_filter
from bloomswarm.publisher.source_keys import KeyType
from bloomswarm.publisher.source_text import MAX_KEY_BYTES, UTF8_BOM, skip_bom
from bloomswarm.publisher.sources import SourceSpec, iter_keys, iter_partition_batches

HAS_DASK = importlib.util.find_spec("distributed") is not None


def _keys(*paths: Path, key_type: KeyType = "str", csv_column: str | None = None) -> list[Key]:
    return list(iter_keys(SourceSpec([str(p) for p in paths], key_type=key_type, csv_column=csv_column)))


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# -- 1. Dask logging: one line on failure, nothing with -q on success ---------------------


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bloomswarm", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not HAS_DASK, reason="needs distributed")
def test_a_failed_dask_build_prints_one_line_and_a_quiet_one_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"1\n 2\n")
    (tmp_path / "ok.txt").write_bytes(b"1\n2\n3\n")
    dask = ["--engine", "dask", "--workers", "1"]
    failed = _cli(["-q", "build", "bad.txt", "--key-type", "int", "-o", "f.bsf", *dask], tmp_path)
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == ["bloomswarm build: error: bad.txt:2: not an integer: b' 2'"]
    assert not (tmp_path / "f.bsf").exists()
    quiet = _cli(["-q", "build", "ok.txt", "-o", "ok.bsf", *dask], tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_the_cli_handler_passes_library_records_at_warning_and_above_only() -> None:
    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "m", None, None)

    assert not library_warnings_only(record("distributed.scheduler", logging.INFO))
    assert library_warnings_only(record("distributed.scheduler", logging.WARNING))
    assert library_warnings_only(record("bloomswarm.build", logging.INFO))
    assert not library_warnings_only(record("bloomswarmish", logging.INFO))


def test_local_cluster_workers_log_nothing_below_critical_unless_verbose() -> None:
    logger = logging.getLogger("bloomswarm.distributed")
    old = logger.level
    try:
        logger.setLevel(logging.INFO)
        assert distributed._worker_log_level() == logging.CRITICAL
        logger.setLevel(logging.DEBUG)
        assert distributed._worker_log_level() == logging.ERROR
    finally:
        logger.setLevel(old)


# -- 2. the Dask build compares its two passes -----------------------------------------------


class _Done:
    """A finished future of the in-process fake client."""

    status = "finished"

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class _FakeClient:
    """Runs every submitted task at once, in this process (futures as arguments resolved)."""

    def nthreads(self) -> dict[str, int]:
        return {"tcp://w1": 1, "tcp://w2": 1}

    def submit(self, fn: Callable[..., Any], *args: Any, **_options: Any) -> _Done:
        return _Done(fn(*(a.value if isinstance(a, _Done) else a for a in args)))


@pytest.fixture
def fake_dask(monkeypatch: pytest.MonkeyPatch) -> _FakeClient:
    monkeypatch.setattr(distributed, "_distributed", lambda: SimpleNamespace(as_completed=iter))
    return _FakeClient()


@given(counted_off_by=st.integers(-3, 50).filter(bool))
@settings(max_examples=10, deadline=None)
def test_the_dask_build_fails_when_the_count_differs_from_the_keys_inserted(
    tmp_path_factory: pytest.TempPathFactory, counted_off_by: int
) -> None:
    path = tmp_path_factory.mktemp("count") / "k.txt"
    path.write_text("".join(f"k{i}\n" for i in range(5)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distributed, "_distributed", lambda: SimpleNamespace(as_completed=iter))
        real_count = distributed._count
        patch.setattr(distributed, "_count", lambda *a: real_count(*a) + counted_off_by)
        with pytest.raises(InputError, match="changed between the two passes"):
            distributed._build(_FakeClient(), SourceSpec([str(path)]), BuildSpec(progress=False))


def test_the_dask_build_with_a_stable_input_equals_the_local_build(
    tmp_path: Path, fake_dask: _FakeClient
) -> None:
    path = tmp_path / "k.txt"
    path.write_text("".join(f"k{i}\n" for i in range(300)))
    source = SourceSpec([str(path)])
    built = distributed._build(fake_dask, source, BuildSpec(progress=False))
    local = build_filter(source, BuildSpec(progress=False))
    assert (bytes(built.body), built.key_count) == (bytes(local.body), local.key_count)


# -- 3. --parquet-column reads Parquet only, in the Dask plan too ----------------------------


@pytest.mark.parametrize("data", [b"", b"a\nb\nc\n" * 4])
def test_the_dask_plan_refuses_a_text_input_with_parquet_column(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "keys.txt"
    path.write_bytes(data)
    spec = SourceSpec([str(path)], parquet_column="k")
    with pytest.raises(InputError, match="--parquet-column reads Parquet inputs only"):
        list(iter_keys(spec))  # the local build
    with pytest.raises(InputError, match="--parquet-column reads Parquet inputs only"):
        distributed.plan_partitions(spec, split_bytes=3)


# -- 4. an output a glob input matches is refused ---------------------------------------------


def test_an_output_matched_by_a_glob_input_is_refused_even_before_it_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "a.txt").write_text("k1\nk2\n")
    assert main(["-q", "build", "g/*", "-o", "g/out.bsf"]) == 1
    assert "is among the inputs (g/*)" in _one_error(capsys)
    assert sorted(os.listdir("g")) == ["a.txt"]
    (tmp_path / "g" / "out.bsf").write_bytes(b"an earlier filter")
    assert main(["-q", "build", "g/*", "-o", "g/out.bsf"]) == 1
    assert "is among the inputs" in _one_error(capsys)
    assert (tmp_path / "g" / "out.bsf").read_bytes() == b"an earlier filter"
    assert main(["-q", "build", "g/*.txt", "-o", "g/out.bsf"]) == 0


@pytest.mark.parametrize(("pattern", "path", "matched"), [
    ("g/*", "g/out.bsf", True),
    ("g/*.txt", "g/out.bsf", False),
    ("g/*", "g/.hidden", False),
    ("g/.*", "g/.hidden", True),
    ("g/**", "g/a/b/out.bsf", True),
    ("g/**/*.bsf", "g/out.bsf", True),
    ("g/**/*.bsf", "g/.h/out.bsf", False),
    ("g/*/", "g/out.bsf", False),
    ("g/[ab]*", "g/b.bsf", True),
    ("other/*", "g/out.bsf", False),
])
def test_glob_matches_like_the_input_glob(pattern: str, path: str, matched: bool) -> None:
    assert glob_matches(pattern, path) is matched


@given(name=st.text(st.characters(codec="ascii", exclude_characters="/\0*?[]"), min_size=1)
       .filter(lambda n: n not in (".", "..") and not n.startswith(".")))
@settings(max_examples=50, deadline=None)
def test_a_star_glob_matches_every_visible_name_in_its_folder(name: str) -> None:
    assert glob_matches("d/*", f"d/{name}")
    assert glob_matches("d/**", f"d/x/{name}")
    assert not glob_matches("e/*", f"d/{name}")


def test_check_output_refuses_a_glob_input_match(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(ConfigError, match="among the inputs"):
        check_output(tmp_path / "in" / "f.bsf", [str(tmp_path / "in" / "*.bsf")])
    check_output(tmp_path / "in" / "f.bsf", [str(tmp_path / "in" / "*.txt")])


# -- 5. a leading byte order mark is no part of the first key --------------------------------


@pytest.mark.parametrize("key_type", ["str", "bytes", "int"])
def test_a_leading_bom_is_skipped_for_every_key_type(tmp_path: Path, key_type: KeyType) -> None:
    (tmp_path / "bom.txt").write_bytes(UTF8_BOM + b"1\n2\n")
    (tmp_path / "bom.csv").write_bytes(UTF8_BOM + b"id\n1\n2\n")
    text = _keys(tmp_path / "bom.txt", key_type=key_type)
    assert text == _keys(tmp_path / "bom.csv", key_type=key_type, csv_column="id")
    assert text == {"str": ["1", "2"], "bytes": [b"1", b"2"], "int": [1, 2]}[key_type]


def test_a_bom_inside_an_input_stays_part_of_its_key(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_bytes(b"a\n" + UTF8_BOM + b"b\n")
    assert _keys(tmp_path / "k.txt", key_type="bytes") == [b"a", UTF8_BOM + b"b"]


def test_a_bom_is_skipped_at_the_start_of_the_first_byte_range_only(tmp_path: Path) -> None:
    path = tmp_path / "k.txt"
    path.write_bytes(UTF8_BOM + b"key1\nkey2\nkey3\n")
    spec = SourceSpec([str(path)], key_type="bytes")
    plan = distributed.plan_partitions(spec, split_bytes=4)
    assert len(plan) > 1
    read = [k for part, _ in plan for batch in iter_partition_batches(part, spec) for k in batch]
    assert read == [b"key1", b"key2", b"key3"]


@given(data=st.binary(max_size=40), cuts=st.lists(st.integers(0, 40), max_size=5))
@settings(max_examples=200, deadline=None)
def test_skip_bom_removes_exactly_one_leading_bom_however_the_chunks_are_cut(
    data: bytes, cuts: list[int]
) -> None:
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    expected = data[len(UTF8_BOM):] if data.startswith(UTF8_BOM) else data
    assert b"".join(skip_bom(iter(chunks))) == expected


# -- 6. CSV: only the key column must be UTF-8; fields as long as a text key -----------------


def test_a_csv_with_bad_bytes_outside_the_key_column_is_read(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"id,name\n1,Jos\xe9\n2,ok\n")
    assert _keys(path, csv_column="id") == ["1", "2"]
    assert _keys(path, csv_column="id", key_type="int") == [1, 2]
    assert _keys(path, csv_column="name", key_type="bytes") == [b"Jos\xe9", b"ok"]


def test_a_key_that_is_not_utf8_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"id,name\n1,a\n2,Jos\xe9\n")
    with pytest.raises(InputError, match=r"latin\.csv:3: not valid UTF-8 \(use --key-type bytes\)"):
        _keys(path, csv_column="name")


@given(field=st.binary(min_size=1, max_size=30).filter(lambda b: not set(b) & set(b',"\r\n')))
@settings(max_examples=100, deadline=None)
def test_a_bytes_key_from_csv_is_its_fields_exact_bytes(
    tmp_path_factory: pytest.TempPathFactory, field: bytes
) -> None:
    path = tmp_path_factory.mktemp("csv") / "k.csv"
    path.write_bytes(b"x,id\n\xff," + field + b"\n")  # not at the start: a BOM is data here
    assert _keys(path, csv_column="id", key_type="bytes") == [field]


def test_a_csv_field_may_be_as_long_as_a_text_key(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    long_key = "x" * MAX_KEY_BYTES
    path.write_text(f"id\n{long_key}\n")
    assert _keys(path, csv_column="id") == [long_key]
    path.write_text(f"id\n{long_key}y\n")
    with pytest.raises(InputError, match="field larger than field limit"):
        _keys(path, csv_column="id")


# -- 7. a glob matching directories only is an error, alone or not ---------------------------


def test_a_glob_matching_directories_only_is_an_error_among_other_inputs(tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    (tmp_path / "k.txt").write_text("a\n")
    pattern = str(tmp_path / "d*")
    for paths in ([pattern], [str(tmp_path / "k.txt"), pattern]):
        with pytest.raises(InputError, match="matches directories only"):
            list(iter_keys(SourceSpec(paths)))


# -- 11. the fingerprint tells S3 URLs apart with is_s3_url ----------------------------------


def test_the_fingerprint_hashes_s3_urls_first_through_is_s3_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.txt"
    path.write_text("a\n")
    source = SourceSpec([str(path), "s3://b/p"])
    stat = path.stat()
    digest = hashlib.sha256(b"s3://b/p\n")
    digest.update(f"{path.resolve()}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    digest.update(b"key_type=str\tcsv_column=\tparquet_column=\n")
    assert fingerprint.source_fingerprint(source) == fingerprint.PREFIX + digest.hexdigest()
    monkeypatch.setattr(fingerprint, "is_s3_url", lambda pattern: True)
    assert fingerprint.source_fingerprint(SourceSpec(["/no/such/file"]))  # taken as a URL
