"""write_atomically: the whole new file or the old one, and how much it fsyncs; write_new_file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bloomswarm.common.atomic_file import write_atomically, write_new_file


@pytest.fixture
def fsyncs_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors os.fsync is called with (each is still fsynced)."""
    calls: list[int] = []
    real = os.fsync

    def counted_fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    return calls


@pytest.mark.parametrize(("options", "fsyncs"), [
    ({}, 2),                                   # the file, then its directory
    ({"sync_directory": False}, 1),            # the caller fsyncs the directory once
    ({"durable": False}, 0),                   # staging documents: verified again on restart
    ({"durable": False, "sync_directory": True}, 0),
])
def test_writes_the_whole_file_with_the_fsyncs_asked_for(
    tmp_path: Path, fsyncs_made: list[int], options: dict[str, bool], fsyncs: int
) -> None:
    target = tmp_path / "doc.json"
    target.write_bytes(b"old")
    write_atomically(target, [b"new ", b"content"], mode=0o640, **options)
    assert target.read_bytes() == b"new content"
    assert target.stat().st_mode & 0o777 == 0o640
    assert len(fsyncs_made) == fsyncs
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]  # no temporary file left


def test_without_overwrite_an_existing_target_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "once"
    write_atomically(target, [b"1"], overwrite=False, durable=False)
    with pytest.raises(FileExistsError):
        write_atomically(target, [b"2"], overwrite=False)
    assert target.read_bytes() == b"1"
    assert [p.name for p in tmp_path.iterdir()] == ["once"]


def test_a_new_file_is_created_whole_with_its_mode_and_one_fsync(
    tmp_path: Path, fsyncs_made: list[int]
) -> None:
    old_umask = os.umask(0o077)
    try:
        write_new_file(tmp_path / "manifest.json", b"x" * 100_000, mode=0o444)
    finally:
        os.umask(old_umask)
    assert (tmp_path / "manifest.json").read_bytes() == b"x" * 100_000
    assert (tmp_path / "manifest.json").stat().st_mode & 0o777 == 0o444
    assert len(fsyncs_made) == 1
    with pytest.raises(FileExistsError):
        write_new_file(tmp_path / "manifest.json", b"other")
    assert (tmp_path / "manifest.json").read_bytes() == b"x" * 100_000
