"""``index sync`` when something in the bucket is broken.

(a) One filter's corrupt ``latest.json`` no longer stops the index update of every other
filter: that filter's entry is left as it was (none when it had none), the others are
synced, and the command exits 1 naming it.

(b) A malformed ``index.json`` is refused with a message naming the way out,
``--replace-malformed``, which rebuilds it from every filter. A deleted one restarts at
the Unix time, not at 1: agents refuse a lower sequence than the one they hold as a
replay (agent/filter_index_source.py), so a restart at 1 cut the fleet off the index.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY
from bloomswarm.common.errors import FormatError
from bloomswarm.common.filter_index import FilterIndex, open_index
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.pointer import open_pointer
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signing import SigningKey
from bloomswarm.common.storage import MemoryObjectStore, ObjectStore
from bloomswarm.publisher.filter_index import sync_index
from bloomswarm.publisher.publish import publish_filter
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import key_file, make_builder, make_config

clean_env = publishing_helpers.clean_env  # a fixture

CONFIG = make_config()
NOW = 1_700_000_000


def publish(root: ObjectStore, key: SigningKey, name: str, *keys: str) -> int:
    store = PrefixedStore(root, filter_prefix(name))
    return publish_filter(store, CONFIG, make_builder(list(keys) or [name]), key, "f",
                          progress=False, force=True).version


def read_index(root: ObjectStore, key: SigningKey) -> FilterIndex:
    stored = root.get(INDEX_KEY)
    assert stored is not None
    return open_index(stored.data, [key.public_key()])


def versions(index: FilterIndex, key: SigningKey) -> dict[str, int]:
    return {name: open_pointer(entry.pointer, [key.public_key()]).version
            for name, entry in index.filters.items()}


def _bucket(key: SigningKey) -> MemoryObjectStore:
    """alpha at v2 and beta at v1, both indexed; then alpha v3 published (not indexed),
    beta's latest.json corrupted, and gamma published with a corrupt latest.json."""
    root = MemoryObjectStore()
    publish(root, key, "alpha")
    publish(root, key, "alpha", "second")
    publish(root, key, "beta")
    assert sync_index(root, ["alpha", "beta"], key, "p") is not None
    publish(root, key, "alpha", "third")
    root.put(f"{filter_prefix('beta')}/{LATEST_KEY}", b"junk")
    publish(root, key, "gamma")
    root.put(f"{filter_prefix('gamma')}/{LATEST_KEY}", b"{}")
    return root


def test_one_corrupt_latest_json_does_not_hold_up_the_other_filters(tmp_path: Path) -> None:
    key, _path = key_file(tmp_path)
    root = _bucket(key)
    before = read_index(root, key)
    with pytest.raises(FormatError):  # without ``failed``: the first error, as before
        sync_index(root, ["alpha", "beta", "gamma"], key, "p")
    failed: dict[str, str] = {}
    index = sync_index(root, ["alpha", "beta", "gamma"], key, "p", failed=failed)
    assert index is not None and index.sequence == before.sequence + 1
    assert versions(index, key) == {"alpha": 3, "beta": 1}  # beta's entry carried over, no gamma
    assert index.filters["beta"] == before.filters["beta"]
    assert sorted(failed) == ["beta", "gamma"] and "not valid JSON" in failed["beta"]


def _run(monkeypatch: pytest.MonkeyPatch, store: ObjectStore, key_path: Path, *extra: str) -> int:
    import bloomswarm.index_commands  # the handler's module (binds _open_store by name)
    from bloomswarm.main import main

    monkeypatch.setattr(bloomswarm.index_commands, "_open_store", lambda _config: store)
    return main(["-q", "index", "sync", "--bucket", "filters", "--key", str(key_path), *extra])


@pytest.mark.usefixtures("clean_env")
def test_the_cli_syncs_the_others_and_exits_1_naming_the_filters_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key, key_path = key_file(tmp_path)
    root = _bucket(key)
    assert _run(monkeypatch, root, key_path) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("index.json -> sequence ")
    err = captured.err.splitlines()
    assert "Traceback" not in captured.err
    assert "index: filter 'beta' left as the index has it: " in caplog.text  # logged as it happens
    assert err[-1].startswith("bloomswarm index: error: index.json: 2 filter(s) left as they were, "
                              "their entry unreadable: beta, gamma (beta: ")
    assert versions(read_index(root, key), key) == {"alpha": 3, "beta": 1}


@pytest.mark.usefixtures("clean_env")
def test_a_malformed_index_is_refused_then_replaced_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key, key_path = key_file(tmp_path)
    root = MemoryObjectStore()
    publish(root, key, "alpha")
    publish(root, key, "alpha", "second")
    publish(root, key, "beta")
    root.put(INDEX_KEY, b'{"x":')
    with pytest.raises(FormatError, match=r"index\.json is malformed .*--replace-malformed"):
        sync_index(root, ["alpha"], key, "p")
    assert _run(monkeypatch, root, key_path, "--filter", "alpha") == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["bloomswarm index: error: index.json is malformed (index envelope is not valid "
                   "JSON: Expecting value at offset 5): `bloomswarm index sync "
                   "--replace-malformed` rebuilds it from every filter's latest.json"]
    assert root.get(INDEX_KEY).data == b'{"x":'  # type: ignore[union-attr]
    assert _run(monkeypatch, root, key_path, "--filter", "alpha", "--replace-malformed") == 0
    index = read_index(root, key)
    assert versions(index, key) == {"alpha": 2, "beta": 1}  # every filter, not only --filter's
    assert index.sequence > 1_000_000_000  # the clock: above anything agents saw before


def test_the_replacement_is_above_the_sequence_a_malformed_index_still_shows(tmp_path: Path) -> None:
    key, _path = key_file(tmp_path)
    root = MemoryObjectStore()
    publish(root, key, "alpha")
    root.put(INDEX_KEY, json.dumps({"index": {"sequence": 5_000_000_000}}).encode())  # no signature
    index = sync_index(root, ["alpha"], key, "p", replace_malformed=True, now=lambda: NOW)
    assert index is not None and index.sequence == 5_000_000_001
    again = sync_index(root, ["alpha"], key, "p", replace_malformed=True)  # a good index: a normal sync
    assert again is None


def test_a_deleted_index_restarts_above_every_sequence_agents_saw(tmp_path: Path) -> None:
    key, _path = key_file(tmp_path)
    root = MemoryObjectStore()
    publish(root, key, "alpha")
    assert sync_index(root, ["alpha"], key, "p", now=lambda: NOW).sequence == 1  # type: ignore[union-attr]
    for n in range(3):
        publish(root, key, "alpha", f"v{n + 2}")
        sync_index(root, ["alpha"], key, "p")
    held = read_index(root, key).sequence  # what an agent polling the index holds
    assert held == 4
    root.delete([INDEX_KEY])  # an operator removed a corrupt index
    index = sync_index(root, ["alpha"], key, "p", now=lambda: NOW)
    assert index is not None and index.sequence == NOW > held


def test_a_first_index_of_a_bucket_with_several_filters_starts_at_the_clock(tmp_path: Path) -> None:
    """Two filters at their first latest.json may have been indexed before, one at a time
    (index sequence 2): a missing index starts at the clock unless the bucket has one filter."""
    key, _path = key_file(tmp_path)
    root = MemoryObjectStore()
    publish(root, key, "alpha")
    publish(root, key, "beta")
    index = sync_index(root, ["alpha"], key, "p", now=lambda: NOW)
    assert index is not None and index.sequence == NOW
