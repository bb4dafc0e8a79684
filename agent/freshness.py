"""Freeze detection: is the newest signed pointer the agent has seen too old?

A man in the middle, a CDN or a bucket writer can serve the same validly signed
``latest.json`` for ever; signatures and the replay rule cannot tell that from "nothing new
was published". The pointer's ``issued_at`` can, when the publisher re-signs it regularly
(``bloomswarm refresh``, or a publish). With ``watch.max_pointer_age_s`` > 0 the agent calls
its view *stale* once the newest verified pointer it has seen was issued longer ago than
that, by the agent's clock.

Stale changes nothing the agent does: it keeps serving and seeding what it has and keeps
polling (an un-install, or a restart, would not bring a fresh pointer). It is reported:
metrics, one log line per change, ``/status``. "Newest" is the pointer with the latest
``issued_at`` seen since the agent started (a replayed older pointer does not make the view
younger); before the first pointer is seen there is nothing to judge, so never stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bloomswarm.common.pointer import Pointer


@dataclass(frozen=True)
class Change:
    """The view turned stale (``stale`` True) or fresh again, at age ``age_s``."""

    stale: bool
    age_s: float
    pointer: Pointer


class PointerFreshness:
    """Tracks the newest verified pointer seen and applies the age limit.

    ``max_age_s`` 0 turns the rule off (ages are still measured). ``clock`` is wall-clock
    Unix seconds (``issued_at`` is one).
    """

    def __init__(self, max_age_s: float, clock: Callable[[], float] = time.time) -> None:
        if not max_age_s >= 0:
            raise ValueError(f"max_age_s must not be negative, got {max_age_s}")
        self.max_age_s = max_age_s
        self._clock = clock
        self._pointer: Pointer | None = None
        self._stale = False

    @property
    def pointer(self) -> Pointer | None:
        """The newest verified pointer seen (latest ``issued_at``), if any."""
        return self._pointer

    @property
    def stale(self) -> bool:
        """The state as of the last :meth:`update`."""
        return self._stale

    def saw(self, pointer: Pointer) -> None:
        """Record a pointer whose signature verified (accepted or refused by policy)."""
        newest = self._pointer
        if newest is None or (pointer.issued_at, pointer.sequence) > (newest.issued_at, newest.sequence):
            self._pointer = pointer

    def age_s(self) -> float | None:
        """Seconds since the newest pointer was issued (0 for one from the future), or None."""
        if self._pointer is None:
            return None
        return max(self._clock() - self._pointer.issued_at, 0.0)

    def update(self) -> Change | None:
        """Apply the rule now; the Change when the state flipped, else None."""
        age = self.age_s()
        stale = self.max_age_s > 0 and age is not None and age > self.max_age_s
        if stale == self._stale:
            return None
        self._stale = stale
        assert self._pointer is not None and age is not None  # only a seen pointer goes stale
        return Change(stale=stale, age_s=age, pointer=self._pointer)

    def status(self) -> dict[str, Any] | None:
        """The newest pointer and its age for ``/status`` (None before the first one)."""
        pointer, age = self._pointer, self.age_s()
        if pointer is None or age is None:
            return None
        return {
            "version": pointer.version,
            "sequence": pointer.sequence,
            "pinned": pointer.pinned,
            "issued_at": pointer.issued_at,
            "age_s": round(age, 3),
            "max_age_s": self.max_age_s,
            "stale": self._stale,
        }


__all__ = ["Change", "PointerFreshness"]
