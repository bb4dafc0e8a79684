"""Watch mode: a burst of changes publishes once; reading the data does not trigger."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bloomswarm.common.errors import ConfigError, InputError
from bloomswarm.publisher.watch import watch_and_publish

DEBOUNCE_S = 0.5


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@contextmanager
def _watching(directory: Path, on_change: Callable[[], None], **kwargs: bool) -> Iterator[list[int]]:
    stop = threading.Event()
    calls: list[int] = []
    thread = threading.Thread(
        target=lambda: calls.append(
            watch_and_publish(directory, on_change, stop, debounce_s=DEBOUNCE_S, **kwargs)))
    thread.start()
    try:
        yield calls
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_each_burst_of_changes_publishes_once(tmp_path: Path) -> None:
    runs: list[float] = []
    ready = threading.Event()

    def publish() -> None:
        for path in tmp_path.iterdir():  # the build reads the files: must not retrigger
            path.read_bytes()
        runs.append(time.monotonic())
        ready.set()

    with _watching(tmp_path, publish, run_at_start=True) as calls:
        _wait_for(lambda: len(runs) == 1)  # the publish at start
        for burst in (1, 2):
            for i in range(30):  # one burst: many files, written back to back
                (tmp_path / f"part-{burst}-{i}.txt").write_text(f"{i}\n")
            (tmp_path / f"part-{burst}-0.txt").unlink()
            _wait_for(lambda burst=burst: len(runs) == 1 + burst)  # type: ignore[misc]
        time.sleep(4 * DEBOUNCE_S)  # quiet: nothing more may happen
        assert len(runs) == 3
    assert calls == [3]


def test_no_publish_at_start_when_asked(tmp_path: Path) -> None:
    runs: list[int] = []
    with _watching(tmp_path, lambda: runs.append(1), run_at_start=False):
        time.sleep(2 * DEBOUNCE_S)
        assert runs == []
        (tmp_path / "new.txt").write_text("x\n")
        _wait_for(lambda: runs == [1])


def test_a_failed_publish_does_not_end_the_watch(tmp_path: Path) -> None:
    attempts: list[int] = []

    def publish() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise InputError("half-written file")

    with _watching(tmp_path, publish, run_at_start=True):
        _wait_for(lambda: len(attempts) == 1)
        (tmp_path / "fixed.txt").write_text("x\n")
        _wait_for(lambda: len(attempts) == 2)


def test_watching_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        watch_and_publish(tmp_path / "nope", lambda: None, threading.Event(), debounce_s=1)
