"""The demo's lookup client: a separate process that queries one agent's data directory
(or one named filter of it) through :class:`~bloomswarm.common.live.LiveFilter` while
versions are swapped under it.

It looks up keys held by every version of the run in batches (``contains_many``) and
checks every answer: a key reported absent is a false negative, an exception is an error;
both must stay 0. Now and then a batch of keys held by no version is looked up to measure
the false-positive rate, a fresh batch each time (:class:`_AbsentKeys`), so that
``absent_lookups`` counts distinct keys, each queried once. Until the first version is
installed it waits (not an error). Reports go to the parent through a pipe about twice a
second, and once more at the end.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from .demo_data import ABSENT_BASE, KeyPlan, U64Array

BATCH = 4096
"""Keys per ``contains_many`` call."""
SAMPLE = 1 << 20
"""Distinct present keys the client cycles through."""
ABSENT_EVERY = 16
"""One batch of (fresh) absent keys after this many batches of present keys."""
REPORT_INTERVAL_S = 0.5
STOP = "stop"


@dataclass(frozen=True)
class ClientReport:
    """The client's counters so far (all cumulative except ``rate``)."""

    pid: int
    version: int | None
    """Version answering now (None before the first one is installed)."""
    lookups: int
    rate: float
    """Lookups/s over the last reporting interval."""
    mean_rate: float
    """Lookups/s since the first version was installed."""
    errors: int
    false_negatives: int
    absent_lookups: int
    """Distinct keys held by no version looked up (each once)."""
    false_positives: int
    swaps: int
    """Versions swapped in, the first one included."""
    versions: tuple[int, ...]
    """Every version answered from, in order."""
    last_error: str | None = None
    final: bool = False

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / self.absent_lookups if self.absent_lookups else 0.0


def client_main(directory: str, keys: int, rounds: int, conn: Connection, filter: str | None = None) -> None:
    """The client process: look up ``directory`` (named filter ``filter`` of it, when
    given) until the parent sends :data:`STOP` (or goes away)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it; Ctrl-C goes to the parent
    from bloomswarm.common.live import LiveFilter

    plan = KeyPlan(keys, rounds)
    present, absent = plan.common_sample(SAMPLE), _AbsentKeys(BATCH)
    batches = [present[i:i + BATCH] for i in range(0, len(present), BATCH)]
    counters = _Counters(os.getpid())
    parent = os.getppid()
    live = LiveFilter(directory, filter=filter, poll_interval=0.2)
    try:
        next_report = time.monotonic()
        for batch_index in _cycle(len(batches)):
            now = time.monotonic()
            if now >= next_report:
                if os.getppid() != parent or (conn.poll() and conn.recv() == STOP):
                    break
                conn.send(counters.report(live.version, now))
                next_report = now + REPORT_INTERVAL_S
            if live.version is None:
                time.sleep(0.05)
                continue
            counters.started(now)
            counters.look_up(live, batches[batch_index])
            if batch_index % ABSENT_EVERY == 0:
                counters.look_up_absent(live, absent.next_batch())
        with contextlib.suppress(OSError):
            conn.send(counters.report(live.version, time.monotonic(), final=True))
    finally:
        live.close()
        conn.close()


def _cycle(count: int) -> Iterator[int]:
    while True:
        yield from range(count)


class _AbsentKeys:
    """Keys held by no version, ``size`` new ones per batch: batch ``n`` is the consecutive
    keys from ``ABSENT_BASE + n * size``. Filled into one reused array (an addition, no
    allocation), so a fresh batch costs next to nothing beside its lookups."""

    def __init__(self, size: int) -> None:
        self._offsets = np.arange(size, dtype=np.uint64)
        self._keys = np.empty(size, dtype=np.uint64)
        self._start = ABSENT_BASE

    def next_batch(self) -> U64Array:
        """The next ``size`` keys, none returned before (the array is reused: valid until
        the next call)."""
        np.add(self._offsets, np.uint64(self._start), out=self._keys)
        self._start += len(self._keys)
        return self._keys


class _Counters:
    """The client's tallies; :meth:`report` snapshots them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.lookups = self.errors = self.false_negatives = 0
        self.absent_lookups = self.false_positives = 0
        self.versions: list[int] = []
        self.last_error: str | None = None
        self.first: float | None = None
        self._window = (time.monotonic(), 0)

    def started(self, now: float) -> None:
        if self.first is None:
            self.first = now
            self._window = (now, self.lookups)

    def _seen(self, version: int | None) -> None:
        if version is not None and (not self.versions or self.versions[-1] != version):
            self.versions.append(version)

    def look_up(self, live: Any, keys: Any) -> None:
        try:
            found = live.contains_many(keys)
            self._seen(live.version)
            self.false_negatives += len(keys) - int(found.sum())
        except Exception as exc:  # every failure counts; the client keeps going
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        self.lookups += len(keys)

    def look_up_absent(self, live: Any, keys: Any) -> None:
        try:
            self.false_positives += int(live.contains_many(keys).sum())
            self.absent_lookups += len(keys)
        except Exception as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        self.lookups += len(keys)

    def report(self, version: int | None, now: float, *, final: bool = False) -> ClientReport:
        since, before = self._window
        rate = (self.lookups - before) / (now - since) if now > since else 0.0
        self._window = (now, self.lookups)
        mean = self.lookups / (now - self.first) if self.first is not None and now > self.first else 0.0
        self._seen(version)
        return ClientReport(self.pid, version, self.lookups, rate, mean, self.errors, self.false_negatives,
                            self.absent_lookups, self.false_positives, len(self.versions),
                            tuple(self.versions), self.last_error, final)


