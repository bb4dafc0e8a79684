"""``refresh_latest``: latest.json re-signed unchanged (next sequence, new issued_at), and only
when what it names verifies."""

from __future__ import annotations

import pytest

from bloomswarm.common.bucket_layout import LATEST_KEY
from bloomswarm.common.errors import ConfigError, VerificationError
from bloomswarm.common.pointer import open_pointer
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.refresh import refresh_latest
from bloomswarm.publisher.versions import read_latest
from tests.unit.agent_helpers import KEY, PUBLIC, ROGUE_KEY, point_latest, publish


def _latest(store: MemoryObjectStore) -> bytes:
    stored = store.get(LATEST_KEY)
    assert stored is not None
    return stored.data


def test_refresh_re_signs_the_same_version_with_the_next_sequence() -> None:
    store = MemoryObjectStore()
    publish(store, ["a"])
    publish(store, ["b"])
    before = open_pointer(_latest(store), PUBLIC)
    refreshed = refresh_latest(store, KEY, PUBLIC, "refresher", now=lambda: before.issued_at + 3600.0)
    assert (refreshed.version, refreshed.pinned) == (before.version, False) == (2, False)
    assert refreshed.sequence == before.sequence + 1
    assert refreshed.issued_at == before.issued_at + 3600
    assert open_pointer(_latest(store), PUBLIC) == refreshed  # signed by the trusted key


def test_refresh_keeps_a_pin() -> None:
    store = MemoryObjectStore()
    publish(store, ["a"])
    publish(store, ["b"])
    pinned = point_latest(store, 1, pinned=True)
    refreshed = refresh_latest(store, KEY, PUBLIC, "refresher")
    assert (refreshed.version, refreshed.pinned, refreshed.sequence) == (1, True, pinned.sequence + 1)


def test_refresh_refuses_an_empty_bucket_and_an_untrusted_pointer() -> None:
    store = MemoryObjectStore()
    with pytest.raises(ConfigError, match="nothing to refresh"):
        refresh_latest(store, KEY, PUBLIC, "refresher")
    publish(store, ["a"])
    point_latest(store, 1, key=ROGUE_KEY)  # a bucket writer's pointer: must not gain our signature
    forged = _latest(store)
    with pytest.raises(VerificationError):
        refresh_latest(store, KEY, PUBLIC, "refresher")
    assert _latest(store) == forged


def test_refresh_refuses_a_pointer_to_a_version_that_is_gone() -> None:
    store = MemoryObjectStore()
    publish(store, ["a"])
    store.delete(store.list("v1/"))
    with pytest.raises(ConfigError, match="version 1 does not exist"):
        refresh_latest(store, KEY, PUBLIC, "refresher")
    latest = read_latest(store)
    assert latest is not None and latest.pointer.sequence == 1
