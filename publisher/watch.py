"""``publish --watch DIR``: rebuild and publish when the data changes, debounced.

A watchdog observer reports changes under the directory (created, modified, moved,
deleted, closed after writing; not opens or reads, so the build reading the files does
not trigger itself). A burst of changes — a job writing many files — leads to one
publish, once the directory has been quiet for ``debounce_s`` seconds. Changes made
during a publish lead to one more publish after it.

The directory itself is checked at every tick: when it disappears the watcher says so
once and publishes nothing; when it comes back (or was replaced by another directory,
e.g. ``rm -rf DIR; mkdir DIR`` or a rename over it) the observer is re-armed on the new
directory and its content is published after the debounce.

The loop runs until ``stop`` is set. :func:`stop_on_signals` (the CLI's SIGINT and
SIGTERM handling) also interrupts a publish under way: signal handlers run in the main
thread, which is the one running the publish, so the publish aborts between (or inside)
its storage calls. The publish protocol (:mod:`bloomswarm.publisher.publish`) makes that
as safe as the process dying at that point: latest.json moves by one compare-and-swap,
only to a version whose manifest and signature exist; what an interrupted attempt leaves
(an unreferenced attempt folder, an unsigned manifest, an unfinished multipart upload) is
never made live and ``retention`` removes it after its grace period.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

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
from watchdog.observers.api import BaseObserver

from bloomswarm.common.errors import BloomswarmError, ConfigError

log = logging.getLogger("bloomswarm.watch")

CHANGE_EVENTS = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_DELETED, EVENT_TYPE_CLOSED}
)
"""Event types that mean the data changed."""


class _PublishInterrupted(KeyboardInterrupt):
    """Raised inside a publish by :meth:`WatchStop.request` when the stop request comes
    from the thread running that publish (a signal handler): the publish aborts at once."""


class WatchStop(threading.Event):
    """A stop request for :func:`watch_and_publish` that can also interrupt a publish.

    Setting it (``set`` or ``request``) ends the watch once no publish is running.
    :meth:`request` called in the thread that is inside ``on_change`` — what a signal
    handler does, as handlers run in the main thread — raises :class:`_PublishInterrupted`
    there, so that the publish under way aborts instead of running to its end.
    """

    def __init__(self) -> None:
        super().__init__()
        self._publishing_in: int | None = None

    def request(self) -> None:
        """Ask the watcher to stop; see the class docstring."""
        self.set()
        if self._publishing_in == threading.get_ident():
            raise _PublishInterrupted

    @contextlib.contextmanager
    def publishing(self) -> Iterator[None]:
        """Marks the calling thread as running a publish for the duration of the block."""
        self._publishing_in = threading.get_ident()
        try:
            if self.is_set():  # requested between the watcher's check and here: don't start
                raise _PublishInterrupted
            yield
        finally:
            self._publishing_in = None


@contextlib.contextmanager
def stop_on_signals(
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> Iterator[WatchStop]:
    """A :class:`WatchStop` requested by ``signals`` (main thread only).

    The first signal ends the watch: at once when idle, and by interrupting the publish
    when one is under way (the watcher then returns normally). A second signal raises
    KeyboardInterrupt wherever the main thread is, e.g. when aborting the interrupted
    upload itself waits for an unresponsive S3. The previous handlers come back after.
    """
    stop = WatchStop()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.request()

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _ChangeRecorder(FileSystemEventHandler):
    """Remembers when the last change happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_change: float | None = None

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in CHANGE_EVENTS:
            self.note()

    def note(self) -> None:
        """Record a change now."""
        with self._lock:
            self._last_change = time.monotonic()

    def forget(self) -> None:
        """Drop the pending change, if any."""
        with self._lock:
            self._last_change = None

    def take_if_quiet(self, quiet_s: float) -> bool:
        """True (and forget the change) when a change is pending and none came for
        ``quiet_s`` seconds."""
        with self._lock:
            if self._last_change is None or time.monotonic() - self._last_change < quiet_s:
                return False
            self._last_change = None
            return True


