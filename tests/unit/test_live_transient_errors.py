"""LiveFilter retries a new file that could not be opened for a passing reason.

Only a content problem (the file is not a valid filter) refuses a file until ``current``
names another one; an OSError (ENOMEM from mmap, EMFILE from open) keeps the old version
serving and the next refresh tries again. A refusal is forgotten once ``current`` names
another file. The errors are simulated by making the reader's ``mmap`` or ``open`` fail
once.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import NotReadyError
from bloomswarm.common.live import LiveFilter
from tests.unit.test_live import B_ONLY, COMMON, QUIET, install, wait_until


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


class _Failing:
    """Make ``mmap.mmap`` or ``os.open`` (the reader's calls) raise OSError(code) ``times`` times."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, call: str, code: int, times: int = 1) -> None:
        self.left = times
        self.calls = 0
        owner: Any = mmap if call == "mmap" else os
        real = getattr(owner, call)

        def failing(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.left > 0:
                self.left -= 1
                raise OSError(code, os.strerror(code))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, call, failing)


TRANSIENT = [("mmap", errno.ENOMEM), ("open", errno.EMFILE)]


@pytest.fixture
def live(data_dir: Path) -> Iterator[LiveFilter]:
    install(data_dir, 1, COMMON, flip=True)
    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        assert live.version == 1
        yield live


@pytest.mark.parametrize(("call", "code"), TRANSIENT)
def test_transient_error_opening_a_new_version_is_retried(
    data_dir: Path, live: LiveFilter, monkeypatch: pytest.MonkeyPatch, call: str, code: int,
) -> None:
    install(data_dir, 2, COMMON + B_ONLY, flip=True)
    failing = _Failing(monkeypatch, call, code)
    assert live.refresh() is False  # the transient failure: v1 keeps serving
    assert live.version == 1
    assert COMMON[0] in live
    assert live.rejected_count == 0
    assert live.open_error_count == 1
    assert live.last_error is not None and os.strerror(code) in live.last_error
    assert live.refresh() is True  # the next refresh tries again
    assert live.version == 2
    assert all(k in live for k in B_ONLY[:50])
    assert failing.calls == 2


@pytest.mark.parametrize(("call", "code"), TRANSIENT)
def test_transient_error_before_the_first_version_is_retried(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int,
) -> None:
    install(data_dir, 1, COMMON, flip=True)
    _Failing(monkeypatch, call, code)
    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        assert live.version is None  # the first open failed
        with pytest.raises(NotReadyError):
            _ = COMMON[0] in live
        assert live.refresh() is True
        assert live.version == 1
        assert COMMON[0] in live


def test_polling_retries_after_a_transient_error(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(data_dir, 1, COMMON, flip=True)
    with LiveFilter(data_dir, watch=False, poll_interval=0.01) as live:
        install(data_dir, 2, COMMON + B_ONLY)
        _Failing(monkeypatch, "mmap", errno.ENOMEM, times=3)
        DataDir(data_dir).flip_current(2)
        assert wait_until(lambda: live.version == 2)
        assert live.rejected_count == 0


def test_a_persistent_open_error_is_logged_once(
    data_dir: Path, live: LiveFilter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    install(data_dir, 2, COMMON + B_ONLY, flip=True)
    _Failing(monkeypatch, "mmap", errno.ENOMEM, times=5)
    with caplog.at_level(logging.DEBUG, logger="bloomswarm.live"):
        for _ in range(5):
            assert live.refresh() is False
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1
    assert str(data_dir) in warned[0].getMessage()
    assert live.open_error_count == 5
    assert live.refresh() is True
    assert live.version == 2


def test_a_refusal_is_forgotten_once_current_names_another_file(data_dir: Path, live: LiveFilter) -> None:
    """A refused file's inode may be reused by a valid one (here: the file is repaired in
    place): once ``current`` has moved away, the refusal does not stick to that inode."""
    good = install(data_dir, 9, COMMON + B_ONLY).read_bytes()
    bad = install(data_dir, 2, COMMON + B_ONLY)
    os.chmod(bad, 0o644)
    with open(bad, "r+b") as fh:
        fh.truncate(100)  # not a valid filter
    DataDir(data_dir).flip_current(2)
    assert live.refresh() is False
    assert live.rejected_count == 1
    assert live.refresh() is False  # refused: not opened again
    assert live.rejected_count == 1
    DataDir(data_dir).flip_current(1)  # current moves back to the version serving
    assert live.refresh() is False
    with open(bad, "r+b") as fh:  # the same inode now holds a valid file
        fh.write(good)
    DataDir(data_dir).flip_current(2)
    assert live.refresh() is True
    assert live.version == 9
    assert live.rejected_count == 1


def test_a_content_error_is_still_refused_until_current_moves(data_dir: Path, live: LiveFilter) -> None:
    bad = install(data_dir, 2, COMMON + B_ONLY)
    os.chmod(bad, 0o644)
    os.truncate(bad, 10)
    DataDir(data_dir).flip_current(2)
    for _ in range(3):
        assert live.refresh() is False
    assert live.rejected_count == 1
    assert live.open_error_count == 0
    assert live.version == 1
