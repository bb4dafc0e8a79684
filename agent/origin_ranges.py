"""Fetching one origin stripe with HTTP range requests, outside libtorrent's web seed.

A stripe (agent/origin_stripes.py) is a set of runs of consecutive pieces that one agent
fetches from the origin while the others fetch theirs. libtorrent's web seed cannot be
held to a stripe: it is a peer that holds every piece, and once the stripe's pieces are
all requested its request queue (``request_queue_time`` seconds of its rate) fills with
any other piece a connected peer holds, contiguous runs of them; a stripe it leaves
keeps its request in flight. In a 256 MiB filter's 14 MiB delta dealt into 14 stripes of
4 pieces, the origin sent each 16 KiB block 1.3-1.6 times on average (its request log:
docs/benchmarks/delta-rollout.md).

:class:`StripeFetch` fetches exactly the stripe's missing pieces instead: one ``Range``
GET per run of consecutive missing pieces, each whole piece checked against its SHA-1
from the torrent and handed to ``deliver`` (the shell's ``torrent_handle.add_piece``:
libtorrent checks it again and tells the peers) as soon as it is in. A piece that fails
the check is never handed over, so bad bytes from the origin never enter libtorrent's
handling of failed pieces (which blames the peers that sent parts of one). It runs on a
thread of its own; :meth:`StripeFetch.cancel` stops it between two reads. Pure HTTP, no
libtorrent.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .transfer import describe_origin_error

log = logging.getLogger("bloomswarm.swarm")

READ_BYTES = 64 * 1024
"""Bytes read from the origin at a time (the granularity of pacing and of a cancel)."""


@dataclass(frozen=True)
class PieceGeometry:
    """The pieces of one file: ``pieces`` pieces of ``piece_length`` bytes, the last one
    shorter when ``total`` is not a multiple."""

    pieces: int
    piece_length: int
    total: int

    def piece_bytes(self, piece: int) -> int:
        """Length of ``piece`` in bytes."""
        return min(self.piece_length, self.total - piece * self.piece_length)

    def byte_range(self, first: int, last: int) -> tuple[int, int]:
        """The inclusive byte range of pieces ``first..last``."""
        return first * self.piece_length, min((last + 1) * self.piece_length, self.total) - 1


def runs(pieces: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted, distinct ``pieces`` as runs ``(first, last)`` of consecutive pieces."""
    result: list[tuple[int, int]] = []
    for piece in sorted(set(pieces)):
        if result and result[-1][1] == piece - 1:
            result[-1] = (result[-1][0], piece)
        else:
            result.append((piece, piece))
    return result


class Pace:
    """At most ``rate`` bytes per second (0: no limit), shared by the threads that ask it:
    a token bucket holding at most ``burst_s`` seconds' worth."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic, *,
                 burst_s: float = 0.1) -> None:
        self.rate = rate
        self._clock = clock
        self._burst = rate * burst_s
        self._tokens = self._burst
        self._stamp = clock()
        self._lock = threading.Lock()

    def delay(self, size: int) -> float:
        """Seconds to wait before ``size`` more bytes may be read (they are counted now)."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= size
            return max(0.0, -self._tokens / self.rate)


class StripeFetch:
    """One stripe's missing pieces, fetched from ``url`` on a thread of its own.

    ``wanted``: the pieces to fetch, each with its SHA-1 (``piece_hashes``; None: not
    checked); ``missing``: asked before the first run (pieces that arrived from peers in
    the meantime are skipped); ``deliver(piece, data)`` is called on the fetch's thread
    with each whole piece that passed its check. After :meth:`start`, read :attr:`done`,
    :attr:`error` and :attr:`received`, and :meth:`take_bad_pieces`, from any thread.
    """

    def __init__(self, url: str, wanted: Sequence[int], geometry: PieceGeometry, *,
                 missing: Callable[[int], bool], deliver: Callable[[int, bytes], None],
                 piece_hashes: Mapping[int, bytes] | None = None,
                 pace: Pace | None = None, user_agent: str = "bloomswarm", timeout_s: float = 30.0) -> None:
        self.url = url
        """The origin URL; a refreshed one set here is used from the next request on."""
        self.wanted = tuple(sorted(set(wanted)))
        self._hashes = piece_hashes
        self._bad: list[int] = []
        self._geometry = geometry
        self._missing = missing
        self._deliver = deliver
        self.pace = pace or Pace(0)
        """Shared by the agent's stripe fetches: the origin cap holds for all of them."""
        self.user_agent = user_agent
        self._timeout_s = timeout_s
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._received = 0
        self.error: str | None = None
        """Why the fetch stopped early (an HTTP error, a dropped connection), or None."""
        self._thread = threading.Thread(target=self._run, name="bloomswarm-stripe", daemon=True)

    @property
    def received(self) -> int:
        """Payload bytes received from the origin so far (delivered or not)."""
        with self._lock:
            return self._received

    @property
    def done(self) -> bool:
        """The fetch ended: every wanted piece handed over, an error, or a cancel."""
        return self._done.is_set()

    def take_bad_pieces(self) -> list[int]:
        """Pieces that failed their check since the last call (not handed over)."""
        with self._lock:
            bad, self._bad = self._bad, []
        return bad

    def start(self) -> StripeFetch:
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop at the next read (a piece half read is dropped); does not wait."""
        self._cancelled.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            for first, last in runs([p for p in self.wanted if self._missing(p)]):
                if self._cancelled.is_set():
                    return
                self._fetch_run(first, last)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not self._cancelled.is_set():
                self.error = describe_origin_error(exc)
        finally:
            self._done.set()

    def _fetch_run(self, first: int, last: int) -> None:
        """GET pieces ``first..last`` and deliver each as it completes."""
        start, end = self._geometry.byte_range(first, last)
        request = urllib.request.Request(self.url, headers={
            "User-Agent": self.user_agent, "Range": f"bytes={start}-{end}"})
        with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
            # 200: the whole file, which serves a range from byte 0 as well
            if response.status != 206 and not (response.status == 200 and start == 0):
                raise ValueError(f"the origin answered {response.status} to a range request")
            for piece in range(first, last + 1):
                data = self._read(response, self._geometry.piece_bytes(piece))
                if data is None:
                    return  # cancelled
                if self._hashes is not None and hashlib.sha1(data).digest() != self._hashes.get(piece):
                    with self._lock:
                        self._bad.append(piece)
                    continue
                try:
                    self._deliver(piece, data)
                except RuntimeError as exc:  # the torrent left the session meanwhile
                    raise ValueError(f"piece {piece} could not be handed over: {exc}") from exc

    def _read(self, response: http.client.HTTPResponse, size: int) -> bytes | None:
        """``size`` bytes of ``response``, paced; None when cancelled meanwhile."""
        chunks: list[bytes] = []
        left = size
        while left > 0:
            delay = self.pace.delay(min(READ_BYTES, left))
            if self._cancelled.wait(delay) if delay > 0 else self._cancelled.is_set():
                return None
            chunk = response.read(min(READ_BYTES, left))
            if not chunk:
                raise ValueError(f"the origin's answer ended {left} bytes early")
            with self._lock:
                self._received += len(chunk)
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


