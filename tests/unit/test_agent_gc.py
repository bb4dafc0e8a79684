"""Garbage collection: retention of installed versions, never the current one, staging leftovers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.agent.gc import collect_garbage, installed_versions, versions_to_keep
from bloomswarm.agent.install import activate, prepare_data_dir
from bloomswarm.common.datadir import DataDir
from tests.unit.agent_helpers import install_fake_versions


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    prepare_data_dir(tmp_path)
    return tmp_path


def test_keeps_current_and_the_newest_others(data_dir: Path) -> None:
    install_fake_versions(data_dir, 1, 2, 3, 4)
    activate(data_dir, 4)
    stopped: list[int] = []
    collected = collect_garbage(data_dir, 2, stopped.append)
    assert installed_versions(data_dir) == [3, 4]
    assert sorted(collected.versions) == sorted(stopped) == [1, 2]


def test_never_deletes_current_even_when_it_is_the_oldest(data_dir: Path) -> None:
    install_fake_versions(data_dir, 1, 2, 3, 4)
    activate(data_dir, 1)  # a pinned rollback
    collect_garbage(data_dir, 2, lambda _v: None)
    assert installed_versions(data_dir) == [1, 4]
    collect_garbage(data_dir, 1, lambda _v: None)
    assert installed_versions(data_dir) == [1]
    assert (data_dir / "current" / "filter.bsf").read_bytes() == b"v1"


def test_without_current_keeps_the_newest(data_dir: Path) -> None:
    install_fake_versions(data_dir, 5, 6, 7)
    collect_garbage(data_dir, 2, lambda _v: None)
    assert installed_versions(data_dir) == [6, 7]


@pytest.mark.parametrize(
    ("installed", "current", "keep", "kept"),
    [([1, 2, 3], 3, 2, {2, 3}), ([1, 2, 3], 1, 2, {1, 3}), ([], None, 2, set()), ([4], 4, 3, {4})],
)
def test_versions_to_keep(installed: list[int], current: int | None, keep: int, kept: set[int]) -> None:
    assert versions_to_keep(installed, current, keep) == kept


def test_cleans_staging_but_the_active_download(data_dir: Path) -> None:
    for version in (7, 8):
        DataDir(data_dir).staging_dir(version).mkdir()
        (DataDir(data_dir).staging_dir(version) / "filter.bsf").write_bytes(b"partial")
    (data_dir / "staging" / "stray-file").write_bytes(b"x")
    (data_dir / "versions" / "v3").mkdir()  # an interrupted install: no filter.bsf
    collected = collect_garbage(data_dir, 2, lambda _v: None, downloading=8)
    assert sorted(p.name for p in (data_dir / "staging").iterdir()) == ["v8"]
    assert not (data_dir / "versions" / "v3").exists()
    assert sorted(collected.leftovers) == ["staging/stray-file", "staging/v7", "versions/v3"]


def test_keep_must_be_positive(data_dir: Path) -> None:
    with pytest.raises(ValueError):
        collect_garbage(data_dir, 0, lambda _v: None)


def test_removes_a_flip_interrupted_by_a_crash(data_dir: Path) -> None:
    install_fake_versions(data_dir, 1)
    activate(data_dir, 1)
    (data_dir / ".current.tmp-99999").symlink_to("versions/v1")
    collected = collect_garbage(data_dir, 2, lambda _v: None)
    assert not (data_dir / ".current.tmp-99999").is_symlink()
    assert collected.leftovers == [".current.tmp-99999"]
    assert (data_dir / "current" / "filter.bsf").read_bytes() == b"v1"


def test_retention_alone_leaves_leftovers_for_the_next_full_collection(data_dir: Path) -> None:
    for version in (1, 2, 3):
        install_fake_versions(data_dir, version)
    activate(data_dir, 3)
    DataDir(data_dir).staging_dir(9).mkdir()
    (data_dir / ".current.tmp-99999").symlink_to("versions/v3")
    collected = collect_garbage(data_dir, 2, lambda _v: None, leftovers=False)
    assert collected.versions == [1] and collected.leftovers == []
    assert DataDir(data_dir).staging_dir(9).is_dir() and (data_dir / ".current.tmp-99999").is_symlink()
    later = collect_garbage(data_dir, 2, lambda _v: None)
    assert sorted(later.leftovers) == [".current.tmp-99999", "staging/v9"]