class LookupClient:
    """Runs :func:`client_main` in a ``spawn`` process and collects its reports.

    The process is started with SIGINT ignored (it inherits that), so a Ctrl-C on the
    terminal reaches only the demo, which then stops the client with :meth:`stop`.
    ``filter`` names the filter of ``directory`` to read (None: a single-filter one); the
    keys it expects are ``plan``'s with base 0, i.e. the single or first named filter's.
    """

    def __init__(self, directory: Path, plan: KeyPlan, filter: str | None = None) -> None:
        self.directory = directory
        self.plan = plan
        self.filter = filter
        self.latest: ClientReport | None = None
        self._process: Any = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> LookupClient:
        context = mp.get_context("spawn")
        ours, theirs = context.Pipe()
        self._conn = ours
        self._process = context.Process(
            target=client_main, name="bloomswarm-demo-lookup-client",
            args=(str(self.directory), self.plan.keys, self.plan.rounds, theirs, self.filter), daemon=True)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._process.start()
        finally:
            signal.signal(signal.SIGINT, previous)
            theirs.close()
        return self

    def poll(self) -> ClientReport | None:
        """Collect the reports sent so far; return the latest (None before the first)."""
        conn = self._conn
        with contextlib.suppress(EOFError, OSError):
            while conn is not None and conn.poll():
                self.latest = conn.recv()
        return self.latest

    def check_alive(self) -> None:
        """RuntimeError when the client process died."""
        if self._process is not None and not self._process.is_alive():
            self.poll()
            raise RuntimeError(f"the lookup client exited (code {self._process.exitcode})")

    def stop(self, timeout_s: float = 10.0) -> ClientReport | None:
        """Ask the client to stop, wait for its final report and exit (terminate, then kill,
        it by PID if it does not); return its last report."""
        process, conn = self._process, self._conn
        if process is None:
            return self.latest
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(STOP)
        deadline = time.monotonic() + timeout_s
        while process.is_alive() and time.monotonic() < deadline:
            self.poll()
            process.join(timeout=0.1)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
        self.poll()
        if conn is not None:
            conn.close()
        self._process = self._conn = None
        return self.latest
