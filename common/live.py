"""LiveFilter: the filter of an agent's data directory, following every hot swap.

The agent flips the ``current`` symlink (see :mod:`.datadir`). LiveFilter notices a flip
through a watchdog (inotify) event, or, as a fallback that always runs, a cheap ``stat``
of ``current/filter.bsf`` every ``poll_interval`` seconds. It then maps and validates the
new file and swaps one reference. A lookup reads that reference once, so it answers
wholly from the old or wholly from the new version, never from a mixture. The old
mapping is released when the last lookup still using it returns. A new file that fails
validation, or is no regular file (a FIFO is refused at once, never waited on), is refused
(logged, counted) and the old one keeps serving; it is not opened again until ``current``
names another file. A new file that cannot be opened for a
passing reason (an OSError: ENOMEM from mmap, EMFILE, the file replaced meanwhile) is not
refused: the old one keeps serving and the next refresh (the next poll or watch event)
tries again. None of this touches the lookup path, which reads one reference.

An agent that follows named filters keeps one data directory per filter
(``DATA_DIR/filters/NAME``): ``LiveFilter(DATA_DIR, filter=NAME)`` follows that one.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .datadir import DataDir, filter_data_dir
from .errors import FormatError, NotReadyError
from .fastpath import Engine, resolve_engine
from .keys import Key
from .reader import Filter, reject_single_key

log = logging.getLogger("bloomswarm.live")

SwapCallback = Callable[[Filter | None, Filter], None]
"""Called as ``callback(old, new)`` after a swap; ``old`` is None for the first version."""


class _NoVersion:
    """Stands in for the filter until the first version is installed."""

    def __contains__(self, key: object) -> bool:
        raise NotReadyError("no filter version is installed yet")

    def contains_many(self, keys: object, *, threads: int = 1) -> npt.NDArray[np.bool_]:
        raise NotReadyError("no filter version is installed yet")


class LiveFilter:
    """Membership queries against whatever version ``directory/current`` points at.

    Thread-safe. ``key in live`` raises NotReadyError until a version is installed
    (pass ``wait`` to block for one at construction). With ``filter=NAME``, ``directory``
    is an agent's data directory holding named filters and the one followed is
    ``directory/filters/NAME``; an invalid name raises ValueError here.

    The constructor also raises ValueError when ``poll_interval`` is not a positive, finite
    number of seconds, and ConfigError when ``engine`` is unknown or unavailable ("c"
    without the C extension): a bad argument is refused at once, never counted as a
    refused file.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        filter: str | None = None,
        poll_interval: float = 1.0,
        watch: bool = True,
        verify: bool = False,
        engine: Engine = "auto",
        wait: float = 0.0,
    ) -> None:
        if not (isinstance(poll_interval, (int, float)) and math.isfinite(poll_interval)
                and poll_interval > 0):  # 0, negative or NaN would make the poll thread spin
            raise ValueError(
                f"poll_interval must be a positive, finite number of seconds, got {poll_interval!r}"
            )
        resolve_engine(engine)  # ConfigError now, not a refusal of every version later
        self.filter_name = filter
        """The named filter followed, None for a single-filter data directory."""
        self.directory = Path(directory) if filter is None else filter_data_dir(Path(directory), filter)
        """The data directory followed (``.../filters/NAME`` for a named filter)."""
        self.poll_interval = poll_interval
        self._verify = verify
        self._engine: Engine = engine
        self._current: Filter | _NoVersion = _NoVersion()
        self._lock = threading.Lock()
        self._callbacks: list[SwapCallback] = []
        self._rejected: tuple[int, int] | None = None
        """The file ``current`` names that failed validation (not opened again)."""
        self._failing: tuple[int, int] | None = None
        """The file ``current`` names that could not be opened (retried; logged once)."""
        self._stop = threading.Event()
        self.swap_count = 0
        """Swaps done since construction (the first version counts)."""
        self.rejected_count = 0
        """New files refused: they failed validation or are not regular files (a FIFO)."""
        self.open_error_count = 0
        """Attempts to open a new file that failed with an OSError (each retried later)."""
        self.last_error: str | None = None
        """Why the most recent new file was refused or could not be opened, if one was."""
        self.refresh()
        deadline = time.monotonic() + wait
        while isinstance(self._current, _NoVersion) and time.monotonic() < deadline:
            time.sleep(min(0.05, poll_interval))
            self.refresh()
        self._watch = watch
        self._observer = _start_observer(self.directory, self.refresh) if watch else None
        self._poller = threading.Thread(target=self._poll, name="livefilter-poll", daemon=True)
        self._poller.start()
        _FOLLOWING.add(self)

    # -- queries -------------------------------------------------------------------

    def __contains__(self, key: Key) -> bool:
        return key in self._current

    def contains_many(
        self, keys: Iterable[Key] | np.ndarray, *, threads: int = 1
    ) -> npt.NDArray[np.bool_]:
        """Batch membership, all answered from one version (see Filter.contains_many:
        ``threads``, and TypeError for one str or bytes key passed on its own, raised
        even before the first version). NotReadyError until a version is installed."""
        reject_single_key(keys)
        return self._current.contains_many(keys, threads=threads)

    @property
    def filter(self) -> Filter:
        """The filter serving now: a snapshot that stays valid while you hold it."""
        current = self._current
        if isinstance(current, _NoVersion):
            raise NotReadyError("no filter version is installed yet")
        return current

    @property
    def version(self) -> int | None:
        """The version serving now, or None before the first one."""
        current = self._current
        return None if isinstance(current, _NoVersion) else current.version

    def on_swap(self, callback: SwapCallback) -> None:
        """Call ``callback(old, new)`` after every future swap (from a background thread)."""
        with self._lock:
            self._callbacks.append(callback)

    # -- swapping ------------------------------------------------------------------

    def refresh(self) -> bool:
        """Check ``current`` now and swap if it names a new, valid file; True if swapped."""
        path = DataDir(self.directory).current_filter
        with self._lock:
            try:
                stat = os.stat(path)
            except OSError:
                return False
            identity = (stat.st_dev, stat.st_ino)
            if identity == self._rejected:
                return False
            # ``current`` names another file: a refusal was about one it no longer names
            # (whose inode number a new file may even reuse).
            self._rejected = None
            current = self._current
            if isinstance(current, Filter) and current.identity == identity:
                self._failing = None
                return False
            try:
                new = Filter.open(path, verify=self._verify, engine=self._engine)
            except FormatError as exc:  # the content: not a valid filter file (or a FIFO)
                self._rejected, self._failing = identity, None
                self.rejected_count += 1
                self.last_error = f"{path}: {exc}"
                log.error("refusing new filter file, keeping the current one: %s", self.last_error)
                return False
            except OSError as exc:  # passing (ENOMEM, EMFILE, ...): the next refresh retries
                self.open_error_count += 1
                self.last_error = f"{path}: {exc}"
                level = logging.DEBUG if identity == self._failing else logging.WARNING
                self._failing = identity
                log.log(level, "cannot open new filter file, keeping the current one, "
                        "retrying at the next refresh: %s", self.last_error)
                return False
            self._failing = None
            if isinstance(current, Filter) and new.identity == current.identity:
                return False
            old = None if isinstance(current, _NoVersion) else current
            self._current = new
            self.swap_count += 1
            callbacks = list(self._callbacks)
        log.info("swapped to filter version %s (%s)", new.version, path)
        for callback in callbacks:
            try:
                callback(old, new)
            except Exception:
                log.exception("on_swap callback failed")
        return True

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.refresh()
            except Exception:  # keep the fallback alive whatever happens
                log.exception("LiveFilter poll failed")

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Stop watching (idempotent). The current filter stays usable until dropped."""
        self._stop.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
        if self._poller.is_alive() and self._poller is not threading.current_thread():
            self._poller.join(timeout=5)

    def _follow_again_after_fork(self) -> None:
        """In a forked child: the threads that watched ``current`` stayed in the parent;
        start this process's own (a pre-fork server's workers follow swaps too). Unless it
        was closed before the fork."""
        self._lock = threading.Lock()  # a parent's thread may have held it at the fork
        if self._stop.is_set():
            return
        self._stop = threading.Event()
        self._observer = _start_observer(self.directory, self.refresh) if self._watch else None
        self._poller = threading.Thread(target=self._poll, name="livefilter-poll", daemon=True)
        self._poller.start()

    def __enter__(self) -> LiveFilter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FOLLOWING: weakref.WeakSet[LiveFilter] = weakref.WeakSet()
"""Every LiveFilter of this process, to start following again in a forked child."""


def _after_fork_in_child() -> None:
    for live in list(_FOLLOWING):
        live._follow_again_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _start_observer(directory: Path, refresh: Callable[[], bool]) -> Any:
    """Start a watchdog observer that calls ``refresh`` when ``current`` changes.

    Returns None (the stat fallback alone then notices swaps) when watchdog is missing or
    the directory cannot be watched yet.
    """
    try:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:  # pragma: no cover - watchdog is a dependency
        return None

    class _CurrentChanged(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            for changed in (event.src_path, getattr(event, "dest_path", "")):
                if DataDir.is_current_link(changed):
                    try:
                        refresh()
                    except Exception:
                        log.exception("LiveFilter refresh after a watchdog event failed")
                    return

    observer = Observer()
    try:
        observer.schedule(_CurrentChanged(), str(directory), recursive=False)
        observer.daemon = True
        observer.start()
    except OSError as exc:
        log.warning("cannot watch %s (%s); relying on polling", directory, exc)
        return None
    return observer
