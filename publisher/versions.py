"""What the bucket holds: version folders, their state, and reading their manifests.

One listing of ``v*`` keys tells, for every version number, whether it is claimed (its
manifest exists), complete (its signature exists too) and which publish-attempt folders
it holds. Publishing, retention, pinning, ``versions`` and ``tracker-sync`` all start
from this view. "Complete" says nothing of the filter file and torrent: which attempt
folder holds them is in the manifest. ``versions`` and ``tracker-sync`` read the manifest
anyway and check those keys against the listing (:func:`missing_objects`); ``pin``,
``unpin`` and ``refresh`` HEAD them (:func:`.pinning.check_version`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bloomswarm.common.bucket_layout import (
    LATEST_KEY,
    MAX_VERSION,
    attempt_started_at,
    manifest_key,
    signature_key,
    version_prefix,
)
from bloomswarm.common.errors import FormatError, ObjectNotFound
from bloomswarm.common.manifest import Manifest, verify_manifest
from bloomswarm.common.pointer import Pointer, read_pointer_unverified
from bloomswarm.common.signing import VerifyKey
from bloomswarm.common.storage import ObjectStore

log = logging.getLogger("bloomswarm.versions")

_NUMBERED_FOLDER = re.compile(r"v([0-9]+)/")
"""A folder named like a version's: "v" and digits (canonical or not, in range or not)."""
_WARNED_STRAYS: set[str] = set()
"""Stray folders already warned about in this process (one publish lists versions
several times; a watching publisher or tracker-sync lists them every round)."""


@dataclass(frozen=True)
class VersionFolder:
    """The objects under ``v{N}/``."""

    version: int
    keys: tuple[str, ...]
    """Every key under ``v{N}/``, sorted."""

    @property
    def claimed(self) -> bool:
        """The manifest exists: version N belongs to one publish attempt."""
        return manifest_key(self.version) in self.keys

    @property
    def complete(self) -> bool:
        """Manifest and signature exist (the last two objects a publisher writes)."""
        return self.claimed and signature_key(self.version) in self.keys

    def attempts(self) -> dict[str, list[str]]:
        """Publish-attempt folders: attempt id -> the keys inside it."""
        prefix = version_prefix(self.version)
        folders: dict[str, list[str]] = {}
        for key in self.keys:
            attempt, sep, _rest = key[len(prefix) :].partition("/")
            if sep and attempt_started_at(attempt) is not None:
                folders.setdefault(attempt, []).append(key)
        return folders


@dataclass(frozen=True)
class LatestPointer:
    """``latest.json`` as a writer sees it: the pointer (signature not checked) and the
    ETag to compare-and-swap against."""

    pointer: Pointer
    etag: str


def scan_versions(store: ObjectStore) -> dict[int, VersionFolder]:
    """Every version folder in the store, by version number (one listing).

    Keys under a folder that looks like a version's but is none (``v0/``, leading zeros
    as in ``v007/``, a number beyond :data:`MAX_VERSION`) are left out, with a warning
    once per folder and process: a stray key must not stop publishing or listing."""
    grouped: dict[int, list[str]] = {}
    strays: dict[str, str] = {}
    for key in store.list("v"):
        match = _NUMBERED_FOLDER.match(key)
        if match is None:
            continue
        digits = match.group(1)
        if digits.startswith("0"):
            strays[match.group(0)] = "not a version number (0 or leading zeros)"
        elif len(digits) > len(str(MAX_VERSION)) or int(digits) > MAX_VERSION:
            strays[match.group(0)] = f"beyond the highest version number {MAX_VERSION}"
        else:
            grouped.setdefault(int(digits), []).append(key)
    for folder, why in sorted(strays.items()):
        shown = folder if len(folder) <= 40 else f"{folder[:36]}.../"
        level = logging.DEBUG if folder in _WARNED_STRAYS else logging.WARNING
        _WARNED_STRAYS.add(folder)
        log.log(level, "ignoring the keys under %s: %s", shown, why)
    return {n: VersionFolder(n, tuple(sorted(keys))) for n, keys in sorted(grouped.items())}


def complete_versions(folders: dict[int, VersionFolder]) -> list[int]:
    """The complete version numbers, ascending."""
    return [n for n, folder in folders.items() if folder.complete]


def missing_objects(store: ObjectStore, folder: VersionFolder, manifest: Manifest) -> dict[str, str]:
    """The objects agents fetch for ``folder``'s version, as its ``manifest`` names them,
    that do not exist: "filter file" and/or "torrent" -> key (empty when both exist).

    :attr:`VersionFolder.complete` only tells that the manifest and its signature exist
    (from the listing alone: which attempt folder holds the version's objects is only
    known from the manifest). A key under the version's own folder, where a publisher
    always writes it, is looked up in ``folder``'s listing: no request. A key elsewhere
    costs one HEAD (``store.exists``). Sizes are not checked (``pin`` does that)."""
    prefix = version_prefix(folder.version)
    missing: dict[str, str] = {}
    for what, key in (("filter file", manifest.filter_key), ("torrent", manifest.torrent_key)):
        present = key in folder.keys if key.startswith(prefix) else store.exists(key)
        if not present:
            missing[what] = key
    return missing


def newest_manifests(store: ObjectStore, limit: int, *, below: int | None = None) -> list[Manifest]:
    """The manifests (signatures not checked) of up to ``limit`` newest complete versions
    (below version ``below`` when given), newest first. One that cannot be read is logged
    and left out."""
    numbers = [n for n in complete_versions(scan_versions(store)) if below is None or n < below]
    manifests: list[Manifest] = []
    for number in reversed(numbers):
        if len(manifests) >= limit:
            break
        try:
            manifests.append(read_manifest(store, number))
        except (ObjectNotFound, FormatError) as exc:
            log.warning("v%d: cannot read its manifest: %s", number, exc)
    return manifests


def read_latest(store: ObjectStore) -> LatestPointer | None:
    """``latest.json`` without checking its signature (for writers); None when absent.

    FormatError when it exists but is malformed.
    """
    try:
        stored = store.get(LATEST_KEY)
    except ObjectNotFound:
        if not store.exists(LATEST_KEY):  # a missing bucket raises here
            return None
        raise
    assert stored is not None  # no if_none_match given
    return LatestPointer(read_pointer_unverified(stored.data), stored.etag)


def read_manifest(store: ObjectStore, version: int) -> Manifest:
    """Version ``version``'s manifest, signature not checked. ObjectNotFound when absent."""
    stored = store.get(manifest_key(version))
    assert stored is not None
    return Manifest.from_bytes(stored.data)


def read_verified_manifest(
    store: ObjectStore, version: int, public_keys: Sequence[VerifyKey]
) -> Manifest:
    """Version ``version``'s manifest after checking its signature against ``public_keys``.

    ObjectNotFound when the manifest or its signature is missing; VerificationError when
    no key signed it (or it names another version); FormatError when malformed.
    """
    manifest = store.get(manifest_key(version))
    signature = store.get(signature_key(version))
    assert manifest is not None and signature is not None
    return verify_manifest(
        manifest.data, signature.data, public_keys, expected_version=version
    )