def _identity(directory: Path) -> tuple[int, int] | None:
    """(device, inode) of ``directory``; None when it is not (or no longer) a directory."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class _Watched:
    """The watched directory and the observer on it, re-armed when the directory goes and
    comes back or is replaced (an inotify watch follows the old directory, or dies with it)."""

    def __init__(self, directory: Path, recorder: _ChangeRecorder) -> None:
        self.directory = directory
        self.recorder = recorder
        self._observer: BaseObserver | None = None
        self._identity: tuple[int, int] | None = None
        self._state = "watched"  # or "missing", "unwatchable": logged once per change of state

    def arm(self) -> None:
        """Start watching the directory as it is now. OSError when that fails."""
        self.disarm()
        self._identity = _identity(self.directory)  # before scheduling: a race re-arms again
        observer = Observer()
        observer.schedule(self.recorder, str(self.directory), recursive=True)
        observer.start()
        self._observer = observer

    def disarm(self) -> None:
        if self._observer is not None:
            observer, self._observer = self._observer, None
            observer.stop()
            observer.join()

    def _alive(self) -> bool:
        return self._observer is not None and all(e.is_alive() for e in self._observer.emitters)

    def follow(self) -> bool:
        """Notice the directory going, coming back or being replaced, and re-arm the
        observer. True while the directory is there and watched."""
        identity = _identity(self.directory)
        if identity is None:
            if self._state != "missing":
                log.warning("watched directory %s is gone: not publishing until it is back",
                            self.directory)
                self._state = "missing"
            self.disarm()
            self.recorder.forget()  # the deletion itself publishes nothing
            return False
        if identity == self._identity and self._alive():
            return True
        try:
            self.arm()
        except OSError as exc:
            self.disarm()
            if self._state != "unwatchable":
                log.warning("cannot watch %s: %s (trying again)", self.directory, exc)
                self._state = "unwatchable"
            return False
        if self._state == "watched":
            log.info("watched directory %s was replaced: watching the new one", self.directory)
        else:
            log.info("watched directory %s is back: watching it again", self.directory)
        self._state = "watched"
        self.recorder.note()  # its content is new to us: publish it after the debounce
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
    nothing watched). A BloomswarmError or OSError from ``on_change`` (a half-written
    file, S3 unreachable, a full disk, a vanished work directory) is logged as that
    round's failure and watching goes on (the next change retries); other exceptions end
    the loop. While ``directory`` is missing nothing is called; once it is back its data
    is published (module docstring). When ``stop`` is a :class:`WatchStop` whose request
    interrupts ``on_change``, the watch ends normally. Returns the number of calls.
    ConfigError when ``directory`` is not a directory at the start.
    """
    if not directory.is_dir():
        raise ConfigError(f"cannot watch {directory}: not a directory")
    recorder = _ChangeRecorder()
    watched = _Watched(directory, recorder)
    watched.arm()
    calls = 0
    tick = min(0.25, max(debounce_s / 4, 0.01))
    try:
        if run_at_start and not stop.is_set():
            calls += _call(on_change, stop)
        log.info("watching %s (publishing %.1fs after the last change)", directory, debounce_s)
        while not stop.wait(tick):
            if watched.follow() and recorder.take_if_quiet(debounce_s):
                calls += _call(on_change, stop)
        log.info("stop requested: no longer watching %s", directory)
    except _PublishInterrupted:
        log.warning("stop requested during a publish: interrupted it; a half-done attempt is "
                    "never made live and retention removes what it left")
    finally:
        watched.disarm()
    return calls


def _call(on_change: Callable[[], None], stop: threading.Event) -> int:
    publishing = stop.publishing() if isinstance(stop, WatchStop) else contextlib.nullcontext()
    try:
        with publishing:
            on_change()
    except (BloomswarmError, OSError) as exc:
        log.error("publish failed: %s (waiting for the next change)", exc)
    return 1
