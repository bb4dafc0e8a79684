"""``publish --watch DIR``: rebuild and publish when the data changes, debounced.

A watchdog observer reports changes under the directory (created, modified, moved,
deleted, closed after writing; not opens or reads, so the build reading the files does
not trigger itself). A burst of changes — a job writing many files — leads to one
publish, once the directory has been quiet for ``debounce_s`` seconds. Changes made
during a publish lead to one more publish after it. The loop runs until ``stop`` is set
(the CLI sets it on SIGINT and SIGTERM).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from bloomswarm.common.errors import BloomswarmError, ConfigError

log = logging.getLogger("bloomswarm.watch")

CHANGE_EVENTS = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_DELETED, EVENT_TYPE_CLOSED}
)
"""Event types that mean the data changed."""


class _ChangeRecorder(FileSystemEventHandler):
    """Remembers when the last change happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_change: float | None = None

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in CHANGE_EVENTS:
            with self._lock:
                self._last_change = time.monotonic()

    def take_if_quiet(self, quiet_s: float) -> bool:
        """True (and forget the change) when a change is pending and none came for
        ``quiet_s`` seconds."""
        with self._lock:
            if self._last_change is None or time.monotonic() - self._last_change < quiet_s:
                return False
            self._last_change = None
            return True


def watch_and_publish(
    directory: Path,
    on_change: Callable[[], None],
    stop: threading.Event,
    *,
    debounce_s: float,
    run_at_start: bool = True,
) -> int:
    """Call ``on_change`` after each quiet burst of changes under ``directory``.

    ``run_at_start`` calls it once before watching (publishing data that changed while
    nothing watched). A BloomswarmError from ``on_change`` is logged and watching goes on
    (the next change retries); other exceptions end the loop. Returns the number of
    calls. ConfigError when ``directory`` is not a directory.
    """
    if not directory.is_dir():
        raise ConfigError(f"cannot watch {directory}: not a directory")
    recorder = _ChangeRecorder()
    observer = Observer()
    observer.schedule(recorder, str(directory), recursive=True)
    observer.start()
    calls = 0
    tick = min(0.25, max(debounce_s / 4, 0.01))
    try:
        if run_at_start:
            calls += _call(on_change)
        log.info("watching %s (publishing %.1fs after the last change)", directory, debounce_s)
        while not stop.wait(tick):
            if recorder.take_if_quiet(debounce_s):
                calls += _call(on_change)
    finally:
        observer.stop()
        observer.join()
    return calls


def _call(on_change: Callable[[], None]) -> int:
    try:
        on_change()
    except BloomswarmError as exc:
        log.error("publish failed: %s (waiting for the next change)", exc)
    return 1
