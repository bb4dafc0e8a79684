"""Deltas at publish: from each recent version that shares the new filter's parameters.

For a new version N, :func:`make_deltas` makes a direct delta from each of the
``deltas.max_bases`` newest complete versions below N that has N's filter parameters
(:func:`choose_bases`, pure; a resize has none), skips one larger than ``deltas.max_share`` of the file,
makes each kept delta a torrent of its own (the same torrent creation as the filter) and
uploads both into N's attempt folder. The caller lists the returned entries in N's
manifest, which is written after them: a manifest never names a missing delta.

A base file comes from ``deltas.cache_dir`` when it holds it, else from the bucket;
either way its SHA-256 must equal its manifest's before it is used. Deltas are an
optimization: a base that cannot be fetched or verified, or a pair the delta code
refuses, costs that one delta (a warning), never the publish. Failures to upload a delta fail the publish
like a failed filter upload.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from bloomswarm.common.bucket_layout import delta_file_name, delta_key, delta_torrent_key
from bloomswarm.common.errors import FormatError, StorageError
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.manifest import DeltaEntry, Manifest
from bloomswarm.common.params import FilterParams
from bloomswarm.common.storage import ObjectStore

from .config import DeltaConfig, PublisherConfig
from .torrent import make_torrent

log = logging.getLogger("bloomswarm.publish")


def choose_bases(
    params: FilterParams, version: int, candidates: Sequence[Manifest], max_bases: int
) -> list[Manifest]:
    """The manifests to make deltas from, newest first: of ``candidates`` below
    ``version``, the ``max_bases`` newest whose filter parameters are ``params``."""
    same = [m for m in candidates if m.version < version and m.filter.to_params() == params]
    return sorted(same, key=lambda m: m.version, reverse=True)[: max(max_bases, 0)]


def make_deltas(
    store: ObjectStore,
    config: PublisherConfig,
    target: Path,
    *,
    version: int,
    attempt: str,
    work_dir: Path,
    bases: Sequence[Manifest],
    progress: bool,
    root_cert: str | None = None,
) -> tuple[DeltaEntry, ...]:
    """Make, upload and describe the deltas from ``bases`` to the file ``target`` of
    ``version`` (written, not yet claimed); returns the entries, newest base first.

    Files are made in ``work_dir``. StorageError when an upload fails.
    """
    from bloomswarm.common.delta import make_delta  # numpy; publish only

    entries: list[DeltaEntry] = []
    file_size = target.stat().st_size
    if bases and config.deltas.max_share * file_size < HEADER_SIZE:
        log.debug("v%d: no deltas: a delta holds the %d-byte header, over %.0f%% of this file",
                 version, HEADER_SIZE, 100 * config.deltas.max_share)
        return ()
    for base in bases:
        base_path = base_file(store, config.deltas, base, work_dir)
        if base_path is None:
            continue
        out = work_dir / delta_file_name(base.version)
        log.info("v%d: making a delta from v%d", version, base.version)
        try:
            make_delta(base_path, target, out)
        except FormatError as exc:  # DeltaError: parameters differ, not a filter
            log.warning("v%d: no delta from v%d: %s", version, base.version, exc)
            continue
        finally:
            if config.deltas.cache_dir is None:  # one downloaded base on disk at a time
                base_path.unlink(missing_ok=True)
        size = out.stat().st_size
        share = size / file_size
        if share > config.deltas.max_share:
            log.info("v%d: delta from v%d skipped: %s bytes, %.1f%% of the file (limit %.0f%%)",
                     version, base.version, f"{size:,}", 100 * share,
                     100 * config.deltas.max_share)
            out.unlink()
            continue
        entries.append(_upload_delta(store, config, out, version=version, attempt=attempt,
                                     base=base.version, root_cert=root_cert, progress=progress))
        log.info("v%d: delta from v%d: %s bytes, %.2f%% of the file",
                 version, base.version, f"{size:,}", 100 * share)
        out.unlink()
    return tuple(entries)


def _upload_delta(
    store: ObjectStore,
    config: PublisherConfig,
    path: Path,
    *,
    version: int,
    attempt: str,
    base: int,
    root_cert: str | None,
    progress: bool,
) -> DeltaEntry:
    torrent = make_torrent(path, trackers=config.trackers, piece_size=config.piece_size,
                           torrent_format=config.torrent_format, root_cert=root_cert,
                           progress=progress)
    key, torrent_file_key = delta_key(version, attempt, base), delta_torrent_key(version, attempt, base)
    store.upload_file(key, path)
    store.put(torrent_file_key, torrent.data, content_type="application/x-bittorrent")
    return DeltaEntry(
        base_version=base,
        size=path.stat().st_size,
        sha256=file_sha256(path),
        info_hash_v1=torrent.info_hash_v1,
        info_hash_v2=torrent.info_hash_v2,
        key=key,
        torrent_key=torrent_file_key,
    )


def base_file(
    store: ObjectStore, deltas: DeltaConfig, base: Manifest, work_dir: Path
) -> Path | None:
    """A local copy of ``base``'s filter file whose SHA-256 equals its manifest's: from
    the cache dir, else downloaded (into the cache dir when there is one). None, with a
    warning, when it cannot be had."""
    cached = _cache_path(deltas, base)
    path = cached if cached is not None else work_dir / f"base-v{base.version}.bsf"
    try:
        if cached is not None and cached.exists():
            if file_sha256(cached) == base.sha256:
                return cached
            log.warning("%s does not match v%d's manifest; downloading it again", cached, base.version)
    except OSError as exc:  # a directory in its place, EACCES, EIO: as if it were corrupt
        log.warning("cannot read %s (v%d's cached file): %s; downloading it again",
                    cached, base.version, exc.strerror or exc)
    log.info("downloading v%d (%s bytes) to make a delta from it", base.version, f"{base.size:,}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        store.download_file(base.filter_key, path)
    except (StorageError, OSError) as exc:
        log.warning("no delta from v%d: cannot download its file: %s", base.version, exc)
        return None
    try:
        matches = file_sha256(path) == base.sha256
    except OSError as exc:
        log.warning("no delta from v%d: cannot read its downloaded file %s: %s",
                    base.version, path, exc.strerror or exc)
        return None
    if not matches:
        log.warning("no delta from v%d: its file does not match its manifest's SHA-256",
                    base.version)
        path.unlink(missing_ok=True)
        return None
    return path


def remember_version(deltas: DeltaConfig, manifest: Manifest, path: Path) -> None:
    """Put the just-published file of ``manifest`` into the cache dir (when there is one)
    and drop cached files of all but the ``max_bases`` newest versions. Failures are
    logged: the cache only saves downloads."""
    cached = _cache_path(deltas, manifest)
    if cached is None or deltas.cache_dir is None:
        return
    try:
        deltas.cache_dir.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_name(cached.name + ".tmp")
        shutil.copyfile(path, temporary)
        os.replace(temporary, cached)
        files = sorted(_cached_versions(deltas.cache_dir), reverse=True)
        for _version, stale in files[max(deltas.max_bases, 1):]:
            stale.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("cannot keep v%d in the cache %s: %s", manifest.version, deltas.cache_dir, exc)


def _cache_path(deltas: DeltaConfig, manifest: Manifest) -> Path | None:
    if deltas.cache_dir is None:
        return None
    return deltas.cache_dir / f"v{manifest.version}-{manifest.sha256[:16]}.bsf"


def _cached_versions(cache_dir: Path) -> list[tuple[int, Path]]:
    found: list[tuple[int, Path]] = []
    for path in cache_dir.glob("v*-*.bsf"):
        number = path.name[1:].partition("-")[0]
        if number.isdigit():
            found.append((int(number), path))
    return found


__all__ = [
    "base_file",
    "choose_bases",
    "make_deltas",
    "remember_version",
]
