"""Bad bucket contents and bad arguments the publisher must survive or refuse in one line:
stray version folders, the last version number, an endpoint that is not S3, an unreadable
delta-cache file, a manifest time past year 9999, arguments that are not UTF-8."""

from __future__ import annotations

import dataclasses
import http.server
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bloomswarm.index_commands  # noqa: F401 (binds the real _open_store before a test patches it)
from bloomswarm.common.bucket_layout import MAX_VERSION, manifest_key
from bloomswarm.common.errors import ConfigError, StorageError
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.storage import MemoryObjectStore, S3Config, S3ObjectStore
from bloomswarm.main import main
from bloomswarm.publisher.config import DeltaConfig, PublisherConfig
from bloomswarm.publisher.publish import PublishResult, publish_filter
from bloomswarm.publisher.versions import scan_versions
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import churned_keys, make_builder, make_config, new_key

clean_env = publishing_helpers.clean_env  # a fixture

KEY = new_key()
CONFIG = make_config()


def _publish(store: MemoryObjectStore, keys: list[str], config: PublisherConfig = CONFIG,
             *, capacity: int = 1000, force: bool = False) -> PublishResult:
    return publish_filter(store, config, make_builder(keys, capacity=capacity), KEY, "f",
                          progress=False, force=force)




# --- 1. stray version folders and the last version number ---------------------------------


def test_stray_version_folders_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    strays = ["v99999999999999999999/junk", f"v{MAX_VERSION + 1}/manifest.json", "v0123/x", "v0/y"]
    for key in strays:
        store.put(key, b"junk")
    with caplog.at_level(logging.WARNING, logger="bloomswarm.versions"):
        assert list(scan_versions(store)) == [1]
    assert "ignoring the keys under v99999999999999999999/: beyond the highest" in caplog.text
    assert f"ignoring the keys under v{MAX_VERSION + 1}/" in caplog.text
    assert "ignoring the keys under v0123/: not a version number" in caplog.text
    assert "ignoring the keys under v0/: not a version number" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bloomswarm.versions"):
        assert _publish(store, ["a", "b"]).version == 2  # publishing goes on past the strays
    assert "ignoring" not in caplog.text  # warned once per process, not at every listing
    assert all(store.exists(key) for key in strays)  # not ours to delete


def test_a_claimed_highest_version_number_refuses_the_next_publish_in_one_line() -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    store.put(manifest_key(MAX_VERSION), b"{}")
    before = {key: store.get(key) for key in store.list()}
    with pytest.raises(StorageError) as caught:
        _publish(store, ["a", "b"])
    assert str(caught.value) == (
        f"no version number left: the bucket already holds v{MAX_VERSION}, the highest there "
        "is (2**63-1); publish to a new bucket or prefix")
    assert {key: store.get(key) for key in store.list()} == before  # nothing written


def test_losing_the_race_for_the_highest_version_number_is_the_same_error() -> None:
    class RacedStore(MemoryObjectStore):
        """Another publisher claims v(MAX) between our listing and our claim."""

        def exists(self, key: str) -> bool:
            if key == manifest_key(MAX_VERSION) and not super().exists(key):
                self.put(key, b"{}")
            return super().exists(key)

    store = RacedStore()
    _publish(store, ["a"])
    store.put(manifest_key(MAX_VERSION - 1), b"{}")
    with pytest.raises(StorageError, match="no version number left"):
        _publish(store, ["a", "b"])


