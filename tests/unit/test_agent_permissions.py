"""File modes of everything the agent writes, under the most permissive umask (0).

docs/security.md ("a local unprivileged user") relies on these: nothing in the data
directory is writable by anyone but the agent's user, unverified downloads are not even
readable by others, installed filters are read-only for everyone.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.agent.install import (
    InstalledDocuments,
    install_version,
    prepare_data_dir,
    write_last_sequence,
)
from bloomswarm.common.datadir import DataDir


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_directories_are_never_writable_by_others(tmp_path: Path, open_umask: None) -> None:
    data_dir = tmp_path / "data"
    prepare_data_dir(data_dir)
    assert _mode(data_dir) == 0o755
    assert _mode(DataDir(data_dir).versions) == 0o755
    assert _mode(DataDir(data_dir).staging) == 0o700


def test_installed_files_are_read_only_and_state_is_owner_writable(tmp_path: Path, open_umask: None) -> None:
    prepare_data_dir(tmp_path)
    staged = DataDir(tmp_path).staging_dir(1)
    staged.mkdir()
    (staged / "filter.bsf").write_bytes(b"filter bytes")
    installed = install_version(tmp_path, 1, staged / "filter.bsf", InstalledDocuments(b"{}", b"sig", b"t"))
    assert _mode(installed) == 0o444
    assert _mode(installed.parent / "manifest.json") == 0o444
    write_last_sequence(tmp_path, 7)
    assert _mode(tmp_path / "state.json") == 0o644
