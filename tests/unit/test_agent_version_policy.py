"""Which pointers the agent acts on: replay and downgrade protection, pins."""

from __future__ import annotations

import pytest

from bloomswarm.agent.version_policy import Action, decide, next_sequence
from bloomswarm.common.bucket_layout import manifest_key
from bloomswarm.common.pointer import Pointer


def _pointer(version: int, sequence: int, *, pinned: bool = False) -> Pointer:
    return Pointer(version=version, manifest_key=manifest_key(version), sequence=sequence,
                   issued_at=1_700_000_000, publisher_id="test", pinned=pinned)


Case = tuple[int, int, bool, int | None, int | None, Action, str]
"""(pointer version, pointer sequence, pinned, installed version, last sequence, action, reason)"""


@pytest.mark.parametrize(
    "case",
    [
        (1, 1, False, None, None, Action.INSTALL, "first"),
        (5, 9, True, None, None, Action.INSTALL, "first"),
        (3, 4, False, 2, 3, Action.INSTALL, "upgrade"),
        (2, 4, False, 2, 3, Action.KEEP, "installed"),
        (2, 3, False, 2, 3, Action.KEEP, "installed"),  # the same pointer again
        (1, 4, False, 2, 3, Action.REFUSE, "downgrade"),
        (1, 4, True, 2, 3, Action.INSTALL, "rollback"),
        (3, 2, False, 2, 3, Action.REFUSE, "replay"),  # an old pointer, even to a newer version
        (1, 2, True, 2, 3, Action.REFUSE, "replay"),  # an old pin is still a replay
        (2, 2, False, None, 3, Action.REFUSE, "replay"),
        (3, 3, False, 2, 3, Action.INSTALL, "upgrade"),  # accepted before, not installed yet
    ],
)
def test_decisions(case: Case) -> None:
    version, sequence, pinned, installed, last, action, reason = case
    decision = decide(_pointer(version, sequence, pinned=pinned), installed, last)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.accepted == (action is not Action.REFUSE)
    assert decision.detail


def test_next_sequence_moves_only_forward_and_only_on_acceptance() -> None:
    newer = _pointer(3, 7)
    assert next_sequence(decide(newer, 2, 5), newer, 5) == 7
    replay = _pointer(3, 4)
    assert next_sequence(decide(replay, 2, 5), replay, 5) == 5
    downgrade = _pointer(1, 9)
    assert next_sequence(decide(downgrade, 2, 5), downgrade, 5) == 5
    first = _pointer(1, 1)
    assert next_sequence(decide(first, None, None), first, None) == 1
