"""Installing a verified file: modes, atomic placement, the flip, and the checks made before a
download (file size limit, free disk space)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bloomswarm.agent.install import (
    DownloadRefused,
    InstalledDocuments,
    activate,
    check_capacity,
    install_version,
    is_installed,
    prepare_data_dir,
    read_last_sequence,
    write_last_sequence,
)
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import FormatError
from tests.unit.agent_helpers import stage_file

_DOCUMENTS = InstalledDocuments(manifest=b"{}", manifest_signature=b"sig", torrent=b"t")



def test_install_places_a_read_only_file_and_metadata_then_flip(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    staged = stage_file(tmp_path, 3, b"filter bytes")
    target = install_version(tmp_path, 3, staged, InstalledDocuments(b"{}", b"sig", b"t"))
    assert target == tmp_path / "versions" / "v3" / "filter.bsf"
    assert not staged.exists() and target.read_bytes() == b"filter bytes"
    for name, data in (("manifest.json", b"{}"), ("manifest.json.sig", b"sig"), ("filter.torrent", b"t")):
        assert (target.parent / name).read_bytes() == data
    for path in target.parent.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert is_installed(tmp_path, 3) and DataDir(tmp_path).current_version() is None  # not flipped yet
    activate(tmp_path, 3)
    assert DataDir(tmp_path).current_version() == 3
    assert DataDir(tmp_path).current_filter.read_bytes() == b"filter bytes"
    assert os.readlink(tmp_path / "current") == os.path.join("versions", "v3")


def test_install_keeps_an_installed_version_as_it_is(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    install_version(tmp_path, 1, stage_file(tmp_path, 1, b"first"), _DOCUMENTS)
    (tmp_path / "staging" / "v1" / "filter.bsf").write_bytes(b"second")
    install_version(tmp_path, 1, tmp_path / "staging" / "v1" / "filter.bsf", _DOCUMENTS)
    assert (tmp_path / "versions" / "v1" / "filter.bsf").read_bytes() == b"first"
    assert not (tmp_path / "staging" / "v1" / "filter.bsf").exists()


def test_install_replaces_the_documents_a_crash_left_in_an_incomplete_version(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    leftover = tmp_path / "versions" / "v2"
    leftover.mkdir(parents=True)
    (leftover / "manifest.json").write_bytes(b'{"trunc')  # a crash while it was written
    (leftover / "manifest.json").chmod(0o444)
    target = install_version(tmp_path, 2, stage_file(tmp_path, 2, b"bytes"), _DOCUMENTS)
    assert (leftover / "manifest.json").read_bytes() == b"{}"
    assert (leftover / "manifest.json.sig").read_bytes() == b"sig"
    assert target.read_bytes() == b"bytes"
    assert sorted(p.name for p in leftover.iterdir()) == [
        "filter.bsf", "filter.torrent", "manifest.json", "manifest.json.sig"]


def test_flip_refuses_a_version_that_is_not_installed(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path)
    with pytest.raises(FileNotFoundError):
        activate(tmp_path, 9)
    assert not (tmp_path / "current").exists()


def test_capacity_checks(tmp_path: Path) -> None:
    check_capacity(tmp_path, 1000, max_file_size=1000, margin=0)
    with pytest.raises(DownloadRefused, match="max_file_size") as too_large:
        check_capacity(tmp_path, 1001, max_file_size=1000, margin=0)
    assert too_large.value.reason == "file_too_large"
    with pytest.raises(DownloadRefused, match="not enough disk space") as no_space:
        check_capacity(tmp_path, 1000, max_file_size=1 << 62, margin=1 << 61)
    assert no_space.value.reason == "disk_space"
    assert "margin" in str(no_space.value)


def test_capacity_counts_bytes_already_downloaded(tmp_path: Path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    size = free + (1 << 20)  # does not fit from scratch ...
    with pytest.raises(DownloadRefused):
        check_capacity(tmp_path, size, max_file_size=1 << 62, margin=0)
    check_capacity(tmp_path, size, max_file_size=1 << 62, margin=0, already_present=2 << 20)


def test_last_sequence_round_trip_and_malformed_state(tmp_path: Path) -> None:
    assert read_last_sequence(tmp_path) is None
    write_last_sequence(tmp_path, 12)
    assert read_last_sequence(tmp_path) == 12
    (tmp_path / "state.json").write_text('{"last_sequence": "x"}')
    with pytest.raises(FormatError):
        read_last_sequence(tmp_path)
    (tmp_path / "state.json").write_text("not json")
    with pytest.raises(FormatError):
        read_last_sequence(tmp_path)
