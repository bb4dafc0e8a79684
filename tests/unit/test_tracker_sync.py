"""tracker-sync: whitelist content, atomic and idempotent writes, SIGHUP to the tracker;
the whitelist probe the tests use."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import signature_key
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.tracker_sync import read_pid_file, sync_whitelist
from bloomswarm.publisher.versions import read_manifest
from bloomswarm.sandbox.tracker import announce_path
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import churned_keys, make_builder, make_config, new_key, published

clean_env = publishing_helpers.clean_env  # a fixture

KEY = new_key()
CONFIG = make_config()

HUP_RECORDER = """
import signal, sys, time
path = sys.argv[1]
signal.signal(signal.SIGHUP, lambda *_: open(path, "a").write("hup\\n"))
open(path + ".ready", "w").close()
while True:
    time.sleep(0.05)
"""


@contextlib.contextmanager
def _hup_recorder(log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process that appends "hup" to ``log`` on each SIGHUP, ready to receive them;
    killed afterwards."""
    recorder = subprocess.Popen([sys.executable, "-c", HUP_RECORDER, str(log)])
    try:
        deadline = time.monotonic() + 20
        while not Path(f"{log}.ready").exists():
            assert time.monotonic() < deadline and recorder.poll() is None
            time.sleep(0.02)
        yield recorder
    finally:
        recorder.kill()
        recorder.wait(timeout=10)


def test_whitelist_holds_the_v1_hashes_of_complete_versions(tmp_path: Path) -> None:
    store = published(3, KEY)
    store.delete([signature_key(3)])  # an unsigned claim is not a version agents will fetch
    whitelist = tmp_path / "whitelist.txt"
    result = sync_whitelist(store, whitelist, public_keys=[KEY.public_key()])
    manifests = [read_manifest(store, v) for v in (1, 2)]
    assert all(m.info_hash_v2 is None for m in manifests)  # v1 torrents: the default
    expected = sorted(m.info_hash_v1 for m in manifests)
    assert whitelist.read_text().splitlines() == expected == list(result.hashes)
    assert result.versions == (1, 2) and result.changed and result.signalled_pid is None
    assert oct(whitelist.stat().st_mode & 0o777) == "0o644"
    again = sync_whitelist(store, whitelist)
    assert not again.changed and again.hashes == result.hashes


def test_hybrid_versions_add_their_truncated_v2_hashes(tmp_path: Path) -> None:
    store = published(2, KEY, make_config(torrent_format="hybrid"))
    result = sync_whitelist(store, tmp_path / "w")
    manifests = [read_manifest(store, v) for v in (1, 2)]
    expected = sorted(h for m in manifests for h in (m.info_hash_v1, (m.info_hash_v2 or "")[:40]))
    assert len(expected) == 4 and all(len(h) == 40 for h in expected)
    assert list(result.hashes) == expected


def test_versions_signed_by_an_unknown_key_are_left_out(tmp_path: Path) -> None:
    store = published(2, KEY)
    other = new_key().public_key()
    with pytest.raises(ConfigError, match="none of the 2 versions in the bucket verified"):
        sync_whitelist(store, tmp_path / "w", public_keys=[other])  # every one left out
    assert not (tmp_path / "w").exists()
    result = sync_whitelist(store, tmp_path / "w", public_keys=[other], allow_empty=True)
    assert result.versions == () and result.left_out == 2 and (tmp_path / "w").read_text() == ""


def test_tracker_gets_sighup_only_when_the_whitelist_changes(tmp_path: Path) -> None:
    log = tmp_path / "hups"
    with _hup_recorder(log) as tracker:
        deadline = time.monotonic() + 20
        pid_file = tmp_path / "tracker.pid"
        pid_file.write_text(f"{tracker.pid}\n")
        proc = _proc_naming(tmp_path, tracker.pid, "opentracker")  # the recorder plays the tracker
        store = published(1, KEY)
        whitelist = tmp_path / "whitelist.txt"
        first = sync_whitelist(store, whitelist, tracker_pid=read_pid_file(pid_file), proc=proc)
        assert first.signalled_pid == tracker.pid
        assert sync_whitelist(store, whitelist, tracker_pid=tracker.pid, proc=proc).signalled_pid is None
        publish_filter(store, CONFIG, make_builder(["more"]), KEY, "f", progress=False)
        assert sync_whitelist(store, whitelist, tracker_pid=tracker.pid, proc=proc).changed
        while not log.exists() or log.read_text().count("hup") < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert log.read_text().count("hup") == 2
    no_such_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a live process
    with pytest.raises(ConfigError, match="not running"):
        sync_whitelist(published(1, KEY), tmp_path / "w2", tracker_pid=no_such_pid)


def _proc_naming(tmp_path: Path, pid: int, name: str) -> Path:
    """A stand-in for /proc in which process ``pid`` is called ``name``."""
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "comm").write_text(f"{name}\n")
    return proc


def test_a_pid_that_is_not_opentracker_is_never_signalled(tmp_path: Path) -> None:
    """A stale PID file may name any process since: it is refused before the whitelist is
    written (so the next sync, with the right PID, writes it and signals)."""
    log = tmp_path / "hups"
    with _hup_recorder(log) as bystander:
        whitelist = tmp_path / "whitelist.txt"
        with pytest.raises(ConfigError, match="not opentracker"):
            sync_whitelist(published(1, KEY), whitelist, tracker_pid=bystander.pid)  # the real /proc
        time.sleep(0.2)
        assert not log.exists() and bystander.poll() is None and not whitelist.exists()


