"""The agent's loop: learn of a version, fetch it, pass the swap gate, install, flip, seed, collect.

One thread runs everything (the transfer's own threads aside)::

    every poll interval (+ jitter):  source.latest()  -> version_policy.decide()
                                     (with ``background_polls``, latest() runs on a
                                     thread of its own, or a worker of ``poll_pool``,
                                     and its result is taken at a later tick: a slow or
                                     hung origin never holds up the transfer's ticks or
                                     a swap)
    a version to install:            check_capacity() -> transfer.start_download(staging/vN)
    every tick:                      transfer.poll(), transfer.status(vN)
    download finished:               verify_download() -> install_version() (a hard link)
                                     -> flip current -> transfer.relocate(vN, versions/vN)
                                     (the same torrent and connections) -> GC

Deltas (:mod:`.deltas`): when the manifest lists a delta from a version installed here,
the poll also fetches the delta's torrent (checked against the signed entry; a transient
failure is retried a few times within a second or two), and the download is of the delta
(key ``DeltaKey(N, base)``, same transfer, the delta object as origin). Once finished it
is checked and applied into ``staging/vN/filter.bsf`` (``event=delta_applying``; with
``background_polls`` on a worker thread, the loop ticking on and the status saying
``applying``), and the result goes through the same gate, given the SHA-256 the apply
computed (not hashed twice), and install; the delta is kept beside the version and
seeded. Any failure of the delta path is a fallback, not an error: it is counted in
``delta_fallbacks_total{reason}``, logged once (``event=delta_fallback``), and the full
file is fetched at once.

Failure handling — the version ``current`` points at keeps serving through all of it:

- the source cannot be read (origin down): ``origin_errors_total``, a log line, the next
  poll after an exponential backoff;
- an announcement or a download fails a check: ``verification_failures_total{check}``,
  an error log line, no swap, a retry after backoff (a corrupt download is deleted; an
  interrupted one is kept and resumed);
- a pointer is refused by policy (replay, downgrade), a version does not fit
  (size, disk) or is public under ``swarm.require_private``: ``refusals_total{reason}``
  and a log line; a refused download is retried
  after backoff, since disk space can be freed.

Restarts: installed versions are seeded again from ``versions/vN`` (their torrent is kept
beside them), and so are the deltas kept beside them; an unfinished download is resumed
from ``staging/vN`` (a delta's too: its torrent is kept there), whose signed documents
are verified again with the keys configured now, together with the resume data saved
every ``resume_save_interval_s`` and at shutdown. The last accepted pointer
sequence is kept in ``state.json`` so that a replayed old pointer is refused after a
restart too.

Log lines are logfmt (``event=... key=value``), see :mod:`.logfmt`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bloomswarm.common.atomic_file import write_atomically
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.delta import temporaries_of
from bloomswarm.common.errors import BloomswarmError, FormatError, ObjectNotFound
from bloomswarm.common.header import read_header
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.signing import VerifyKey

from .announcements import Announcement, AnnouncementSource, SignedDocuments, open_announcement
from .background_call import BackgroundCall
from .backoff import Backoff
from .config import AgentConfig
from .deltas import (
    DeltaFallback,
    DeltaPlan,
    apply_fetched_delta,
    check_delta_torrent,
    discard_unfinished_apply,
    plan_delta,
)
from .freshness import PointerFreshness
from .gc import collect_garbage, installed_versions, retire_version
from .install import (
    DownloadRefused,
    InstalledDocuments,
    activate,
    check_capacity,
    install_delta,
    install_version,
    is_installed,
    make_owner_writable,
    prepare_data_dir,
    read_if_present,
    read_last_sequence,
    remove_tree,
    write_last_sequence,
)
from .logfmt import log_event, logfmt
from .metrics import AgentMetrics
from .origin import Origin
from .transfer import DeltaKey, Transfer, TransferKey, TransferStatus, key_label, key_version
from .verify import CheckFailed, HashedFile, check_file, read_torrent, verify_download
from .version_policy import Action, decide, next_sequence
from .worker_pool import WorkerPool

if TYPE_CHECKING:
    from .certificates import CertificateState
    from .peer_access import PeerAccess

log = logging.getLogger("bloomswarm.agent")
SLOW_POLL_S = 30.0
"""A background poll under way for this long is logged (once) as slow."""

TICK_S = 0.2
"""Longest time between two iterations of the loop while a version is being fetched or a
poll is under way (the transfer's events wake it sooner)."""

MIN_TICK_S = 0.02
"""Shortest time between two iterations while busy (the transfer's events wake the loop)."""

OBSERVE_S = 0.25
"""Longest time between two refreshes of the metrics and /status while nothing the status
shows has changed (a swap, a new target, a download started or failed refreshes them at
once): a tick that only moves bytes need not rebuild them (100 filters' daemons on one
thread ticking 30 times a second spent most of an agent's CPU doing so)."""

DISK_OBSERVE_S = 5.0
"""Longest time between two reads of the data directory for /status (the installed
versions and ``current``) while nothing the status shows has changed: the daemon's own
swaps and collections change them, and refresh them at once."""

IDLE_TICK_S = 1.0
"""Longest wait between two iterations otherwise (nothing to fetch: libtorrent seeds on its
own threads; the loop only refreshes metrics and /status, and wakes for the next poll)."""


@dataclass
class _Target:
    """The version being fetched, and its retry state."""

    announcement: Announcement
    seen_at: float
    """Monotonic time the announcement was first seen (start of the swap latency)."""
    backoff: Backoff
    retry_at: float = 0.0
    """Monotonic time before which no new attempt starts."""
    started: bool = False
    """The transfer is working on it."""
    resume: bytes | None = None
    """Resume data to pass to the next start_download."""
    delta: DeltaPlan | None = None
    """The delta fetched instead of the file; None: the file (no delta, or it failed)."""
    delta_progress: tuple[int, float] = (0, 0.0)
    """Bytes of the delta received, and the monotonic time they last grew (stall check)."""
    applying: BackgroundCall[tuple[HashedFile, TransferStatus]] | None = None
    """The finished delta's apply under way (on a worker thread with background work)."""
    applied: HashedFile | None = None
    """The file the delta's apply wrote, with the SHA-256 it computed while writing it, for
    the gate (which then does not hash it again); set only while it is being finished."""
    apply_s: float | None = None
    """Seconds the delta's apply took (for the swap's record), once applied."""

    @property
    def version(self) -> int:
        return self.announcement.version

    @property
    def key(self) -> TransferKey:
        """What the transfer fetches for it: the delta's key, or the version."""
        return self.delta.key if self.delta is not None else self.version

    @property
    def manifest(self) -> Manifest:
        return self.announcement.manifest


@dataclass(frozen=True)
class _Polled:
    """One poll's news: the announcement, and the delta to fetch for it (or why not)."""

    announcement: Announcement
    delta: DeltaPlan | None = None
    fallback: DeltaFallback | None = None


class AgentDaemon:
    """The agent. Construct, then :meth:`run` until ``stop`` is set (or drive it with
    :meth:`start`, :meth:`step` and :meth:`shutdown`, as the tests do).

    ``source``, ``transfer`` and ``origin`` are injected: production passes the S3 or CDN
    source, the libtorrent swarm and a presigned-URL origin; tests pass in-memory
    stores and :class:`~.direct.DirectTransfer`. ``origin`` None means peers only.
    ``public_keys`` verify documents kept from before a restart.
    """

    def __init__(
        self,
        config: AgentConfig,
        source: AnnouncementSource,
        transfer: Transfer,
        origin: Origin | None,
        public_keys: Sequence[VerifyKey],
        *,
        metrics: AgentMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        background_polls: bool = False,
        poll_pool: WorkerPool | None = None,
        peer_access: PeerAccess | None = None,
        name: str | None = None,
    ) -> None:
        self.config = config
        self.peer_access = peer_access
        self.name = name
        """The filter's name, in each of its log lines (None: an agent of one filter)."""
        self.data_dir = Path(config.data_dir)
        self.layout = DataDir(self.data_dir)
        self.source = source
        self.transfer = transfer
        self.origin = origin
        self.public_keys = list(public_keys)
        self.metrics = metrics or AgentMetrics()
        self._clock = clock
        self._rng = rng or random.Random()
        self._poll_backoff = self._new_backoff()
        self._next_poll = 0.0
        self._next_resume_save = 0.0
        self._target: _Target | None = None
        self._last_sequence: int | None = None
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._last_swap: dict[str, Any] | None = None
        self._status_lock = threading.Lock()
        self._status: dict[str, Any] = {}
        self._started = False
        self._nothing_published = False
        self._freshness = PointerFreshness(config.watch.max_pointer_age_s, clock=wall_clock)
        self._background_polls = background_polls
        self._poll_pool = poll_pool
        self._pending_poll: BackgroundCall[_Polled | None] | None = None
        self._slow_poll_logged = False
        self._next_observe = 0.0
        self._last_observed: tuple[object, ...] = ()
        self.observe_interval_s = OBSERVE_S
        """Longest time between two refreshes of the metrics and /status while nothing they
        show changed (an agent of many filters lengthens it: see :mod:`.filter_set`)."""
        self._disk_view: tuple[int | None, list[int]] = (None, [])
        """``current`` and the installed versions, as /status last read them."""
        self._next_disk_read = 0.0
        self._disk_changed = True
        """The daemon changed the data directory (a swap, a collection) since /status read it."""

    def _log_event(self, level: int, event: str, **fields: object) -> None:
        log_event(log, level, event, filter=self.name, **fields)

    # -- lifecycle -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Start, loop until ``stop`` is set, then shut down (resume data saved)."""
        try:
            self.start()
            while not stop.is_set():
                self.step()
                wait_for_next_tick(stop, self.transfer, busy=self.busy,
                                   until_due_s=self._next_poll - self._clock())
        finally:
            self.shutdown()

    def start(self) -> None:
        """Recover after a (re)start: seed installed versions, resume an unfinished download,
        clean leftovers (with the temporary files of atomic writes a crash interrupted: none
        is in progress yet). Raises FormatError when state.json is malformed (its message
        says to delete it)."""
        prepare_data_dir(self.data_dir)
        self._last_sequence = read_last_sequence(self.data_dir)
        current = self.layout.current_version()
        for version in installed_versions(self.data_dir):
            torrent = read_if_present(self.layout.torrent_file(version))
            if torrent is None:
                self._log_event(logging.WARNING, "not_seeding", version=version,
                                reason="no filter.torrent beside it (not installed by an agent)")
                continue
            self._seed(version, torrent)
            for base in self.layout.installed_deltas(version):
                delta_torrent = read_if_present(self.layout.delta_torrent_file(version, base))
                if delta_torrent is not None:
                    self._seed(DeltaKey(version, base), delta_torrent)
        self._publish_current(current)
        self._target = self._recover_download(current)
        self._collect(temporaries=True)
        self._started = True
        self._log_event(logging.INFO, "started", data_dir=self.data_dir, current=current,
                        resuming=self._target.version if self._target else None,
                        last_sequence=self._last_sequence)
        self._refresh_status()

    def shutdown(self) -> None:
        """Save the unfinished download's resume data, then close the transfer."""
        try:
            self._save_resume_data(timeout=5.0)
        except Exception as exc:
            self._log_event(logging.WARNING, "resume_save_failed", error=exc)
        self.transfer.close()
        self._log_event(logging.INFO, "stopped")

    def step(self) -> None:
        """One iteration: poll the source when due, drive the download, update metrics
        (an idle iteration that starts a background poll stops there: the next one, which
        takes the poll's answer, does the rest).

        Never raises for a failure of the source, the transfer or a check; an unexpected
        exception is logged with its traceback and the loop goes on.
        """
        if not self._started:
            raise RuntimeError("call start() first")
        now = self._clock()
        try:
            pending = self._pending_poll
            if pending is not None and pending.done():
                self._pending_poll = None
                self._take_poll(pending.result, now)
            if now >= self._next_poll and self._pending_poll is None:
                self._poll(now)
                if self._pending_poll is not None and self._target is None:
                    return  # idle: the tick that takes this poll's answer does the rest
            self.transfer.poll()
            self._advance(self._clock())
            if now >= self._next_resume_save:
                self._next_resume_save = now + self.config.resume_save_interval_s
                self._save_resume_data(timeout=2.0)
            observed = self._observed_state()
            if now >= self._next_observe or observed != self._last_observed:
                self._next_observe, self._last_observed = now + self.observe_interval_s, observed
                self._observe()
        except Exception as exc:  # a bug must not stop the agent serving
            log.exception("%s", logfmt("internal_error", filter=self.name,
                                       error=f"{type(exc).__name__}: {exc}"))
            self._error(f"internal error: {exc}")

    # -- learning of versions ------------------------------------------------------------

    def _poll(self, now: float) -> None:
        self._next_poll = now + self._poll_interval()  # also when latest() has a bug
        if self._background_polls:
            self._pending_poll = BackgroundCall(self._latest, started_at=now, pool=self._poll_pool)
            self._slow_poll_logged = False
        else:
            self._take_poll(self._latest, now)

    def _latest(self) -> _Polled | None:
        """``source.latest()``, with the delta worth fetching for it (its torrent fetched
        here, so that a slow origin holds up the background poll, not the loop)."""
        announcement = self.source.latest()
        if announcement is None:
            return None
        if not self.config.install.deltas:
            return _Polled(announcement)
        try:
            plan = plan_delta(announcement.manifest, self.layout, self.source.document)
        except DeltaFallback as exc:
            return _Polled(announcement, fallback=exc)
        return _Polled(announcement, delta=plan)

    def _poll_in_flight(self) -> float | None:
        """Seconds the background poll under way has taken so far (None: none under way).
        A poll slower than ``SLOW_POLL_S`` is logged once: the origin answers too slowly
        for the agent to learn of new versions (the client's timeouts bound it)."""
        pending = self._pending_poll
        if pending is None:
            return None
        elapsed = self._clock() - pending.started_at
        if elapsed >= SLOW_POLL_S and not self._slow_poll_logged:
            self._slow_poll_logged = True
            self._log_event(logging.WARNING, "poll_slow", in_flight_s=round(elapsed, 1))
        return elapsed

    def _take_poll(self, latest: Callable[[], _Polled | None], now: float) -> None:
        """Act on one poll's outcome: ``latest()`` returns it or raises its error."""
        try:
            polled = latest()
        except ObjectNotFound as exc:
            self._poll_backoff.reset()
            if not self._nothing_published:  # once, not every poll
                self._log_event(logging.INFO, "nothing_published", detail=exc)
            self._nothing_published = True
            return
        except CheckFailed as exc:
            self.metrics.verification_failures.labels(exc.check).inc()
            self._retry_poll(now, "announcement_refused", exc, check=exc.check)
            return
        except (BloomswarmError, OSError) as exc:
            self.metrics.origin_errors.inc()
            self._retry_poll(now, "origin_error", exc)
            return
        self._nothing_published = False
        if self._poll_backoff.failures:
            self._log_event(logging.INFO, "origin_recovered", after_failures=self._poll_backoff.failures)
            self._poll_backoff.reset()
        if polled is not None:
            self._freshness.saw(polled.announcement.pointer)
            self._consider(polled, now)

    def _retry_poll(self, now: float, event: str, exc: BaseException, **fields: object) -> None:
        delay = self._poll_backoff.next_delay()
        self._next_poll = now + delay
        self._error(str(exc))
        self._log_event(logging.ERROR if event != "origin_error" else logging.WARNING, event,
                        **fields, error=exc, retry_in_s=delay)

    def _poll_interval(self) -> float:
        watch = self.config.watch
        return watch.poll_interval_s + self._rng.uniform(0.0, watch.poll_jitter_s)

    def _consider(self, polled: _Polled, now: float) -> None:
        announcement = polled.announcement
        pointer = announcement.pointer
        installed = self.layout.current_version()
        decision = decide(pointer, installed, self._last_sequence)
        self._log_event(logging.INFO, "announcement", version=pointer.version,
                        sequence=pointer.sequence, pinned=pointer.pinned, installed=installed,
                        decision=decision.reason)
        if not decision.accepted:
            self.metrics.refusals.labels(decision.reason).inc()
            self._error(decision.detail)
            self._log_event(logging.WARNING, "refused", reason=decision.reason,
                            detail=decision.detail)
            return
        sequence = next_sequence(decision, pointer, self._last_sequence)
        if sequence != self._last_sequence:
            write_last_sequence(self.data_dir, sequence)
            self._last_sequence = sequence
        target = self._target
        if decision.action is Action.KEEP:
            if target is not None:
                self._abandon(target, f"v{pointer.version} is wanted again, and installed")
            return
        if target is not None and target.version == announcement.version:
            target.announcement = announcement  # the same version, re-announced (e.g. pinned)
            return
        if target is not None and announcement.version > target.version and not pointer.pinned:
            self._finish_if_done(target, now)  # finished while the poll ran: install it, not drop it
            target = self._target
        if target is not None:
            self._abandon(target, f"v{announcement.version} was announced")
        self._target = _Target(announcement, seen_at=now, backoff=self._new_backoff(),
                               delta=polled.delta)
        if polled.fallback is not None:
            self._count_fallback(announcement.version, polled.fallback)

    def _finish_if_done(self, target: _Target, now: float) -> None:
        """Install ``target`` now if its transfer has finished (a poll can block the loop for
        several seconds when the origin stalls; a download that finished meanwhile is
        installed before a newer announcement replaces it)."""
        if not target.started:
            return
        status = self.transfer.status(target.key)
        if status is None or not status.finished or status.state == "error":
            return
        if target.delta is not None:
            self._drive_delta(target, target.delta, status, now, wait=True)  # applied first
        else:
            self._finish(target, status, now)

    def _abandon(self, target: _Target, why: str) -> None:
        if target.applying is not None:  # a delta's apply writes into staging: let it end first
            target.applying.wait()
        self._remove_transfer(target.key)
        self._discard(self.layout.staging_dir(target.version))
        self._target = None
        self._log_event(logging.INFO, "download_abandoned", version=target.version, reason=why)

    # -- fetching, verifying, installing -------------------------------------------------

    def _advance(self, now: float) -> None:
        target = self._target
        if target is None:
            return
        try:
            self._drive(target, now)
        except Exception as exc:  # the transfer or the disk refused: retry later, no hot loop
            log.debug("driving v%d failed", target.version, exc_info=True)
            self.metrics.transfer_errors.inc()
            with contextlib.suppress(Exception):
                self._remove_transfer(target.key)
            if self._target is target:
                self._fail(target, now, "download_failed", f"{type(exc).__name__}: {exc}")

    def _drive(self, target: _Target, now: float) -> None:
        if not target.started:
            if now >= target.retry_at:
                self._begin(target, now)
            return
        status = self.transfer.status(target.key)
        if target.delta is not None:
            self._drive_delta(target, target.delta, status, now)
            return
        if status is None or status.state == "error":
            self.metrics.transfer_errors.inc()
            self._remove_transfer(target.version)
            error = status.error if status is not None else "the transfer lost the download"
            self._fail(target, now, "download_failed", error or "unknown error")
            return
        if status.finished:
            self._finish(target, status, now)

    def _drive_delta(self, target: _Target, plan: DeltaPlan, status: TransferStatus | None,
                     now: float, *, wait: bool = False) -> None:
        """A delta download's tick: a failed or stalled one falls back to the file; a
        finished one is applied, then verified and installed like a downloaded file.

        With background work (``background_polls``) the apply runs on a worker thread and
        its outcome is taken at a later tick: the loop keeps ticking meanwhile, and the
        status says ``applying``. ``wait``: wait for an apply under way and take it now (a
        newer announcement must not drop a file about to be installed)."""
        if target.applying is not None:  # the transfer's state no longer matters
            self._take_apply(target, now, wait=wait)
            return
        if status is None or status.state == "error":
            error = status.error if status is not None else "the transfer lost the download"
            self._fall_back(target, now, DeltaFallback("missing", error or "unknown error"))
            return
        received = status.bytes_from_peers + status.bytes_from_origin
        if received > target.delta_progress[0] or status.finished:
            target.delta_progress = (received, now)
        elif now - target.delta_progress[1] >= self.config.install.delta_stall_s:
            self._fall_back(target, now, DeltaFallback(
                "stalled", f"no progress for {self.config.install.delta_stall_s:g}s "
                           f"({status.progress:.1%} verified, {status.peers} peers)"))
            return
        if not status.finished:
            return
        self._log_event(logging.INFO, "delta_applying", version=target.version, delta_from=plan.base,
                        size=target.manifest.size, background=self._background_polls)
        manifest, finished = target.manifest, status

        def apply() -> tuple[HashedFile, TransferStatus]:
            return apply_fetched_delta(plan, manifest, self.layout), finished

        target.applying = BackgroundCall(apply, started_at=now, name="bloomswarm-apply",
                                          thread=self._background_polls)
        self._take_apply(target, now, wait=wait)

    def _take_apply(self, target: _Target, now: float, *, wait: bool) -> None:
        """Act on the delta's apply once it is done (at once with ``wait``): install its
        result through the gate, or fall back to the file."""
        call = target.applying
        if call is None or not (call.wait() if wait else call.done()):
            return
        target.applying = None
        try:
            applied, status = call.result()
        except DeltaFallback as exc:
            self._fall_back(target, now, exc)
            return
        target.apply_s = round(self._clock() - call.started_at, 3)
        self._log_event(logging.INFO, "delta_applied", version=target.version,
                        delta_from=target.delta.base if target.delta is not None else None,
                        apply_s=target.apply_s)
        target.applied = applied
        try:
            self._finish(target, status, now)
        finally:
            target.applied = None  # never vouches for a later file

    def _begin(self, target: _Target, now: float) -> None:
        version, manifest = target.version, target.manifest
        if is_installed(self.data_dir, version):
            self._reinstate(target, now)
            return
        if self.config.swarm.require_private and not manifest.private:
            self.metrics.refusals.labels("not_private").inc()
            self._fail(target, now, "download_refused", "the version is not private (its manifest "
                       "names no swarm CA) and swarm.require_private is set", reason="not_private")
            return
        if target.delta is not None and self._begin_delta(target, target.delta, now):
            return
        staging = self.layout.staging_dir(version)
        partial = self.layout.staged_file(version)
        present = partial.stat().st_size if partial.is_file() else 0
        if not self._fits(target, now, manifest.size, present):
            return
        staging.mkdir(parents=True, exist_ok=True)
        resume = target.resume
        if resume is None:
            with contextlib.suppress(FileNotFoundError):
                resume = self.layout.resume_file(version).read_bytes()
        origin = self.origin.url_factory(manifest.filter_key) if self.origin is not None else None
        self.transfer.start_download(version, target.announcement.torrent, staging, origin,
                                     resume_data=resume)
        target.started, target.resume = True, None
        self._log_event(logging.INFO, "download_started", version=version, size=manifest.size,
                        resumed_bytes=present or None, attempt=target.backoff.failures + 1)

    def _begin_delta(self, target: _Target, plan: DeltaPlan, now: float) -> bool:
        """Start (or resume) fetching the delta; False when it fell back to the file."""
        version = target.version
        if not self.layout.filter_file(plan.base).is_file():
            self._fall_back(target, now,
                            DeltaFallback("base_missing", f"v{plan.base} is no longer installed"))
            return False
        partial = self.layout.staged_delta(version, plan.base)
        present = partial.stat().st_size if partial.is_file() else 0
        if target.manifest.size > self.config.install.max_file_size:
            self._fits(target, now, target.manifest.size, 0)  # refused, and retried later
            return True
        try:  # the delta and the file it makes, on disk at once
            check_capacity(self.data_dir, target.manifest.size + plan.entry.size,
                           max_file_size=target.manifest.size + plan.entry.size,
                           margin=self.config.install.disk_margin_bytes, already_present=present)
        except DownloadRefused as exc:
            self._fall_back(target, now, DeltaFallback("no_room", f"{exc}; the full file alone may fit"))
            return False
        staging = self.layout.staging_dir(version)
        staging.mkdir(parents=True, exist_ok=True)
        torrent_file = self.layout.staged_delta_torrent(version, plan.base)
        if not torrent_file.exists():  # its presence makes a restarted agent resume the delta
            write_atomically(torrent_file, [plan.torrent], mode=0o644)
        resume = target.resume or read_if_present(self.layout.delta_resume_file(version, plan.base))
        origin = self.origin.url_factory(plan.entry.key) if self.origin is not None else None
        self.transfer.start_download(plan.key, plan.torrent, staging, origin, resume_data=resume)
        target.started, target.resume = True, None
        target.delta_progress = (0, now)
        self._log_event(logging.INFO, "download_started", version=version, delta_from=plan.base,
                        size=plan.entry.size, file_size=target.manifest.size, resumed_bytes=present or None,
                        attempt=target.backoff.failures + 1)
        return True

    def _fits(self, target: _Target, now: float, size: int, present: int) -> bool:
        """Whether ``size`` bytes (``present`` of them on disk) fit; else the refusal is
        counted and the target retried after backoff."""
        try:
            check_capacity(self.data_dir, size, max_file_size=self.config.install.max_file_size,
                           margin=self.config.install.disk_margin_bytes, already_present=present)
        except DownloadRefused as exc:
            self.metrics.refusals.labels(exc.reason).inc()
            self._fail(target, now, "download_refused", str(exc), reason=exc.reason)
            return False
        return True

    def _fall_back(self, target: _Target, now: float, failure: DeltaFallback) -> None:
        """Give up the target's delta: count and log it once, delete its files, and fetch
        the full file at once (``current`` keeps serving meanwhile)."""
        plan = target.delta
        if target.applying is not None:  # its files are about to go: let it end first
            target.applying.wait()
        target.delta, target.applying, target.applied = None, None, None
        target.started, target.retry_at, target.resume = False, now, None
        if plan is not None:
            self._remove_transfer(plan.key)
            for path in (self.layout.staged_delta(plan.version, plan.base),
                         self.layout.staged_delta_torrent(plan.version, plan.base),
                         self.layout.delta_resume_file(plan.version, plan.base),
                         self.layout.staged_file(plan.version)):  # an applied result the gate refused
                path.unlink(missing_ok=True)
        self._count_fallback(target.version, failure, base=plan.base if plan is not None else None)

    def _count_fallback(self, version: int, failure: DeltaFallback, *, base: int | None = None) -> None:
        self.metrics.delta_fallbacks.labels(failure.reason).inc()
        self._log_event(logging.WARNING, "delta_fallback", version=version, delta_from=base,
                        reason=failure.reason, error=failure, detail="fetching the full file")

    def _finish(self, target: _Target, status: TransferStatus, now: float) -> None:
        """Verify a finished download (still seeded from staging meanwhile: the transfer
        only reads a finished file), then install it and seed it from versions/vN."""
        version, manifest = target.version, target.manifest
        staging = self.layout.staging_dir(version)
        staged = self.layout.staged_file(version)
        delta = target.delta
        try:
            verify_download(manifest, target.announcement.torrent, status, target.applied or staged)
        except CheckFailed as exc:
            if delta is not None:  # the delta applied, but not into the signed file
                self._fall_back(target, now, DeltaFallback("wrong_result", str(exc)))
                return
            self.metrics.verification_failures.labels(exc.check).inc()
            self._remove_transfer(version)
            self._discard(staging)  # corrupt content is not worth resuming
            self._fail(target, now, "verification_failed", str(exc), check=exc.check)
            return
        documents = target.announcement.documents
        try:  # hard links: the transfer still reads the staged names until it is switched
            install_version(self.data_dir, version, staged, InstalledDocuments(
                manifest=documents.manifest,
                manifest_signature=documents.manifest_signature,
                torrent=documents.torrent,
            ), keep_staged=True)
            kept = delta is not None and self._keep_delta(delta)
            if delta is not None:
                self.metrics.delta_installs.inc()
            self._swap(target, now, downloaded=True, delta_from=delta.base if delta is not None else None)
        except OSError as exc:  # disk full, permissions: current still serves
            self._remove_transfer(target.key)  # before its staged file goes
            self._discard(staging)
            self._fail(target, now, "install_failed", f"{exc.strerror or exc}: {exc.filename or ''}")
            return
        if delta is None:
            self._seed(version, documents.torrent, downloaded=True)
        else:  # the file was made by applying the delta: no torrent of it to keep
            self._seed(version, documents.torrent)
            if kept:
                self._seed(delta.key, delta.torrent, downloaded=True)
            else:
                self._remove_transfer(delta.key)
        self._discard(staging)  # nothing reads it any more
        self._collect(leftovers=False)  # retention: a crash's leftovers went at the start

    def _discard(self, path: Path) -> None:
        """Delete ``path`` (a staging directory, a corrupt copy) as far as possible; what
        cannot be deleted is logged and left to a later collection, never raised: the
        version at hand is installed, or failed, either way."""
        try:
            remove_tree(path)
        except OSError as exc:
            self._log_event(logging.WARNING, "cleanup_failed", path=path,
                            error=f"{exc.strerror or exc}: {exc.filename or path}")

    def _keep_delta(self, plan: DeltaPlan) -> bool:
        """Keep the applied delta beside its installed version, to seed it; a failure is
        logged (the version is installed all the same)."""
        try:
            install_delta(self.data_dir, plan.version, plan.base,
                          self.layout.staged_delta(plan.version, plan.base), plan.torrent,
                          keep_staged=True)
        except OSError as exc:
            self._log_event(logging.WARNING, "delta_not_kept", version=plan.version,
                            delta_from=plan.base, error=exc)
            return False
        return True

    def _reinstate(self, target: _Target, now: float) -> None:
        """Flip to a version that is still installed (a rollback), after checking it."""
        path = self.layout.filter_file(target.version)
        try:
            check_file(target.manifest, path)
        except CheckFailed as exc:
            self.metrics.verification_failures.labels(exc.check).inc()
            if self.layout.current_version() != target.version:
                self._remove_transfer(target.version)
                try:  # renamed away first: never a half-deleted version after a crash
                    self._discard(retire_version(self.layout, target.version))
                except OSError as failure:
                    self._log_event(logging.WARNING, "cleanup_failed",
                                    path=self.layout.version_dir(target.version),
                                    error=f"{failure.strerror or failure}: {failure.filename or ''}")
            self._fail(target, now, "verification_failed", f"installed copy: {exc}", check=exc.check)
            return
        self._swap(target, now, downloaded=False)
        if target.version not in self.transfer.versions():
            self._seed(target.version, target.announcement.torrent)
        self._collect()

    def _swap(self, target: _Target, now: float, *, downloaded: bool, delta_from: int | None = None) -> None:
        previous = self.layout.current_version()
        self._disk_changed = True
        activate(self.data_dir, target.version)
        latency = self._clock() - target.seen_at
        self.metrics.record_swap(latency)
        self._publish_current(target.version, target.manifest)
        self._target = None
        self._last_swap = {"version": target.version, "previous": previous,
                           "latency_s": round(latency, 3), "at": time.time(), "delta_from": delta_from,
                           "apply_s": target.apply_s if delta_from is not None else None}
        self._log_event(logging.INFO, "swapped", version=target.version, previous=previous,
                        latency_s=latency, downloaded=downloaded, delta_from=delta_from,
                        pinned=target.announcement.pointer.pinned)

    def _fail(self, target: _Target, now: float, event: str, error: str, **fields: object) -> None:
        delay = target.backoff.next_delay()
        target.started = False
        target.retry_at = now + delay
        self._error(f"v{target.version}: {error}")
        self._log_event(logging.ERROR, event, version=target.version, **fields, error=error,
                        failures=target.backoff.failures, retry_in_s=delay)

    # -- restarts, resume data, garbage --------------------------------------------------

    def _recover_download(self, current: int | None) -> _Target | None:
        """The unfinished download in staging/, verified again, if it is still wanted.

        Its staged file (the filter's, or the delta's being resumed) gets its owner's write
        bit back when an install a crash interrupted had made it read-only: the transfer
        that resumes it writes to it. A failure to do so is logged (the transfer then
        reports the download's error)."""
        candidates: list[_Target] = []
        for staging in sorted(p for p in self.layout.staging.iterdir() if p.is_dir()):
            try:
                documents = self._load_documents(staging)
                if documents is None:
                    continue
                announcement = open_announcement(documents, self.public_keys)
            except (CheckFailed, OSError) as exc:
                self._log_event(logging.WARNING, "staging_discarded", path=staging, error=exc)
                continue
            decision = decide(announcement.pointer, current, self._last_sequence)
            if decision.action is not Action.INSTALL:
                continue
            delta = self._recover_delta(staging, announcement)
            self._make_resumable(self.layout.filter_in(staging) if delta is None
                                 else self.layout.staged_delta(delta.version, delta.base))
            resume = read_if_present(
                self.layout.resume_in(staging) if delta is None
                else self.layout.delta_resume_file(delta.version, delta.base))
            candidates.append(_Target(announcement, seen_at=self._clock(),
                                      backoff=self._new_backoff(), resume=resume, delta=delta))
        if not candidates:
            return None
        return max(candidates, key=lambda t: t.announcement.pointer.sequence)

    def _make_resumable(self, staged: Path) -> None:
        try:
            if make_owner_writable(staged):
                self._log_event(logging.INFO, "staged_file_writable", path=staged,
                                detail="made read-only by an install a crash interrupted")
        except OSError as exc:
            self._log_event(logging.WARNING, "staged_file_not_writable", path=staged,
                            error=exc.strerror or exc)

    def _recover_delta(self, staging: Path, announcement: Announcement) -> DeltaPlan | None:
        """The delta whose download ``staging`` holds (its torrent kept there), if deltas
        are on, its base is still installed and it is still the manifest's. Only then is
        what an apply interrupted by the shutdown left there deleted (its filter.bsf and
        temporary file: the apply is done again); otherwise the full file's download
        resumes and its partial filter.bsf is kept (only an apply's temporary file goes;
        a complete applied file is verified like any download)."""
        version = announcement.version
        bases = self.layout.staged_delta_bases(staging)
        plan = self._resumable_delta(staging, announcement) if bases else None
        if plan is not None:  # a delta's staging: its filter.bsf was applied
            leftovers = discard_unfinished_apply(self.layout, version)
        else:
            leftovers = temporaries_of(self.layout.staged_file(version)) if bases else []
            for path in leftovers:
                path.unlink(missing_ok=True)
        if leftovers:
            self._log_event(logging.INFO, "delta_apply_discarded", version=version,
                            paths=",".join(p.name for p in leftovers),
                            detail="applied again" if plan is not None else "fetching the full file")
        return plan

    def _resumable_delta(self, staging: Path, announcement: Announcement) -> DeltaPlan | None:
        """The first delta whose torrent ``staging`` keeps that can be resumed; see
        :meth:`_recover_delta`."""
        version = announcement.version
        if not self.config.install.deltas:
            return None
        for base in self.layout.staged_delta_bases(staging):
            entry = announcement.manifest.delta_from(base)
            torrent = read_if_present(self.layout.staged_delta_torrent(version, base))
            if entry is None or torrent is None or not self.layout.filter_file(base).is_file():
                continue
            try:
                check_delta_torrent(entry, torrent, announcement.manifest.swarm_ca_sha256)
            except DeltaFallback:
                continue
            return DeltaPlan(entry=entry, version=version, torrent=torrent)
        return None

    def _store_documents(self, staging: Path, documents: SignedDocuments) -> None:
        """Keep the announcement beside an unfinished download, for a restart to resume
        it (written with its first resume data, every ``resume_save_interval_s`` and at
        shutdown). Not fsynced: a restart verifies them again and discards what does not
        verify (after a crash, at worst the download starts over)."""
        for name, path in self.layout.staged_documents(staging).items():
            if not path.exists():
                write_atomically(path, [getattr(documents, name)], mode=0o644, durable=False)

    def _load_documents(self, staging: Path) -> SignedDocuments | None:
        parts: dict[str, bytes] = {}
        for name, path in self.layout.staged_documents(staging).items():
            try:
                parts[name] = path.read_bytes()
            except FileNotFoundError:
                return None
        return SignedDocuments(**parts)

    def _save_resume_data(self, *, timeout: float) -> None:
        target = self._target
        if target is None or not target.started:
            return
        data = self.transfer.save_resume_data(timeout, [target.key]).get(target.key)
        staging = self.layout.staging_dir(target.version)
        if data is not None and staging.is_dir():
            # The announcement goes beside the download with its first resume data: a
            # restart needs both, and a download that finishes before it (a small file,
            # most of them) never writes either.
            self._store_documents(staging, target.announcement.documents)
            delta = target.delta
            path = (self.layout.resume_file(target.version) if delta is None
                    else self.layout.delta_resume_file(delta.version, delta.base))
            # Not fsynced: a transfer ignores resume data it cannot use.
            write_atomically(path, [data], mode=0o644, durable=False)

    def _collect(self, *, leftovers: bool = True, temporaries: bool = False) -> None:
        downloading = self._target.version if self._target is not None else None
        collected = collect_garbage(self.data_dir, self.config.install.keep_versions,
                                    self._stop_version, downloading=downloading, leftovers=leftovers,
                                    temporaries=temporaries)
        if collected.versions or collected.leftovers:
            self._disk_changed = True
            self._log_event(logging.INFO, "garbage_collected",
                            versions=",".join(map(str, collected.versions)) or None,
                            leftovers=",".join(collected.leftovers) or None)

    def _seed(self, key: TransferKey, torrent: bytes, *, downloaded: bool = False) -> None:
        """Seed an installed version's file, or a delta kept beside it; a failure is logged
        (the version still serves locally).

        ``downloaded``: the transfer holds ``key``'s finished download, whose file was just
        hard-linked into ``versions/vN``: it is switched to that name (``relocate``), so
        its peers stay connected and its counts carry on. Where that fails it is removed
        and seeded anew, as a file installed otherwise is. Either way nothing reads the
        staged file afterwards. Under ``swarm.require_private`` a public version (its
        torrent carries no swarm CA) is not seeded: it still serves locally."""
        if self.config.swarm.require_private and not _is_private(torrent):
            self._log_event(logging.WARNING, "not_seeding", version=key_label(key),
                            reason="a public version, and swarm.require_private is set "
                                   "(still served locally)")
            return
        file_dir = self.layout.version_dir(key_version(key))
        if downloaded:
            if self.transfer.relocate(key, file_dir):
                self._log_event(logging.INFO, "seeding", version=key_label(key), source=file_dir,
                                connections_kept=True)
                return
            self._remove_transfer(key)
        try:
            self.transfer.seed(key, torrent, file_dir)
        except Exception as exc:
            self._log_event(logging.WARNING, "seed_failed", version=key_label(key), error=exc)

    def _remove_transfer(self, key: TransferKey) -> None:
        """Stop transferring ``key``, counting its last bytes first."""
        status = self.transfer.status(key)
        if status is not None:
            self.metrics.account(status)
        self.transfer.remove(key)
        self.metrics.forget(key)

    def _stop_version(self, version: int) -> None:
        """Stop transferring ``version``'s file and its deltas (before GC deletes them)."""
        for key in self.transfer.versions():
            if key_version(key) == version:
                self._remove_transfer(key)

    # -- status ----------------------------------------------------------------------------

    def _new_backoff(self) -> Backoff:
        watch = self.config.watch
        return Backoff(watch.retry_initial_s, watch.retry_max_s, rng=self._rng)

    def _error(self, message: str) -> None:
        self._last_error, self._last_error_at = message, time.time()

    def _publish_current(self, version: int | None, manifest: Manifest | None = None) -> None:
        """Set the current version's metrics; ``manifest``: that version's, when the caller
        holds it (else it is read from the data directory)."""
        created_at: float | None = None
        if manifest is not None:
            created_at = float(manifest.created_at)
        elif version is not None:
            created_at = self._created_at(version)
        self.metrics.set_current(version, created_at)

    def _created_at(self, version: int) -> float | None:
        data = read_if_present(self.layout.manifest_file(version))
        try:
            if data is not None:
                return float(Manifest.from_bytes(data).created_at)
            return float(read_header(str(self.layout.filter_file(version))).created_at)
        except (FormatError, OSError):
            return None

    def _check_freshness(self) -> None:
        """Apply watch.max_pointer_age_s: metrics every time, a log line when it flips."""
        change = self._freshness.update()
        pointer = self._freshness.pointer
        self.metrics.set_pointer_freshness(pointer.issued_at if pointer is not None else None,
                                           self._freshness.age_s(), self._freshness.stale)
        if change is None:
            return
        fields = {"version": change.pointer.version, "sequence": change.pointer.sequence,
                  "issued_at": change.pointer.issued_at, "age_s": change.age_s,
                  "max_age_s": self._freshness.max_age_s}
        if change.stale:
            self._log_event(logging.WARNING, "pointer_stale", **fields,
                            detail="no newer signed latest.json: the publisher stopped refreshing it, "
                             "or the origin serves an old one; still serving the installed version")
        else:
            self._log_event(logging.INFO, "pointer_fresh", **fields)

    def _observed_state(self) -> tuple[object, ...]:
        """What, when it changes, refreshes the metrics and /status at once."""
        target = self._target
        return (target.version if target is not None else None,
                target.key if target is not None else None,
                target.started if target is not None else None,
                target.applying is not None if target is not None else None,
                self._last_swap["at"] if self._last_swap is not None else None,
                self._last_error_at)

    def _observe(self) -> None:
        self._check_freshness()
        access = self.peer_access
        if access is not None:
            self.metrics.observe_peer_access(access.refusals.totals, _certificate_states(access))
        statuses = [s for k in self.transfer.versions() if (s := self.transfer.status(k)) is not None]
        downloading = self._target.key if self._target is not None else None
        self.metrics.observe_transfers(statuses, downloading)
        self._refresh_status(statuses)

    def _refresh_status(self, statuses: list[TransferStatus] | None = None) -> None:
        """Rebuild the /status snapshot. The data directory (``current``, the installed
        versions) is listed again after the daemon changed it, and every DISK_OBSERVE_S
        (a change made by hand); otherwise the last listing is shown."""
        statuses = statuses or []
        now = self._clock()
        if self._disk_changed or now >= self._next_disk_read:
            self._disk_view = (self.layout.current_version(), installed_versions(self.data_dir))
            self._disk_changed, self._next_disk_read = False, now + DISK_OBSERVE_S
        current, installed = self._disk_view
        target = self._target
        by_key = {s.key: s for s in statuses}
        seeding = [s for s in statuses if s.state == "seeding"]
        download: dict[str, Any] | None = None
        if target is not None:
            status = by_key.get(target.key)
            download = {
                "version": target.version,
                "size": target.manifest.size,
                "delta_from": target.delta.base if target.delta is not None else None,
                "delta_size": target.delta.entry.size if target.delta is not None else None,
                "state": ("applying" if target.applying is not None
                          else status.state if status is not None and target.started else "waiting"),
                "progress": status.progress if status is not None and target.started else 0.0,
                "peers": status.peers if status is not None else 0,
                "retry_in_s": max(target.retry_at - self._clock(), 0.0) if not target.started else None,
                "failures": target.backoff.failures,
            }
        snapshot = {
            "data_dir": str(self.data_dir),
            "ready": self.metrics.is_ready,
            "current_version": current,
            "installed_versions": installed,
            "seeding": sorted(s.version for s in seeding if s.base is None),
            "seeding_deltas": [key_label(s.key) for s in seeding if s.base is not None],
            "download": download,
            "last_sequence": self._last_sequence,
            "poll_in_flight_s": self._poll_in_flight(),
            "pointer": self._freshness.status(),
            "peer_access": self._peer_access_status(),
            "last_swap": self._last_swap,
            "last_error": self._last_error,
            "last_error_at": self._last_error_at,
        }
        with self._status_lock:
            self._status = snapshot

    def _peer_access_status(self) -> dict[str, Any] | None:
        access = self.peer_access
        if access is None:
            return None
        return {"refused_peers": dict(access.refusals.totals),
                "certificates": [dataclasses.asdict(s) for s in _certificate_states(access)]}

    def status(self) -> dict[str, Any]:
        """The latest status snapshot (thread-safe; served as /status). Before the first
        one (the agent is starting: recovering, seeding what it holds), a snapshot that
        says so: ``ready`` false, no current version, ``starting`` true."""
        with self._status_lock:
            snapshot = dict(self._status)
        if not snapshot:
            return {"ready": False, "starting": True, "current_version": None, "data_dir": str(self.data_dir)}
        snapshot["metrics"] = self.metrics.samples()  # read now: the registry is thread-safe
        return snapshot

    def poll_now(self) -> None:
        """Poll the source at the next :meth:`step` (it has news: the index changed)."""
        self._next_poll = min(self._next_poll, self._clock())

    def poll_due(self) -> bool:
        """The next :meth:`step` would poll the source."""
        return self._clock() >= self._next_poll

    @property
    def busy(self) -> bool:
        """A version is being fetched or a poll is under way (tick often), else idle."""
        return self._target is not None or self._pending_poll is not None

    @property
    def target_version(self) -> int | None:
        """The version being fetched (or waiting for a retry), if any."""
        return self._target.version if self._target is not None else None


def wait_for_next_tick(stop: threading.Event, transfer: Transfer, *, busy: bool, until_due_s: float,
                       min_tick_s: float = MIN_TICK_S) -> None:
    """Wait before a loop's next iteration: while ``busy``, until the transfer's news (a
    download finished: swap now), at most TICK_S and at least ``min_tick_s``; idle, until
    the next poll is due (``until_due_s``), at most IDLE_TICK_S. ``stop`` cuts either short."""
    if busy:
        transfer.wait(TICK_S)
        stop.wait(min_tick_s)
    else:
        stop.wait(min(IDLE_TICK_S, max(until_due_s, 0.0)))


__all__ = ["AgentDaemon", "wait_for_next_tick"]


def _certificate_states(access: PeerAccess) -> list[CertificateState]:
    """Each certificate's seconds left (none without certificates)."""
    return access.certificates.states() if access.certificates is not None else []


def _is_private(torrent: bytes) -> bool:
    """Whether ``torrent`` carries a swarm CA (False for a torrent that does not parse)."""
    try:
        return read_torrent(torrent).ca_sha256 is not None
    except CheckFailed:
        return False
