"""Exponential backoff with jitter, for retries after failures.

The n-th failure in a row waits ``min(maximum, initial * 2**(n-1))`` seconds, scaled by a
random factor in [0.5, 1] so a fleet that failed together does not retry together. A
success resets the count.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays for consecutive failures. Not thread-safe (one per retry loop)."""

    def __init__(self, initial: float, maximum: float, *, rng: random.Random | None = None) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"need 0 < initial <= maximum, got {initial} and {maximum}")
        self.initial = initial
        self.maximum = maximum
        self.failures = 0
        """Failures in a row so far."""
        self._rng = rng or random.Random()

    def ceiling(self, failures: int) -> float:
        """The longest delay after ``failures`` failures in a row (before jitter)."""
        if failures < 1:
            return 0.0
        return min(self.maximum, self.initial * 2.0 ** min(failures - 1, 62))

    def next_delay(self) -> float:
        """Count one more failure and return the delay before the next attempt."""
        self.failures += 1
        return self.ceiling(self.failures) * self._rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        """A success: the next failure starts from ``initial`` again."""
        self.failures = 0


__all__ = ["Backoff"]
