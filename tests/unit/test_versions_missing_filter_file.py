"""A version whose manifest and signature exist but whose filter file (or torrent) is gone
(deleted by hand, by a lifecycle rule): ``versions`` shows it incomplete, saying what is
missing, and ``tracker-sync`` leaves its info-hashes out of the whitelist (agents could not
fetch it from the origin). Neither costs a request per version: the keys are looked up in
the listing the commands make anyway."""

from __future__ import annotations

import builtins
import dataclasses
import logging
from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import manifest_key
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.object_store import ObjectInfo, StoredObject
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.storage import MemoryObjectStore, ObjectStore
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.tracker_sync import sync_whitelist
from bloomswarm.publisher.versions import missing_objects, read_manifest, scan_versions
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import key_file, make_builder, make_config, new_key, published, run_cli_on

clean_env = publishing_helpers.clean_env  # a fixture

KEY = new_key()


class CountingStore(MemoryObjectStore):
    """Records the requests that read one object (GET, HEAD, exists)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: builtins.list[str] = []

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        self.reads.append(f"GET {key}")
        return super().get(key, if_none_match=if_none_match)

    def head(self, key: str) -> ObjectInfo:
        self.reads.append(f"HEAD {key}")
        return super().head(key)

    def exists(self, key: str) -> bool:
        self.reads.append(f"HEAD {key}")
        return super().exists(key)


def _counting(count: int) -> CountingStore:
    store = CountingStore()
    for n in range(count):
        publish_filter(store, make_config(), make_builder([f"k{n}"]), KEY, "f", progress=False)
    store.reads.clear()
    return store


def _remove_filter_file(store: ObjectStore, version: int) -> str:
    key = read_manifest(store, version).filter_key
    store.delete([key])
    return key


def test_missing_objects_names_what_is_gone_from_the_listing_alone() -> None:
    store = _counting(2)
    folders = scan_versions(store)
    manifests = {v: read_manifest(store, v) for v in (1, 2)}
    store.reads.clear()
    assert missing_objects(store, folders[1], manifests[1]) == {}
    filter_file = _remove_filter_file(store, 1)
    store.delete([manifests[2].filter_key, manifests[2].torrent_key])
    folders = scan_versions(store)
    store.reads.clear()
    assert missing_objects(store, folders[1], manifests[1]) == {"filter file": filter_file}
    assert missing_objects(store, folders[2], manifests[2]) == {
        "filter file": manifests[2].filter_key, "torrent": manifests[2].torrent_key}
    assert store.reads == []  # no request: the listing holds the version's keys


def test_a_key_outside_the_version_folder_costs_one_head() -> None:
    store = _counting(1)
    manifest = read_manifest(store, 1)
    elsewhere = dataclasses.replace(manifest, filter_key="elsewhere/filter.bsf")
    folder = scan_versions(store)[1]
    store.reads.clear()
    assert missing_objects(store, folder, elsewhere) == {"filter file": "elsewhere/filter.bsf"}
    assert store.reads == ["HEAD elsewhere/filter.bsf"]
    store.put("elsewhere/filter.bsf", b"x")
    assert missing_objects(store, folder, elsewhere) == {}


# --- tracker-sync -----------------------------------------------------------------------


def test_tracker_sync_leaves_out_a_version_without_its_filter_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _counting(3)
    _remove_filter_file(store, 2)
    store.reads.clear()
    whitelist = tmp_path / "whitelist.txt"
    with caplog.at_level(logging.WARNING, "bloomswarm.tracker_sync"):
        result = sync_whitelist(store, whitelist, public_keys=[KEY.public_key()])
    reads = list(store.reads)
    assert result.versions == (1, 3) and result.left_out == 1
    expected = sorted(read_manifest(store, v).info_hash_v1 for v in (1, 3))
    assert whitelist.read_text().splitlines() == expected == list(result.hashes)
    assert "leaving v2 out of the whitelist: its filter file v2/" in caplog.text
    assert "/filter.bsf is missing" in caplog.text
    # The cost: what it cost before, GETs of each complete version's manifest and
    # signature (and the listings): no HEAD per version.
    assert not [r for r in reads if r.startswith("HEAD v")]
    assert sorted(r for r in reads if r.startswith("GET v")) == sorted(
        f"GET v{v}/manifest.json{sig}" for v in (1, 2, 3) for sig in ("", ".sig"))


def test_tracker_sync_checks_the_named_filters_too(tmp_path: Path) -> None:
    root = MemoryObjectStore()
    alpha = PrefixedStore(root, filter_prefix("alpha"))
    for n in range(2):
        publish_filter(alpha, make_config(), make_builder([f"a{n}"]), KEY, "f", progress=False)
    _remove_filter_file(alpha, 2)
    result = sync_whitelist(root, tmp_path / "w", public_keys=[KEY.public_key()])
    assert result.filter_versions == {"alpha": (1,)} and result.left_out == 1
    assert list(result.hashes) == [read_manifest(alpha, 1).info_hash_v1]


def test_an_empty_whitelist_for_missing_files_is_refused_and_says_why(tmp_path: Path) -> None:
    store = published(2, KEY)
    for version in (1, 2):
        _remove_filter_file(store, version)
    with pytest.raises(ConfigError, match=r"none of the 2 versions in the bucket can be fetched "
                                          r"\(objects missing\) \(v1: its filter file v1/"):
        sync_whitelist(store, tmp_path / "w", public_keys=[KEY.public_key()])
    assert not (tmp_path / "w").exists()
    result = sync_whitelist(store, tmp_path / "w", allow_empty=True)
    assert result.hashes == () and result.left_out == 2


# --- versions ---------------------------------------------------------------------------


@pytest.mark.usefixtures("clean_env")
def test_versions_shows_a_version_without_its_filter_file_as_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key, _path = key_file(tmp_path)
    store = published(3, key)
    _remove_filter_file(store, 2)
    store.delete([read_manifest(store, 3).torrent_key])
    assert run_cli_on(monkeypatch, store, "versions") == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["3", "2", "1"]
    assert rows[0].split(None, 1)[1].startswith("latest, incomplete: torrent missing ")
    assert rows[1].split(None, 1)[1].startswith("incomplete: filter file missing ")
    assert rows[2].split(None, 1)[1].startswith("complete ")
    assert store.exists(manifest_key(2))  # only shown: nothing deleted


@pytest.mark.usefixtures("clean_env")
def test_versions_makes_no_request_per_version_for_the_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _counting(3)
    _remove_filter_file(store, 1)
    store.reads.clear()
    assert run_cli_on(monkeypatch, store, "versions") == 0
    assert "incomplete: filter file missing" in capsys.readouterr().out
    assert not [r for r in store.reads if r.startswith("HEAD v")]  # one GET per manifest, as before
