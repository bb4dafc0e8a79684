"""The soak's lookup processes: LiveFilters on agents' data directories, checked continuously.

:func:`lookup_worker` runs in a process of its own (multiprocessing ``spawn``). It opens
one :class:`LiveFilter` per data directory it is given and, until told to stop, looks up
batches of keys in them round-robin, one data directory per batch. Each batch holds keys
common to the version serving when the batch starts (``V``) and ``V + 1`` (see
:mod:`benchmarks.soak_keys`), so every one of them must be found whether or not the
agent swaps during the batch. A miss is a false negative when the key is held by both
the version serving before the batch and the one serving after it; a miss that is not
(the agent jumped past ``V + 1``, e.g. after a restart) is counted apart.

Every lookup is timed with ``time.perf_counter_ns``; what is kept per batch is the
longest *gap*: the time between a lookup's completion and the previous one's (so a stall
of the lookup thread of any cause, e.g. a swap mapping a new file in the background
thread, or the scheduler, shows up in it). The **swap pause** of a swap is the longest
gap of the batch in which the process's swap counter moved and of the batch before it;
the gaps of the other batches are the baseline, for comparison. Since a busy machine
preempts the process too, each swap's **swap CPU** is also kept: the CPU time the
process's other threads (LiveFilter's refresh: stat, map, header check) used during
those two batches (process CPU time minus the lookup thread's), which the scheduler
does not inflate; it bounds the GIL time a swap can take from the lookup thread.

The worker sends a :class:`LookupReport` every ``report_every_s`` and a final one with
the gap statistics when it stops.
"""

from __future__ import annotations

import os
import time
import traceback
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from multiprocessing.synchronize import Event as EventType
from typing import Any

from benchmarks.soak_keys import KeyPlan, rolling_key, stable_key

SAMPLE_LIMIT = 20
"""Examples of exceptions and false negatives kept in a report."""


@dataclass
class LookupReport:
    """What one lookup process has seen so far (``final``: after it stopped)."""

    worker: int
    pid: int
    data_dirs: list[str]
    lookups: int = 0
    exceptions: int = 0
    false_negatives: int = 0
    jump_misses: int = 0
    """Misses of keys that the version serving after the batch no longer holds."""
    swaps: int = 0
    batches: int = 0
    busy_ns: int = 0
    """Time spent inside the timed lookup loops."""
    versions_seen: dict[str, list[int]] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)
    """Examples of exceptions and false negatives."""
    swap_pauses_ns: list[int] = field(default_factory=list)
    swap_cpu_ns: list[int] = field(default_factory=list)
    """Per swap: CPU time of the process's other threads during the swap's two batches."""
    baseline_gaps_ns: list[int] = field(default_factory=list)
    """Longest gap of every batch without a swap (final report only)."""
    final: bool = False
    fatal: str | None = None
    """The traceback, when the worker itself failed."""


