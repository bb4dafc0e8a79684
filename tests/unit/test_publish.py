"""The publish protocol against the in-memory store: versions, claims, races, latest.json."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent.verify import read_torrent
from bloomswarm.common.bucket_layout import (
    LATEST_KEY,
    delta_key,
    delta_torrent_key,
    filter_key,
    manifest_key,
    new_attempt_id,
    signature_key,
)
from bloomswarm.common.errors import ConfigError, StorageError
from bloomswarm.common.pointer import Pointer, read_pointer_unverified, seal_pointer
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.common.tls_identity import ca_fingerprint, issue_certificate, make_ca
from bloomswarm.publisher.config import DeltaConfig, PublisherConfig
from bloomswarm.publisher.deltas import choose_bases
from bloomswarm.publisher.latest import first_sequence
from bloomswarm.publisher.publish import (
    MAX_CLAIM_ATTEMPTS,
    PublishResult,
    forward_to,
    publish_filter,
)
from bloomswarm.publisher.versions import newest_manifests, scan_versions
from tests.unit.publishing_helpers import (
    check_deltas,
    check_version,
    churned_keys,
    latest_pointer,
    make_builder,
    make_config,
    new_key,
)

KEY = new_key()
PUBLIC = [KEY.public_key()]
CONFIG = make_config()


def _publish(store: MemoryObjectStore, keys: list[str], **kwargs: Any) -> Any:
    return publish_filter(store, CONFIG, make_builder(keys), KEY, "files-sha256:test",
                          progress=False, **kwargs)


def test_publishes_consecutive_versions_and_moves_latest() -> None:
    store = MemoryObjectStore()
    first = _publish(store, ["a", "b"])
    second = _publish(store, ["a", "b", "c"])
    assert (first.status, first.version, second.status, second.version) == (
        "published", 1, "published", 2)
    assert first.latest_moved and second.latest_moved and second.lost_claims == 0
    for version in (1, 2):
        manifest = check_version(store, version, PUBLIC)
        assert manifest.publisher_id == "unit-test"
        assert manifest.source_fingerprint == "files-sha256:test"
        assert manifest.filter_key.startswith(f"v{version}/") and manifest.filter.key_count == version + 1
    pointer = latest_pointer(store, PUBLIC)
    assert (pointer.version, pointer.sequence, pointer.pinned) == (2, 2, False)
    assert pointer.manifest_key == manifest_key(2)


def test_after_latest_json_is_deleted_the_next_sequence_is_above_any_earlier_one() -> None:
    """The way out of a corrupt latest.json is to delete it and publish: the fleet saw
    sequence 3, and would refuse a new pointer at sequence 1 as a replay."""
    store = MemoryObjectStore()
    for keys in (["a"], ["a", "b"], ["a", "b", "c"]):
        _publish(store, keys)
    seen = latest_pointer(store, PUBLIC).sequence
    store.delete([LATEST_KEY])
    result = _publish(store, ["a", "b", "c", "d"])
    pointer = latest_pointer(store, PUBLIC)
    assert (result.version, pointer.version) == (4, 4)
    assert pointer.sequence > seen and pointer.sequence >= pointer.issued_at - 1
    assert first_sequence(1, 1_800_000_000.5) == 1 and first_sequence(4, 1_800_000_000.5) == 1_800_000_000


def test_unchanged_filter_publishes_nothing_unless_forced() -> None:
    store = MemoryObjectStore()
    _publish(store, ["a", "b"])
    objects = store.list()
    result = _publish(store, ["b", "a"])  # same keys, other order: same bits
    assert (result.status, result.version) == ("unchanged", 1)
    assert store.list() == objects
    forced = _publish(store, ["a", "b"], force=True)
    assert (forced.status, forced.version, forced.latest_moved) == ("published", 2, True)
    other_params = publish_filter(store, CONFIG, make_builder(["a", "b"], capacity=5000), KEY,
                                  "x", progress=False)
    assert other_params.status == "published"


class ClaimStealingStore(MemoryObjectStore):
    """Lets a rival publisher claim each version number just before we do, ``steals`` times."""

    def __init__(self, steals: int) -> None:
        super().__init__()
        self.steals = steals

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        if key.endswith("/manifest.json") and kwargs.get("if_none_match_any") and self.steals:
            self.steals -= 1
            super().put(key, b"{}", if_none_match_any=True)  # the rival's claim
        return super().put(key, data, **kwargs)


def test_lost_claim_retries_with_the_next_number_and_rewrites_the_header() -> None:
    store = ClaimStealingStore(steals=2)
    result = _publish(store, ["a"])
    assert (result.status, result.version, result.lost_claims) == ("published", 3, 2)
    manifest = check_version(store, 3, PUBLIC)  # header says version 3
    assert manifest.version == 3
    # the two losing uploads sit in attempt folders of v1 and v2, never named by a manifest
    folders = scan_versions(store)
    assert all(len(folders[n].attempts()) == 1 for n in (1, 2))
    assert latest_pointer(store, PUBLIC).version == 3


def test_gives_up_after_bounded_claim_attempts() -> None:
    store = ClaimStealingStore(steals=MAX_CLAIM_ATTEMPTS)
    with pytest.raises(StorageError, match="other publishers took 5 version numbers"):
        _publish(store, ["a"])
    assert not store.exists(LATEST_KEY)


def test_skips_numbers_claimed_while_building() -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    store.put(manifest_key(2), b"{}")  # a rival claimed v2 but has not moved latest yet
    result = _publish(store, ["b"])
    assert (result.version, result.lost_claims) == (3, 0)  # seen in the listing
    assert latest_pointer(store, PUBLIC).version == 3


def test_an_abandoned_upload_does_not_leave_a_gap() -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    store.put(filter_key(2, new_attempt_id(0)), b"half")  # a publisher died uploading v2
    assert _publish(store, ["b"]).version == 2


def test_latest_never_moves_backwards() -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    rival = Pointer(version=9, manifest_key=manifest_key(9), sequence=7, issued_at=1,
                    publisher_id="rival")
    store.put(LATEST_KEY, seal_pointer(rival, KEY))
    result = _publish(store, ["b"])
    assert result.version == 10  # numbers continue above latest
    assert result.latest_moved and latest_pointer(store, PUBLIC).sequence == 8
    decide = forward_to(5)
    assert decide(rival) is None
    assert decide(None) is not None


def test_pinned_fleet_gets_new_versions_but_latest_stays() -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    pinned = Pointer(version=1, manifest_key=manifest_key(1), sequence=2, issued_at=1,
                     publisher_id="op", pinned=True)
    store.put(LATEST_KEY, seal_pointer(pinned, KEY))
    result = _publish(store, ["b"])
    assert (result.status, result.version) == ("published", 2)
    assert not result.latest_moved and result.pinned_at == 1
    assert latest_pointer(store, PUBLIC) == pinned
    check_version(store, 2, PUBLIC)


class LatestRacingStore(MemoryObjectStore):
    """Another writer rewrites latest.json (still naming v1) right before each of our next
    ``races`` compare-and-swap writes."""

    races = 0

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        if key == LATEST_KEY and self.races and kwargs.get("if_match"):
            self.races -= 1
            sequence = read_pointer_unverified(self.get(LATEST_KEY).data).sequence  # type: ignore[union-attr]
            rival = Pointer(version=1, manifest_key=manifest_key(1), sequence=sequence + 1,
                            issued_at=1, publisher_id="rival")
            super().put(LATEST_KEY, seal_pointer(rival, KEY))
        return super().put(key, data, **kwargs)


def test_compare_and_swap_retries_when_latest_moved_meanwhile() -> None:
    store = LatestRacingStore()
    _publish(store, ["a"])
    store.races = 3
    result = _publish(store, ["b"])
    assert result.latest_moved and store.races == 0
    pointer = latest_pointer(store, PUBLIC)
    assert (pointer.version, pointer.sequence) == (2, 5)  # ours (1), 3 rival writes, ours


def test_conditional_writes_are_used(tmp_path: Path) -> None:
    """The manifest is created with If-None-Match and latest.json moved with If-Match."""
    calls: list[tuple[str, dict[str, Any]]] = []

    class Recording(MemoryObjectStore):
        def put(self, key: str, data: bytes, **kwargs: Any) -> str:
            calls.append((key, kwargs))
            return super().put(key, data, **kwargs)

    store = Recording()
    _publish(store, ["a"])
    _publish(store, ["b"])
    order = [key.rsplit("/", 1)[-1] for key, _ in calls]
    assert order == ["filter.bsf", "filter.torrent", "manifest.json", "manifest.json.sig",
                     "latest.json"] * 2
    by_key = {key: kwargs for key, kwargs in calls}
    assert by_key[manifest_key(2)]["if_none_match_any"] is True
    assert calls[4][1].get("if_none_match_any") is True  # first latest.json: create
    assert calls[-1][1].get("if_match")  # second: compare-and-swap
    assert not by_key[signature_key(2)].get("if_match")


def test_work_dir_is_used_and_cleaned(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    config = dataclasses.replace(CONFIG, work_dir=tmp_path)
    publish_filter(store, config, make_builder(["a"]), KEY, "f", progress=False)
    assert list(tmp_path.iterdir()) == []


# --- sizing and deltas ----------------------------------------------------------------


def _publish_keys(store: MemoryObjectStore, keys: list[str], config: PublisherConfig = CONFIG,
                  *, capacity: int = 20_000) -> PublishResult:
    return publish_filter(store, config, make_builder(keys, capacity=capacity), KEY, "f",
                          progress=False)


def test_versions_with_the_same_parameters_list_deltas_that_rebuild_them(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    results = [_publish_keys(store, churned_keys(20_000, v)) for v in (1, 2, 3)]
    assert [(r.version, r.sizing, r.previous) for r in results] == [
        (1, "resized", None), (2, "kept", 1), (3, "kept", 2)]
    assert results[0].manifest.deltas == ()
    assert [d.base_version for d in results[1].manifest.deltas] == [1]
    assert [d.base_version for d in results[2].manifest.deltas] == [2, 1]
    for result in results:
        check_version(store, result.version, PUBLIC)  # the signature covers the deltas
        check_deltas(store, result.manifest, tmp_path)
    one_back, two_back = results[2].manifest.deltas
    assert one_back.size < two_back.size < results[2].manifest.size * CONFIG.deltas.max_share
    assert one_back.key == delta_key(3, one_back.key.split("/")[1], 2)
    assert one_back.torrent_key == delta_torrent_key(3, one_back.key.split("/")[1], 2)


def test_a_resized_version_has_no_deltas() -> None:
    store = MemoryObjectStore()
    _publish_keys(store, churned_keys(20_000, 1))
    resized = _publish_keys(store, churned_keys(20_000, 2), capacity=30_000)
    assert (resized.sizing, resized.previous, resized.manifest.deltas) == ("resized", 1, ())
    after = _publish_keys(store, churned_keys(20_000, 3))  # v1's parameters again: v1 only
    assert [d.base_version for d in after.manifest.deltas] == [1]


def test_max_bases_limits_the_deltas_and_zero_turns_them_off() -> None:
    store = MemoryObjectStore()
    one = dataclasses.replace(CONFIG, deltas=DeltaConfig(max_bases=1))
    for version in (1, 2, 3):
        result = _publish_keys(store, churned_keys(20_000, version), one)
    assert [d.base_version for d in result.manifest.deltas] == [2]
    off = _publish_keys(store, churned_keys(20_000, 4),
                        dataclasses.replace(CONFIG, deltas=DeltaConfig(max_bases=0)))
    assert (off.sizing, off.manifest.deltas) == ("kept", ())


def test_a_delta_over_the_size_limit_is_skipped() -> None:
    store = MemoryObjectStore()
    _publish_keys(store, churned_keys(20_000, 1))
    strict = dataclasses.replace(CONFIG, deltas=DeltaConfig(max_share=0.2))
    full_churn = _publish_keys(store, [f"other-{i}" for i in range(20_000)], strict)
    assert (full_churn.sizing, full_churn.manifest.deltas) == ("kept", ())
    assert not [k for k in store.list() if "delta-from" in k]


def test_a_base_file_that_does_not_match_its_manifest_gives_no_delta(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryObjectStore()
    first = _publish_keys(store, churned_keys(20_000, 1))
    _publish_keys(store, churned_keys(20_000, 2))
    stored = store.get(first.manifest.filter_key)
    assert stored is not None
    store.put(first.manifest.filter_key, stored.data[:-1] + bytes([stored.data[-1] ^ 1]))
    third = _publish_keys(store, churned_keys(20_000, 3))
    assert [d.base_version for d in third.manifest.deltas] == [2]
    assert "no delta from v1: its file does not match its manifest's SHA-256" in caplog.text


class CountingStore(MemoryObjectStore):
    """Counts download_file calls; fails the put of keys containing ``fail_on``."""

    downloads = 0
    fail_on: str | None = None

    def download_file(self, key: str, path: Path) -> None:
        self.downloads += 1
        super().download_file(key, path)

    def put(self, key: str, data: bytes, **kwargs: Any) -> str:
        if self.fail_on is not None and self.fail_on in key:
            raise StorageError(f"injected failure writing {key}")
        return super().put(key, data, **kwargs)


def test_the_cache_dir_saves_downloads_and_is_verified(tmp_path: Path) -> None:
    store = CountingStore()
    cached = dataclasses.replace(
        CONFIG, deltas=DeltaConfig(max_bases=2, cache_dir=tmp_path / "cache"))
    for version in (1, 2, 3):
        _publish_keys(store, churned_keys(20_000, version), cached)
    assert store.downloads == 0
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").iterdir()) == ["v2", "v3"]
    v3 = next((tmp_path / "cache").glob("v3-*.bsf"))
    v3.write_bytes(b"tampered")
    fourth = _publish_keys(store, churned_keys(20_000, 4), cached)
    assert store.downloads == 1 and [d.base_version for d in fourth.manifest.deltas] == [3, 2]
    uncached = _publish_keys(store, churned_keys(20_000, 5))
    assert store.downloads == 1 + 4 and len(uncached.manifest.deltas) == 4


def test_the_manifest_comes_after_the_deltas() -> None:
    store = CountingStore()
    _publish_keys(store, churned_keys(20_000, 1))
    store.fail_on = "delta-from-v1.torrent"
    with pytest.raises(StorageError, match="injected"):
        _publish_keys(store, churned_keys(20_000, 2))
    assert not store.exists(manifest_key(2))
    assert latest_pointer(store, PUBLIC).version == 1


def test_choose_bases_takes_the_newest_with_equal_parameters() -> None:
    store = MemoryObjectStore()
    for version, capacity in ((1, 20_000), (2, 30_000), (3, 20_000), (4, 20_000)):
        _publish_keys(store, churned_keys(1000, version), capacity=capacity)
    manifests = newest_manifests(store, 10)
    assert [m.version for m in manifests] == [4, 3, 2, 1]
    params = manifests[0].filter.to_params()
    assert [m.version for m in choose_bases(params, 5, manifests, 8)] == [4, 3, 1]
    assert [m.version for m in choose_bases(params, 5, manifests, 2)] == [4, 3]
    assert [m.version for m in choose_bases(params, 4, manifests, 8)] == [3, 1]
    assert choose_bases(params, 5, manifests, 0) == []
    assert [m.version for m in newest_manifests(store, 2, below=4)] == [3, 2]


# --- private versions ---------------------------------------------------------------------------


def test_a_private_version_puts_the_ca_into_every_torrent_and_its_fingerprint_into_the_manifest(
    tmp_path: Path,
) -> None:
    ca = make_ca("fleet", days=30, now=datetime.datetime.now(datetime.timezone.utc))[0]
    (tmp_path / "ca.crt").write_bytes(ca)
    private = make_config(swarm_ca=tmp_path / "ca.crt", deltas=DeltaConfig(max_share=1.0))
    store = MemoryObjectStore()
    _publish(store, ["a", "b"])  # a public v1
    builder = make_builder(["a", "b"])
    unchanged_but_private = publish_filter(store, private, builder, KEY, "x", progress=False)
    assert unchanged_but_private.status == "published", "becoming private is a change"
    manifest = check_version(store, 2, PUBLIC)
    assert manifest.private and manifest.swarm_ca_sha256 == ca_fingerprint(ca)
    torrents = [manifest.torrent_key] + [d.torrent_key for d in manifest.deltas]
    assert len(torrents) == 2, "a delta from v1 too"
    for key in torrents:
        stored = store.get(key)
        assert stored is not None and read_torrent(stored.data).ca_sha256 == ca_fingerprint(ca)
    again = publish_filter(store, private, make_builder(["a", "b"]), KEY, "x", progress=False)
    assert again.status == "unchanged"


@pytest.mark.parametrize(("content", "reason"), [
    (None, "No such file or directory"),
    (b"not a certificate", "the CA is not a PEM certificate"),
    ("leaf", "not a CA certificate"),
    ("cert+key", "holds a private key"),
    ("key+cert", "holds a private key"),
    ("two CAs", "holds 2 certificates"),
])
def test_a_bad_swarm_ca_stops_the_publish_before_anything_is_written(
    tmp_path: Path, content: bytes | str | None, reason: str,
) -> None:
    """A CA file bundled with its key (or holding anything but one CA certificate) is
    refused with one line naming the file: the key must never reach a torrent."""
    path = tmp_path / "ca.crt"
    now = datetime.datetime.now(datetime.timezone.utc)
    ca = make_ca("fleet", days=30, now=now)
    files = {"leaf": issue_certificate(ca[0], ca[1], name="agent", days=10, now=now)[0],
             "cert+key": ca[0] + ca[1], "key+cert": ca[1] + ca[0],
             "two CAs": ca[0] + make_ca("other", days=30, now=now)[0]}
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_bytes(files[content])
    store = MemoryObjectStore()
    with pytest.raises(ConfigError) as raised:
        publish_filter(store, make_config(swarm_ca=path), make_builder(["a"]), KEY, "x", progress=False)
    message = str(raised.value)
    assert message.startswith(f"swarm_ca {path}: ") and reason in message and "\n" not in message
    assert store.list() == []


def test_a_private_torrent_carries_the_ca_certificate_alone(tmp_path: Path) -> None:
    """Only the re-serialised certificate goes into the torrents: text around it in the
    file (here a comment and trailing junk) is left out, and no key is ever there."""
    ca = make_ca("fleet", days=30, now=datetime.datetime.now(datetime.timezone.utc))[0]
    (tmp_path / "ca.crt").write_bytes(b"# fleet CA\n" + ca + b"trailing junk\n")
    store = MemoryObjectStore()
    result = publish_filter(store, make_config(swarm_ca=tmp_path / "ca.crt"), make_builder(["a"]), KEY,
                            "x", progress=False)
    stored = store.get(result.manifest.torrent_key)
    assert stored is not None
    assert ca in stored.data and b"PRIVATE KEY" not in stored.data
    assert b"junk" not in stored.data and b"# fleet CA" not in stored.data
    assert result.manifest.swarm_ca_sha256 == ca_fingerprint(ca)
