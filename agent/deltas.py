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
   (:func:`~bloomswarm.common.delta.apply_delta`, which checks the base's recorded body
   hash, every position, and the result's SHA-256 against the manifest's);

and the daemon runs its usual swap gate on the result. Every failure raises
:class:`DeltaFallback` naming its reason (the label of ``delta_fallbacks_total``); the
daemon then fetches the full file:

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
=================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bloomswarm.common.bucket_layout import delta_file_name
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.delta import apply_delta, read_delta_header
from bloomswarm.common.errors import BloomswarmError, DeltaError, DeltaFallback
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.manifest import DeltaEntry, Manifest

from .gc import installed_versions
from .transfer import DeltaKey
from .verify import CheckFailed, read_torrent

FALLBACK_REASONS = (
    "base_missing", "missing", "delta_hash", "base_modified", "corrupt", "wrong_result", "stalled",
)
"""Every label of ``delta_fallbacks_total{reason}``."""


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


def check_delta_torrent(entry: DeltaEntry, torrent: bytes) -> None:
    """The torrent is the one ``entry`` signs for: its info-hashes, its one file's name
    and size. DeltaFallback("delta_hash") otherwise."""
    try:
        summary = read_torrent(torrent)
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


def plan_delta(manifest: Manifest, layout: DataDir, fetch: Callable[[str], bytes]) -> DeltaPlan | None:
    """The delta to fetch for ``manifest`` given the versions installed under ``layout``,
    its torrent fetched with ``fetch(key)`` and checked; None when no delta applies.
    DeltaFallback when one applies but its torrent cannot be fetched or does not match."""
    entry = choose_delta(manifest, installed_versions(layout.root), layout.current_version())
    if entry is None:
        return None
    try:
        torrent = fetch(entry.torrent_key)
    except (BloomswarmError, OSError) as exc:
        raise DeltaFallback("missing", f"the delta's torrent {entry.torrent_key}: {exc}") from exc
    check_delta_torrent(entry, torrent)
    return DeltaPlan(entry=entry, version=manifest.version, torrent=torrent)


def apply_fetched_delta(plan: DeltaPlan, manifest: Manifest, layout: DataDir) -> None:
    """Check the downloaded delta and apply it to the installed base, writing
    ``staging/vN/filter.bsf``; DeltaFallback on any failure (no output file then)."""
    delta = layout.staged_delta(plan.version, plan.base)
    base = layout.filter_file(plan.base)
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
        apply_delta(base, delta, layout.staged_file(plan.version), expected_sha256=expected)
    except (DeltaError, OSError) as exc:
        if not _body_matches(base, header.base_body_sha256):
            raise DeltaFallback(
                "base_modified", f"the body of the installed v{plan.base} was modified: {exc}"
            ) from exc
        raise DeltaFallback("corrupt", f"the delta does not apply: {exc}") from exc


def _body_matches(path: Path, sha256: bytes) -> bool:
    """Whether the body of the filter at ``path`` (after its header) hashes to ``sha256``."""
    try:
        return bytes.fromhex(file_sha256(path, offset=HEADER_SIZE)) == sha256
    except OSError:
        return False


__all__ = [
    "FALLBACK_REASONS",
    "DeltaFallback",
    "DeltaPlan",
    "apply_fetched_delta",
    "check_delta_torrent",
    "choose_delta",
    "plan_delta",
]
