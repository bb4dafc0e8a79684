"""DirectTransfer: a :class:`~.transfer.Transfer` that fetches the file from the origin over HTTP.

No peers, no pieces: a worker (at most ``direct.concurrency`` downloads run at once; the
others wait their turn, in the order started) GETs the origin URL and appends to
``save_dir/filter.bsf`` in bounded chunks, continuing an interrupted download with a
``Range`` request from the bytes already on disk (a response that ends early is
continued so, and counts as a failed attempt only when it brought no byte). It never
writes past the torrent's size: a response that says or turns out to be longer fails (its
bytes are dropped). Beyond the length it checks nothing about the content — the daemon's
swap gate does (size, SHA-256, header). It is the fast tests' transfer and
the swarm benchmark's "every agent from the origin" baseline; its ``seed`` only records
the version (nothing is served).

Resume data is the byte offset, but the file itself is the truth: a download always
continues from the bytes on disk (every byte written is at its final offset).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import threading
import time
import urllib.error
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .config import DirectConfig
from .http_pool import HttpPool
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
        self.http = HttpPool(max_idle=self.config.concurrency)
        """The origin connections, kept alive from one download to the next."""

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
        self.http.close()

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
        failures = 0
        while failures < _ATTEMPTS:
            grew = 0
            try:
                grew = self._fetch(job, origin())
            except _Stopped:
                return
            except Exception as exc:  # HTTP, socket, file and URL-factory errors alike
                error, retry = describe_origin_error(exc), _transient(exc)
            else:
                if job.on_disk >= job.total:
                    self._update(job, state="seeding", error=None)
                    return
                # The response ended early (a proxy cutting long responses): the next
                # attempt continues with a Range request.
                error, retry = f"the origin's response ended at byte {job.on_disk} of {job.total}", True
            if grew <= 0:  # one that brought bytes uses up no attempt
                failures += 1
            log.info("direct download of %s: %s (failed attempts: %d)", key_label(job.key), error, failures)
            if failures == _ATTEMPTS or not retry or job.stop.wait(0.5 * max(failures, 1)):
                break
        if not job.stop.is_set():
            self._update(job, state="error", error=error)

    def _fetch(self, job: _Job, origin: OriginURL) -> int:
        """GET the rest of the file into ``job.path``; returns when the response ended
        (``job.on_disk`` tells whether all ``job.total`` bytes are there), with the bytes
        the file grew by. Raises CheckFailed ("size") when the origin offers or sends more
        than the file (that response's bytes are not kept: the file never grows past
        ``job.total``)."""
        assert job.stop is not None
        job.path.parent.mkdir(parents=True, exist_ok=True)
        with open(job.path, "ab") as out:
            offset = out.seek(0, 2)
            if offset > job.total:  # not written by us (we never write past the end)
                log.info("%s: %s has %d bytes, more than the file's %d: starting over",
                         key_label(job.key), job.path, offset, job.total)
                out.truncate(0)
                offset = out.seek(0)
            self._update(job, on_disk=offset)
            initial = offset
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                with self.http.get(origin.url, headers, timeout=self.config.timeout_s) as response:
                    return self._receive(job, out, response, offset, initial)
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code == 416 and offset >= job.total:  # nothing left to fetch
                    return 0
                raise

    def _receive(self, job: _Job, out: BinaryIO, response: http.client.HTTPResponse,
                 offset: int, initial: int) -> int:
        """Append ``response`` (the answer to a GET from byte ``offset``) to ``out``; see
        :meth:`_fetch`."""
        assert job.stop is not None
        begin = offset if response.status == 206 else 0
        _check_length(response, begin, job.total)  # before anything on disk changes
        if offset != begin:  # the server ignored the range
            out.truncate(0)
            offset = out.seek(0)
        started = time.monotonic()
        fetched = 0
        while offset < job.total and (
            chunk := response.read(min(self.config.chunk_size, job.total - offset))
        ):
            if job.stop.is_set():
                raise _Stopped
            out.write(chunk)
            out.flush()
            offset += len(chunk)
            fetched += len(chunk)
            self._update(job, on_disk=offset, received=job.received + len(chunk))
            self._pace(job, fetched, started)
        if offset == job.total and _more(response):  # complete, yet the response goes on
            out.truncate(begin)  # its bytes are suspect: keep none of them
            self._update(job, on_disk=begin)
            raise CheckFailed("size", f"the origin sent more than the file's {job.total} "
                                      f"bytes (from byte {begin})")
        return offset - initial

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
    """Worth retrying at once: not a 4xx answer (except timeout and too-many-requests),
    nor a response longer than the file (CheckFailed: the origin does not serve it)."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code in (408, 429)
    return not isinstance(exc, CheckFailed)


def _more(response: http.client.HTTPResponse) -> bool:
    """Whether the response has a byte left (one that cannot be read counts as none: the
    file is complete, the daemon's gate checks it)."""
    try:
        return bool(response.read(1))
    except (OSError, http.client.HTTPException):
        return False


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


def _check_length(response: http.client.HTTPResponse, offset: int, total: int) -> None:
    """Raise CheckFailed ("size") when the response's headers announce more than the
    ``total - offset`` bytes left, or (206) a range that does not start at ``offset``."""
    if response.status == 206:
        header = response.headers.get("Content-Range")
        match = _CONTENT_RANGE.fullmatch(header.strip()) if header is not None else None
        if header is not None and match is None:
            raise CheckFailed("size", f"the origin's Content-Range {header!r} cannot be read")
        if match is not None:
            first, last, size = int(match.group(1)), int(match.group(2)), match.group(3)
            if first != offset:
                raise CheckFailed("size", f"the origin sent bytes from {first}, asked from {offset}")
            if last >= total or (size != "*" and int(size) != total):
                raise CheckFailed("size", f"the origin's Content-Range {header!r} does not fit "
                                          f"the file's {total} bytes")
    if response.length is not None and response.length > total - offset:
        raise CheckFailed("size", f"the origin's response has {response.length} bytes, the "
                                  f"file {total - offset} left from byte {offset}")




__all__ = ["DirectTransfer"]
