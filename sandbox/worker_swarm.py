"""Test files, hybrid torrents and N bare swarm sessions downloading one of them, for the
swarm tests and the origin-policy benchmark (benchmarks/origin_policy.py).

Where :class:`~bloomswarm.sandbox.fleet.LocalFleet` runs whole agents (S3, publisher,
``bloomswarm agent run``), :func:`run_workers` runs only their transfer: it starts N
:class:`~bloomswarm.sandbox.swarm_worker.WorkerProcess` sessions on 127.0.0.1 that
download one torrent at the same time — peers through a tracker or the DHT, the
:class:`~bloomswarm.sandbox.origin.Origin` as web seed — waits until all have finished,
checks every copy's SHA-256, stops them all by PID and returns what the origin and the
sessions counted.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libtorrent as lt

from bloomswarm.common.file_hash import file_sha256
from bloomswarm.sandbox.origin import Origin
from bloomswarm.sandbox.swarm_worker import Report, WorkerProcess

MIB = 1024 * 1024


def write_random_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes to ``path``; return their SHA-256 hex digest."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        left = size
        while left > 0:
            chunk = os.urandom(min(left, 4 * MIB))
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()



@dataclass(frozen=True)
class TestTorrent:
    """A file and its hybrid v1+v2 torrent, written next to each other."""

    __test__ = False  # not a pytest test class

    file: Path
    torrent_path: Path
    data: bytes
    info_hash_v1: str
    info_hash_v2: str
    """Empty for a v1-only torrent."""
    size: int
    sha256: str
    piece_size: int

    @property
    def name(self) -> str:
        """The file name the torrent gives (what agents write in their directory)."""
        return self.file.name


def make_test_torrent(
    file: Path, *, piece_size: int = 256 * 1024, trackers: Sequence[str] = (), v1_only: bool = False,
    root_cert: str | None = None,
) -> TestTorrent:
    """Hash ``file`` into a hybrid v1+v2 torrent (libtorrent's default; a v1-only one with
    ``v1_only``), with ``trackers`` in one tier and no web seed; write it as
    ``<file>.torrent`` (``<file>.v1.torrent``; ``<file>.private.torrent`` with
    ``root_cert``, a CA certificate in PEM that makes it an SSL torrent)."""
    flags = lt.create_torrent.v1_only if v1_only else 0
    creator = lt.create_torrent(lt.list_files(str(file)), piece_size, flags)
    for url in trackers:
        creator.add_tracker(url, 0)
    if root_cert is not None:
        creator.set_root_cert(root_cert)
    lt.set_piece_hashes(creator, str(file.parent))
    data: bytes = lt.bencode(creator.generate())
    hashes = lt.torrent_info(data).info_hashes()
    suffix = ".private.torrent" if root_cert else ".v1.torrent" if v1_only else ".torrent"
    torrent_path = file.with_name(file.name + suffix)
    torrent_path.write_bytes(data)
    return TestTorrent(
        file=file,
        torrent_path=torrent_path,
        data=data,
        info_hash_v1=str(hashes.v1),
        info_hash_v2=str(hashes.v2) if hashes.has_v2() else "",
        size=file.stat().st_size,
        sha256=file_sha256(file),
        piece_size=piece_size,
    )


def loopback_swarm(**overrides: Any) -> dict[str, Any]:
    """SwarmConfig settings for agents on 127.0.0.1: an ephemeral port, no DHT unless
    asked, the origin allowed on loopback, a short grace."""
    settings: dict[str, Any] = {
        "listen_interfaces": "127.0.0.1:0",
        "enable_dht": False,
        "dht_restrict_ips": False,
        "allow_private_origin": True,
        "origin_grace_s": 1.0,
        "origin_stagger_s": 2.0,
        "origin_starved_s": 1.0,
        "origin_request_bytes": 1024 * 1024,  # scaled down with the test files
        "peer_rediscovery_s": 2.0,
    }
    settings.update(overrides)
    return settings


def worker_spec(
    torrent: TestTorrent,
    directory: Path,
    swarm: dict[str, Any],
    *,
    origin_url: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The JSON spec of one download worker."""
    return {
        "swarm": swarm,
        "version": 1,
        "torrent": str(torrent.torrent_path),
        "dir": str(directory),
        "mode": "download",
        "origin_url": origin_url,
        "origin_url_ttl": 120,
        "poll_interval": 0.1,
        "report_interval": 0.5,
        **extra,
    }