def test_a_reload_that_fails_puts_the_previous_whitelist_back(tmp_path: Path) -> None:
    whitelist = tmp_path / "whitelist.txt"
    first = sync_whitelist(published(1, KEY), whitelist)
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a live process
    proc = _proc_naming(tmp_path, gone, "opentracker")  # it looks like the tracker, and is gone
    with pytest.raises(ConfigError, match="not running"):
        sync_whitelist(published(2, KEY), whitelist, tracker_pid=gone, proc=proc)
    assert whitelist.read_text().splitlines() == list(first.hashes)


def test_named_filters_are_whitelisted_with_the_buckets_own_versions(tmp_path: Path) -> None:
    store = published(1, KEY)
    for name, count in (("alpha", 2), ("beta", 1)):
        folder = PrefixedStore(store, filter_prefix(name))
        for n in range(count):
            publish_filter(folder, CONFIG, make_builder([f"{name}{n}"]), KEY, "f", progress=False)
    result = sync_whitelist(store, tmp_path / "w", public_keys=[KEY.public_key()])
    assert result.versions == (1,) and result.filter_versions == {"alpha": (1, 2), "beta": (1,)}
    expected = [read_manifest(store, 1).info_hash_v1]
    expected += [read_manifest(PrefixedStore(store, filter_prefix("alpha")), v).info_hash_v1 for v in (1, 2)]
    expected += [read_manifest(PrefixedStore(store, filter_prefix("beta")), 1).info_hash_v1]
    assert list(result.hashes) == sorted(expected)


def test_pid_file_must_hold_a_pid(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_pid_file(tmp_path / "missing.pid")
    (tmp_path / "bad.pid").write_text("opentracker\n")
    with pytest.raises(ConfigError, match="does not hold a PID"):
        read_pid_file(tmp_path / "bad.pid")
    (tmp_path / "ok.pid").write_text(f"{os.getpid()}\n")
    assert read_pid_file(tmp_path / "ok.pid") == os.getpid()


def test_the_deltas_hashes_are_whitelisted_too(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    hybrid = make_config(torrent_format="hybrid")
    for version in (1, 2, 3):
        publish_filter(store, hybrid, make_builder(churned_keys(20_000, version), capacity=20_000),
                       KEY, "f", progress=False)
    result = sync_whitelist(store, tmp_path / "w")
    manifests = [read_manifest(store, v) for v in (1, 2, 3)]
    torrents = [(m.info_hash_v1, m.info_hash_v2) for m in manifests]
    torrents += [(d.info_hash_v1, d.info_hash_v2) for m in manifests for d in m.deltas]
    assert len(torrents) == 6
    expected = sorted(h for v1, v2 in torrents for h in (v1, (v2 or "")[:40]))
    assert list(result.hashes) == expected and len(set(expected)) == 12


def test_the_whitelist_probe_percent_encodes_every_byte_of_the_hash() -> None:
    # urlencode sends a 0x20 byte as "+", which opentracker reads as 0x2b: it then looks
    # up another hash and refuses the whitelisted one however often it reloads (about 1 in
    # 13 random hashes; the compose test's "missed reload" flake).
    info_hash = "20" * 10 + "2b" * 5 + "7e2d5f2e"
    path = announce_path(info_hash)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    assert path.startswith("/announce?info_hash=" + "%20" * 10 + "%2b" * 5 + "%7e%2d%5f%2e&")
    sent = path.split("info_hash=")[1].split("&")[0]
    assert urllib.parse.unquote_to_bytes(sent) == bytes.fromhex(info_hash)
    assert query["port"] == ["9"] and query["left"] == ["0"] and "event" not in query
    assert announce_path(info_hash, stopped=True) == path + "&event=stopped"


@pytest.mark.usefixtures("clean_env")
def test_tracker_sync_trusts_the_signing_key_during_a_rotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/operations.md's rotation, step 2: signing_key is the new key, accepted_public_keys
    still the old one. The versions the new key signs (latest.json's) are whitelisted."""
    import bloomswarm.index_commands  # noqa: F401 (binds the real _open_store before the patch)
    from bloomswarm.common.signing import load_private_key
    from bloomswarm.main import main

    old_key, new_key_file = tmp_path / "old.key", tmp_path / "new.key"
    assert main(["-q", "keygen", str(old_key)]) == 0 and main(["-q", "keygen", str(new_key_file)]) == 0
    store = MemoryObjectStore()
    publish_filter(store, CONFIG, make_builder(["a"]), load_private_key(old_key), "f", progress=False)
    publish_filter(store, CONFIG, make_builder(["b"]), load_private_key(new_key_file), "f", progress=False)
    whitelist = tmp_path / "whitelist.txt"
    (tmp_path / "publisher.toml").write_text(
        f'signing_key = "{new_key_file}"\naccepted_public_keys = ["{old_key.with_suffix(".pub")}"]\n'
        f'[s3]\nbucket = "filters"\n[tracker]\nwhitelist = "{whitelist}"\n')
    monkeypatch.setattr("bloomswarm.publish_commands._open_store", lambda _config: store)
    assert main(["-q", "tracker-sync", "--config", str(tmp_path / "publisher.toml")]) == 0
    assert "versions 1-2" in capsys.readouterr().out
    assert whitelist.read_text().splitlines() == sorted(read_manifest(store, v).info_hash_v1 for v in (1, 2))
