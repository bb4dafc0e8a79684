"""unpin never moves latest.json to a version older than the one it names.

unpin points latest.json at the newest complete, correctly signed version. When latest.json
already names a newer one (whose files are being replaced or cannot be read just now), that
newest *valid* version is older than what the fleet was told: unpin clears ``pinned`` and
leaves the version, and says which version latest.json names.
"""

from __future__ import annotations

import logging

import pytest

from bloomswarm.common.bucket_layout import signature_key
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.pinning import pin, unpin
from bloomswarm.publisher.versions import read_manifest
from tests.unit.publishing_helpers import latest_pointer, new_key, published

KEY = new_key()
PUBLIC = [KEY.public_key()]


def _break_signature(store: MemoryObjectStore, version: int) -> None:
    """``version``'s signature no longer matches its manifest (as when it is rewritten)."""
    store.put(signature_key(version), store.get(signature_key(version - 1)).data)  # type: ignore[union-attr]


def test_unpin_of_a_pin_at_a_version_that_no_longer_verifies_keeps_that_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = published(3, KEY)
    pinned = pin(store, 3, KEY, PUBLIC, "operator")
    _break_signature(store, 3)  # the newest valid version is now v2, below the pin
    with caplog.at_level(logging.INFO, logger="bloomswarm.pinning"):
        released = unpin(store, KEY, PUBLIC, "operator")
    assert released is not None
    assert (released.version, released.pinned, released.sequence) == (3, False, pinned.sequence + 1)
    assert latest_pointer(store, PUBLIC) == released
    assert "latest.json names v3" in caplog.text and "v2" in caplog.text
    assert unpin(store, KEY, PUBLIC, "operator") is None  # nothing left to release


def test_unpin_of_a_pin_at_a_version_missing_its_filter_keeps_that_version() -> None:
    store = published(3, KEY)
    pin(store, 3, KEY, PUBLIC, "operator")
    store.delete([read_manifest(store, 3).filter_key])
    released = unpin(store, KEY, PUBLIC, "operator")
    assert released is not None and (released.version, released.pinned) == (3, False)


def test_unpin_leaves_an_unpinned_pointer_newer_than_every_valid_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = published(3, KEY)
    before = latest_pointer(store, PUBLIC)
    assert (before.version, before.pinned) == (3, False)
    _break_signature(store, 3)
    with caplog.at_level(logging.INFO, logger="bloomswarm.pinning"):
        assert unpin(store, KEY, PUBLIC, "operator") is None
    assert latest_pointer(store, PUBLIC) == before
    assert "latest.json names v3" in caplog.text


def test_unpin_still_moves_forward_from_an_older_pin() -> None:
    store = published(4, KEY)
    pin(store, 2, KEY, PUBLIC, "operator")
    _break_signature(store, 4)  # v3 is the newest valid one, above the pin at v2
    released = unpin(store, KEY, PUBLIC, "operator")
    assert released is not None and (released.version, released.pinned) == (3, False)
