"""spread_subdirectories: ext4's FS_TOPDIR_FL on the directories that get a subdirectory per
version, best effort where a file system has no such flag."""

from __future__ import annotations

from pathlib import Path

from bloomswarm.agent.install import prepare_data_dir
from bloomswarm.common.dir_spread import is_spread, spread_subdirectories


def test_a_marked_directory_says_so_and_marking_again_changes_nothing(tmp_path: Path) -> None:
    marked = spread_subdirectories(tmp_path)
    assert is_spread(tmp_path) is marked  # False only where the file system has no such flags
    assert spread_subdirectories(tmp_path) is marked
    assert is_spread(tmp_path) is marked
    (tmp_path / "v1").mkdir()  # the directory still works as one
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]


def test_what_is_no_directory_is_left_alone(tmp_path: Path) -> None:
    file = tmp_path / "state.json"
    file.write_bytes(b"{}")
    assert spread_subdirectories(file) is False and is_spread(file) is False
    assert spread_subdirectories(tmp_path / "missing") is False
    assert file.read_bytes() == b"{}"


def test_a_prepared_data_directory_spreads_its_versions_and_staging(tmp_path: Path) -> None:
    supported = spread_subdirectories(tmp_path)
    prepare_data_dir(tmp_path / "data")
    assert is_spread(tmp_path / "data" / "versions") is supported
    assert is_spread(tmp_path / "data" / "staging") is supported
    assert is_spread(tmp_path / "data") is False  # its own files (current, state.json) stay put
