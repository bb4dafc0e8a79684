"""Which announced pointers the agent acts on: pure functions of the pointer and local state.

Two rules, both from design.md ("Versions, integrity, trust"):

- **No replay.** Every write of latest.json has a ``sequence`` one higher than the one it
  replaced. A pointer whose sequence is lower than the last one this agent accepted is
  an old latest.json served again (a stale CDN cache, an attacker with an old signed
  copy) and is refused, even when it is pinned. An equal sequence is the pointer already
  accepted, seen again (after a restart, or a cache that was not revalidated).
- **No downgrade without a pin.** A version lower than the installed one is refused
  unless the signed pointer is ``pinned`` (an operator's rollback, as Netflix Hollow pins).

What the agent does with an accepted pointer is the daemon's business; this module only
says which of the outcomes in :class:`Action` applies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from bloomswarm.common.pointer import Pointer


class Action(enum.Enum):
    """What to do about a pointer."""

    INSTALL = "install"
    """Fetch (or reuse) and install the pointer's version."""
    KEEP = "keep"
    """The pointer names the installed version: nothing to fetch; the pointer is accepted."""
    REFUSE = "refuse"
    """Ignore the pointer; the installed version keeps serving."""


@dataclass(frozen=True)
class Decision:
    """The outcome for one pointer and the reason, for logs and metrics."""

    action: Action
    reason: str
    """A short label: "upgrade", "rollback", "first", "installed", "replay", "downgrade"."""
    detail: str
    """A sentence for a person."""

    @property
    def accepted(self) -> bool:
        """The pointer is accepted: its sequence becomes the last accepted one."""
        return self.action is not Action.REFUSE


def decide(pointer: Pointer, installed: int | None, last_sequence: int | None) -> Decision:
    """Decide about a verified ``pointer``.

    ``installed`` is the version ``current`` points at (None before the first install);
    ``last_sequence`` the highest sequence accepted so far (None when none was).
    """
    if last_sequence is not None and pointer.sequence < last_sequence:
        return Decision(
            Action.REFUSE,
            "replay",
            f"pointer sequence {pointer.sequence} is older than the accepted {last_sequence} "
            f"(a replayed latest.json naming v{pointer.version})",
        )
    if installed is None:
        return Decision(Action.INSTALL, "first", f"v{pointer.version} is the first version")
    if pointer.version == installed:
        return Decision(Action.KEEP, "installed", f"v{pointer.version} is already installed")
    if pointer.version > installed:
        return Decision(Action.INSTALL, "upgrade", f"v{installed} -> v{pointer.version}")
    if pointer.pinned:
        return Decision(
            Action.INSTALL, "rollback", f"pinned rollback v{installed} -> v{pointer.version}"
        )
    return Decision(
        Action.REFUSE,
        "downgrade",
        f"v{pointer.version} is lower than the installed v{installed} and the pointer is "
        "not pinned",
    )


def next_sequence(decision: Decision, pointer: Pointer, last_sequence: int | None) -> int | None:
    """The last accepted sequence after ``decision`` about ``pointer``."""
    if not decision.accepted:
        return last_sequence
    return max(pointer.sequence, last_sequence or 0)


__all__ = ["Action", "Decision", "decide", "next_sequence"]
