"""A call on a thread of its own, whose result the loop thread takes when it is done."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from .worker_pool import WorkerPool

T = TypeVar("T")


class BackgroundCall(Generic[T]):
    """``fn()`` on a daemon thread of its own named ``name`` (a hung request never delays
    the process's exit; a process that exits during a delta's apply leaves only a
    temporary file, which a restart removes before it applies the delta again), or on a
    worker of ``pool`` when one is given (many calls at once share its threads), or, with
    ``thread`` False, right here (done when constructed: one code path for the loop's
    synchronous mode). :meth:`result` returns its value or raises its exception once
    :meth:`done`."""

    def __init__(self, fn: Callable[[], T], *, started_at: float, name: str = "bloomswarm-poll",
                 thread: bool = True, pool: WorkerPool | None = None) -> None:
        self.started_at = started_at
        """When the call started (the caller's clock)."""
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        if thread and pool is not None:
            pool.submit(lambda: self._run(fn))
        elif thread:
            threading.Thread(target=self._run, args=(fn,), name=name, daemon=True).start()
        else:
            self._run(fn)

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._value = fn()
        except Exception as exc:  # handed to the loop thread by result()
            self._error = exc
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the call has finished (at most ``timeout`` seconds); whether it has."""
        return self._done.wait(timeout)

    def result(self) -> T:
        if not self._done.is_set():
            raise RuntimeError("the call has not finished")
        if self._error is not None:
            raise self._error
        return cast(T, self._value)


__all__ = ["BackgroundCall"]
