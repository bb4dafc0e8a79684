"""The ``index`` fuzz target's own checks work: each of them fails when the code it guards
is made to misbehave (the bounded fuzzing of every target is tests/fuzz/)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bloomswarm.agent import announcements
from bloomswarm.common.canonical_json import canonical_json
from bloomswarm.common.filter_index import FilterIndex, read_index_unverified, seal_index
from bloomswarm.common.pointer import Pointer, read_pointer_unverified, seal_pointer
from bloomswarm.common.signing import generate_keypair, parse_private_key
from bloomswarm.publisher.filter_index import sync_index
from bloomswarm.sandbox import fuzz_targets


def _seed(mode: int) -> bytes:
    """The first seed of the ``index`` target in ``mode`` (a publisher's real index.json)."""
    return next(s for s in fuzz_targets.seeds()["index"] if s[0] == mode)


def _other_key_seal(index: FilterIndex) -> bytes:
    return seal_index(index, parse_private_key(generate_keypair()[0]))


def test_every_mode_has_an_accepted_seed() -> None:
    seeds = fuzz_targets.seeds()["index"]
    assert sorted({s[0] % 5 for s in seeds}) == [0, 1, 2, 3, 4]
    assert all(fuzz_targets.index(s) for s in seeds)


def test_an_index_signed_by_another_key_is_refused() -> None:
    index = read_index_unverified(_seed(1)[1:])
    assert fuzz_targets.index(b"\1" + _other_key_seal(index)) is False


def test_a_forged_index_that_opened_would_be_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were open_index to skip the signature, the target's own check would catch it."""
    index = read_index_unverified(_seed(1)[1:])
    monkeypatch.setattr(fuzz_targets, "open_index", lambda data, _keys: read_index_unverified(data))
    with pytest.raises(AssertionError, match="an index not signed by the pinned key was accepted"):
        fuzz_targets.index(b"\1" + _other_key_seal(index))


def test_an_entry_signed_by_another_key_is_refused_by_the_agent() -> None:
    """Mode 3 seals the index itself: an entry whose pointer another key signed is refused
    by the agent's entry check, so the index is accepted with no announcement."""
    payload: dict[str, Any] = json.loads(_seed(3)[1:])
    other = parse_private_key(generate_keypair()[0])
    for name, entry in payload["filters"].items():
        pointer = json.loads(entry["pointer"])["pointer"]
        payload["filters"][name]["pointer"] = seal_pointer(Pointer.from_dict(pointer), other).decode()
    assert fuzz_targets.index(b"\3" + canonical_json(payload)) is True


def test_an_entry_the_agent_accepted_unsigned_would_be_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the agent's entry check to trust any pointer, the target would catch it."""
    payload: dict[str, Any] = json.loads(_seed(3)[1:])
    other = parse_private_key(generate_keypair()[0])
    entry = payload["filters"][fuzz_targets._INDEX_FILTER]
    pointer = Pointer.from_dict(json.loads(entry["pointer"])["pointer"])
    entry["pointer"] = seal_pointer(pointer, other).decode()
    monkeypatch.setattr(announcements, "open_pointer", lambda data, _keys: read_pointer_unverified(data))
    with pytest.raises(AssertionError, match="an index entry's pointer not signed by the pinned key"):
        fuzz_targets.index(b"\3" + canonical_json(payload))


@pytest.mark.parametrize(("kept", "finding"), [
    ("extra", "carry the unreadable entries over unchanged"),  # unreadable entries dropped
    ("unreadable", "carry the index.s unknown fields over unchanged"),  # unknown fields dropped
])
def test_a_writer_that_dropped_what_it_cannot_read_would_be_a_finding(
    monkeypatch: pytest.MonkeyPatch, kept: str, finding: str,
) -> None:
    """Were the publisher's sync to drop the index's unreadable entries, or its unknown
    top-level fields, the target would catch it (``kept``: the one it still carries)."""
    dropped_field = "unreadable" if kept == "extra" else "extra"
    seed = next(s for s in fuzz_targets.seeds()["index"]
                if s[0] == 4 and getattr(read_index_unverified(s[1:]), dropped_field))
    assert fuzz_targets.index(seed) is True

    def forgetful(store: Any, names: Any, key: Any, publisher_id: str, **kw: Any) -> FilterIndex | None:
        written = sync_index(store, names, key, publisher_id, **kw)
        if written is None:
            return None
        dropped = FilterIndex(sequence=written.sequence, issued_at=written.issued_at,
                              publisher_id=written.publisher_id, filters=written.filters,
                              **{kept: getattr(written, kept)})
        store.put("index.json", seal_index(dropped, key))
        return dropped

    monkeypatch.setattr(fuzz_targets, "sync_index", forgetful)
    with pytest.raises(AssertionError, match=finding):
        fuzz_targets.index(seed)
def test_an_index_that_does_not_round_trip_would_be_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def drifting(self: FilterIndex) -> bytes:
        return canonical_json({**self.to_dict(), "sequence": self.sequence + 1})

    monkeypatch.setattr(FilterIndex, "to_bytes", drifting)
    with pytest.raises(AssertionError, match="does not survive its own canonical bytes"):
        fuzz_targets.index(_seed(0))
