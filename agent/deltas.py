"""Deltas on the agent's side: which delta to fetch, and turning a fetched one into the file.

A manifest may list deltas (:class:`~bloomswarm.common.manifest.DeltaEntry`), each turning
an older version's filter into the manifest's. An agent that holds one of those older
versions installed fetches the delta (a torrent of its own, over the same transfer as a
full file) instead of the file, then:

1. checks the delta file against the signed entry: size and SHA-256 (the torrent's
   info-hashes were checked against the entry before the download started);
2. checks the delta's header against the manifest: base and target versions, and the
   target's SHA-256;
3. applies it to the installed base into ``staging/vN/filter.bsf``
   (:func:`~bloomswarm.common.delta.apply_delta`: one pass over the base, whose body
   hash it checks on the copy it patches; every position; the result's SHA-256 against
   the manifest's);

and the daemon runs its usual swap gate on the result, given as a
:class:`~.verify.HashedFile`: the SHA-256 computed while writing it is not computed
again. The apply is the agent's one long computation (a 256 MiB filter: about a second
of CPU), so the daemon runs it on a worker thread; every long step in it releases the
GIL.

The delta's torrent is fetched when the poll learns of the version (:func:`plan_delta`);
a transient failure (an origin error, a timeout) is retried ``TORRENT_RETRY.attempts``
times within a second or two before it counts as ``missing``; a permanent one (not
found, or a torrent that is not the signed one) falls back at once.

Every failure raises :class:`DeltaFallback` naming its reason (the label of
``delta_fallbacks_total``); the daemon then fetches the full file:

=================  ==================================================================
``base_missing``   the base version is no longer installed
``missing``        the delta's torrent or file cannot be fetched (not found, origin
                   error, the transfer failed)
``delta_hash``     the delta's torrent or file differs from the signed entry
``base_modified``  the installed base's body no longer has the hash the delta was made
                   from (the file was modified on disk)
``corrupt``        the delta does not parse or does not apply
``wrong_result``   the delta's target is not the manifest's file, or the result fails
                   the swap gate
``stalled``        the delta download made no progress for ``install.delta_stall_s``
``no_room``        the delta and the file it makes do not fit on disk together (the
                   full file alone may)
=================  ==================================================================
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bloomswarm.common.bucket_layout import delta_file_name
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.delta import apply_delta, read_delta_header, temporaries_of
from bloomswarm.common.errors import BloomswarmError, DeltaError, DeltaFallback, ObjectNotFound, WrongBase
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.manifest import DeltaEntry, Manifest

from .backoff import Backoff
from .gc import installed_versions
from .logfmt import log_event
from .transfer import DeltaKey
from .verify import CheckFailed, HashedFile, check_swarm_ca, read_torrent

log = logging.getLogger("bloomswarm.agent")

FALLBACK_REASONS = (
    "base_missing", "missing", "delta_hash", "base_modified", "corrupt", "wrong_result", "stalled",
    "no_room",
)
"""Every label of ``delta_fallbacks_total{reason}``."""


@dataclass(frozen=True)
class FetchRetry:
    """How :func:`plan_delta` retries a transient failure to fetch a delta's torrent: up
    to ``attempts`` GETs in all, waiting in between as :class:`~.backoff.Backoff` of
    ``initial_s`` and ``maximum_s`` says (with jitter, so a fleet that failed together does
    not retry together). The defaults wait 0.25-0.5 s, then 0.5-1 s."""

    attempts: int = 3
    initial_s: float = 0.5
    maximum_s: float = 1.0
    sleep: Callable[[float], None] | None = None
    """How to wait; None: ``time.sleep`` (looked up at each wait)."""
    rng: random.Random | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")


TORRENT_RETRY = FetchRetry()
"""The retry :func:`plan_delta` uses unless told otherwise. It runs where the poll runs:
on the daemon's background poll thread in ``bloomswarm agent run``."""


@dataclass(frozen=True)
class DeltaPlan:
    """A delta to fetch: the signed entry, and its torrent (checked against the entry)."""

    entry: DeltaEntry
    version: int
    """The version the delta produces (the manifest's)."""
    torrent: bytes

    @property
    def base(self) -> int:
        return self.entry.base_version

    @property
    def key(self) -> DeltaKey:
        """Its transfer key."""
        return DeltaKey(self.version, self.base)


def choose_delta(manifest: Manifest, installed: list[int], current: int | None) -> DeltaEntry | None:
    """The delta worth fetching for ``manifest``: from ``current`` when listed, else from
    the newest other installed version listed; None when none applies (or the version
    itself is installed)."""
    if manifest.version in installed:
        return None
    if current is not None and current in installed:
        entry = manifest.delta_from(current)
        if entry is not None:
            return entry
    for base in sorted(installed, reverse=True):
        entry = manifest.delta_from(base)
        if entry is not None:
            return entry
    return None


def check_delta_torrent(entry: DeltaEntry, torrent: bytes, swarm_ca_sha256: str | None) -> None:
    """The torrent is the one ``entry`` signs for: its info-hashes, its one file's name
    and size, and the swarm CA of its manifest (``swarm_ca_sha256``, None: public).
    DeltaFallback("delta_hash") otherwise."""
    try:
        summary = read_torrent(torrent)
        check_swarm_ca(swarm_ca_sha256, summary, "delta's torrent")
    except CheckFailed as exc:
        raise DeltaFallback("delta_hash", f"the delta's torrent: {exc}") from exc
    if (summary.info_hash_v1, summary.info_hash_v2) != (entry.info_hash_v1, entry.info_hash_v2):
        raise DeltaFallback(
            "delta_hash",
            f"the delta's torrent has info-hashes v1 {summary.info_hash_v1 or '-'} "
            f"v2 {summary.info_hash_v2 or '-'}, the manifest v1 {entry.info_hash_v1} "
            f"v2 {entry.info_hash_v2 or '-'}",
        )
    expected_name = delta_file_name(entry.base_version)
    if summary.file_name != expected_name or summary.total_size != entry.size:
        raise DeltaFallback(
            "delta_hash",
            f"the delta's torrent holds {summary.file_name!r} of {summary.total_size} bytes, "
            f"expected {expected_name!r} of {entry.size}",
        )


