"""Local inputs: an empty directory is an error, and ``**`` ends on symlink loops.

A directory input without a regular file used to add nothing without a word when other
inputs had files (the build went on as if it had never been named); now it is one
InputError naming it. ``**`` used to follow every symlinked directory, so a link to an
ancestor (``d/up -> ..``) or to itself made the glob walk ``d/up/up/up/...`` until the
kernel's symlink limit: 2**40 paths for two such links. Now a symlinked directory is
followed only to a directory the walk has not seen and that does not hold its start.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bloomswarm.common.errors import InputError
from bloomswarm.main import main
from bloomswarm.publisher.fingerprint import source_fingerprint
from bloomswarm.publisher.sources import SourceSpec, expand_paths, iter_keys, resolve_inputs


def _keys(*patterns: str | Path) -> list[str]:
    return [str(k) for k in iter_keys(SourceSpec([str(p) for p in patterns]))]


def test_an_empty_directory_among_other_inputs_is_an_input_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_bytes(b"a\nb\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    message = f"no input files in directory {empty} (it holds no regular files"
    for call in (lambda: expand_paths([str(tmp_path / "keys.txt"), str(empty)]),
                 lambda: resolve_inputs([str(tmp_path / "keys.txt"), str(empty)]),
                 lambda: _keys(tmp_path / "keys.txt", empty),
                 lambda: source_fingerprint(SourceSpec([str(tmp_path / "keys.txt"), str(empty)]))):
        with pytest.raises(InputError) as caught:
            call()
        assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_directory_holding_only_subdirectories_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_bytes(b"a\n")
    (tmp_path / "nested" / "sub").mkdir(parents=True)
    (tmp_path / "nested" / "sub" / "k.txt").write_bytes(b"deep\n")
    with pytest.raises(InputError, match=r"no input files in directory .*nested.*not read"):
        _keys(tmp_path / "keys.txt", tmp_path / "nested")


def test_build_with_an_empty_directory_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys.txt").write_bytes(b"a\nb\n")
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out.bsf"
    capsys.readouterr()
    code = main(["build", str(tmp_path / "keys.txt"), str(tmp_path / "empty"), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == (f"bloomswarm build: error: no input files in directory {tmp_path / 'empty'} "
                   "(it holds no regular files; subdirectories are not read)\n")
    assert not out.exists()


def _looping_tree(root: Path) -> Path:
    data = root / "data"
    (data / "d" / "e").mkdir(parents=True)
    (data / "top.txt").write_bytes(b"top\n")
    (data / "d" / "mid.txt").write_bytes(b"mid\n")
    (data / "d" / "e" / "deep.txt").write_bytes(b"deep\n")
    os.symlink("..", data / "d" / "up")      # to the parent: a loop
    os.symlink(".", data / "d" / "e" / "self")  # to itself: a loop
    os.symlink("../..", data / "d" / "e" / "root")  # to an ancestor two levels up
    return data


def test_a_recursive_glob_reads_each_file_once_through_symlink_loops(tmp_path: Path) -> None:
    data = _looping_tree(tmp_path)
    files = expand_paths([f"{data}/**/*.txt"])
    assert files == [data / "d" / "e" / "deep.txt", data / "d" / "mid.txt", data / "top.txt"]
    assert sorted(_keys(f"{data}/**/*.txt")) == ["deep", "mid", "top"]
    # starting below a loop's target: the link back up is not followed either
    assert expand_paths([f"{data}/d/**/*.txt"]) == [data / "d" / "e" / "deep.txt", data / "d" / "mid.txt"]
    assert expand_paths([f"{data}/**/e/**/*.txt"]) == [data / "d" / "e" / "deep.txt"]


def test_a_recursive_glob_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _looping_tree(tmp_path)
    monkeypatch.chdir(tmp_path / "data")
    assert expand_paths(["**/*.txt"]) == [Path("d/e/deep.txt"), Path("d/mid.txt"), Path("top.txt")]
    assert [p for p in expand_paths(["**"])] == [Path("d/e/deep.txt"), Path("d/mid.txt"), Path("top.txt")]


def test_a_recursive_glob_still_follows_a_symlink_to_another_directory(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "linked.txt").write_bytes(b"linked\n")
    (tmp_path / "data" / ".hidden").mkdir(parents=True)
    (tmp_path / "data" / ".hidden" / "no.txt").write_bytes(b"hidden\n")
    (tmp_path / "data" / "own.txt").write_bytes(b"own\n")
    os.symlink(tmp_path / "elsewhere", tmp_path / "data" / "link")
    os.symlink(tmp_path / "elsewhere", tmp_path / "data" / "same")  # the same directory again
    files = expand_paths([f"{tmp_path}/data/**/*.txt"])
    assert files == [tmp_path / "data" / "link" / "linked.txt", tmp_path / "data" / "own.txt"]
