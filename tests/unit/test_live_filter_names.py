"""LiveFilter by name: ``LiveFilter(DATA_DIR, filter=NAME)`` follows ``DATA_DIR/filters/NAME``
exactly as it follows a single-filter data directory."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import DataDir, filter_data_dir
from bloomswarm.common.errors import NotReadyError
from bloomswarm.common.live import LiveFilter

QUIET: dict[str, Any] = {"watch": False, "poll_interval": 3600.0}
"""No watchdog, no effective polling: only explicit refresh() calls swap."""


def install(data_dir: Path, version: int, keys: Sequence[str]) -> None:
    """Write ``keys`` as version ``version`` of ``data_dir`` and point ``current`` at it."""
    builder = FilterBuilder.for_capacity(max(len(keys), 1), 0.001, engine="python")
    builder.add_many(keys)
    path = DataDir(data_dir).filter_file(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    builder.write(path, version=version)
    DataDir(data_dir).flip_current(version)


def test_a_named_filter_is_followed_in_its_folder(tmp_path: Path) -> None:
    install(filter_data_dir(tmp_path, "blocklist"), 1, ["bad-1"])
    install(filter_data_dir(tmp_path, "fraud"), 7, ["fraud-1"])
    with LiveFilter(tmp_path, filter="blocklist", **QUIET) as blocklist, \
            LiveFilter(tmp_path, filter="fraud", **QUIET) as fraud:
        assert blocklist.directory == tmp_path / "filters" / "blocklist"
        assert blocklist.filter_name == "blocklist" and fraud.filter_name == "fraud"
        assert (blocklist.version, fraud.version) == (1, 7)
        assert "bad-1" in blocklist and "fraud-1" not in blocklist
        assert "fraud-1" in fraud and "bad-1" not in fraud
        # A swap of one filter is seen by its reader only.
        install(filter_data_dir(tmp_path, "blocklist"), 2, ["bad-1", "bad-2"])
        assert blocklist.refresh() and not fraud.refresh()
        assert (blocklist.version, fraud.version) == (2, 7)
        assert "bad-2" in blocklist


def test_a_single_filter_data_dir_is_unchanged(tmp_path: Path) -> None:
    install(tmp_path, 3, ["k"])
    with LiveFilter(tmp_path, **QUIET) as live:
        assert live.filter_name is None and live.directory == tmp_path
        assert live.version == 3 and "k" in live


def test_a_named_filter_not_installed_yet_waits_like_an_empty_dir(tmp_path: Path) -> None:
    with LiveFilter(tmp_path, filter="later", **QUIET) as live:
        assert live.version is None
        with pytest.raises(NotReadyError):
            _ = "k" in live
        install(filter_data_dir(tmp_path, "later"), 1, ["k"])
        assert live.refresh() and "k" in live


def test_the_background_watch_follows_a_named_filter(tmp_path: Path) -> None:
    folder = filter_data_dir(tmp_path, "watched")
    install(folder, 1, ["a"])
    with LiveFilter(tmp_path, filter="watched", poll_interval=0.05) as live:
        install(folder, 2, ["a", "b"])  # no refresh(): the watcher or the poll swaps
        deadline = time.monotonic() + 10.0
        while live.version != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert live.version == 2 and "b" in live


@pytest.mark.parametrize("name", ["..", "../etc", "a/b", "", ".", "/abs", "Upper", "x" * 64, "a..b"])
def test_a_bad_name_is_refused_at_construction(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"^filter name "):
        LiveFilter(tmp_path, filter=name, **QUIET)
    with pytest.raises(ValueError, match=r"^filter name "):
        filter_data_dir(tmp_path, name)
