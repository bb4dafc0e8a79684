"""The soak's key sets: which keys each version holds, and which the lookups must find.

Version ``v`` holds ``stable`` keys that every version holds (``s0``, ``s1``, ...) and a
sliding window of ``window`` rolling keys ``r{j}`` for ``j`` in
``[v * churn, v * churn + window)``: each version drops the ``churn`` oldest rolling keys
and adds ``churn`` new ones. Windows are contiguous, so a key held by versions ``a`` and
``b > a`` is held by every version between them.

"Keys common to consecutive versions" ``v`` and ``v + 1``: all stable keys and the rolling
keys ``[(v + 1) * churn, v * churn + window)``. A lookup that started while version ``a``
served and ended while ``b`` served answered from a version in ``[a, b]``; a miss is a
false negative exactly when the key is held by both ``a`` and ``b`` (:meth:`KeyPlan.held_by_all`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class KeyPlan:
    """The key layout of every version (see the module docstring)."""

    stable: int
    window: int
    churn: int

    def __post_init__(self) -> None:
        if self.stable < 1 or self.window < 1 or self.churn < 1:
            raise ValueError("stable, window and churn must be at least 1")
        if self.churn >= self.window:
            raise ValueError("churn must be smaller than the rolling window, or consecutive "
                             "versions share no rolling key")

    @property
    def keys_per_version(self) -> int:
        return self.stable + self.window

    def rolling_range(self, version: int) -> range:
        """The rolling key indices version ``version`` holds."""
        return range(version * self.churn, version * self.churn + self.window)

    def common_rolling(self, version: int) -> range:
        """Rolling indices held by both ``version`` and ``version + 1``."""
        return range((version + 1) * self.churn, version * self.churn + self.window)

    def keys(self, version: int) -> Iterator[bytes]:
        """Every key of ``version``."""
        for i in range(self.stable):
            yield stable_key(i)
        for j in self.rolling_range(version):
            yield rolling_key(j)

    def held_by_all(self, key: bytes, first: int, last: int) -> bool:
        """True when every version in ``[first, last]`` holds ``key``."""
        if key.startswith(b"s"):
            return 0 <= int(key[1:]) < self.stable
        j = int(key[1:])
        return j in self.rolling_range(first) and j in self.rolling_range(last)


def stable_key(i: int) -> bytes:
    return b"s%d" % i


def rolling_key(j: int) -> bytes:
    return b"r%d" % j


__all__ = ["KeyPlan", "rolling_key", "stable_key"]
