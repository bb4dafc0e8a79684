"""The demo's generated data: which uint64 keys each version holds, and building it.

Version ``v`` (1-based) holds the ``keys`` consecutive integers starting at
``base + (v - 1) * churn``: each new version drops ``churn`` keys and adds ``churn`` new
ones. Keys from ``base + (rounds - 1) * churn`` up to ``base + keys`` are in every version
of a run, so a lookup client may expect them to be found whatever version it reads; keys
from :data:`ABSENT_BASE` up are in none (their hits are false positives). With named
filters (``demo --filters N``), filter ``i`` (0-based) has its own ``base``, ``i`` times
the span of one filter's keys, so no two filters share a key (nor a file); the first
one's keys are those of the single-filter demo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bloomswarm.common.builder import FilterBuilder

ABSENT_BASE = 1 << 40
"""First key of the range no version holds."""
BUILD_CHUNK = 1 << 20
"""Keys inserted per call while building (progress is reported per chunk)."""

U64Array = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class KeyPlan:
    """The keys of every version of one demo run."""

    keys: int
    """Keys per version."""
    rounds: int
    """Versions published (v1 .. v``rounds``)."""
    base: int = 0
    """First key of v1 (0 but for the second and later named filters)."""

    def __post_init__(self) -> None:
        if self.keys < 2 or self.rounds < 1:
            raise ValueError("a key plan needs at least 2 keys and 1 round")
        if self.base < 0 or self.base + self.span > ABSENT_BASE:
            raise ValueError(f"a key plan's keys must lie below {ABSENT_BASE:,}")

    @property
    def churn(self) -> int:
        """Keys dropped (and added) by each new version: 1%, less for many rounds, so that
        at least half of the keys are in every version."""
        return max(1, self.keys // max(100, 2 * self.rounds))

    @property
    def span(self) -> int:
        """How many consecutive integers the run's versions draw their keys from."""
        return self.keys + (self.rounds - 1) * self.churn

    def for_filter(self, index: int) -> KeyPlan:
        """The plan of named filter ``index`` (0-based): as many keys, none shared."""
        return KeyPlan(self.keys, self.rounds, index * self.span)

    def version_range(self, version: int) -> tuple[int, int]:
        """``[start, stop)`` of the keys of ``version``."""
        start = self.base + (version - 1) * self.churn
        return start, start + self.keys

    def common_range(self) -> tuple[int, int]:
        """``[start, stop)`` of the keys held by every version of the run."""
        return self.base + (self.rounds - 1) * self.churn, self.base + self.keys

    def common_sample(self, size: int) -> U64Array:
        """Up to ``size`` keys held by every version, spread evenly over their range."""
        start, stop = self.common_range()
        step = max(1, (stop - start) // size)
        return np.arange(start, stop, step, dtype=np.uint64)[:size]

    @staticmethod
    def absent_sample(size: int) -> U64Array:
        """``size`` keys held by no version."""
        return np.arange(ABSENT_BASE, ABSENT_BASE + size, dtype=np.uint64)


def build_version(
    plan: KeyPlan,
    version: int,
    fpp: float,
    on_progress: Callable[[int], None] | None = None,
) -> FilterBuilder:
    """A builder sized for ``plan.keys`` at ``fpp`` holding ``version``'s keys, inserted
    as uint64 arrays (the batch path); ``on_progress(done)`` after every chunk."""
    builder = FilterBuilder.for_capacity(plan.keys, fpp)
    start, stop = plan.version_range(version)
    for low in range(start, stop, BUILD_CHUNK):
        builder.add_many(np.arange(low, min(low + BUILD_CHUNK, stop), dtype=np.uint64))
        if on_progress is not None:
            on_progress(min(low + BUILD_CHUNK, stop) - start)
    return builder
