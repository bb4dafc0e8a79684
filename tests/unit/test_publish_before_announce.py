"""``publish_filter(before_announce=...)``: runs after the claim, before latest.json moves."""

from __future__ import annotations

import pytest

from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.publish import publish_filter
from tests.unit.publishing_helpers import check_version, latest_pointer, make_builder, make_config, new_key

KEY = new_key()
PUBLIC = [KEY.public_key()]


def test_hook_sees_the_claimed_manifest_before_latest_moves() -> None:
    store = MemoryObjectStore()
    publish_filter(store, make_config(), make_builder(["a"]), KEY, "fp", progress=False)
    seen: list[tuple[int, int]] = []

    def hook(manifest: Manifest) -> None:
        seen.append((manifest.version, latest_pointer(store, PUBLIC).version))

    result = publish_filter(store, make_config(), make_builder(["a", "b"]), KEY, "fp", progress=False,
                            before_announce=hook)
    assert seen == [(2, 1)]  # called once, with v2 claimed and latest still at v1
    assert result.latest_moved and latest_pointer(store, PUBLIC).version == 2


def test_failing_hook_leaves_latest_where_it_was() -> None:
    store = MemoryObjectStore()
    publish_filter(store, make_config(), make_builder(["a"]), KEY, "fp", progress=False)

    def hook(manifest: Manifest) -> None:
        raise RuntimeError("tracker unreachable")

    with pytest.raises(RuntimeError, match="tracker unreachable"):
        publish_filter(store, make_config(), make_builder(["a", "b"]), KEY, "fp", progress=False,
                       before_announce=hook)
    assert latest_pointer(store, PUBLIC).version == 1
    check_version(store, 2, PUBLIC)  # claimed and complete, just not announced
    third = publish_filter(store, make_config(), make_builder(["a", "b", "c"]), KEY, "fp", progress=False)
    assert third.version == 3 and latest_pointer(store, PUBLIC).version == 3
