"""``diff``, ``patch`` and ``build`` refuse an output that is one of their own inputs (by
any name) or an existing file that is not a regular one: the atomic write would replace
the input with the result, or a FIFO or a device with a regular file, and exit 0."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.delta import make_delta
from bloomswarm.main import main


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """a.bsf (version 1), b.bsf (version 2, 20 more keys), d.bsd the delta between them."""
    builder = FilterBuilder.for_capacity(300, 0.01)
    builder.add_many([f"key-{i}" for i in range(200)])
    builder.write(tmp_path / "a.bsf", version=1)
    builder.add_many([f"next-{i}" for i in range(20)])
    builder.write(tmp_path / "b.bsf", version=2)
    make_delta(tmp_path / "a.bsf", tmp_path / "b.bsf", tmp_path / "d.bsd")
    return {name: tmp_path / f"{name}" for name in ("a.bsf", "b.bsf", "d.bsd")}


def _digests(paths: dict[str, Path]) -> dict[str, str]:
    return {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in paths.items()}


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("argv", [
    ["diff", "a.bsf", "b.bsf", "-o", "a.bsf"],
    ["diff", "a.bsf", "b.bsf", "-o", "b.bsf"],
    ["patch", "a.bsf", "d.bsd", "-o", "a.bsf"],
    ["patch", "a.bsf", "d.bsd", "-o", "d.bsd"],
])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    clobbered = argv[-1]
    before = _digests(files)
    assert main(argv) == 1
    assert _one_error(capsys) == (f"bloomswarm {argv[0]}: error: the output {clobbered} is among the "
                                  f"inputs ({clobbered}): write it elsewhere")
    assert _digests(files) == before


def test_the_same_file_by_another_name_is_refused(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    os.link(files["a.bsf"], tmp_path / "hard.bsf")  # another name of the same inode
    (tmp_path / "sub" / "soft.bsd").symlink_to(files["d.bsd"])
    before = _digests(files)
    for argv in (["diff", "a.bsf", "b.bsf", "-o", "sub/../a.bsf"],
                 ["diff", "a.bsf", "b.bsf", "-o", "hard.bsf"],
                 ["patch", "a.bsf", "d.bsd", "-o", "sub/soft.bsd"]):
        assert main(argv) == 1, argv
        assert "is among the inputs" in _one_error(capsys)
    assert _digests(files) == before and (tmp_path / "sub" / "soft.bsd").is_symlink()


@pytest.mark.parametrize("argv", [
    ["diff", "a.bsf", "b.bsf", "-o", "pipe"],
    ["patch", "a.bsf", "d.bsd", "-o", "pipe"],
    ["build", "keys.txt", "-o", "pipe"],
])
def test_a_fifo_output_is_refused_and_left_a_fifo(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys.txt").write_text("a\nb\n")
    os.mkfifo(tmp_path / "pipe")
    assert main(argv) == 1
    assert _one_error(capsys) == (f"bloomswarm {argv[0]}: error: output is not a regular file: pipe (a FIFO, "
                                  "device or socket would be replaced by a file; give a file name)")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)


def test_an_existing_regular_output_is_still_replaced(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out.bsf").write_bytes(b"old")
    assert main(["-q", "patch", "a.bsf", "d.bsd", "-o", "out.bsf"]) == 0
    assert (tmp_path / "out.bsf").read_bytes() == files["b.bsf"].read_bytes()