def plan_delta(
    manifest: Manifest, layout: DataDir, fetch: Callable[[str], bytes], *, retry: FetchRetry | None = None
) -> DeltaPlan | None:
    """The delta to fetch for ``manifest`` given the versions installed under ``layout``,
    its torrent fetched with ``fetch(key)`` and checked; None when no delta applies.

    ``fetch`` raising ObjectNotFound is final; another StorageError (any BloomswarmError)
    or an OSError is retried as ``retry`` says (:data:`TORRENT_RETRY` by default).
    DeltaFallback("missing") when the torrent cannot be fetched, ("delta_hash") at once
    when it is not the one the manifest signs for.
    """
    if not manifest.deltas:  # nothing to choose from: the data directory is not listed
        return None
    entry = choose_delta(manifest, installed_versions(layout.root), layout.current_version())
    if entry is None:
        return None
    torrent = _fetch_torrent(entry, fetch, retry or TORRENT_RETRY)
    check_delta_torrent(entry, torrent, manifest.swarm_ca_sha256)
    return DeltaPlan(entry=entry, version=manifest.version, torrent=torrent)


def _fetch_torrent(entry: DeltaEntry, fetch: Callable[[str], bytes], retry: FetchRetry) -> bytes:
    backoff = Backoff(retry.initial_s, retry.maximum_s, rng=retry.rng)
    key = entry.torrent_key
    for attempt in range(1, retry.attempts + 1):
        try:
            return fetch(key)
        except ObjectNotFound as exc:
            raise DeltaFallback("missing", f"the delta's torrent {key}: {exc}") from exc
        except (BloomswarmError, OSError) as exc:
            if attempt == retry.attempts:
                raise DeltaFallback(
                    "missing", f"the delta's torrent {key}, {attempt} attempts: {exc}"
                ) from exc
            delay = backoff.next_delay()
            log_event(log, logging.INFO, "delta_torrent_retry", delta_from=entry.base_version,
                      key=key, attempt=attempt, retry_in_s=round(delay, 3), error=exc)
            (retry.sleep or time.sleep)(delay)
    raise AssertionError("unreachable: the last attempt returns or raises")


def apply_fetched_delta(plan: DeltaPlan, manifest: Manifest, layout: DataDir) -> HashedFile:
    """Check the downloaded delta and apply it to the installed base, writing
    ``staging/vN/filter.bsf``; return that file with the SHA-256 the apply computed while
    writing it (the manifest's: the gate need not hash it again). DeltaFallback on any
    failure (no output file then).

    Reads the base once and the result never (its hash is taken in memory); safe to run
    on a worker thread (it touches nothing but the files of ``plan``)."""
    delta = layout.staged_delta(plan.version, plan.base)
    base = layout.filter_file(plan.base)
    out = layout.staged_file(plan.version)
    if not base.is_file():
        raise DeltaFallback("base_missing", f"v{plan.base} is no longer installed")
    try:
        size = delta.stat().st_size
        digest = file_sha256(delta)
    except OSError as exc:
        raise DeltaFallback("missing", f"cannot read the delta {delta}: {exc.strerror or exc}") from exc
    if size != plan.entry.size or digest != plan.entry.sha256:
        raise DeltaFallback(
            "delta_hash",
            f"the delta has {size} bytes, SHA-256 {digest}; the manifest says {plan.entry.size} "
            f"bytes, {plan.entry.sha256}",
        )
    try:
        header = read_delta_header(delta)
    except (DeltaError, OSError) as exc:
        raise DeltaFallback("corrupt", f"the delta's header: {exc}") from exc
    expected = bytes.fromhex(manifest.sha256)
    if (header.base_version, header.target_version, header.target_sha256) != (
        plan.base, plan.version, expected
    ):
        raise DeltaFallback(
            "wrong_result",
            f"the delta turns v{header.base_version} into v{header.target_version} "
            f"(SHA-256 {header.target_sha256.hex()}), the manifest wants v{plan.base} into "
            f"v{plan.version} ({manifest.sha256})",
        )
    try:
        apply_delta(base, delta, out, expected_sha256=expected)
        return HashedFile.of(out, manifest.sha256)  # apply_delta checked it hashes to that
    except WrongBase as exc:
        raise DeltaFallback(
            "base_modified", f"the installed v{plan.base} is not the delta's base: {exc}"
        ) from exc
    except (DeltaError, OSError) as exc:
        raise DeltaFallback("corrupt", f"the delta does not apply: {exc}") from exc


def discard_unfinished_apply(layout: DataDir, version: int) -> list[Path]:
    """Delete what an apply into ``staging/vN`` left when the process ended before the
    result was installed (a shutdown or a kill while applying): its temporary file, and
    the result itself. The result is never installed without the digest the apply
    computed in the running process, so a restart applies the delta again. Returns the
    paths deleted."""
    out = layout.staged_file(version)
    removed = []
    for path in [*temporaries_of(out), out]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


__all__ = [
    "FALLBACK_REASONS",
    "TORRENT_RETRY",
    "DeltaFallback",
    "DeltaPlan",
    "FetchRetry",
    "apply_fetched_delta",
    "check_delta_torrent",
    "choose_delta",
    "discard_unfinished_apply",
    "plan_delta",
]
