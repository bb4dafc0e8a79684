"""The libtorrent swarm with real sessions, each in its own process, on 127.0.0.1.

The origin is :class:`~bloomswarm.sandbox.origin.Origin` serving a directory (Range requests,
bytes counted at the server, S3-like per-connection rate caps where a test needs a
realistic origin); the tracker is Debian's opentracker; one test uses aria2c, a BitTorrent
client no one here wrote. Every process a test starts is stopped by that test, by PID.

Timing is never asserted except in the rate-limit tests, and there only as a loose lower
bound (the cap must hold), never as a speed claim.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.common.file_hash import file_sha256
from bloomswarm.sandbox.origin import Origin
from bloomswarm.sandbox.swarm_worker import Report, WorkerProcess
from bloomswarm.sandbox.tracker import OpenTracker
from bloomswarm.sandbox.worker_swarm import (
    MIB,
    TestTorrent,
    loopback_swarm,
    make_test_torrent,
    run_workers,
    worker_spec,
    write_random_file,
)

pytestmark = pytest.mark.slow

FILE_SIZE = 24 * MIB
ORIGIN_CONNECTION_RATE = 8 * MIB
"""Per-connection cap of the origin in the fleet tests: an origin much slower than the
LAN, as S3 or a CDN is for a data centre."""

Spawn = Callable[..., WorkerProcess]


@pytest.fixture(scope="module")
def torrent(tmp_path_factory: pytest.TempPathFactory) -> TestTorrent:
    """A random file and its hybrid v1+v2 torrent (no tracker inside: agents add theirs)."""
    directory = tmp_path_factory.mktemp("origin")
    file = directory / "filter-v1.bsf"
    write_random_file(file, FILE_SIZE)
    return make_test_torrent(file)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start worker processes; every one is stopped (by PID) when the test ends."""
    started: list[WorkerProcess] = []

    def start(spec: dict[str, Any], name: str, *, wait: bool = True) -> WorkerProcess:
        worker = WorkerProcess(spec, name=name)
        started.append(worker)
        if wait:
            worker.start()
        else:
            worker.launch()
        return worker

    yield start
    for worker in started:
        worker.cleanup()


def _origin(torrent: TestTorrent, *, connection_rate: int = 0) -> Origin:
    return Origin(files=torrent.file.parent, connection_rate=connection_rate).start()


def _whitelisted(tracker: OpenTracker, torrent: TestTorrent) -> list[str]:
    tracker.allow(torrent.info_hash_v1, torrent.info_hash_v2)
    return [tracker.announce_url]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- (a) the origin alone -----------------------------------------------------------------


def test_one_agent_downloads_from_the_origin_alone(
    torrent: TestTorrent, tmp_path: Path, spawn: Spawn
) -> None:
    origin = _origin(torrent)
    try:
        spec = worker_spec(torrent, tmp_path / "agent", loopback_swarm(),
                           origin_url=origin.url(torrent.name))
        worker = spawn(spec, "alone")
        worker.wait_finished(60)
        time.sleep(0.6)  # the next report has the final counts
        final = worker.latest
        assert final is not None
        assert file_sha256(tmp_path / "agent" / torrent.name) == torrent.sha256
        assert final["state"] == "seeding" and final["progress"] == 1.0
        assert final["bytes_from_peers"] == 0 and final["hash_failures"] == 0
        assert final["bytes_from_origin"] == torrent.size
        assert origin.filter_bytes == torrent.size  # one copy, counted at the origin too
        assert final["origin_in_use"] is False  # the web seed goes once done
    finally:
        origin.stop()


# --- (b), (c) five agents: one copy from the origin -----------------------------------------


def _check_fleet(result: Any, torrent: TestTorrent) -> None:
    assert all(result.correct), result
    # Each agent's own split agrees with what the origin counted (what an agent drops
    # mid-request when it backs off reaches the origin's count, not the agent's).
    reported = sum(result.reported_origin)
    assert abs(reported - result.origin_bytes) <= 0.1 * torrent.size + 2 * MIB, result
    for got in (o + p for o, p in zip(result.reported_origin, result.reported_peers, strict=True)):
        assert got >= torrent.size, result


