"""WorkerPool: calls run on a bounded set of reused threads, in the order submitted.

The direct transfer fetches every small file of an agent of many filters at once: a
hundred filters published together are a hundred downloads. A thread each would start a
hundred threads in one tick, all contending with the agent's loop for the interpreter,
and open a hundred connections to the origin at once. A :class:`WorkerPool` runs them on
at most ``size`` threads instead, started when work waits and no thread is free, and
ended after ``idle_s`` without work (an idle agent keeps none).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("bloomswarm.agent.worker_pool")

IDLE_S = 5.0
"""How long a worker thread waits for work before it ends."""


class WorkerPool:
    """Runs submitted calls on at most ``size`` daemon threads named ``name-N``, first
    submitted first started. Thread-safe. A call's exception is logged and the worker
    goes on; a caller that needs the outcome records it in the call."""

    def __init__(self, size: int, *, name: str, idle_s: float = IDLE_S) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one thread, got {size}")
        self.size = size
        self.name = name
        self.idle_s = idle_s
        self._pending: collections.deque[Callable[[], None]] = collections.deque()
        self._changed = threading.Condition()
        self._threads = 0
        self._idle = 0
        self._started = 0

    def submit(self, call: Callable[[], None]) -> None:
        """Run ``call`` on a worker as soon as one is free."""
        with self._changed:
            self._pending.append(call)
            if len(self._pending) > self._idle and self._threads < self.size:
                self._threads += 1
                self._started += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._started}", daemon=True).start()
            else:
                self._changed.notify()

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        with self._changed:
            return self._threads

    @property
    def idle(self) -> int:
        """Worker threads waiting for work now."""
        with self._changed:
            return self._idle

    @property
    def waiting(self) -> int:
        """Calls submitted and not yet started."""
        with self._changed:
            return len(self._pending)

    def _work(self) -> None:
        with self._changed:
            while True:
                self._idle += 1
                has_work = self._changed.wait_for(lambda: bool(self._pending), timeout=self.idle_s)
                self._idle -= 1
                if not has_work:
                    self._threads -= 1
                    return
                call = self._pending.popleft()
                self._changed.release()
                try:
                    call()
                except Exception:  # the caller's bug: the pool keeps its workers
                    log.exception("a call on worker pool %s failed", self.name)
                finally:
                    self._changed.acquire()


__all__ = ["IDLE_S", "WorkerPool"]
