"""pin and unpin: signed, pinned pointers with increasing sequence; what they refuse."""

from __future__ import annotations

import pytest

from bloomswarm.common.bucket_layout import signature_key
from bloomswarm.common.errors import ConfigError, VerificationError
from bloomswarm.publisher.pinning import pin, unpin
from bloomswarm.publisher.publish import publish_filter
from tests.unit.publishing_helpers import latest_pointer, make_builder, make_config, new_key, published

KEY = new_key()
PUBLIC = [KEY.public_key()]
CONFIG = make_config()


def test_pin_rolls_back_and_unpin_returns_to_the_newest() -> None:
    store = published(3, KEY)
    pinned = pin(store, 1, KEY, PUBLIC, "operator")
    assert (pinned.version, pinned.pinned, pinned.sequence) == (1, True, 4)
    assert latest_pointer(store, PUBLIC) == pinned
    # publishing while pinned adds v4 but leaves the pin
    result = publish_filter(store, CONFIG, make_builder(["new"]), KEY, "f", progress=False)
    assert result.version == 4 and result.pinned_at == 1
    released = unpin(store, KEY, PUBLIC, "operator")
    assert released is not None
    assert (released.version, released.pinned, released.sequence) == (4, False, 5)
    assert unpin(store, KEY, PUBLIC, "operator") is None  # nothing left to release


def test_pin_refuses_missing_incomplete_and_foreign_versions() -> None:
    store = published(2, KEY)
    with pytest.raises(ConfigError, match="version 7 does not exist"):
        pin(store, 7, KEY, PUBLIC, "operator")
    stranger = new_key()
    with pytest.raises(VerificationError):
        pin(store, 1, stranger, [stranger.public_key()], "operator")
    store.delete([signature_key(1)])
    with pytest.raises(ConfigError, match="incomplete"):
        pin(store, 1, KEY, PUBLIC, "operator")
    assert latest_pointer(store, PUBLIC).version == 2


def test_pin_refuses_a_version_whose_file_is_gone() -> None:
    store = published(2, KEY)
    from bloomswarm.publisher.versions import read_manifest

    store.delete([read_manifest(store, 1).filter_key])
    with pytest.raises(VerificationError, match="missing an object"):
        pin(store, 1, KEY, PUBLIC, "operator")


def test_unpin_skips_versions_that_do_not_verify() -> None:
    store = published(3, KEY)
    pin(store, 1, KEY, PUBLIC, "operator")
    store.put(signature_key(3), store.get(signature_key(2)).data)  # type: ignore[union-attr]
    released = unpin(store, KEY, PUBLIC, "operator")
    assert released is not None and released.version == 2


def test_a_rotated_key_is_accepted_when_listed() -> None:
    store = published(2, KEY)
    new = new_key()
    with pytest.raises(VerificationError):
        pin(store, 1, new, [new.public_key()], "operator")
    pointer = pin(store, 1, new, [new.public_key(), *PUBLIC], "operator")
    assert pointer.pinned and latest_pointer(store, [new.public_key()]).version == 1