def test_versions_lists_past_a_stray_folder(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = MemoryObjectStore()
    _publish(store, ["a"])
    store.put("v88888888888888888888/junk.txt", b"hello")
    monkeypatch.setattr("bloomswarm.publish_commands._open_store", lambda _config: store)
    assert main(["-q", "versions", "--bucket", "filters"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].split()[:2] == ["1", "latest"]


# --- 2. an endpoint that is not S3 --------------------------------------------------------


class _PlainHandler(http.server.BaseHTTPRequestHandler):
    """A web server that answers 200 to anything, without an ETag: "{}" to a GET (and
    its length to a HEAD), nothing to a PUT."""

    def _answer(self, body: bytes, *, send: bool = True) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(b"{}")

    def do_PUT(self) -> None:
        self._answer(b"")

    def do_HEAD(self) -> None:
        self._answer(b"{}", send=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def plain_http() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PlainHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_endpoint_that_is_not_s3_is_a_storage_error(clean_env: None, plain_http: str) -> None:
    store = S3ObjectStore(S3Config(bucket="bkt", endpoint_url=plain_http, max_attempts=1))
    expected = (f"the answer of {plain_http} for s3://bkt/latest.json has no ETag: "
                "is it an S3 endpoint?")
    for call in (lambda: store.get("latest.json"), lambda: store.exists("latest.json"),
                 lambda: store.put("latest.json", b"{}")):
        with pytest.raises(StorageError) as caught:
            call()
        assert str(caught.value) == expected
    with pytest.raises(StorageError, match="has no ETag"), store.open_stream("latest.json"):
        pass


def test_versions_against_an_endpoint_that_is_not_s3_fails_in_one_line(
    clean_env: None, plain_http: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-q", "versions", "--bucket", "bkt", "--endpoint-url", plain_http]) == 1
    assert capsys.readouterr().err == (
        f"bloomswarm versions: error: the answer of {plain_http} for s3://bkt/latest.json has "
        "no ETag: is it an S3 endpoint?\n")


# --- 3. an unreadable delta-cache file ----------------------------------------------------


def _cached_publishes(tmp_path: Path) -> tuple[MemoryObjectStore, PublisherConfig, Path]:
    store = MemoryObjectStore()
    config = dataclasses.replace(CONFIG, deltas=DeltaConfig(max_bases=1, cache_dir=tmp_path / "cache"))
    _publish(store, churned_keys(20_000, 1), config, capacity=20_000)
    (cached,) = (tmp_path / "cache").glob("v1-*.bsf")
    return store, config, cached


def test_a_directory_in_place_of_a_cached_base_costs_one_delta_not_the_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, config, cached = _cached_publishes(tmp_path)
    cached.unlink()
    cached.mkdir()  # stands for any cache entry that cannot be read
    with caplog.at_level(logging.WARNING, logger="bloomswarm.publish"):
        second = _publish(store, churned_keys(20_000, 2), config, capacity=20_000)
    assert (second.status, second.version, second.sizing, second.manifest.deltas) == (
        "published", 2, "kept", ())
    assert f"cannot read {cached} (v1's cached file): Is a directory" in caplog.text
    assert "no delta from v1: cannot download its file" in caplog.text


def test_an_unreadable_cached_base_is_downloaded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store, config, cached = _cached_publishes(tmp_path)
    real_sha256 = file_sha256

    def failing_once(path: Path) -> str:  # EIO (or EACCES, which root never sees) on the cache
        if path == cached and not failing_once.failed:  # type: ignore[attr-defined]
            failing_once.failed = True  # type: ignore[attr-defined]
            raise OSError(5, "Input/output error")
        return real_sha256(path)

    failing_once.failed = False  # type: ignore[attr-defined]
    monkeypatch.setattr("bloomswarm.publisher.deltas.file_sha256", failing_once)
    with caplog.at_level(logging.WARNING, logger="bloomswarm.publish"):
        second = _publish(store, churned_keys(20_000, 2), config, capacity=20_000)
    assert [d.base_version for d in second.manifest.deltas] == [1]
    assert f"cannot read {cached} (v1's cached file): Input/output error; downloading it again" \
        in caplog.text


# --- 4. a manifest time datetime cannot show ----------------------------------------------


@pytest.mark.parametrize("created_at", [253402300800, 2**62, 2**63 - 1])
def test_versions_shows_an_out_of_range_created_at_and_goes_on(
    created_at: int, clean_env: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryObjectStore()
    for keys in (["a"], ["a", "b"]):
        _publish(store, keys)
    stored = store.get(manifest_key(1))
    assert stored is not None
    document = json.loads(stored.data)
    document["created_at"] = created_at
    store.put(manifest_key(1), json.dumps(document).encode())
    monkeypatch.setattr("bloomswarm.publish_commands._open_store", lambda _config: store)
    assert main(["-q", "versions", "--bucket", "filters"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    _header, v2, v1 = captured.out.splitlines()
    assert v2.split()[:2] == ["2", "latest"]
    assert f"out of range ({created_at} s since the epoch)" in v1 and v1.split()[:2] == ["1", "complete"]


# --- 5. arguments that are not UTF-8 ------------------------------------------------------


@pytest.mark.parametrize("command", [["versions"], ["unpin", "--key", "k.key"], ["tracker-sync"]])
def test_a_prefix_that_is_not_utf8_is_a_config_error(
    command: list[str], clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = b"\xff".decode("utf-8", "surrogateescape")  # what Python makes of argv byte 0xff
    argv = [*command, "--bucket", "filters", "--prefix", bad, "--endpoint-url", "http://127.0.0.1:1"]
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        f"bloomswarm {command[0]}: error: S3 prefix '\\udcff' is not valid UTF-8\n")


def test_a_publisher_id_that_is_not_utf8_is_refused_before_anything_is_written(
    tmp_path: Path, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "k.key"
    assert main(["keygen", str(key)]) == 0
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\n")
    capsys.readouterr()
    bad = "host-" + b"\xff".decode("utf-8", "surrogateescape")
    # nothing listens at port 1: the refusal must come before any request
    argv = ["publish", str(keys), "--bucket", "filters", "--key", str(key),
            "--endpoint-url", "http://127.0.0.1:1", "--publisher-id", bad]
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        "bloomswarm publish: error: publisher_id 'host-\\udcff' is not valid UTF-8\n")


def test_config_objects_refuse_text_that_is_not_utf8() -> None:
    bad = b"\xfe".decode("utf-8", "surrogateescape")
    for field, value in (("prefix", bad), ("endpoint_url", "http://" + bad), ("region", bad),
                         ("profile", bad), ("public_base_url", bad)):
        with pytest.raises(ConfigError, match=f"^S3 {field} .* is not valid UTF-8$"):
            changes: dict[str, Any] = {field: value}
            dataclasses.replace(S3Config(bucket="filters"), **changes)
    with pytest.raises(ConfigError, match=r"^publisher_id 'a\\udcfe' is not valid UTF-8$"):
        make_config(publisher_id="a" + bad)
    with pytest.raises(ConfigError, match=r"^tracker URL"):
        make_config(trackers=("http://" + bad,))
