"""Retention: delete old versions and the garbage of unfinished publish attempts.

Run after latest.json has moved. What is kept:

- the version latest.json names (pinned or not) and the ``keep_versions`` newest
  complete versions (manifest and signature present), with every object of the attempt
  folder their manifest names: file, torrent, deltas (a kept version's delta from a
  deleted base stays useful to agents that still hold that base);
- anything that may belong to a publisher still at work: an attempt folder younger than
  ``grace_s`` (by the time in its id), a manifest without signature younger than
  ``grace_s`` (by its ``created_at``), a multipart upload younger than ``grace_s``.

What is deleted:

- every object of an older complete version (its deltas too: they live in its attempt
  folder), and of an abandoned claim (a manifest whose signature never came, older than
  ``grace_s``); the manifest goes first, in its own request, so an interrupted retention
  never leaves a manifest without its file;
- attempt folders a kept version's manifest does not name (racing losers: a claimed
  version's manifest never changes, so they can go at once), and stale ones under
  unclaimed numbers;
- a signature left without its manifest by an interrupted retention, below latest;
- unfinished multipart uploads under version folders older than ``grace_s`` (a publisher
  killed with SIGKILL cannot abort its own). Their age is the later of the store's
  initiation time and the attempt id's time (moto reports a fixed 2010 date).

Objects outside ``v{N}/`` folders and unknown keys in unclaimed folders are never touched.
Do not run retention while pinning a version it could delete (older than the kept set).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from bloomswarm.common.bucket_layout import (
    attempt_started_at,
    is_manifest_key,
    manifest_key,
    parse_version_prefix,
    signature_key,
    version_prefix,
)
from bloomswarm.common.errors import FormatError, ObjectNotFound
from bloomswarm.common.storage import ObjectStore, PendingUpload

from .versions import VersionFolder, read_latest, read_manifest, scan_versions

log = logging.getLogger("bloomswarm.retention")


@dataclass(frozen=True)
class RetentionPlan:
    """What retention keeps and deletes."""

    kept_versions: tuple[int, ...]
    """Versions whose manifest and named objects stay."""
    deleted_versions: tuple[int, ...]
    """Versions removed entirely."""
    delete_keys: tuple[str, ...]
    """Every key to delete, manifests first."""
    abort_uploads: tuple[PendingUpload, ...]
    """Stale multipart uploads to abort."""


def plan_retention(
    store: ObjectStore, keep_versions: int, grace_s: float, *, now: float | None = None
) -> RetentionPlan:
    """Decide what to delete; reads the store, writes nothing."""
    if keep_versions < 1:
        raise ValueError(f"keep_versions must be at least 1, got {keep_versions}")
    now = time.time() if now is None else now
    latest = read_latest(store)
    folders = scan_versions(store)
    complete = [n for n, f in folders.items() if f.complete]
    protected = set(complete[-keep_versions:])
    if latest is not None:
        protected.add(latest.pointer.version)

    kept: list[int] = []
    deleted: list[int] = []
    manifests: list[str] = []
    others: list[str] = []
    for version, folder in folders.items():
        if version in protected:
            kept.append(version)
            others += _unreferenced_attempts(store, folder)
        elif folder.claimed and (folder.complete or _claim_is_stale(store, version, grace_s, now)):
            deleted.append(version)
            manifests.append(manifest_key(version))
            others += [k for k in folder.keys if k != manifest_key(version)]
        elif folder.claimed:
            kept.append(version)  # a claim whose signature may still come
        else:
            others += _stale_attempts(folder, grace_s, now)
            if latest is not None and version < latest.pointer.version:
                others += [k for k in folder.keys if k == signature_key(version)]
    return RetentionPlan(
        kept_versions=tuple(kept),
        deleted_versions=tuple(deleted),
        delete_keys=tuple(manifests + others),
        abort_uploads=tuple(_stale_uploads(store, grace_s, now)),
    )


def apply_retention(
    store: ObjectStore, keep_versions: int, grace_s: float, *, now: float | None = None
) -> RetentionPlan:
    """Plan retention, then delete (manifests first) and abort stale uploads."""
    plan = plan_retention(store, keep_versions, grace_s, now=now)
    manifests = [k for k in plan.delete_keys if is_manifest_key(k)]
    store.delete(manifests)
    store.delete([k for k in plan.delete_keys if not is_manifest_key(k)])
    for upload in plan.abort_uploads:
        store.abort_multipart_upload(upload.key, upload.upload_id)
    if plan.delete_keys or plan.abort_uploads:
        log.info("retention: deleted %d objects (versions %s), aborted %d uploads",
                 len(plan.delete_keys), list(plan.deleted_versions), len(plan.abort_uploads))
    return plan


def _unreferenced_attempts(store: ObjectStore, folder: VersionFolder) -> list[str]:
    """Keys of a kept version's attempt folders that its manifest does not name."""
    if not folder.claimed:
        return []
    try:
        manifest = read_manifest(store, folder.version)
    except (ObjectNotFound, FormatError) as exc:
        log.warning("v%d: cannot read its manifest (%s); leaving its objects alone",
                    folder.version, exc)
        return []
    named = {manifest.filter_key, manifest.torrent_key}
    garbage: list[str] = []
    for keys in folder.attempts().values():
        if named.isdisjoint(keys):
            garbage += keys
    return garbage


def _claim_is_stale(store: ObjectStore, version: int, grace_s: float, now: float) -> bool:
    """A manifest without signature, older than the grace period: its publisher died
    between claiming and signing. A manifest that cannot be read is left alone."""
    try:
        manifest = read_manifest(store, version)
    except (ObjectNotFound, FormatError) as exc:
        log.warning("v%d: cannot read its manifest (%s); leaving it", version, exc)
        return False
    return manifest.created_at + grace_s < now


def _stale_attempts(folder: VersionFolder, grace_s: float, now: float) -> list[str]:
    """Keys of an unclaimed version's attempt folders older than the grace period."""
    garbage: list[str] = []
    for attempt, keys in folder.attempts().items():
        started = attempt_started_at(attempt)
        if started is not None and started + grace_s < now:
            garbage += keys
    return garbage


def _stale_uploads(store: ObjectStore, grace_s: float, now: float) -> list[PendingUpload]:
    stale: list[PendingUpload] = []
    for upload in store.list_multipart_uploads("v"):
        version = parse_version_prefix(upload.key)
        if version is None:
            continue
        attempt = upload.key[len(version_prefix(version)) :].partition("/")[0]
        started = max(upload.initiated_at, attempt_started_at(attempt) or 0)
        if started + grace_s < now:
            stale.append(upload)
    return stale

