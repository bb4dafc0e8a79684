"""Progress of long work: a live bar on a terminal, periodic plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType

log = logging.getLogger("bloomswarm.progress")


class Progress:
    """Counts units of work (keys, bytes) and reports rate and ETA.

    Use as a context manager; call :meth:`advance` from one thread. On a terminal
    (stderr is a TTY) a rich progress bar is drawn; otherwise one log line is written every
    ``interval`` seconds and one at the end, so CI logs and journald stay readable.
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "keys",
                 interval: float = 5.0, enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._interval = interval
        self._enabled = enabled
        self._started = time.monotonic()
        self._last_log = self._started
        self._bar: object | None = None
        self._task: object | None = None

    def __enter__(self) -> Progress:
        self._started = self._last_log = time.monotonic()
        if self._enabled and sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=True,
            )
            bar.start()
            self._task = bar.add_task(self.label, total=self.total, rate="")
            self._bar = bar
        return self

    def advance(self, count: int) -> None:
        """Record ``count`` more units done."""
        self.done += count
        now = time.monotonic()
        if self._bar is not None:
            from rich.progress import Progress as RichProgress
            from rich.progress import TaskID

            assert isinstance(self._bar, RichProgress)
            self._bar.update(TaskID(self._task), completed=self.done,  # type: ignore[arg-type]
                             rate=f"{self.rate() / 1e6:.2f}M {self.unit}/s")
        elif self._enabled and now - self._last_log >= self._interval:
            self._last_log = now
            log.info("%s", self.describe())

    def rate(self) -> float:
        """Units per second so far."""
        return self.done / max(time.monotonic() - self._started, 1e-9)

    def describe(self) -> str:
        """One line: done, total, rate and ETA."""
        rate = self.rate()
        text = f"{self.label}: {self.done:,} {self.unit}"
        if self.total:
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            text += f" of {self.total:,} ({100 * self.done / self.total:.1f}%), ETA {eta:.0f}s"
        return text + f", {rate / 1e6:.2f}M {self.unit}/s"

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            from rich.progress import Progress as RichProgress

            assert isinstance(self._bar, RichProgress)
            self._bar.stop()
        if self._enabled and exc_type is None:
            log.info("%s, done in %.1fs", self.describe(), time.monotonic() - self._started)
