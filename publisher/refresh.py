"""Re-sign ``latest.json`` unchanged, so agents can tell a quiet publisher from a frozen origin.

Agents with ``watch.max_pointer_age_s`` call their view stale when the newest signed pointer
is older than that. When no new data arrives, :func:`refresh_latest` writes the pointer
again — same version, same ``pinned`` flag, the next ``sequence``, ``issued_at`` now — by the
usual compare-and-swap. Agents accept it as the installed version seen again: they record
the sequence and download nothing (``version_policy``: "installed").

Only a pointer that verifies against the trusted keys, naming a version whose signed
manifest and objects are there, is re-signed: a bucket writer's forged pointer must never
gain the publisher's signature this way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from bloomswarm.common.bucket_layout import LATEST_KEY
from bloomswarm.common.errors import ConfigError, ObjectNotFound, StorageError
from bloomswarm.common.pointer import Pointer, open_pointer
from bloomswarm.common.signing import SigningKey, VerifyKey
from bloomswarm.common.storage import ObjectStore

from .latest import Target, swap_latest
from .pinning import check_version

log = logging.getLogger("bloomswarm.refresh")

REFRESH_ROUNDS = 5
"""Attempts when another writer moves latest.json between verifying and writing it."""


def refresh_latest(
    store: ObjectStore,
    signing_key: SigningKey,
    public_keys: Sequence[VerifyKey],
    publisher_id: str,
    *,
    now: Callable[[], float] = time.time,
) -> Pointer:
    """Re-sign latest.json as it is, with the next sequence and a new ``issued_at``.

    Raises ConfigError when nothing is published or the version it names is incomplete,
    VerificationError when latest.json or that version's manifest is not signed by a key in
    ``public_keys``, FormatError when latest.json is malformed, StorageError when other
    writers keep moving it.
    """
    for _ in range(REFRESH_ROUNDS):
        try:
            stored = store.get(LATEST_KEY)
        except ObjectNotFound:
            raise ConfigError(f"nothing to refresh: {LATEST_KEY} does not exist (publish first)") from None
        assert stored is not None  # no if_none_match given
        verified = open_pointer(stored.data, public_keys)
        check_version(store, verified.version, public_keys)

        def same(current: Pointer | None, verified: Pointer = verified) -> Target | None:
            return Target(verified.version, pinned=verified.pinned) if current == verified else None

        outcome = swap_latest(store, same, signing_key, publisher_id, now=now)
        if outcome.written:
            assert outcome.pointer is not None
            log.info("refreshed latest.json: v%d, sequence %d", outcome.pointer.version,
                     outcome.pointer.sequence)
            return outcome.pointer
    raise StorageError(f"could not refresh {LATEST_KEY}: other writers moved it {REFRESH_ROUNDS} times")


__all__ = ["REFRESH_ROUNDS", "refresh_latest"]
