"""Publishing one filter version: upload it, claim the next number, sign, move latest.json.

The protocol (docs/publishing.md explains each order)::

  1. read latest.json (pointer and ETag) and list the version folders;
     N = 1 + max(latest's version, highest claimed version)
  2. unless forced: if the filter equals the one latest.json names (body SHA-256 and
     parameters), stop: "unchanged"
  3. write the filter file with N in its header; make its torrent
  4. upload both into a folder only this attempt writes:
         vN/<attempt>/filter.bsf   (multipart, checksums, retried parts)
         vN/<attempt>/filter.torrent
     then a delta (and its torrent) from each recent version with the same parameters:
         vN/<attempt>/delta-from-vB.bsd, vN/<attempt>/delta-from-vB.torrent
  5. claim vN: create vN/manifest.json, naming those objects, with If-None-Match: *
     lost (412): another publisher owns vN -> N+1 and back to 3 (the header holds N)
  6. write vN/manifest.json.sig
  7. compare-and-swap latest.json to vN (If-Match on the ETag it reads), never backwards:
     leave it when it already names N or higher, or when the fleet is pinned.

Why this is safe:

- A manifest only ever names objects that were completely uploaded before it: no reader
  (agent, ``pin``, ``tracker-sync``) sees a version without its file, torrent or deltas.
- Racing publishers upload into different attempt folders, so neither overwrites the
  other; the conditional create of the manifest picks exactly one owner of vN.
- latest.json names a version only after its signature exists, and moves by
  compare-and-swap with a strictly increasing ``sequence``.
- A publisher killed at any point leaves at most an unreferenced attempt folder, a
  manifest without signature (after 5, before 6; never made live) or an unfinished
  multipart upload; ``retention`` removes all three after a grace period. Exceptions
  (Ctrl-C, SIGTERM in the CLI) abort the multipart upload at once.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bloomswarm.common.bucket_layout import (
    FILTER_FILE_NAME,
    MAX_VERSION,
    filter_key,
    manifest_key,
    new_attempt_id,
    signature_key,
    torrent_key,
)
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.errors import ObjectNotFound, PreconditionFailed, StorageError
from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.header import FilterHeader
from bloomswarm.common.manifest import Manifest, sign_manifest
from bloomswarm.common.pointer import Pointer
from bloomswarm.common.signing import SigningKey
from bloomswarm.common.storage import ObjectStore

from .config import PublisherConfig
from .deltas import choose_bases, make_deltas, remember_version
from .latest import Decide, Target, swap_latest
from .progress import Progress
from .sizing_policy import SizingAction
from .torrent import SwarmCA, load_swarm_ca, make_torrent
from .versions import newest_manifests, read_latest, read_manifest, scan_versions

log = logging.getLogger("bloomswarm.publish")

MAX_CLAIM_ATTEMPTS = 5
"""Version numbers tried before giving up (each failure means another publisher won)."""


@dataclass(frozen=True)
class PublishResult:
    """What a publish did."""

    status: Literal["published", "unchanged"]
    version: int
    """The version published; for "unchanged", the version latest.json names."""
    manifest: Manifest
    """The published manifest; for "unchanged", the manifest latest.json names."""
    latest: Pointer | None
    """latest.json after publishing."""
    lost_claims: int = 0
    """Version numbers other publishers took first."""
    sizing: SizingAction = "resized"
    """"kept": the filter has the parameters of the newest complete version before it
    (``previous``), so deltas are possible; "resized": other parameters, or no previous
    version (a version without deltas)."""
    previous: int | None = None
    """The newest complete version before this one, when there is one."""

    @property
    def latest_moved(self) -> bool:
        """latest.json now names the published version."""
        return (
            self.status == "published"
            and self.latest is not None
            and self.latest.version == self.version
            and not self.latest.pinned
        )

    @property
    def pinned_at(self) -> int | None:
        """The version the fleet is pinned at (latest.json left there), or None."""
        return self.latest.version if self.latest is not None and self.latest.pinned else None


def publish_filter(
    store: ObjectStore,
    config: PublisherConfig,
    builder: FilterBuilder,
    signing_key: SigningKey,
    source_fingerprint: str,
    *,
    force: bool = False,
    progress: bool = True,
    now: Callable[[], float] = time.time,
    before_announce: Callable[[Manifest], None] | None = None,
) -> PublishResult:
    """Publish ``builder``'s filter as the next version (protocol in the module docstring).

    ``before_announce(manifest)`` runs once the version is claimed and before latest.json
    moves to it, e.g. to whitelist its info-hashes on a tracker so that agents that see
    the new version can announce it at once; an exception from it leaves latest.json as
    it was (the version stays claimed and a later publish or ``pin`` can expose it).

    Returns "unchanged" without writing anything when the filter equals latest.json's
    and ``force`` is false. Raises StorageError when every one of
    :data:`MAX_CLAIM_ATTEMPTS` version numbers was taken by other publishers or when the
    next number would pass :data:`MAX_VERSION` (before anything is written), and the
    store's errors (StorageError, ObjectNotFound for a missing bucket) as they come.
    """
    swarm_ca = load_swarm_ca(config.swarm_ca)
    latest = read_latest(store)
    folders = scan_versions(store)
    if latest is not None and not force:
        previous = _manifest_or_none(store, latest.pointer.version)
        if (previous is not None and same_filter(previous, builder.header())
                and previous.swarm_ca_sha256 == (swarm_ca.sha256 if swarm_ca else None)):
            return PublishResult("unchanged", previous.version, previous, latest.pointer)
    claimed = [n for n, folder in folders.items() if folder.claimed]
    version = _check_version_left(max([latest.pointer.version if latest else 0, *claimed]) + 1)
    recent = newest_manifests(store, max(config.deltas.max_bases, 1), below=version)
    sizing: SizingAction = (
        "kept" if recent and recent[0].filter.to_params() == builder.params else "resized"
    )
    bases = choose_bases(builder.params, version, recent, config.deltas.max_bases)
    created_at = int(now())
    lost = 0
    with tempfile.TemporaryDirectory(prefix="bloomswarm-publish-", dir=config.work_dir) as tmp:
        path = Path(tmp) / FILTER_FILE_NAME
        while True:
            if lost >= MAX_CLAIM_ATTEMPTS:
                raise StorageError(
                    f"gave up after other publishers took {lost} version numbers in a row "
                    f"(up to v{version - 1}); try again"
                )
            _check_version_left(version)
            if store.exists(manifest_key(version)):  # taken since we listed: skip the upload
                log.info("v%d was claimed by another publisher; trying v%d", version, version + 1)
                lost, version = lost + 1, version + 1
                continue
            manifest = _upload_attempt(
                store, builder, version, config=config, created_at=created_at, path=path,
                source_fingerprint=source_fingerprint, progress=progress, now=now,
                bases=bases, swarm_ca=swarm_ca,
            )
            if _claim(store, manifest, signing_key):
                remember_version(config.deltas, manifest, path)
                break
            log.warning("lost the race for v%d to another publisher; trying v%d", version, version + 1)
            lost, version = lost + 1, version + 1
    if before_announce is not None:
        before_announce(manifest)
    outcome = swap_latest(store, forward_to(version), signing_key, config.publisher_id, now=now)
    if outcome.pointer is not None and outcome.pointer.pinned:
        log.warning("the fleet is pinned at v%d: latest.json not moved to v%d",
                    outcome.pointer.version, version)
    return PublishResult("published", version, manifest, outcome.pointer, lost, sizing,
                         recent[0].version if recent else None)


def _check_version_left(version: int) -> int:
    """``version``, the next number to claim; StorageError when it is beyond
    :data:`MAX_VERSION` (the bucket already holds the highest version number)."""
    if version > MAX_VERSION:
        raise StorageError(
            f"no version number left: the bucket already holds v{version - 1}, the highest "
            f"there is (2**63-1); publish to a new bucket or prefix"
        )
    return version


def same_filter(manifest: Manifest, header: FilterHeader) -> bool:
    """Whether ``header`` describes the same filter as ``manifest``: same body bytes and
    parameters (version and creation time aside)."""
    return (
        manifest.body_sha256 == header.body_sha256.hex()
        and manifest.filter == FilterSummary.from_header(header)
    )


def forward_to(version: int) -> Decide:
    """Move latest.json to ``version`` unless it names ``version`` or a higher one, or the
    fleet is pinned: latest never moves backwards and a pin holds."""

    def decide(current: Pointer | None) -> Target | None:
        if current is not None and (current.pinned or current.version >= version):
            return None
        return Target(version)

    return decide


def _manifest_or_none(store: ObjectStore, version: int) -> Manifest | None:
    try:
        return read_manifest(store, version)
    except ObjectNotFound:
        log.warning("latest.json names v%d but its manifest is gone", version)
        return None


def _upload_attempt(
    store: ObjectStore,
    builder: FilterBuilder,
    version: int,
    *,
    config: PublisherConfig,
    created_at: int,
    path: Path,
    source_fingerprint: str,
    progress: bool,
    now: Callable[[], float],
    bases: list[Manifest],
    swarm_ca: SwarmCA | None,
) -> Manifest:
    """Write the file for ``version``, make its torrent, upload both into a fresh attempt
    folder, then the deltas from ``bases``; return the (unsigned, unstored) manifest
    naming them all."""
    header = builder.write(path, version=version, created_at=created_at)
    digest = hashlib.sha256(header.pack())
    digest.update(builder.body)
    root_cert = swarm_ca.pem if swarm_ca is not None else None
    torrent = make_torrent(path, trackers=config.trackers, piece_size=config.piece_size,
                           torrent_format=config.torrent_format, root_cert=root_cert,
                           progress=progress)
    attempt = new_attempt_id(now())
    file_key, torrent_file_key = filter_key(version, attempt), torrent_key(version, attempt)
    with Progress(f"uploading v{version}", total=header.file_size, unit="bytes",
                  enabled=progress) as bar:
        store.upload_file(file_key, path, progress=bar.advance)
    store.put(torrent_file_key, torrent.data, content_type="application/x-bittorrent")
    deltas = make_deltas(store, config, path, version=version, attempt=attempt,
                         work_dir=path.parent, bases=bases, root_cert=root_cert,
                         progress=progress)
    return Manifest(
        version=version,
        size=header.file_size,
        sha256=digest.hexdigest(),
        info_hash_v1=torrent.info_hash_v1,
        info_hash_v2=torrent.info_hash_v2,
        piece_size=torrent.piece_size,
        filter=FilterSummary.from_header(header),
        created_at=created_at,
        source_fingerprint=source_fingerprint,
        publisher_id=config.publisher_id,
        filter_key=file_key,
        torrent_key=torrent_file_key,
        body_sha256=header.body_sha256.hex(),
        deltas=deltas,
        swarm_ca_sha256=swarm_ca.sha256 if swarm_ca is not None else None,
    )


def _claim(store: ObjectStore, manifest: Manifest, signing_key: SigningKey) -> bool:
    """Create the manifest if vN is free, then its signature. False when another publisher
    owns vN."""
    manifest_bytes, signature_bytes = sign_manifest(manifest, signing_key)
    try:
        store.put(manifest_key(manifest.version), manifest_bytes, if_none_match_any=True,
                  content_type="application/json")
    except PreconditionFailed:
        return False
    store.put(signature_key(manifest.version), signature_bytes, content_type="text/plain")
    log.info("claimed v%d", manifest.version)
    return True