class _CheckKeys:
    """The keys to look up while version V serves: a sample of the stable keys and of the
    rolling keys common to V and V + 1, interleaved; the last few versions are cached."""

    def __init__(self, plan: KeyPlan, sample: int) -> None:
        self.plan = plan
        self.sample = sample
        step = max(1, plan.stable // sample)
        self.stable = [stable_key(i) for i in range(0, plan.stable, step)]
        self._cache: OrderedDict[int, list[bytes]] = OrderedDict()

    def for_version(self, version: int) -> list[bytes]:
        keys = self._cache.get(version)
        if keys is None:
            common = self.plan.common_rolling(version)
            step = max(1, len(common) // self.sample)
            rolling = [rolling_key(j) for j in common[::step]]
            keys = [k for pair in zip(self.stable, rolling, strict=False) for k in pair]
            keys += self.stable[len(rolling):] + rolling[len(self.stable):]
            self._cache[version] = keys
            while len(self._cache) > 4:
                self._cache.popitem(last=False)
        return keys


@dataclass(frozen=True)
class LookupJob:
    """What one lookup process does."""

    worker: int
    data_dirs: list[str]
    plan: KeyPlan
    batch: int
    """Lookups per batch (one data directory per batch)."""
    sample: int
    """Stable keys and rolling keys to cycle through, each."""
    nice: int
    report_every_s: float


def lookup_worker(job: LookupJob, reports: Any, stop: EventType) -> None:
    """The process's entry point (see the module docstring): reports go to ``reports``
    (a multiprocessing queue) until ``stop`` is set."""
    report = LookupReport(job.worker, os.getpid(), job.data_dirs)
    try:
        if job.nice:
            os.nice(job.nice)
        _run(report, job, reports, stop)
    except BaseException:
        report.fatal = traceback.format_exc()
    finally:
        report.final = True
        reports.put(report)


def _run(report: LookupReport, job: LookupJob, reports: Any, stop: EventType) -> None:
    from bloomswarm.common.live import LiveFilter  # type: ignore[import-not-found, unused-ignore]

    lives = [LiveFilter(d, poll_interval=0.5, wait=60.0) for d in report.data_dirs]
    try:
        plan, batch, report_every_s = job.plan, job.batch, job.report_every_s
        check = _CheckKeys(plan, job.sample)
        offsets = [0] * len(lives)
        seen: list[set[int]] = [set() for _ in lives]
        swaps_at_start = sum(live.swap_count for live in lives)
        baseline = array("q")
        perf, process_cpu, thread_cpu = time.perf_counter_ns, time.process_time_ns, time.thread_time_ns
        next_report = time.monotonic() + report_every_s
        last_swaps = swaps_at_start
        previous_max = previous_other = 0
        prev = perf()
        while not stop.is_set():
            for index, live in enumerate(lives):
                before = live.version
                if before is None:  # cannot happen after warm-up; count it, do not spin
                    report.exceptions += 1
                    _sample(report, f"{report.data_dirs[index]}: no version installed")
                    continue
                seen[index].add(before)
                keys = check.for_version(before)
                start = offsets[index] % len(keys)
                chunk = keys[start:start + batch]
                offsets[index] = start + batch
                misses: list[bytes] = []
                longest = 0
                started = prev
                cpu_process, cpu_thread = process_cpu(), thread_cpu()
                for key in chunk:
                    try:
                        hit = key in live
                    except Exception as exc:  # counted, never fatal: the soak reports them
                        hit = True
                        report.exceptions += 1
                        _sample(report, f"{type(exc).__name__}: {exc}")
                    now = perf()
                    if now - prev > longest:  # noqa: PLR1730 (max() costs a call per lookup)
                        longest = now - prev
                    prev = now
                    if not hit:
                        misses.append(key)
                other = (process_cpu() - cpu_process) - (thread_cpu() - cpu_thread)
                report.busy_ns += prev - started
                report.lookups += len(chunk)
                report.batches += 1
                after = live.version or before
                seen[index].add(after)
                for key in misses:
                    if plan.held_by_all(key, before, after):
                        report.false_negatives += 1
                        _sample(report, f"false negative: {key!r} in v{before}..v{after} "
                                        f"of {report.data_dirs[index]}")
                    else:
                        report.jump_misses += 1
                swaps = sum(lv.swap_count for lv in lives)
                if swaps != last_swaps:
                    report.swap_pauses_ns.append(max(longest, previous_max))
                    report.swap_cpu_ns.append(other + previous_other)
                    last_swaps = swaps
                else:
                    baseline.append(longest)
                previous_max, previous_other = longest, other
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + report_every_s
                _progress(report, seen, last_swaps - swaps_at_start, reports)
                prev = perf()  # the report is not a lookup stall
        report.swaps = last_swaps - swaps_at_start
        report.versions_seen = {d: sorted(s) for d, s in zip(report.data_dirs, seen, strict=True)}
        report.baseline_gaps_ns = sorted(baseline)
    finally:
        for live in lives:
            live.close()


def _progress(report: LookupReport, seen: list[set[int]], swaps: int, reports: Any) -> None:
    """Send a copy (the queue pickles later, in its feeder thread); gaps go in the final one."""
    report.swaps = swaps
    versions = {d: sorted(s) for d, s in zip(report.data_dirs, seen, strict=True)}
    reports.put(replace(report, versions_seen=versions, samples=list(report.samples),
                        swap_pauses_ns=list(report.swap_pauses_ns), swap_cpu_ns=list(report.swap_cpu_ns),
                        baseline_gaps_ns=[]))


def _sample(report: LookupReport, text: str) -> None:
    if len(report.samples) < SAMPLE_LIMIT:
        report.samples.append(text)


__all__ = ["LookupJob", "LookupReport", "lookup_worker"]