@dataclass(frozen=True)
class WorkersResult:
    """What one run of the workers measured."""

    agents: int
    file_size: int
    origin_bytes: int
    """Payload bytes the origin sent, counted at the origin."""
    origin_requests: int
    reported_origin: tuple[int, ...]
    """Each agent's own ``bytes_from_origin``."""
    reported_peers: tuple[int, ...]
    """Each agent's own ``bytes_from_peers``."""
    hash_failures: tuple[int, ...]
    seconds: float
    """From the first worker's start until the last finished."""
    correct: tuple[bool, ...]
    """Each agent's file has the right SHA-256."""

    @property
    def origin_copies(self) -> float:
        """Origin bytes as a multiple of the file size."""
        return self.origin_bytes / self.file_size

    def summary(self) -> str:
        """One line for logs and reports."""
        return (f"{self.agents} agents, {self.file_size / MIB:.0f} MiB: origin sent "
                f"{self.origin_copies:.2f}x the file in {self.origin_requests} requests, "
                f"agents counted {sum(self.reported_origin) / self.file_size:.2f}x from the "
                f"origin and {sum(self.reported_peers) / self.file_size:.2f}x from peers, "
                f"all done in {self.seconds:.1f}s")


def run_workers(
    agents: int,
    torrent: TestTorrent,
    origin: Origin,
    swarm: dict[str, Any],
    workdir: Path,
    *,
    dht: bool = False,
    timeout: float = 120.0,
    log_dir: Path | None = None,
) -> WorkersResult:
    """Start ``agents`` download workers at once, wait for all, stop all.

    With ``dht``, agent 0 starts first with the DHT and no bootstrap node; the others
    bootstrap from it (no tracker needed). Otherwise peers come from the trackers in
    ``swarm`` (or the torrent). The origin's counters are reset first. With ``log_dir``,
    each worker's log is copied there as ``agent-N.log``.
    """
    origin.reset_counters()
    url = origin.url(torrent.name)
    workers: list[WorkerProcess] = []
    started = time.monotonic()
    try:
        first_settings = dict(swarm, enable_dht=True) if dht else swarm
        workers.append(WorkerProcess(
            worker_spec(torrent, workdir / "agent-0", first_settings, origin_url=url), name="agent-0"))
        if dht:
            workers[0].start()
            swarm = dict(swarm, enable_dht=True, dht_bootstrap_nodes=[f"127.0.0.1:{workers[0].port}"])
        for i in range(1, agents):
            workers.append(WorkerProcess(
                worker_spec(torrent, workdir / f"agent-{i}", swarm, origin_url=url), name=f"agent-{i}"))
        _start_all(workers[1:] if dht else workers)
        finals: list[Report] = [w.wait_finished(max(1.0, timeout - (time.monotonic() - started)))
                                for w in workers]
        seconds = time.monotonic() - started
        # Let the last blocks' alerts be counted: take the newest report of each.
        time.sleep(0.6)
        finals = [w.latest or r for w, r in zip(workers, finals, strict=True)]
        correct = tuple(file_sha256(workdir / f"agent-{i}" / torrent.name) == torrent.sha256
                        for i in range(agents))
        return WorkersResult(
            agents=agents,
            file_size=torrent.size,
            origin_bytes=origin.filter_bytes,
            origin_requests=origin.filter_requests,
            reported_origin=tuple(int(r["bytes_from_origin"]) for r in finals),
            reported_peers=tuple(int(r["bytes_from_peers"]) for r in finals),
            hash_failures=tuple(int(r["hash_failures"]) for r in finals),
            seconds=seconds,
            correct=correct,
        )
    finally:
        for i, worker in enumerate(workers):
            worker.stop()
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                (log_dir / f"agent-{i}.log").write_text(worker.log_tail(1_000_000))
            worker.cleanup()


def _start_all(workers: Sequence[WorkerProcess], timeout: float = 30.0) -> None:
    """Launch every worker's process first, then wait for each to listen."""
    for worker in workers:
        worker.launch()
    for worker in workers:
        worker.wait_ready(timeout)
