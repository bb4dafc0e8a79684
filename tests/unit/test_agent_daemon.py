"""The agent's loop, in-process: a memory store behind an in-memory origin, MemoryTransfer.

Every scenario drives one AgentDaemon step by step until a state is reached (bounded by a
number of steps), then checks the data directory, the metrics and the status. Nothing
opens a socket or sleeps: the transfer moves bytes when the loop polls it, and the
agent's clock moves as it is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent.announcements import ObjectStoreAnnouncements
from bloomswarm.agent.certificates import CertificateState
from bloomswarm.agent.config import InstallConfig, SwarmConfig
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.peer_access import RefusalLog
from bloomswarm.common.bucket_layout import LATEST_KEY
from bloomswarm.common.live import LiveFilter
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    PUBLIC,
    ROGUE_KEY,
    TickingClock,
    agent_config,
    installed,
    make_daemon,
    metric,
    point_latest,
    publish,
    run_until,
    served_filter_bytes,
    stepping,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps


def _agent(tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
           transfer: MemoryTransfer | None = None, **changes: Any) -> AgentDaemon:
    daemon = make_daemon(agent_config(tmp_path, **changes), origin, transfer=transfer)
    daemons.append(daemon)
    return daemon


def _agent_through_v2(tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin,
                      daemons: list[AgentDaemon]) -> AgentDaemon:
    """An agent that installed v1, then swapped to v2 (both published here)."""
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    publish(store, ["a", "b"])
    run_until(daemon, lambda: installed(daemon, 2))
    return daemon

def test_installs_the_first_version_then_swaps_and_collects(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    v1 = publish(store, ["a", "b"])
    daemon = _agent(tmp_path, origin, daemons)
    live = LiveFilter(daemon.data_dir, watch=False, poll_interval=0.01)
    try:
        run_until(daemon, lambda: installed(daemon, 1))
        installed_file = daemon.data_dir / "versions" / "v1" / "filter.bsf"
        assert stat.S_IMODE(installed_file.stat().st_mode) == 0o444
        assert hashlib.sha256(installed_file.read_bytes()).hexdigest() == v1.sha256
        for name in ("manifest.json", "manifest.json.sig", "filter.torrent"):
            assert (installed_file.parent / name).is_file()
        assert daemon.metrics.is_ready and metric(daemon, "swaps_total") == 1
        assert metric(daemon, "current_version") == 1
        assert metric(daemon, "swap_latency_seconds_count") == 1
        assert not any((daemon.data_dir / "staging").iterdir())
        live.refresh()
        assert live.version == 1 and "a" in live

        publish(store, ["a", "b", "c"])
        run_until(daemon, lambda: installed(daemon, 2))
        publish(store, ["a", "b", "c", "d"])
        run_until(daemon, lambda: installed(daemon, 3))
        live.refresh()
        assert live.version == 3 and "d" in live
        versions = sorted(p.name for p in (daemon.data_dir / "versions").iterdir())
        assert versions == ["v2", "v3"]  # keep_versions=2: current and previous
        assert daemon.transfer.versions() == [2, 3]
        assert metric(daemon, "swaps_total") == 3
        assert metric(daemon, "bytes_from_origin_total") == served_filter_bytes(origin)
    finally:
        live.close()


def test_a_file_whose_sha256_differs_is_never_installed_and_is_retried(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    v2 = publish(store, ["a", "b"])
    good = store.get(v2.filter_key)
    assert good is not None
    bad = bytearray(good.data)
    bad[-1] ^= 0xFF  # the body differs: same size, valid header, wrong SHA-256
    store.put(v2.filter_key, bytes(bad))
    run_until(daemon, lambda: metric(daemon, "verification_failures_total", check="sha256") >= 2)
    assert daemon.layout.current_version() == 1
    assert not (daemon.data_dir / "versions" / "v2").exists()
    status = daemon.status()
    assert "SHA-256" in status["last_error"] and status["download"]["version"] == 2
    store.put(v2.filter_key, good.data)  # the origin is repaired: the retry succeeds
    run_until(daemon, lambda: installed(daemon, 2))
    assert metric(daemon, "swaps_total") == 2


@pytest.mark.parametrize("fault", ["pointer_signature", "manifest_signature", "info_hash"])
def test_announcements_that_fail_verification_change_nothing(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    fault: str,
) -> None:
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    if fault == "pointer_signature":
        publish(store, ["a", "b"], key=ROGUE_KEY)
    else:
        v2 = publish(store, ["a", "b"])
        if fault == "manifest_signature":
            tampered = dataclasses.replace(v2, source_fingerprint="tampered")
            store.put(f"v{v2.version}/manifest.json", tampered.to_bytes())
        else:
            other = publish(store, ["x"])  # v3's torrent, swapped in under v2's manifest
            torrent = store.get(other.torrent_key)
            assert torrent is not None
            store.put(v2.torrent_key, torrent.data)
            point_latest(store, 2)
    run_until(daemon, lambda: metric(daemon, "verification_failures_total", check=fault) >= 2)
    assert daemon.layout.current_version() == 1
    assert served_filter_bytes(origin) == store.head("v1/" + _attempt_key(store, 1)).size
    assert daemon.status()["download"] is None


def _attempt_key(store: MemoryObjectStore, version: int) -> str:
    stored = store.get(f"v{version}/manifest.json")
    assert stored is not None
    return Manifest.from_bytes(stored.data).filter_key.split("/", 1)[1]


def test_downgrade_refused_pin_followed_replay_refused(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"])
    publish(store, ["a", "b"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 2))
    old_latest = store.get(LATEST_KEY)
    assert old_latest is not None
    point_latest(store, 1)  # not pinned: a downgrade
    run_until(daemon, lambda: metric(daemon, "refusals_total", reason="downgrade") >= 1)
    assert daemon.layout.current_version() == 2
    pinned = point_latest(store, 1, pinned=True)
    run_until(daemon, lambda: installed(daemon, 1))
    assert daemon.status()["last_sequence"] == pinned.sequence
    assert metric(daemon, "swaps_total") == 2  # v1 downloaded once, rolled back to

    store.put(LATEST_KEY, old_latest.data)  # the old pointer served again
    run_until(daemon, lambda: metric(daemon, "refusals_total", reason="replay") >= 1)
    assert daemon.layout.current_version() == 1

    daemon.shutdown()  # the accepted sequence survives a restart
    daemons.remove(daemon)
    assert f'"last_sequence": {pinned.sequence}' in daemon.layout.state_file.read_text()
    again = _agent(tmp_path, origin, daemons)
    run_until(again, lambda: metric(again, "refusals_total", reason="replay") >= 1)
    assert again.layout.current_version() == 1


def test_a_rollback_to_an_installed_version_downloads_nothing(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    daemon = _agent_through_v2(tmp_path, store, origin, daemons)
    fetched = served_filter_bytes(origin)
    point_latest(store, 1, pinned=True)
    run_until(daemon, lambda: installed(daemon, 1))
    assert served_filter_bytes(origin) == fetched
    assert daemon.status()["last_swap"]["previous"] == 2


@pytest.mark.parametrize(
    "case",
    [
        (InstallConfig(disk_margin_bytes=1 << 60), "disk_space", "not enough disk space"),
        (InstallConfig(max_file_size=4096), "file_too_large", "max_file_size"),
    ],
)
def test_a_version_that_does_not_fit_is_refused_before_download(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    case: tuple[InstallConfig, str, str],
) -> None:
    install, reason, words = case
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons, install=install)
    run_until(daemon, lambda: metric(daemon, "refusals_total", reason=reason) >= 2)
    assert served_filter_bytes(origin) == 0
    assert not (daemon.data_dir / "staging" / "v1" / "filter.bsf").exists()
    assert daemon.layout.current_version() is None and not daemon.metrics.is_ready
    assert words in daemon.status()["last_error"]


def test_origin_down_keeps_serving_and_recovers(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    origin.failing = True
    run_until(daemon, lambda: metric(daemon, "origin_errors_total") >= 3)
    assert daemon.layout.current_version() == 1 and daemon.metrics.is_ready
    assert "origin is unavailable" in daemon.status()["last_error"]
    publish(store, ["a", "b"])
    origin.failing = False
    run_until(daemon, lambda: installed(daemon, 2))


def test_a_download_interrupted_by_shutdown_resumes_after_restart(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    manifest = publish(store, ["a"], capacity=1_500_000)  # about 1.8 MB: 8 pieces of 256 KiB
    slow = MemoryTransfer(origin, pieces_per_poll=1)
    daemon = _agent(tmp_path, origin, daemons, transfer=slow)
    partial = daemon.data_dir / "staging" / "v1" / "filter.bsf"
    run_until(daemon, lambda: partial.is_file() and partial.stat().st_size >= 256 * 1024)
    daemon.shutdown()
    daemons.remove(daemon)
    assert daemon.layout.resume_in(partial.parent).is_file()
    assert daemon.layout.current_version() is None
    assert not (daemon.data_dir / "versions" / "v1").exists()
    on_disk = partial.stat().st_size
    assert on_disk < manifest.size

    again = _agent(tmp_path, origin, daemons)
    assert again.target_version == 1  # recovered from staging before any poll
    run_until(again, lambda: installed(again, 1))
    assert metric(again, "bytes_from_origin_total") == manifest.size - on_disk
    assert hashlib.sha256(again.layout.current_filter.read_bytes()).hexdigest() == manifest.sha256


def test_restart_seeds_installed_versions_and_cleans_leftovers(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    daemon = _agent_through_v2(tmp_path, store, origin, daemons)
    daemon.shutdown()
    daemons.remove(daemon)
    data = daemon.data_dir
    (data / "staging" / "v9").mkdir()  # an abandoned download without documents
    (data / "staging" / "v9" / "filter.bsf").write_bytes(b"x")
    (data / "versions" / "v7").mkdir()  # an install interrupted before its rename
    again = _agent(tmp_path, origin, daemons)
    assert again.transfer.versions() == [1, 2]
    assert not (data / "staging" / "v9").exists() and not (data / "versions" / "v7").exists()
    assert again.metrics.is_ready and metric(again, "current_version") == 2
    assert metric(again, "current_version_created_timestamp_seconds") > 0


def test_readiness_and_status_before_anything_is_published(
    tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    daemon = _agent(tmp_path, origin, daemons)
    for _ in stepping(daemon, 5):
        pass
    status = daemon.status()
    assert status["ready"] is False and status["current_version"] is None
    assert metric(daemon, "origin_errors_total") == 0  # nothing published is not an error
    assert os.listdir(daemon.data_dir / "versions") == []


class _RefusingTransfer(MemoryTransfer):
    """Raises from start_download the first ``failures`` times (as libtorrent may)."""

    def __init__(self, origin: MemoryOrigin, failures: int) -> None:
        super().__init__(origin)
        self.failures = failures
        self.calls = 0

    def start_download(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise ValueError("libtorrent refused the torrent")
        super().start_download(*args, **kwargs)


def test_a_transfer_that_raises_is_retried_with_backoff(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"])
    transfer = _RefusingTransfer(origin, failures=2)
    daemon = _agent(tmp_path, origin, daemons, transfer=transfer)
    run_until(daemon, lambda: installed(daemon, 1))
    assert transfer.calls == 3 and metric(daemon, "transfer_errors_total") == 2
    assert "libtorrent refused" in (daemon.status()["last_error"] or "")


def test_nothing_published_is_logged_once(
    tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon], caplog: pytest.LogCaptureFixture
) -> None:
    daemon = _agent(tmp_path, origin, daemons)
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        for _ in stepping(daemon, 20):
            pass
    assert sum("event=nothing_published" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("name", [None, "blocklist"])
def test_a_named_filters_log_lines_name_it(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon], *,
    caplog: pytest.LogCaptureFixture, name: str | None
) -> None:
    publish(store, ["a"])
    with caplog.at_level(logging.INFO, logger="bloomswarm.agent"):
        daemon = make_daemon(agent_config(tmp_path), origin, name=name)
        daemons.append(daemon)
        run_until(daemon, lambda: installed(daemon, 1))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event=")]
    assert any(line.startswith("event=swapped ") for line in lines)
    if name is None:  # an agent of one filter: no filter field
        assert not any(" filter=" in line for line in lines)
    else:
        assert all(line.split(" ")[1] == f"filter={name}" for line in lines), lines


def test_status_before_the_first_snapshot_says_the_agent_is_starting(
    tmp_path: Path, origin: MemoryOrigin
) -> None:
    daemon = AgentDaemon(agent_config(tmp_path), ObjectStoreAnnouncements(origin, PUBLIC),
                         MemoryTransfer(origin), origin, PUBLIC, metrics=AgentMetrics(),
                         clock=TickingClock())  # not started: /status is served meanwhile
    assert daemon.status() == {"ready": False, "starting": True, "current_version": None,
                               "data_dir": str(daemon.data_dir)}
    daemon.start()
    try:
        assert "starting" not in daemon.status() and daemon.status()["ready"] is False
    finally:
        daemon.shutdown()


def test_a_public_version_is_refused_under_require_private(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"])
    (tmp_path / "certs").mkdir()  # require_private needs a directory; the daemon never reads it
    swarm = SwarmConfig(certificate_dirs=(tmp_path / "certs",), require_private=True)
    daemon = _agent(tmp_path, origin, daemons, swarm=swarm)
    run_until(daemon, lambda: metric(daemon, "refusals_total", reason="not_private") >= 2)
    assert served_filter_bytes(origin) == 0
    assert daemon.layout.current_version() is None
    assert "not private" in daemon.status()["last_error"]


class _FakeCertificates:
    def states(self) -> list[CertificateState]:
        return [CertificateState("/certs/tls.crt", "CN=agent", -5.0)]


@dataclasses.dataclass
class _FakeAccess:
    refusals: RefusalLog
    certificates: _FakeCertificates | None


def test_refused_peers_and_certificate_expiry_reach_metrics_and_status(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    """An expired certificate is reported (negative seconds left) while the agent keeps
    serving; refusals are counted once each, however often they are read."""
    publish(store, ["a"])
    access = _FakeAccess(RefusalLog(), _FakeCertificates())
    daemon = make_daemon(agent_config(tmp_path), origin, peer_access=access)
    daemons.append(daemon)
    access.refusals.record("tls_handshake", 0.0)
    access.refusals.record("tls_handshake", 1.0)
    run_until(daemon, lambda: installed(daemon, 1))
    access.refusals.record("address", 2.0)
    run_until(daemon, lambda: metric(daemon, "refused_peers_total", reason="address") == 1)
    for _ in range(100):  # metrics are refreshed every OBSERVE_S: read again and again
        daemon.step()
    assert metric(daemon, "refused_peers_total", reason="tls_handshake") == 2
    assert metric(daemon, "refused_peers_total", reason="address") == 1
    assert metric(daemon, "certificate_expiry_seconds", certificate="/certs/tls.crt") == -5.0
    status = daemon.status()["peer_access"]
    assert status["refused_peers"] == {"tls_handshake": 2, "address": 1}
    assert status["certificates"] == [{"certificate": "/certs/tls.crt", "subject": "CN=agent",
                                       "expires_in_s": -5.0}]
    assert daemon.metrics.is_ready and daemon.layout.current_version() == 1


def test_under_require_private_an_installed_public_version_serves_but_is_not_seeded(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    """A version installed before the switch to private mode stays current after a
    restart, but is not put on an open swarm (nor is a public version rolled back to)."""
    publish(store, ["a"])
    first = _agent(tmp_path, origin, daemons)
    run_until(first, lambda: installed(first, 1))
    first.shutdown()
    (tmp_path / "certs").mkdir()
    swarm = SwarmConfig(certificate_dirs=(tmp_path / "certs",), require_private=True)
    restarted = _agent(tmp_path, origin, daemons, swarm=swarm)
    assert restarted.layout.current_version() == 1
    assert 1 not in restarted.transfer.versions()


def test_status_reads_the_data_directory_on_a_change_and_every_few_seconds_only(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import bloomswarm.agent.daemon as daemon_module
    from bloomswarm.agent.gc import installed_versions

    daemon = _agent_through_v2(tmp_path, store, origin, daemons)
    assert daemon.status()["current_version"] == 2  # the swap refreshed it at once
    listings: list[Path] = []

    def counted(data_dir: Path) -> list[int]:
        listings.append(data_dir)
        return installed_versions(data_dir)

    monkeypatch.setattr(daemon_module, "installed_versions", counted)
    clock = daemon._clock
    assert isinstance(clock, TickingClock)
    began = clock.now
    for _ in range(1000):  # periodic refreshes every OBSERVE_S; the disk every DISK_OBSERVE_S
        daemon.step()
    elapsed = clock.now - began
    assert elapsed > 2 * daemon_module.DISK_OBSERVE_S
    assert 1 <= len(listings) <= elapsed / daemon_module.DISK_OBSERVE_S + 1
    assert daemon.status()["installed_versions"] == [1, 2]


def test_a_swap_publishes_the_creation_time_of_the_manifest_it_verified(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    first = publish(store, ["a"])
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    assert metric(daemon, "current_version_created_timestamp_seconds") == first.created_at
    second = publish(store, ["a", "b"])
    daemon._created_at = lambda version: -1.0  # type: ignore[method-assign]  # not read back
    run_until(daemon, lambda: installed(daemon, 2))
    assert metric(daemon, "current_version_created_timestamp_seconds") == second.created_at
