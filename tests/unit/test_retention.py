"""Retention: which versions and garbage it deletes, and what it never touches."""

from __future__ import annotations

import time
from typing import Any

from bloomswarm.common.bucket_layout import (
    LATEST_KEY,
    filter_key,
    manifest_key,
    new_attempt_id,
    signature_key,
)
from bloomswarm.common.pointer import Pointer, seal_pointer
from bloomswarm.common.storage import MemoryObjectStore, PendingUpload
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.retention import apply_retention, plan_retention
from bloomswarm.publisher.versions import read_manifest, scan_versions
from tests.unit.publishing_helpers import (
    check_version,
    churned_keys,
    make_builder,
    make_config,
    new_key,
)

KEY = new_key()
PUBLIC = [KEY.public_key()]
CONFIG = make_config()
HOUR = 3600.0


def _publish_versions(store: MemoryObjectStore, count: int) -> None:
    for n in range(count):
        publish_filter(store, CONFIG, make_builder([f"key-{n}"]), KEY, "f", progress=False)


def _pin(store: MemoryObjectStore, version: int) -> None:
    pointer = Pointer(version=version, manifest_key=manifest_key(version), sequence=99,
                      issued_at=1, publisher_id="op", pinned=True)
    store.put(LATEST_KEY, seal_pointer(pointer, KEY))


def test_keeps_the_newest_k_and_deletes_older_versions_entirely() -> None:
    store = MemoryObjectStore()
    _publish_versions(store, 5)
    plan = apply_retention(store, keep_versions=2, grace_s=HOUR)
    assert plan.deleted_versions == (1, 2, 3) and plan.kept_versions == (4, 5)
    assert sorted(scan_versions(store)) == [4, 5]
    for version in (4, 5):
        check_version(store, version, PUBLIC)
    assert store.exists(LATEST_KEY)
    assert apply_retention(store, keep_versions=2, grace_s=HOUR).delete_keys == ()


def test_never_deletes_latest_or_a_pinned_version() -> None:
    store = MemoryObjectStore()
    _publish_versions(store, 5)
    _pin(store, 1)
    plan = apply_retention(store, keep_versions=1, grace_s=HOUR)
    assert plan.kept_versions == (1, 5) and plan.deleted_versions == (2, 3, 4)
    check_version(store, 1, PUBLIC)
    check_version(store, 5, PUBLIC)


def test_manifests_are_deleted_before_the_objects_they_name() -> None:
    deletes: list[list[str]] = []

    class Recording(MemoryObjectStore):
        def delete(self, keys: Any) -> None:
            deletes.append(list(keys))
            super().delete(keys)

    store = Recording()
    _publish_versions(store, 3)
    apply_retention(store, keep_versions=1, grace_s=HOUR)
    manifests, rest = deletes
    assert manifests == [manifest_key(1), manifest_key(2)]
    assert signature_key(1) in rest and all(not k.endswith("manifest.json") for k in rest)


def test_unfinished_attempts_are_garbage_only_after_the_grace_period() -> None:
    store = MemoryObjectStore()
    _publish_versions(store, 2)
    now = time.time()
    # a racer that lost v2: its upload sits in an attempt folder v2's manifest does not name
    loser = filter_key(2, new_attempt_id(now))
    # a publisher still uploading v3, and one that died uploading v4 long ago
    running = filter_key(3, new_attempt_id(now))
    dead = filter_key(4, new_attempt_id(now - 2 * HOUR))
    unknown = "v4/operator-notes.txt"
    for key in (loser, running, dead, unknown):
        store.put(key, b"partial")
    plan = apply_retention(store, keep_versions=5, grace_s=HOUR, now=now)
    assert set(plan.delete_keys) == {loser, dead}
    assert store.exists(running) and store.exists(unknown)
    assert plan.kept_versions == (1, 2)


def test_a_claim_without_signature_waits_for_the_grace_period() -> None:
    store = MemoryObjectStore()
    _publish_versions(store, 3)
    # v3's publisher died between claiming and signing: latest.json still names v2
    store.delete([signature_key(3)])
    pointer = Pointer(version=2, manifest_key=manifest_key(2), sequence=2, issued_at=1,
                      publisher_id="unit-test")
    store.put(LATEST_KEY, seal_pointer(pointer, KEY))
    created = read_manifest(store, 3).created_at
    young = plan_retention(store, keep_versions=1, grace_s=HOUR, now=created + 10)
    assert (young.kept_versions, young.deleted_versions) == ((2, 3), (1,))
    old = plan_retention(store, keep_versions=1, grace_s=HOUR, now=created + 2 * HOUR)
    assert (old.kept_versions, old.deleted_versions) == ((2,), (1, 3))


def test_stale_multipart_uploads_are_aborted() -> None:
    now = time.time()
    stale = PendingUpload(filter_key(3, new_attempt_id(now - 2 * HOUR)), "old", now - 2 * HOUR)
    fresh_attempt = PendingUpload(filter_key(3, new_attempt_id(now)), "new", now - 2 * HOUR)
    fresh = PendingUpload(filter_key(3, new_attempt_id(now - 2 * HOUR)), "recent", now - 5)
    elsewhere = PendingUpload("backups/x", "other", now - 9 * HOUR)
    aborted: list[str] = []

    class WithUploads(MemoryObjectStore):
        def list_multipart_uploads(self, prefix: str = "") -> list[PendingUpload]:
            return [u for u in (stale, fresh_attempt, fresh, elsewhere) if u.key.startswith(prefix)]

        def abort_multipart_upload(self, key: str, upload_id: str) -> None:
            aborted.append(upload_id)

    apply_retention(WithUploads(), keep_versions=1, grace_s=HOUR, now=now)
    assert aborted == ["old"]


def test_deltas_go_with_their_versions() -> None:
    store = MemoryObjectStore()
    for version in (1, 2, 3, 4):
        publish_filter(store, CONFIG, make_builder(churned_keys(20_000, version), capacity=20_000),
                       KEY, "f", progress=False)
    deltas = {v: read_manifest(store, v).deltas for v in (2, 3, 4)}
    assert [d.base_version for d in deltas[4]] == [3, 2, 1]
    plan = apply_retention(store, keep_versions=2, grace_s=HOUR)
    assert plan.deleted_versions == (1, 2)
    remaining = store.list()
    assert not [k for k in remaining if k.startswith(("v1/", "v2/"))]
    for entry in deltas[3] + deltas[4]:  # kept versions keep every delta, from gone bases too
        assert entry.key in remaining and entry.torrent_key in remaining
    deleted_deltas = sorted(k for k in plan.delete_keys if "delta-from" in k)
    assert deleted_deltas == sorted(k for d in deltas[2] for k in (d.key, d.torrent_key))
