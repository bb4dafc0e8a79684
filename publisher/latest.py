"""Moving ``latest.json`` by compare-and-swap.

Every writer (publish, pin, unpin) reads ``latest.json`` and its ETag, decides from the
pointer it read what the next pointer should say, and writes it with ``If-Match`` on that
ETag (``If-None-Match: *`` when there is none yet). When another writer got there first
the write fails with 412, and the writer reads again and decides again: a decision is
always made on the pointer it replaces. Each new pointer's ``sequence`` is one more
than the one it replaces, so agents can refuse a replayed older pointer. With no
``latest.json`` to replace, it is 1 for a bucket's first version, and the current Unix
time for a later one (:func:`first_sequence`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from bloomswarm.common.bucket_layout import LATEST_KEY, manifest_key
from bloomswarm.common.errors import ObjectNotFound, PreconditionFailed, StorageError
from bloomswarm.common.pointer import Pointer, seal_pointer
from bloomswarm.common.signing import SigningKey
from bloomswarm.common.storage import ObjectStore

from .versions import read_latest

log = logging.getLogger("bloomswarm.latest")

MAX_SWAP_ATTEMPTS = 20
"""Compare-and-swap rounds before giving up (each lost round means another writer won)."""


def recovery_sequence(now: float) -> int:
    """The sequence of a document written anew where an earlier one was deleted: the Unix
    time ``now`` (at least 2, above a new bucket's 1)."""
    return max(int(now), 2)


def first_sequence(version: int, now: float) -> int:
    """The sequence of a ``latest.json`` written where there is none: 1 for version 1 (a
    new bucket); for a later version the Unix time ``now`` (:func:`recovery_sequence`). A
    later version without ``latest.json`` is a recovery (a corrupt pointer deleted by an
    operator): the fleet has seen sequences up to the number of earlier writes, far below
    the time, and would refuse a restart at 1 as a replay."""
    return 1 if version == 1 else recovery_sequence(now)


@dataclass(frozen=True)
class Target:
    """What a writer wants latest.json to say."""

    version: int
    pinned: bool = False


Decide = Callable[[Pointer | None], Target | None]
"""Given the current pointer (None when latest.json is absent), the target to write, or
None to leave latest.json as it is."""


@dataclass(frozen=True)
class SwapOutcome:
    """The pointer latest.json held when the writer finished, and whether it wrote it."""

    pointer: Pointer | None
    written: bool


def swap_latest(
    store: ObjectStore,
    decide: Decide,
    signing_key: SigningKey,
    publisher_id: str,
    *,
    now: Callable[[], float] = time.time,
) -> SwapOutcome:
    """Compare-and-swap latest.json to what ``decide`` asks for, retrying lost races.

    Raises StorageError after :data:`MAX_SWAP_ATTEMPTS` lost races, FormatError when
    latest.json is malformed.
    """
    for attempt in range(1, MAX_SWAP_ATTEMPTS + 1):
        current = read_latest(store)
        pointer = current.pointer if current is not None else None
        target = decide(pointer)
        if target is None:
            return SwapOutcome(pointer, written=False)
        new = Pointer(
            version=target.version,
            manifest_key=manifest_key(target.version),
            sequence=pointer.sequence + 1 if pointer is not None else first_sequence(target.version, now()),
            issued_at=int(now()),
            publisher_id=publisher_id,
            pinned=target.pinned,
        )
        data = seal_pointer(new, signing_key)
        try:
            if current is None:
                store.put(LATEST_KEY, data, if_none_match_any=True, content_type="application/json")
            else:
                store.put(LATEST_KEY, data, if_match=current.etag, content_type="application/json")
        except (PreconditionFailed, ObjectNotFound):  # moved or deleted meanwhile
            log.info("latest.json changed while writing it (round %d); reading it again", attempt)
            time.sleep(random.uniform(0.0, min(0.05 * attempt, 1.0)))
            continue
        return SwapOutcome(new, written=True)
    raise StorageError(
        f"could not update {LATEST_KEY}: other writers moved it {MAX_SWAP_ATTEMPTS} times in a row"
    )
