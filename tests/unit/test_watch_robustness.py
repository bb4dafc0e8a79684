"""Watch mode keeps publishing through a replaced directory and failed rounds, and stops
promptly on a signal even in the middle of a publish."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.common.bucket_layout import LATEST_KEY
from bloomswarm.common.errors import InputError
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.config import PublisherConfig
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.versions import newest_manifests, scan_versions
from bloomswarm.publisher.watch import watch_and_publish
from tests.unit.publishing_helpers import latest_pointer, make_builder, make_config, new_key

DEBOUNCE_S = 0.3
KEY = new_key()
PUBLIC = [KEY.public_key()]


def _wait_for(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def _write_keys(directory: Path, count: int, name: str = "keys.txt") -> None:
    (directory / name).write_text("".join(f"key-{i}\n" for i in range(count)))


class _Publisher:
    """What the CLI's publish round does, in short: read the keys under the directory,
    build, publish to a MemoryObjectStore."""

    def __init__(self, directory: Path, config: PublisherConfig,
                 store: MemoryObjectStore | None = None) -> None:
        self.directory, self.config = directory, config
        self.store = store if store is not None else MemoryObjectStore()
        self.rounds = 0

    def __call__(self) -> None:
        self.rounds += 1
        if not self.directory.is_dir():
            raise InputError(f"input not found: {self.directory}")
        keys = [line for path in sorted(self.directory.iterdir())
                for line in path.read_text().splitlines()]
        publish_filter(self.store, self.config, make_builder(keys, capacity=100_000), KEY,
                       "files-sha256:test", progress=False)

    def key_counts(self) -> list[int]:
        """Key counts of the published versions, oldest first."""
        return [m.filter.key_count for m in reversed(newest_manifests(self.store, 100))]


@contextmanager
def _watching(directory: Path, on_change: Callable[[], None]) -> Iterator[threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=watch_and_publish, args=(directory, on_change, stop),
                              kwargs={"debounce_s": DEBOUNCE_S}, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_a_directory_removed_and_recreated_is_published_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bloomswarm.watch")
    data = tmp_path / "in"
    data.mkdir()
    _write_keys(data, 100)
    publisher = _Publisher(data, make_config())
    with _watching(data, publisher) as thread:
        _wait_for(lambda: publisher.key_counts() == [100])
        shutil.rmtree(data)
        time.sleep(6 * DEBOUNCE_S)
        assert publisher.rounds == 1  # nothing to publish while it is missing
        data.mkdir()
        _write_keys(data, 200)
        _wait_for(lambda: publisher.key_counts() == [100, 200])
        _write_keys(data, 300, "more.txt")  # the new directory is watched
        _wait_for(lambda: publisher.key_counts() == [100, 200, 500])
        assert thread.is_alive()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "gone" in r.message]
    back = [r for r in caplog.records if r.levelno == logging.INFO and "is back" in r.message]
    assert len(warnings) == 1 and len(back) == 1


def test_a_directory_replaced_at_once_is_followed(tmp_path: Path) -> None:
    data, fresh = tmp_path / "in", tmp_path / "in.new"
    data.mkdir()
    _write_keys(data, 100)
    publisher = _Publisher(data, make_config())
    with _watching(data, publisher):
        _wait_for(lambda: publisher.key_counts() == [100])
        fresh.mkdir()
        _write_keys(fresh, 250)
        shutil.rmtree(data)
        fresh.rename(data)  # a job that swaps in a new directory: no gap to notice
        _wait_for(lambda: publisher.key_counts() == [100, 250])
        shutil.rmtree(data)
        data.mkdir()  # removed and recreated back to back (the inode may even be reused)
        _write_keys(data, 400)
        _wait_for(lambda: publisher.key_counts() == [100, 250, 400])


def test_an_oserror_in_one_round_does_not_end_the_watch(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data, work = tmp_path / "in", tmp_path / "work"
    data.mkdir()
    work.mkdir()
    _write_keys(data, 100)
    publisher = _Publisher(data, make_config(work_dir=work))
    with _watching(data, publisher) as thread:
        _wait_for(lambda: publisher.key_counts() == [100])
        work.rmdir()  # a tmp cleaner: the next round fails with FileNotFoundError
        _write_keys(data, 200)
        _wait_for(lambda: publisher.rounds == 2)
        time.sleep(4 * DEBOUNCE_S)
        assert thread.is_alive()
        assert publisher.key_counts() == [100]
        work.mkdir()
        _write_keys(data, 300)
        _wait_for(lambda: publisher.key_counts() == [100, 300])
    assert any(r.levelno == logging.ERROR and "publish failed" in r.message
               for r in caplog.records)


def test_an_oserror_raised_by_the_publish_function_is_one_failed_round(tmp_path: Path) -> None:
    attempts: list[int] = []

    def publish() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError(28, "No space left on device")

    with _watching(tmp_path, publish):
        _wait_for(lambda: len(attempts) == 1)
        (tmp_path / "next.txt").write_text("x\n")
        _wait_for(lambda: len(attempts) == 2)


class _StalledStore(MemoryObjectStore):
    """S3 that stops answering once the filter upload starts."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = threading.Event()

    def upload_file(self, key: str, path: Path, **kwargs: Any) -> str:
        self.stalled.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a socket read that gets no answer
            time.sleep(0.5)
        return super().upload_file(key, path, **kwargs)


def _signal_when(event: threading.Event, signum: int) -> threading.Thread:
    """Send ``signum`` to this process shortly after ``event`` is set."""

    def send() -> None:
        if event.wait(30):
            time.sleep(0.2)
            os.kill(os.getpid(), signum)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_interrupts_a_stalled_publish(tmp_path: Path, signum: int) -> None:
    from bloomswarm.publisher.watch import stop_on_signals

    data = tmp_path / "in"
    data.mkdir()
    _write_keys(data, 100)
    store = _StalledStore()
    publisher = _Publisher(data, make_config(), store)
    before = signal.getsignal(signum)
    with stop_on_signals() as stop:
        sender = _signal_when(store.stalled, signum)
        started = time.monotonic()
        calls = watch_and_publish(data, publisher, stop, debounce_s=DEBOUNCE_S)
        took = time.monotonic() - started
    sender.join(timeout=5)
    assert took < 10, f"the watcher took {took:.1f}s to stop"
    assert calls == 0  # interrupted: returned normally, nothing published
    assert signal.getsignal(signum) == before
    # the bucket stays consistent: no claimed version, latest.json never written
    assert not store.exists(LATEST_KEY)
    assert not any(folder.claimed for folder in scan_versions(store).values())


def test_a_signal_while_idle_stops_the_watch(tmp_path: Path) -> None:
    from bloomswarm.publisher.watch import stop_on_signals

    data = tmp_path / "in"
    data.mkdir()
    _write_keys(data, 100)
    publisher = _Publisher(data, make_config())
    published = threading.Event()

    def publish() -> None:
        publisher()
        published.set()

    with stop_on_signals() as stop:
        _signal_when(published, signal.SIGTERM)  # after the publish at start: idle
        started = time.monotonic()
        calls = watch_and_publish(data, publish, stop, debounce_s=DEBOUNCE_S)
        assert time.monotonic() - started < 10
    assert calls == 1
    assert latest_pointer(publisher.store, PUBLIC).version == 1


def test_a_second_signal_raises_keyboard_interrupt() -> None:
    from bloomswarm.publisher.watch import stop_on_signals

    with pytest.raises(KeyboardInterrupt), stop_on_signals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_for(stop.is_set)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
