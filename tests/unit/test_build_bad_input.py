"""Builds refuse what they cannot do right: an input that differs between the two passes
of a build without --expected-keys (never a filter missing keys), an output among the
inputs, and a filter larger than a filter may be or than memory holds."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.common.errors import InputError
from bloomswarm.publisher import build as build_module
from bloomswarm.publisher.build import BuildSpec, build_filter
from bloomswarm.publisher.sources import SourceSpec, iter_key_batches


def test_an_input_that_changes_between_the_passes_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"k{i}\n" for i in range(100)))
    passes = []

    def shrinking(source: SourceSpec) -> Iterator[list[str]]:
        passes.append(1)
        if len(passes) == 2:  # a file of the input was removed after it was counted
            keys.write_text("".join(f"k{i}\n" for i in range(60)))
        yield from iter_key_batches(source)  # type: ignore[misc]

    monkeypatch.setattr(build_module, "iter_key_batches", shrinking)
    with pytest.raises(InputError, match="100 keys counted, then 60 read"):
        build_filter(SourceSpec([str(keys)]), BuildSpec(progress=False))
    passes.clear()
    keys.write_text("".join(f"k{i}\n" for i in range(100)))
    builder = build_filter(SourceSpec([str(keys)]), BuildSpec(progress=False, expected_keys=100))
    assert builder.key_count == 100 and len(passes) == 1  # one pass: what it read is what it has


def test_build_from_a_pipe_fails_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "filter.bsf"
    done = subprocess.run(
        [sys.executable, "-m", "bloomswarm", "-q", "build", "/dev/stdin", "-o", str(out)],
        input="".join(f"key-{i}\n" for i in range(1000)), capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "pass --expected-keys" in done.stderr
    assert not out.exists()
    with_count = subprocess.run(
        [sys.executable, "-m", "bloomswarm", "-q", "build", "/dev/stdin", "-o", str(out),
         "--expected-keys", "1000"],
        input="".join(f"key-{i}\n" for i in range(1000)), capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert with_count.returncode == 0, with_count.stderr
    assert out.is_file()


@pytest.mark.parametrize("output", ["keys.txt", "data/filter.bsf"])
def test_build_refuses_to_write_over_or_into_its_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    from bloomswarm.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys.txt").write_text("a\nb\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "more.txt").write_text("c\n")
    assert main(["-q", "build", "keys.txt", "data", "-o", output]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is among the inputs" in err
    assert (tmp_path / "keys.txt").read_text() == "a\nb\n" and not (tmp_path / "data" / "filter.bsf").exists()


def test_a_standard_filter_beyond_the_size_limit_is_refused_in_one_line() -> None:
    from bloomswarm.common.params import Layout
    from bloomswarm.common.sizing import size_filter

    with pytest.raises(ValueError, match="a filter holds at most 274,877,906,880"):
        size_filter(10**15, 0.01, Layout.STANDARD)
    size_filter(10**9, 0.01, Layout.STANDARD)  # within it


def test_a_filter_that_memory_cannot_hold_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bloomswarm.common.errors import ConfigError

    def no_memory(*_args: object, **_kwargs: object) -> None:
        raise MemoryError

    from bloomswarm.common.builder import FilterBuilder

    monkeypatch.setattr(FilterBuilder, "__init__", no_memory)
    keys = tmp_path / "keys.txt"
    keys.write_text("a\n")
    with pytest.raises(ConfigError, match="does not fit in this machine's memory"):
        build_filter(SourceSpec([str(keys)]), BuildSpec(progress=False))
