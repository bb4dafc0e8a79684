"""The publisher against moto's S3 server over real HTTP: versions, pins, retention, racing
publishers, publishers killed mid-upload, watch mode, bad input, and opentracker's whitelist.

Publishers run as real processes (``python -m bloomswarm`` or the request-announcing
``publisher_driver.py``) where the test is about processes: races, SIGKILL, signals,
exit codes and one-line errors. Processes are stopped by their PID.
"""

from __future__ import annotations

import gzip
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from bloomswarm.common.bucket_layout import LATEST_KEY
from bloomswarm.common.pointer import open_pointer
from bloomswarm.common.signing import SigningKey, VerifyKey, load_private_key, write_keypair
from bloomswarm.common.storage import S3Config, S3ObjectStore
from bloomswarm.main import main
from bloomswarm.publisher.config import PublisherConfig, load_config
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.retention import apply_retention
from bloomswarm.publisher.versions import read_manifest, read_verified_manifest, scan_versions
from bloomswarm.sandbox.processes import free_port
from bloomswarm.sandbox.tracker import OpenTracker
from tests.functional.publisher_driver import READY_MARK, REQUEST_MARK
from tests.unit.publishing_helpers import check_version, make_builder

DRIVER = Path(__file__).with_name("publisher_driver.py")
MIB = 1 << 20


@dataclass
class PublishBucket:
    """A bucket prepared for publishing: config file, key pair, a store to inspect it."""

    s3: S3Config
    config_file: Path
    key_file: Path
    signing_key: SigningKey
    store: S3ObjectStore
    data: Path

    @property
    def public_keys(self) -> list[VerifyKey]:
        return [self.signing_key.public_key()]

    def config(self) -> PublisherConfig:
        return load_config(self.config_file, environ={})

    def keys_file(self, name: str, count: int = 200) -> Path:
        path = self.data / f"{name}.txt"
        path.write_text("".join(f"{name}-{i}\n" for i in range(count)))
        return path

    def latest(self) -> tuple[int, int, bool]:
        stored = self.store.get(LATEST_KEY)
        assert stored is not None
        pointer = open_pointer(stored.data, self.public_keys)
        return pointer.version, pointer.sequence, pointer.pinned


