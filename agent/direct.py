"""DirectTransfer: a :class:`~.transfer.Transfer` that fetches the file from the origin over HTTP.

No peers, no pieces: a worker (at most ``direct.concurrency`` downloads run at once; the
others wait their turn, in the order started) GETs the origin URL and appends to
``save_dir/filter.bsf`` in bounded chunks, continuing an interrupted download with a
``Range`` request from the bytes already on disk. It checks nothing about the content —
the daemon's swap gate does (size, SHA-256, header). It is the fast tests' transfer and
the swarm benchmark's "every agent from the origin" baseline; its ``seed`` only records
the version (nothing is served).

Resume data is the byte offset, but the file itself is the truth: a download always
continues from the bytes on disk (every byte written is at its final offset).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from .config import DirectConfig
from .transfer import (
    OriginURL,
    OriginURLFactory,
    TransferKey,
    TransferState,
    TransferStatus,
    describe_origin_error,
    key_base,
    key_label,
    key_order,
    key_version,
    relocated,
)
from .verify import CheckFailed, read_torrent
from .worker_pool import WorkerPool

log = logging.getLogger("bloomswarm.agent.direct")

_ATTEMPTS = 3
"""HTTP attempts per start_download before the version reports an error."""
_JOIN_TIMEOUT_S = 2.0


@dataclass
class _Job:
    """One file's download (a version's or a delta; or a recorded seed), shared with its
    thread under a lock."""

    key: TransferKey
    path: Path
    total: int
    state: TransferState
    on_disk: int = 0
    received: int = 0
    error: str | None = None
    stop: threading.Event | None = None
    started: threading.Event | None = None
    """Set when a worker takes it up (before it looks at ``stop``)."""
    done: threading.Event | None = None
    """Set when its worker is through with it (finished, failed or stopped)."""

    def snapshot(self) -> TransferStatus:
        finished = self.state == "seeding"
        key = self.key
        return TransferStatus(
            version=key_version(key),
            state=self.state,
            progress=1.0 if finished else min(self.on_disk / self.total, 1.0) if self.total else 0.0,
            total_bytes=self.total,
            bytes_from_peers=0,
            bytes_from_origin=self.received,
            bytes_uploaded=0,
            peers=0,
            hash_failures=0,
            finished=finished,
            error=self.error,
            base=key_base(key),
        )


class _Stopped(Exception):
    """The job was removed while it ran."""


class DirectTransfer:
    """Downloads versions straight from their origin URL. Thread-safe; see module docstring."""

    def __init__(self, config: DirectConfig | None = None) -> None:
        self.config = config or DirectConfig()
        self._jobs: dict[TransferKey, _Job] = {}
        self._lock = threading.Lock()
        self._news = threading.Event()
        """Set when a download's state changed (for :meth:`wait`)."""
        self._workers = WorkerPool(self.config.concurrency, name="direct")

    def start_download(
        self,
        key: TransferKey,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """See :meth:`Transfer.start_download`. Replaces any job of the same version."""
        self.remove(key)
        try:
            summary = read_torrent(torrent)
        except CheckFailed as exc:
            self._set(_Job(key, save_dir, 0, "error", error=str(exc)))
            return
        job = _Job(key, save_dir / summary.file_name, summary.total_size, "downloading")
        if origin is None:
            job.state, job.error = "error", "the direct transfer needs an origin URL"
            self._set(job)
            return
        job.stop, job.started, job.done = threading.Event(), threading.Event(), threading.Event()
        self._set(job)
        self._workers.submit(lambda: self._run(job, origin))

    def seed(self, key: TransferKey, torrent: bytes, file_dir: Path) -> None:
        """Record ``version`` as seeded (nothing is served)."""
        self.remove(key)
        try:
            summary = read_torrent(torrent)
        except CheckFailed as exc:
            self._set(_Job(key, file_dir, 0, "error", error=str(exc)))
            return
        self._set(
            _Job(key, file_dir / summary.file_name, summary.total_size, "seeding",
                 on_disk=summary.total_size)
        )

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        """See :meth:`Transfer.relocate`: a finished download is recorded as seeded from
        ``file_dir`` (the same file, :func:`~.transfer.same_file`); its counts carry on."""
        with self._lock:
            job = self._jobs.get(key)
            moved = None if job is None or job.state != "seeding" else relocated(job.path, file_dir)
            if job is None or moved is None:
                return False
            job.path = moved
            return True

    def remove(self, key: TransferKey) -> None:
        """Stop the version's download (waits up to 2 s for its worker; not at all for a
        download still waiting for one) and forget it."""
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is not None:
            _stop([job])

    def status(self, key: TransferKey) -> TransferStatus | None:
        """See :meth:`Transfer.status`."""
        with self._lock:
            job = self._jobs.get(key)
            return job.snapshot() if job is not None else None

    def versions(self) -> list[TransferKey]:
        """See :meth:`Transfer.versions`."""
        with self._lock:
            return sorted(self._jobs, key=key_order)

    def poll(self) -> None:
        """Nothing to do: the threads report through the status."""

    def wait(self, timeout: float) -> None:
        """Block until a download finished or failed, or ``timeout`` seconds passed."""
        self._news.wait(timeout)
        self._news.clear()

    def save_resume_data(
        self, timeout: float = 10.0, keys: Collection[TransferKey] | None = None
    ) -> dict[TransferKey, bytes]:
        """The byte offset of every unfinished download (of ``keys``, when given), as JSON."""
        with self._lock:
            return {
                v: json.dumps({"offset": job.on_disk}).encode()
                for v, job in self._jobs.items()
                if job.state == "downloading" and (keys is None or v in keys)
            }

    def close(self) -> None:
        """Stop every download (all told at once: a worker freed by one does not take up
        the next; waits up to 2 s for those under way)."""
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
        _stop(jobs)

    # -- the download thread -------------------------------------------------------------

    def _set(self, job: _Job) -> None:
        with self._lock:
            self._jobs[job.key] = job

    def _update(self, job: _Job, **changes: object) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(job, name, value)
        if "state" in changes:
            self._news.set()

    def _run(self, job: _Job, origin: OriginURLFactory) -> None:
        assert job.started is not None and job.done is not None
        job.started.set()  # before _attempt looks at ``stop`` (see remove)
        try:
            self._attempt(job, origin)
        finally:
            job.done.set()

    def _attempt(self, job: _Job, origin: OriginURLFactory) -> None:
        assert job.stop is not None
        if job.stop.is_set():  # removed while it waited for a worker
            return
        error = "no attempt made"
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                self._fetch(job, origin())
            except _Stopped:
                return
            except Exception as exc:  # HTTP, socket, file and URL-factory errors alike
                error = describe_origin_error(exc)
                log.info("direct download of %s failed (attempt %d): %s", key_label(job.key), attempt, error)
                if attempt == _ATTEMPTS or not _transient(exc) or job.stop.wait(0.5 * attempt):
                    break
                continue
            self._update(job, state="seeding", error=None)
            return
        if not job.stop.is_set():
            self._update(job, state="error", error=error)

    def _fetch(self, job: _Job, origin: OriginURL) -> None:
        """GET the rest of the file into ``job.path``; returns when the response ended."""
        assert job.stop is not None
        job.path.parent.mkdir(parents=True, exist_ok=True)
        with open(job.path, "ab") as out:
            offset = out.seek(0, 2)
            self._update(job, on_disk=offset)
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            request = urllib.request.Request(origin.url, headers=headers)
            try:
                response = urllib.request.urlopen(request, timeout=self.config.timeout_s)
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code == 416 and offset >= job.total:  # nothing left to fetch
                    return
                raise
            with response:
                if offset and response.status != 206:  # the server ignored the range
                    out.truncate(0)
                    out.seek(0)
                    offset = 0
                started = time.monotonic()
                fetched = 0
                while chunk := response.read(self.config.chunk_size):
                    if job.stop.is_set():
                        raise _Stopped
                    out.write(chunk)
                    out.flush()
                    offset += len(chunk)
                    fetched += len(chunk)
                    self._update(job, on_disk=offset, received=job.received + len(chunk))
                    self._pace(job, fetched, started)

    def _pace(self, job: _Job, fetched: int, started: float) -> None:
        """Sleep so that the download stays under the configured rate."""
        rate = self.config.rate_limit_bytes_per_s
        if rate <= 0:
            return
        ahead = fetched / rate - (time.monotonic() - started)
        assert job.stop is not None
        if ahead > 0 and job.stop.wait(ahead):
            raise _Stopped


def _stop(jobs: list[_Job]) -> None:
    """Tell ``jobs`` to stop, then wait up to 2 s for those a worker had taken up (one
    still waiting for a worker never starts)."""
    for job in jobs:
        if job.stop is not None:
            job.stop.set()  # before looking at ``started``: a worker taking it up now sees it
    deadline = time.monotonic() + _JOIN_TIMEOUT_S
    for job in jobs:
        if job.started is not None and job.done is not None and job.started.is_set():
            job.done.wait(max(deadline - time.monotonic(), 0.0))


def _transient(exc: BaseException) -> bool:
    """Worth retrying at once: not a 4xx answer (except timeout and too-many-requests)."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code in (408, 429)
    return True




__all__ = ["DirectTransfer"]
