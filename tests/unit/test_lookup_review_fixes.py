"""Fixes from the lookup API review: each test here failed on the code before its fix.

- a FIFO (or any non-regular file) as the filter file is refused at once by Filter.open,
  ``bloomswarm query``/``inspect`` and LiveFilter, never waited on;
- LiveFilter refuses a bad ``engine`` or ``poll_interval`` in its constructor, and a
  configuration error in a refresh is not counted as a refused file;
- ``contains_many`` given one str/bytes key raises TypeError instead of answering per
  character;
- ``LiveFilter.contains_many`` takes ``threads``;
- ``bloomswarm query --verify`` checks the body; ``build --expected-keys 0`` is refused;
- docs/format.md describes ``Filter.expected_fpp()`` as the code computes it.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from bloomswarm.common import fastpath
from bloomswarm.common import reader as reader_module
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import ConfigError, FormatError, NotReadyError
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.live import LiveFilter
from bloomswarm.common.reader import Filter
from bloomswarm.common.sizing import expected_fpp
from bloomswarm.main import main

ENGINES = [
    "python",
    pytest.param("c", marks=pytest.mark.skipif(EXTENSION is None, reason="C extension not built")),
]
KEYS = [f"user-{i}" for i in range(500)]
QUIET = {"watch": False, "poll_interval": 3600.0}
ROOT = Path(__file__).resolve().parents[2]


def write_filter(path: Path, keys: Sequence[str] = KEYS, *, version: int = 1) -> Path:
    builder = FilterBuilder.for_capacity(max(len(keys), 1), 0.01, engine="python")
    builder.add_many(keys)
    path.parent.mkdir(parents=True, exist_ok=True)
    builder.write(path, version=version)
    return path


def install(data_dir: Path, version: int, keys: Sequence[str] = KEYS) -> Path:
    path = write_filter(DataDir(data_dir).filter_file(version), keys, version=version)
    DataDir(data_dir).flip_current(version)
    return path


def finishes(call: Callable[[], object], fifo: Path, timeout: float = 5.0) -> object:
    """Run ``call`` in a thread and return its result (or the exception it raised).

    Fails when it is still running after ``timeout``: blocked on the FIFO. The FIFO is then
    opened for writing until the thread ends, so that a failing test leaves no thread stuck.
    """
    result: list[object] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    hung = thread.is_alive()
    for _ in range(100):  # unblock an opener waiting for a writer (old code), every time
        if not thread.is_alive():
            break
        with contextlib.suppress(OSError):  # ENXIO: nobody is waiting on it right now
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(0.05)
    assert not hung, f"still running after {timeout} s: blocked on the FIFO {fifo}"
    return result[0]


def run_cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- 1. a FIFO as the filter file ---------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_filter_open_refuses_a_fifo_at_once(tmp_path: Path, engine: str) -> None:
    fifo = tmp_path / "pipe.bsf"
    os.mkfifo(fifo)
    outcome = finishes(lambda: Filter.open(fifo, engine=engine), fifo)  # type: ignore[arg-type]
    assert isinstance(outcome, FormatError)
    assert f"not a regular file: {fifo}" in str(outcome)


def test_filter_open_of_a_directory_still_raises_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="Is a directory"):
        Filter.open(tmp_path)


@pytest.mark.parametrize("command", ["query", "inspect"])
def test_cli_refuses_a_fifo_with_one_line(tmp_path: Path, command: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = [command, str(fifo), *(["a"] if command == "query" else [])]
    outcome = finishes(lambda: run_cli(argv, capsys), fifo)
    assert isinstance(outcome, tuple)
    code, out, err = outcome
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"bloomswarm {command}: error: not a regular file: {fifo} "
        "(a FIFO, device or socket cannot be a filter file)"
    ]


def test_livefilter_refuses_a_fifo_and_follows_the_next_version(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    data.version_dir(1).mkdir(parents=True)
    fifo = data.filter_file(1)
    os.mkfifo(fifo)
    os.symlink("versions/v1", tmp_path / "current")  # flip_current() wants a regular file
    live = finishes(lambda: LiveFilter(tmp_path, **QUIET), fifo)  # type: ignore[arg-type]
    assert isinstance(live, LiveFilter)
    try:
        assert live.rejected_count == 1 and live.open_error_count == 0
        assert live.last_error is not None and "not a regular file" in live.last_error
        assert finishes(live.refresh, fifo) is False  # refused once, not opened again
        install(tmp_path, 2)
        assert live.refresh() is True
        assert live.version == 2 and KEYS[0] in live
    finally:
        live.close()


# -- 2. a bad engine ------------------------------------------------------------------


def test_livefilter_unknown_engine_raises_at_construction(tmp_path: Path) -> None:
    install(tmp_path, 1)
    with pytest.raises(ConfigError, match="unknown engine 'turbo'"):
        LiveFilter(tmp_path, engine="turbo", **QUIET)  # type: ignore[arg-type]


def test_livefilter_c_engine_without_extension_raises_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, 1)
    monkeypatch.setattr(fastpath, "EXTENSION", None)
    with pytest.raises(ConfigError, match="C extension is not available"):
        LiveFilter(tmp_path, engine="c", **QUIET)  # type: ignore[arg-type]


def test_config_error_in_refresh_is_not_a_refused_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, 1)
    with LiveFilter(tmp_path, engine="python", **QUIET) as live:  # type: ignore[arg-type]
        install(tmp_path, 2)

        def broken(engine: str) -> str:
            raise ConfigError("engine unavailable")

        monkeypatch.setattr(reader_module, "resolve_engine", broken)
        with pytest.raises(ConfigError):
            live.refresh()
        assert live.rejected_count == 0 and live.version == 1
        monkeypatch.undo()
        assert live.refresh() is True  # version 2 was not marked refused
        assert live.version == 2


# -- 3. one key passed to contains_many ---------------------------------------------------


SINGLE_KEYS = ["user-1", b"user-1", bytearray(b"user-1"), memoryview(b"user-1")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("key", SINGLE_KEYS, ids=["str", "bytes", "bytearray", "memoryview"])
def test_filter_contains_many_refuses_one_key(tmp_path: Path, engine: str, key: object) -> None:
    with Filter.open(write_filter(tmp_path / "f.bsf"), engine=engine) as f:  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key in filter"):
            f.contains_many(key)  # type: ignore[arg-type]
        assert f.contains_many([key]).tolist() == [True]  # type: ignore[list-item]


@pytest.mark.parametrize("key", SINGLE_KEYS, ids=["str", "bytes", "bytearray", "memoryview"])
def test_livefilter_contains_many_refuses_one_key(tmp_path: Path, key: object) -> None:
    with LiveFilter(tmp_path, **QUIET) as live:  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key in filter"):  # before any version, too
            live.contains_many(key)  # type: ignore[arg-type]
        install(tmp_path, 1)
        assert live.refresh()
        with pytest.raises(TypeError, match="key in filter"):
            live.contains_many(key)  # type: ignore[arg-type]


# -- 4. poll_interval -------------------------------------------------------------------


@pytest.mark.parametrize("interval", [0.0, 0, -1.0, math.nan, math.inf, -math.inf])
def test_livefilter_refuses_a_bad_poll_interval(tmp_path: Path, interval: float) -> None:
    install(tmp_path, 1)
    before = threading.active_count()
    with pytest.raises(ValueError, match="poll_interval must be a positive, finite number"):
        LiveFilter(tmp_path, poll_interval=interval, watch=False)
    assert threading.active_count() == before  # no poll thread left behind


# -- 5. query --verify ----------------------------------------------------------------


def corrupt_copy(tmp_path: Path) -> Path:
    path = write_filter(tmp_path / "corrupt.bsf", ["user:42"])
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE:] = bytes(len(data) - HEADER_SIZE)  # body zeroed, header intact
    path.write_bytes(bytes(data))
    return path


def test_query_verify_refuses_a_corrupt_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = corrupt_copy(tmp_path)
    code, out, err = run_cli(["query", "--verify", str(path), "user:42"], capsys)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"bloomswarm query: error: {path}: body SHA-256 does not match the header (corrupt file)"
    ]
    # Without --verify the file is trusted, as documented: a wrong answer, exit 0.
    code, out, _ = run_cli(["query", str(path), "user:42"], capsys)
    assert code == 0 and out == "absent\tuser:42\n"


def test_query_verify_answers_from_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_filter(tmp_path / "f.bsf")
    code, out, err = run_cli(["query", "--verify", str(path), KEYS[0]], capsys)
    assert (code, out, err) == (0, f"present\t{KEYS[0]}\n", "")


def test_query_help_says_it_trusts_the_file_without_verify(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["query", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--verify" in text and "trusts the file" in text


# -- 6. the expected_fpp documentation ------------------------------------------------


def test_format_doc_describes_expected_fpp_from_the_bits_set(tmp_path: Path) -> None:
    # 10000 insertions of one key: the sizing formula at key_count says ~1%, the bits say ~0.
    path = write_filter(tmp_path / "same.bsf", ["same"] * 10000)
    with Filter.open(path) as f:
        assert f.expected_fpp() < 1e-6 < expected_fpp(f.params, f.key_count)
    text = " ".join((ROOT / "docs" / "format.md").read_text(encoding="utf-8").split())
    assert "evaluates the same formula at the filter's actual key count" not in text
    assert "`Filter.expected_fpp()` does **not** evaluate them" in text
    assert "from the bits actually set" in text


# -- 7. LiveFilter.contains_many(threads=...) -------------------------------------------


def test_livefilter_contains_many_takes_threads(tmp_path: Path) -> None:
    with LiveFilter(tmp_path, **QUIET) as live:  # type: ignore[arg-type]
        keys = np.arange(1 << 17, dtype=np.uint64)
        with pytest.raises(NotReadyError):
            live.contains_many(keys, threads=2)
        install(tmp_path, 1)
        assert live.refresh()
        expected = live.filter.contains_many(keys)
        assert np.array_equal(live.contains_many(keys, threads=2), expected)
        assert live.contains_many([KEYS[0], "nobody"], threads=2).tolist()[0] is True


# -- 9. build --expected-keys 0 -----------------------------------------------------------


@pytest.mark.parametrize(("value", "message"), [
    ("0", "argument --expected-keys: must be at least 1, got 0"),
    ("-3", "argument --expected-keys: must not be negative: -3"),
])
def test_build_refuses_expected_keys_below_one(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               value: str, message: str) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\n")
    out = tmp_path / "o.bsf"
    code, stdout, err = run_cli(["build", str(keys), "-o", str(out), "--expected-keys", value], capsys)
    assert code == 2 and stdout == ""
    assert err.splitlines() == [f"bloomswarm build: {message}"]
    assert not out.exists()
