"""Pinning: hold or roll the fleet back to one version, and release it (as Netflix Hollow pins).

``pin(N)`` points latest.json at vN with ``pinned: true``. Agents normally refuse a
version lower than the one they run; a signed pointer marked pinned, with a higher
``sequence`` than any they accepted, is the one exception, so a pin rolls the fleet back.
While pinned, ``publish`` still publishes new versions but leaves latest.json alone.
``unpin`` points latest.json at the newest complete version with ``pinned: false``, but
never at a version older than the one latest.json names: when that one is the newest or
newer (it does not check out just now), unpin only clears ``pinned``.

Both verify what they point at first: the manifest's signature (by the signing key or
one of the accepted public keys) and the presence of its filter and torrent objects.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

from bloomswarm.common.errors import ConfigError, FormatError, ObjectNotFound, VerificationError
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.pointer import Pointer
from bloomswarm.common.signing import SigningKey, VerifyKey
from bloomswarm.common.storage import ObjectStore

from .latest import Target, swap_latest
from .versions import complete_versions, read_verified_manifest, scan_versions

log = logging.getLogger("bloomswarm.pinning")

_UNPIN_ROUNDS = 5
"""Times unpin re-checks for a version published while it was moving latest.json."""


def check_version(store: ObjectStore, version: int, public_keys: Sequence[VerifyKey]) -> Manifest:
    """The verified manifest of ``version``, after checking its objects exist.

    ConfigError when the version does not exist or is incomplete; VerificationError when
    its signature or objects do not match.
    """
    try:
        manifest = read_verified_manifest(store, version, public_keys)
    except ObjectNotFound:
        raise ConfigError(f"version {version} does not exist or is incomplete") from None
    try:
        size = store.head(manifest.filter_key).size
        store.head(manifest.torrent_key)
    except ObjectNotFound as exc:
        raise VerificationError(f"version {version} is missing an object: {exc}") from None
    if size != manifest.size:
        raise VerificationError(
            f"version {version}: {manifest.filter_key} has {size} bytes, the manifest says "
            f"{manifest.size}"
        )
    return manifest


def pin(
    store: ObjectStore,
    version: int,
    signing_key: SigningKey,
    public_keys: Sequence[VerifyKey],
    publisher_id: str,
) -> Pointer:
    """Point latest.json at ``version``, pinned; return the new pointer."""
    check_version(store, version, public_keys)
    outcome = swap_latest(store, lambda _current: Target(version, pinned=True), signing_key,
                          publisher_id)
    assert outcome.pointer is not None
    log.info("pinned the fleet at v%d (sequence %d)", version, outcome.pointer.sequence)
    return outcome.pointer


def unpin(
    store: ObjectStore,
    signing_key: SigningKey,
    public_keys: Sequence[VerifyKey],
    publisher_id: str,
) -> Pointer | None:
    """Point latest.json at the newest complete version, not pinned; never at a version
    older than the one it names.

    When latest.json already names that version or a newer one (a newer one does not
    check out just now: its objects are being replaced, or cannot be read), the version is
    kept and only ``pinned`` is cleared; moving the fleet back is what ``pin`` is for.
    Returns the new pointer, or None when latest.json was not pinned and named the newest
    version or a newer one. A version published while this runs (its publisher saw the pin
    and left latest.json) is picked up by re-checking after the move.
    """
    written: Pointer | None = None
    for _ in range(_UNPIN_ROUNDS):
        newest = newest_valid_version(store, public_keys)
        if newest is None:
            raise ConfigError("no complete, correctly signed version to point latest.json at")
        outcome = swap_latest(store, partial(_unpinned, newest=newest), signing_key, publisher_id)
        current = outcome.pointer
        if not outcome.written:
            if current is not None and current.version > newest:
                log.warning(
                    "latest.json names v%d, newer than v%d, the newest complete, correctly "
                    "signed version: left at v%d (unpin never moves latest.json back)",
                    current.version, newest, current.version,
                )
            elif current is not None:
                log.info("latest.json names v%d, not pinned", current.version)
            return written
        written = current
        assert written is not None
        log.info("unpinned: latest.json names v%d", written.version)
    return written


def _unpinned(current: Pointer | None, newest: int) -> Target | None:
    """unpin's decision on the pointer ``current``: ``newest`` (the newest valid version)
    unless latest.json names it or a newer one; then the same version with ``pinned``
    cleared, or nothing to write when it is not pinned."""
    if current is None or current.version < newest:
        return Target(newest, pinned=False)
    return Target(current.version, pinned=False) if current.pinned else None


def newest_valid_version(
    store: ObjectStore,
    public_keys: Sequence[VerifyKey],
    *,
    below: int | None = None,
    quiet: bool = False,
) -> int | None:
    """The highest complete version (lower than ``below``, when given) whose signature
    and objects check out; None when none does. Each version passed over is logged as a
    warning ("skipping vN") unless ``quiet``."""
    versions = complete_versions(scan_versions(store))
    if below is not None:
        versions = [v for v in versions if v < below]
    for version in reversed(versions):
        try:
            check_version(store, version, public_keys)
        except (ConfigError, FormatError, VerificationError) as exc:
            if not quiet:
                log.warning("skipping v%d: %s", version, exc)
            continue
        return version
    return None