def test_five_agents_with_a_tracker_pull_about_one_copy_from_the_origin(
    torrent: TestTorrent,
    tmp_path: Path,
    opentracker: OpenTracker,
    record_property: Callable[[str, object], None],
) -> None:
    trackers = _whitelisted(opentracker, torrent)
    origin = _origin(torrent, connection_rate=ORIGIN_CONNECTION_RATE)
    try:
        policy_on = run_workers(5, torrent, origin, loopback_swarm(trackers=trackers), tmp_path / "on")
        always = run_workers(5, torrent, origin, loopback_swarm(trackers=trackers, origin_policy="always"),
                           tmp_path / "always")
    finally:
        origin.stop()
    print(f"\norigin policy on:  {policy_on.summary()}\norigin always on: {always.summary()}")
    record_property("origin_copies_policy_on", round(policy_on.origin_copies, 3))
    record_property("origin_copies_always", round(always.origin_copies, 3))
    _check_fleet(policy_on, torrent)
    _check_fleet(always, torrent)
    assert policy_on.origin_copies <= 1.5, policy_on.summary()
    assert sum(policy_on.reported_peers) >= 3 * torrent.size  # the rest came from peers


def test_five_agents_find_each_other_through_the_dht_alone(
    torrent: TestTorrent, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    origin = _origin(torrent, connection_rate=ORIGIN_CONNECTION_RATE)
    try:
        result = run_workers(5, torrent, origin, loopback_swarm(), tmp_path / "dht", dht=True)
    finally:
        origin.stop()
    print(f"\nDHT only, origin policy on: {result.summary()}")
    record_property("origin_copies_dht", round(result.origin_copies, 3))
    _check_fleet(result, torrent)
    assert result.origin_copies <= 1.5, result.summary()
    assert sum(result.reported_peers) >= 3 * torrent.size


# --- (d) a peer that serves corrupt pieces ------------------------------------------------


def test_corrupt_pieces_from_a_peer_are_detected_and_the_download_completes(
    torrent: TestTorrent, tmp_path: Path, opentracker: OpenTracker, spawn: Spawn
) -> None:
    trackers = _whitelisted(opentracker, torrent)
    tampered = tmp_path / "evil"
    tampered.mkdir()
    shutil.copy(torrent.file, tampered / torrent.name)
    with (tampered / torrent.name).open("r+b") as file:  # every other piece damaged
        for offset in range(0, torrent.size, 2 * torrent.piece_size):
            file.seek(offset + 100)
            byte = file.read(1)
            file.seek(offset + 100)
            file.write(bytes([byte[0] ^ 0xFF]))
    evil = spawn({"mode": "evil-seed", "torrent": str(torrent.torrent_path), "dir": str(tampered),
                  "swarm": loopback_swarm(trackers=trackers)}, "evil")
    # The victim meets only the corrupt peer (no origin) until its hash failures show;
    # then an honest seed joins and the download completes from it.
    spec = worker_spec(torrent, tmp_path / "agent", loopback_swarm(trackers=trackers), origin_url=None)
    agent = spawn(spec, "victim")
    agent.wait_for(lambda r: r.get("event") == "status" and r["hash_failures"] >= 1, 60)
    honest = spawn({"mode": "seed", "torrent": str(torrent.torrent_path), "dir": str(torrent.file.parent),
                    "swarm": loopback_swarm(trackers=trackers), "report_interval": 0.2}, "honest")
    agent.wait_finished(90)
    time.sleep(0.6)
    final = agent.latest
    assert final is not None
    assert final["hash_failures"] >= 1, final
    assert file_sha256(tmp_path / "agent" / torrent.name) == torrent.sha256
    assert final["bytes_from_origin"] == 0 and final["bytes_from_peers"] > 0, final
    assert int((honest.latest or {}).get("bytes_uploaded", 0)) > 0, honest.latest
    evil.stop()


# --- (e) resume after SIGKILL -------------------------------------------------------------


def test_a_killed_download_resumes_from_its_resume_data(
    torrent: TestTorrent, tmp_path: Path, spawn: Spawn
) -> None:
    origin = _origin(torrent, connection_rate=4 * MIB)  # about 6 s for the file
    resume = tmp_path / "resume.dat"
    settings = loopback_swarm(origin_policy="always")
    try:
        spec = worker_spec(torrent, tmp_path / "agent", settings, origin_url=origin.url(torrent.name),
                           resume_out=str(resume), save_resume_every=0.3)
        first = spawn(spec, "first")
        # Wait for resume data saved past a third of the file, then kill -9 mid-download.
        saved_at: dict[str, float] = {}

        def saved_past_a_third(report: Report) -> bool:
            if report.get("event") == "status":
                saved_at["progress"] = float(report["progress"])
            return report.get("event") == "resume_saved" and saved_at.get("progress", 0.0) >= 0.33

        first.wait_for(saved_past_a_third, 60)
        progress_saved = saved_at["progress"]
        first.kill()
        assert progress_saved < 1.0
        sent_before = origin.filter_bytes

        second = spawn({**spec, "resume": str(resume), "save_resume_every": None}, "second")
        second.wait_finished(60)
        time.sleep(0.6)
        final = second.latest
        assert final is not None
    finally:
        origin.stop()
    assert file_sha256(tmp_path / "agent" / torrent.name) == torrent.sha256
    # Only what was missing at the last save came again (plus the pieces in flight).
    missing = (1.0 - progress_saved) * torrent.size
    assert final["bytes_from_origin"] <= missing + 4 * MIB, (final, progress_saved)
    assert origin.filter_bytes - sent_before <= missing + 4 * MIB
    assert origin.filter_bytes < 1.5 * torrent.size


# --- (f) rate limits on loopback ----------------------------------------------------------


def _transfer_seconds(worker: WorkerProcess, key: str) -> float:
    """Seconds from the first report with bytes in ``key`` to the finished report."""
    started = next(float(r["t"]) for r in worker.reports if r.get("event") == "status" and r[key] > 0)
    finished = next(float(r["t"]) for r in worker.reports if r.get("event") == "status" and r["finished"])
    return finished - started


def _download_alone(torrent: TestTorrent, directory: Path, spawn: Spawn, name: str, swarm: dict[str, Any],
                    *, connection_rate: int = 0, **extra: Any) -> tuple[WorkerProcess, Origin]:
    """One worker downloads the torrent into ``directory`` from an origin of its own (a
    ``connection_rate`` pace), which stops once the worker has finished; the copy's
    SHA-256 is checked. ``extra``: more worker spec fields."""
    origin = _origin(torrent, connection_rate=connection_rate)
    try:
        spec = worker_spec(torrent, directory, swarm, origin_url=origin.url(torrent.name), **extra)
        worker = spawn(spec, name)
        worker.wait_finished(60)
    finally:
        origin.stop()
    assert file_sha256(directory / torrent.name) == torrent.sha256
    return worker, origin


def test_the_origin_rate_limit_holds_on_loopback(torrent: TestTorrent, tmp_path: Path, spawn: Spawn) -> None:
    cap = 6 * MIB
    swarm = loopback_swarm(origin_policy="always", origin_rate_limit=cap)
    worker, _ = _download_alone(torrent, tmp_path / "agent", spawn, "capped", swarm, report_interval=0.2)
    assert _transfer_seconds(worker, "bytes_from_origin") >= 0.6 * torrent.size / cap - 0.2


def test_the_upload_rate_limit_holds_for_peers_on_loopback(
    torrent: TestTorrent, tmp_path: Path, opentracker: OpenTracker, spawn: Spawn
) -> None:
    cap = 6 * MIB
    trackers = _whitelisted(opentracker, torrent)
    seed = spawn({"mode": "seed", "torrent": str(torrent.torrent_path), "dir": str(torrent.file.parent),
                  "swarm": loopback_swarm(trackers=trackers, upload_rate_limit=cap)}, "seed")
    spec = worker_spec(torrent, tmp_path / "agent", loopback_swarm(trackers=trackers), report_interval=0.2)
    leech = spawn(spec, "leech")  # no origin: peers only
    leech.wait_finished(60)
    assert file_sha256(tmp_path / "agent" / torrent.name) == torrent.sha256
    assert _transfer_seconds(leech, "bytes_from_peers") >= 0.6 * torrent.size / cap - 0.2
    seed.stop()


# --- (g) interoperability: aria2c downloads from the agents -------------------------------


def _aria2c() -> str:
    path = shutil.which("aria2c")
    if path is None:
        pytest.skip("aria2c is not installed (apt-get install aria2; scripts/test.sh installs it)")
    return path


def test_aria2c_downloads_from_the_agents_swarm(
    torrent: TestTorrent, tmp_path: Path, opentracker: OpenTracker, spawn: Spawn
) -> None:
    """aria2c, from its .torrent, fetches the file from two agents that seed it.

    The torrent is v1-only, like the publisher's default: Debian's aria2 1.36 cannot join a
    hybrid v1+v2 swarm (see the next test). test_agent_swarm.py does the same with the
    published torrent and whole agents.
    """
    aria2c = _aria2c()
    v1 = make_test_torrent(torrent.file, piece_size=torrent.piece_size, v1_only=True)
    opentracker.allow(v1.info_hash_v1)
    swarm = loopback_swarm(trackers=[opentracker.announce_url])
    seeds = [spawn({"mode": "seed", "torrent": str(v1.torrent_path), "dir": str(v1.file.parent),
                    "swarm": swarm, "report_interval": 0.2}, f"seed-{i}") for i in range(2)]
    out = tmp_path / "aria2"
    command = [
        aria2c, f"--dir={out}", f"--bt-tracker={opentracker.announce_url}", "--enable-dht=false",
        "--enable-dht6=false", "--bt-enable-lpd=false", "--enable-peer-exchange=false",
        f"--listen-port={_free_port()}", "--interface=127.0.0.1", "--seed-time=0",
        "--bt-stop-timeout=60", "--console-log-level=warn", "--summary-interval=0",
        "--file-allocation=none", str(v1.torrent_path),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=10)
        pytest.fail(f"aria2c did not finish:\n{output.decode(errors='replace')[-3000:]}")
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert process.returncode == 0, output.decode(errors="replace")[-3000:]
    assert file_sha256(out / v1.name) == torrent.sha256
    time.sleep(0.5)
    assert sum(int((s.latest or {}).get("bytes_uploaded", 0)) for s in seeds) >= torrent.size


def test_debian_aria2c_misreads_hybrid_torrents(torrent: TestTorrent) -> None:
    """A known aria2 1.36 bug (aria2/aria2#1903, fixed after 1.36 by #1905): its bencode
    parser drops the empty-string keys of the v2 "file tree", so it computes another
    v1 info-hash for a hybrid torrent and can never find its swarm; this is why the
    publisher makes v1 torrents by default. When this test fails, the installed aria2
    reads hybrid torrents too (and docs/publishing.md can say so)."""
    shown = subprocess.run([_aria2c(), "-S", str(torrent.torrent_path)], capture_output=True,
                           text=True, timeout=30, check=True).stdout
    info_hash = next(line.split(":", 1)[1].strip() for line in shown.splitlines()
                     if line.startswith("Info Hash:"))
    assert info_hash != torrent.info_hash_v1


# --- presigned URLs are refreshed before they expire --------------------------------------


def test_an_expiring_origin_url_is_refreshed_before_it_expires(
    torrent: TestTorrent, tmp_path: Path, spawn: Spawn
) -> None:
    worker, origin = _download_alone(torrent, tmp_path / "agent", spawn, "refresh",
                                     loopback_swarm(origin_policy="always"),
                                     connection_rate=4 * MIB,  # about 6 s: several URL lifetimes
                                     origin_url_ttl=3.0)
    assert origin.forbidden == 0  # never used an expired URL
    assert "origin URL refreshed" in worker.log_tail(1_000_000)