@pytest.fixture
def bucket(s3_bucket: S3Config, tmp_path: Path) -> Iterator[PublishBucket]:
    key_file = tmp_path / "publisher.key"
    write_keypair(key_file, tmp_path / "publisher.pub")
    (tmp_path / "work").mkdir()
    (tmp_path / "data").mkdir()
    config_file = tmp_path / "publisher.toml"
    config_file.write_text(
        f"publisher_id = \"functional\"\n"
        f"signing_key = {json.dumps(str(key_file))}\n"
        f"work_dir = {json.dumps(str(tmp_path / 'work'))}\n"
        f"trackers = [\"http://127.0.0.1:6969/announce\"]\n"
        f"[s3]\n"
        f"bucket = {json.dumps(s3_bucket.bucket)}\n"
        f"prefix = {json.dumps(s3_bucket.prefix)}\n"
        f"endpoint_url = {json.dumps(s3_bucket.endpoint_url)}\n"
        f"region = \"us-east-1\"\n"
        f"connect_timeout_s = 2.0\n"
        f"part_size = {5 * MIB}\n"
    )
    store = S3ObjectStore(s3_bucket)
    yield PublishBucket(s3_bucket, config_file, key_file, load_private_key(key_file), store,
                tmp_path / "data")
    store.delete(store.list())  # moto keeps every bucket in memory for the session


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m bloomswarm -q ARGS`` as a child process."""
    return subprocess.run(
        [sys.executable, "-m", "bloomswarm", "-q", *args],
        check=False, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
    )


class LineReader:
    """Collects a child's output lines on a thread, so a test can wait for one with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float = 120.0) -> str | None:
        """The first new line matching ``predicate``; None when the stream ends first."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no matching line within {timeout_s}s; got {self.lines[-20:]}"
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                return None
            self.lines.append(line)
            if predicate(line):
                return line


def _published_versions(stdout: str) -> list[int]:
    return [int(line.split()[1].rstrip(":")[1:]) for line in stdout.splitlines()
            if line.startswith("published v")]


# --- publishing, unchanged, pin, retention ----------------------------------------------------


def test_publish_two_versions_then_unchanged_and_force(
    bucket: PublishBucket, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(bucket.config_file)]
    assert main(["-q", "publish", str(bucket.keys_file("a")), *config]) == 0
    assert main(["-q", "publish", str(bucket.keys_file("b")), *config, "--expected-keys", "5000000"]) == 0
    assert _published_versions(capsys.readouterr().out) == [1, 2]
    for version in (1, 2):
        manifest = check_version(bucket.store, version, bucket.public_keys)  # sig, file, torrent
        assert manifest.publisher_id == "functional"
        assert manifest.source_fingerprint.startswith("files-sha256:")
    assert read_manifest(bucket.store, 2).size > 5 * MIB  # went up as a multipart upload
    assert bucket.latest() == (2, 2, False)
    assert bucket.store.list_multipart_uploads() == []

    before = bucket.store.list()
    assert main(["-q", "publish", str(bucket.keys_file("b")), *config, "--expected-keys", "5000000"]) == 0
    assert capsys.readouterr().out.startswith("unchanged: the filter equals v2")
    assert bucket.store.list() == before and bucket.latest() == (2, 2, False)
    assert main(["-q", "publish", str(bucket.keys_file("b")), *config, "--expected-keys", "5000000",
                 "--force"]) == 0
    assert _published_versions(capsys.readouterr().out) == [3]
    assert bucket.latest() == (3, 3, False)



def test_an_empty_input_is_published_only_with_allow_empty(bucket: PublishBucket, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    config = ["--config", str(bucket.config_file)]
    assert main(["-q", "publish", str(empty), *config]) == 1
    assert not bucket.store.exists(LATEST_KEY)
    assert main(["-q", "publish", str(empty), *config, "--allow-empty"]) == 0
    assert read_manifest(bucket.store, 1).filter.key_count == 0 and bucket.latest() == (1, 1, False)

def test_pin_holds_the_fleet_and_unpin_releases_it(
    bucket: PublishBucket, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(bucket.config_file)]
    for name in ("a", "b"):
        assert main(["-q", "publish", str(bucket.keys_file(name)), *config]) == 0
    assert main(["-q", "pin", "1", *config]) == 0
    assert bucket.latest() == (1, 3, True)
    assert main(["-q", "publish", str(bucket.keys_file("c")), *config]) == 0
    out = capsys.readouterr().out
    assert _published_versions(out) == [1, 2, 3] and "the fleet is pinned at v1" in out
    assert bucket.latest() == (1, 3, True)
    check_version(bucket.store, 3, bucket.public_keys)
    assert main(["-q", "versions", *config]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in listing[1:]][:3] == [
        ["3", "complete", f"{read_manifest(bucket.store, 3).size:,}"],
        ["2", "complete", f"{read_manifest(bucket.store, 2).size:,}"],
        ["1", "latest,", "pinned"]]
    assert main(["-q", "pin", "9", *config]) == 1
    assert "version 9 does not exist" in capsys.readouterr().err
    assert main(["-q", "unpin", *config]) == 0
    assert bucket.latest() == (3, 4, False)
    assert main(["-q", "unpin", *config]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("not pinned")


def test_refresh_re_signs_latest_unchanged_and_a_key_others_can_read_is_refused(
    bucket: PublishBucket, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(bucket.config_file)]
    assert main(["-q", "refresh", *config]) == 1
    assert "nothing to refresh: latest.json does not exist" in capsys.readouterr().err
    for name in ("a", "b"):
        assert main(["-q", "publish", str(bucket.keys_file(name)), *config]) == 0
    assert bucket.latest() == (2, 2, False)
    capsys.readouterr()
    assert main(["-q", "refresh", *config]) == 0
    assert capsys.readouterr().out.startswith("refreshed: latest.json -> v2, sequence 3, issued ")
    assert bucket.latest() == (2, 3, False)
    assert main(["-q", "publish", str(bucket.keys_file("b")), *config, "--refresh"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("unchanged: the filter equals v2")
    assert lines[1].startswith("refreshed: latest.json -> v2, sequence 4, issued ")
    assert bucket.latest() == (2, 4, False)
    assert main(["-q", "pin", "1", *config]) == 0
    assert main(["-q", "refresh", *config]) == 0
    assert bucket.latest() == (1, 6, True)  # the pin is kept
    assert main(["-q", "publish", str(bucket.keys_file("c")), *config, "--refresh"]) == 0
    out = capsys.readouterr().out
    assert "the fleet is pinned at v1" in out and "refreshed: latest.json -> v1 (pinned), sequence 7" in out
    assert bucket.latest() == (1, 7, True)
    bucket.key_file.chmod(0o640)
    assert main(["-q", "refresh", *config]) == 1
    assert capsys.readouterr().err.endswith(f"(mode 0640): run chmod 600 {bucket.key_file}\n")
    assert bucket.latest() == (1, 7, True)  # nothing written


def test_retention_keeps_the_newest_versions_after_latest_moves(
    bucket: PublishBucket, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(bucket.config_file), "--keep", "2"]
    for name in ("a", "b", "c", "d"):
        assert main(["-q", "publish", str(bucket.keys_file(name)), *config]) == 0
    out = capsys.readouterr().out
    assert "retention: deleted" in out
    assert sorted(scan_versions(bucket.store)) == [3, 4]
    assert bucket.latest() == (4, 4, False)
    keys = bucket.store.list()
    assert all(k == LATEST_KEY or k.startswith(("v3/", "v4/")) for k in keys)
    assert len(keys) == 1 + 2 * 4  # latest.json; per version: manifest, signature, file, torrent


# --- racing publishers --------------------------------------------------------------------------


def test_racing_publishers_never_duplicate_or_skip_a_version(bucket: PublishBucket, tmp_path: Path) -> None:
    """Ten rounds of two publisher processes released at the same moment."""
    published: list[int] = []
    lost = 0
    for round_no in range(10):
        go = tmp_path / f"go-{round_no}"
        env = {**os.environ, "BSW_TEST_GO_FILE": str(go), "BSW_TEST_REQUEST_DELAY": "0.01"}
        procs = [
            subprocess.Popen(
                [sys.executable, str(DRIVER), "-v", "publish",
                 str(bucket.keys_file(f"r{round_no}-p{i}")), "--config", str(bucket.config_file),
                 "--keep", "100", "--expected-keys", "1000"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )
            for i in range(2)
        ]
        try:
            for proc in procs:
                assert proc.stderr is not None
                assert proc.stderr.readline().strip() == READY_MARK
            go.touch()
            results = [proc.communicate(timeout=300) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for proc, (out, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, err[-2000:]
            versions = _published_versions(out)
            assert len(versions) == 1, out
            published += versions
            lost += err.count("claimed by another publisher") + err.count("lost the race")
    print(f"lost claims over 10 rounds: {lost}")
    assert sorted(published) == list(range(1, 21))  # no duplicates, no gaps
    folders = scan_versions(bucket.store)
    assert sorted(folders) == list(range(1, 21)) and all(f.complete for f in folders.values())
    for version in folders:
        manifest = read_verified_manifest(bucket.store, version, bucket.public_keys)
        assert bucket.store.head(manifest.filter_key).size == manifest.size
    version, sequence, pinned = bucket.latest()
    assert (version, pinned) == (20, False) and sequence <= 20


# --- publishers killed mid-way -----------------------------------------------------------------


def _check_consistent(bucket: PublishBucket, latest_before: tuple[int, int, bool] | None,
                      verified: set[int]) -> None:
    """No manifest without its objects; latest.json unchanged or naming a complete version."""
    folders = scan_versions(bucket.store)
    for version, folder in folders.items():
        if not folder.claimed:
            continue
        manifest = read_manifest(bucket.store, version)
        assert bucket.store.head(manifest.filter_key).size == manifest.size
        assert bucket.store.exists(manifest.torrent_key)
        if folder.complete and version not in verified:
            check_version(bucket.store, version, bucket.public_keys)
            verified.add(version)
    latest = bucket.latest() if bucket.store.exists(LATEST_KEY) else None
    if latest != latest_before:
        assert latest is not None and folders[latest[0]].complete


def test_publisher_killed_at_random_points_leaves_no_partial_version(
    bucket: PublishBucket, tmp_path: Path
) -> None:
    rng = random.Random(7321)
    delay = 0.03
    env = {**os.environ, "BSW_TEST_REQUEST_DELAY": str(delay)}
    base = [sys.executable, str(DRIVER), "-q", "publish", "--config", str(bucket.config_file),
            "--expected-keys", "5000000", "--keep", "3"]  # ~6 MiB: a two-part upload
    for warm_up in ("warm-up-1", "warm-up-2"):  # the second shows a typical request sequence
        counting = subprocess.run([*base, str(bucket.keys_file(warm_up))], check=False,
                                  capture_output=True, text=True, env=env, timeout=300)
        assert counting.returncode == 0, counting.stderr
    operations = [line.split()[3] for line in counting.stderr.splitlines()
                  if line.startswith(REQUEST_MARK)]
    # every other trial kills at a write that changes what readers see
    writes = [i for i, op in enumerate(operations, 1)
              if op in ("PutObject", "CompleteMultipartUpload", "DeleteObjects")]
    config, signing_key = bucket.config(), bucket.signing_key
    verified: set[int] = set()
    outcomes: list[str] = []
    for trial in range(10):
        before = bucket.latest()
        kill_at = rng.choice(writes) if trial % 2 else rng.randint(1, len(operations) + 1)
        proc = subprocess.Popen([*base, str(bucket.keys_file(f"trial-{trial}"))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stderr is not None
            reader = LineReader(proc.stderr)
            mark = f"{REQUEST_MARK} {kill_at} "
            line = reader.wait_for(lambda s, mark=mark: s.startswith(mark))  # type: ignore[misc]
            if line is not None:
                time.sleep(rng.uniform(0, 1.5 * delay))  # before, or during, that request
                os.kill(proc.pid, signal.SIGKILL)
                outcomes.append(" ".join(line.split()[3:]))
            else:
                outcomes.append("finished")
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        _check_consistent(bucket, before, verified)
        # the next publish succeeds and becomes latest
        result = publish_filter(bucket.store, config, make_builder([f"next-{trial}"]),
                                signing_key, "after-kill", progress=False)
        assert result.status == "published" and result.latest_moved
        assert bucket.latest()[0] == result.version
        _check_consistent(bucket, None, verified)
    print("killed before/during:", outcomes)
    # retention with no grace removes every leftover of the killed publishers
    apply_retention(bucket.store, keep_versions=3, grace_s=0, now=time.time() + 60)
    assert bucket.store.list_multipart_uploads() == []
    folders = scan_versions(bucket.store)
    assert all(f.complete and len(f.attempts()) == 1 for f in folders.values()), folders


def test_sigterm_during_the_upload_aborts_it(bucket: PublishBucket) -> None:
    assert main(["-q", "publish", str(bucket.keys_file("a")), "--config", str(bucket.config_file)]) == 0
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "-q", "publish", str(bucket.keys_file("b")),
         "--config", str(bucket.config_file), "--expected-keys", "5000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BSW_TEST_REQUEST_DELAY": "0.2"},
    )
    try:
        assert proc.stderr is not None
        reader = LineReader(proc.stderr)
        assert reader.wait_for(lambda s: s.startswith(REQUEST_MARK) and " UploadPart " in s)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
        assert reader.wait_for(lambda s: " AbortMultipartUpload " in s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert bucket.store.list_multipart_uploads() == []
    assert bucket.latest() == (1, 1, False) and sorted(scan_versions(bucket.store)) == [1]


# --- watch mode ----------------------------------------------------------------------------------


def test_watch_publishes_once_per_burst_and_stops_on_sigterm(bucket: PublishBucket, tmp_path: Path) -> None:
    data = tmp_path / "watched"
    data.mkdir()
    (data / "keys-0.txt").write_text("a\nb\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomswarm", "-q", "publish", "--watch", str(data),
         "--config", str(bucket.config_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BLOOMSWARM_WATCH_DEBOUNCE_S": "0.5"},
    )
    try:
        assert proc.stdout is not None
        out = LineReader(proc.stdout)
        assert out.wait_for(lambda s: s == "latest.json -> v1")
        for i in range(1, 40):  # one burst
            (data / f"keys-{i}.txt").write_text(f"key-{i}\n")
        assert out.wait_for(lambda s: s == "latest.json -> v2")
        time.sleep(3.0)  # quiet: the burst must not publish again
        assert sorted(scan_versions(bucket.store)) == [1, 2]
        (data / "keys-0.txt").write_text("a\nb\nc\n")
        assert out.wait_for(lambda s: s == "latest.json -> v3")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sorted(scan_versions(bucket.store)) == [1, 2, 3]
    assert check_version(bucket.store, 2, bucket.public_keys).filter.key_count == 41


# --- bad input: one line, non-zero exit ---------------------------------------------------------


def _bad_inputs(bucket: PublishBucket, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    truncated = tmp_path / "keys.txt.gz"
    truncated.write_bytes(gzip.compress(b"".join(b"%d\n" % i for i in range(10000)))[:200])
    table = tmp_path / "keys.csv"
    table.write_text("id,name\n1,a\n2,b\n")
    ints = tmp_path / "ints.txt"
    ints.write_text("12\n13\nfourteen\n")
    bad_key = tmp_path / "bad.key"
    bad_key.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    keys = str(bucket.keys_file("ok"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    return {
        "input without keys": ([str(empty)], "holds no keys"),
        "missing file": ([str(tmp_path / "nope.txt")], "nope.txt"),
        "unreadable compressed file": ([str(truncated)], "keys.txt.gz"),
        "wrong column": ([str(table), "--csv-column", "email"], "email"),
        "non-integer in int mode": ([str(ints), "--key-type", "int"], "fourteen"),
        "unreachable endpoint": ([keys, "--endpoint-url", f"http://127.0.0.1:{free_port()}"],
                                 "cannot reach S3 endpoint"),
        "missing bucket": ([keys, "--bucket", f"bsw-missing-{uuid.uuid4().hex[:12]}"],
                           "does not exist"),
        "bad key file": ([keys, "--key", str(bad_key)], "bad.key"),
    }


@pytest.mark.parametrize(
    "case",
    ["input without keys", "missing file", "unreadable compressed file", "wrong column",
     "non-integer in int mode",
     "unreachable endpoint", "missing bucket", "bad key file"],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(bucket: PublishBucket, tmp_path: Path, case: str) -> None:
    args, fragment = _bad_inputs(bucket, tmp_path)[case]
    result = run_cli("publish", *args, "--config", str(bucket.config_file))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bloomswarm publish: error: "), result.stderr
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not bucket.store.exists(LATEST_KEY)


# --- opentracker whitelist ----------------------------------------------------------------------


def _eventually(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@pytest.mark.skipif(shutil.which("opentracker") is None,
                    reason="opentracker is not installed (scripts/test.sh installs it with apt-get as root)")
def test_tracker_sync_makes_opentracker_serve_exactly_the_retained_versions(bucket: PublishBucket) -> None:
    config = ["--config", str(bucket.config_file)]
    for name in ("a", "b"):
        assert main(["-q", "publish", str(bucket.keys_file(name)), *config]) == 0
    with OpenTracker() as tracker:  # an empty whitelist, re-read on SIGHUP
        unknown = "ab" * 20
        assert not tracker.accepts(unknown)
        sync = ["tracker-sync", "--whitelist", str(tracker.whitelist), "--tracker-pid", str(tracker.pid),
                *config]
        result = run_cli(*sync)
        assert result.returncode == 0, result.stderr
        assert "sent SIGHUP" in result.stdout
        manifests = [read_manifest(bucket.store, v) for v in (1, 2)]
        assert all(m.info_hash_v2 is None for m in manifests)  # v1 torrents (the default)
        hashes = sorted(m.info_hash_v1 for m in manifests)
        assert tracker.whitelist.read_text().splitlines() == hashes
        for info_hash in hashes:
            _eventually(lambda h=info_hash: _rehup_then_accepted(tracker, h))  # type: ignore[misc]
        assert not tracker.accepts(unknown)
        again = run_cli(*sync)
        assert again.returncode == 0 and "up to date" in again.stdout
        # a new version and retention of one: v1 and v2 leave the whitelist
        assert main(["-q", "publish", str(bucket.keys_file("c")), *config, "--keep", "1"]) == 0
        assert run_cli(*sync).returncode == 0
        newest = read_manifest(bucket.store, 3)
        _eventually(lambda: _rehup_then_accepted(tracker, newest.info_hash_v1))
        _eventually(lambda: not tracker.accepts(manifests[0].info_hash_v1))


@pytest.mark.skipif(shutil.which("opentracker") is None,
                    reason="opentracker is not installed (scripts/test.sh installs it with apt-get as root)")
def test_the_sandbox_tracker_whitelists_many_torrents_at_once() -> None:
    first, second, hybrid, v2, unknown = "a1" * 20, "b2" * 20, "c3" * 20, "d4" * 32, "e5" * 20
    with OpenTracker() as tracker:
        tracker.allow_all([(first, None), (second, None), (hybrid, v2), (first, None)])
        assert tracker.whitelist.read_text().splitlines() == [first, second, hybrid, v2[:40]]
        assert all(tracker.accepts(h) for h in (first, second, hybrid, v2[:40]))
        assert not tracker.accepts(unknown)


def _rehup_then_accepted(tracker: OpenTracker, info_hash_hex: str) -> bool:
    """Whether the hash is accepted; if not, SIGHUP the tracker again.

    One CI run saw a whitelisted hash refused for 20 s after tracker-sync's SIGHUP. The
    likely cause was this test's own announce, which sent a 0x20 byte of the hash as "+"
    (fixed since); repeating the signal is kept as a harmless guard.
    """
    if tracker.accepts(info_hash_hex):
        return True
    os.kill(tracker.pid, signal.SIGHUP)
    time.sleep(0.2)
    return False
