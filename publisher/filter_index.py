"""Moving ``index.json``: the signed index of every named filter's latest version.

A bucket with many filters keeps one single-filter layout per filter under
``filters/NAME/`` (published, pinned and refreshed exactly as a single-filter bucket,
through a :class:`~bloomswarm.common.prefixed_store.PrefixedStore`), plus ``index.json``
(:mod:`bloomswarm.common.filter_index`), which agents poll instead of one ``latest.json``
per filter. After a writer moves ``filters/NAME/latest.json`` it calls :func:`sync_index`
for NAME.

Protocol. :func:`sync_index` first reads, for each name, the filter's ``latest.json``,
the manifest and signature it names and the torrent when small: that is the filter's
entry. Then, as :mod:`.latest` moves ``latest.json``, it reads ``index.json`` and its
ETag, merges, and writes the result with ``If-Match`` on that ETag (``If-None-Match: *``
when there is none yet), reading and merging again after a lost race. The merge is
monotonic: an entry replaces the index's entry for the same name only when its pointer's
``sequence`` is greater. Publishers of different filters therefore race only on the one
object, never lose each other's entries, and a slow publisher cannot put back an older
pointer that a faster one already replaced. Entries of names not synced are kept as
they are; a filter is never removed from the index here. An entry that does not parse
(written by a newer or broken writer) is carried over verbatim, and replaced when its
filter is synced.

A filter whose entry cannot be read (its ``latest.json`` or manifest is malformed, or its
objects stay missing) does not hold up the others when the caller asks for that
(``failed``): its entry in the index is left as it was (none when it had none), and the
caller reports it.

With no ``index.json`` to replace, the first one's ``sequence`` follows
:func:`~.latest.first_sequence`: 1 for a new bucket's first index (one filter, at its first
``latest.json``), the current Unix time otherwise, so that agents that saw a deleted
index's sequence accept the new one rather than refuse it as a replay. A malformed
``index.json`` is refused (FormatError) unless the caller asks to replace it
(``replace_malformed``); its replacement lists every filter in the bucket, with a sequence
above both the Unix time and the one the broken index shows, if any.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY, signature_key_of
from bloomswarm.common.document_fields import MAX_INT
from bloomswarm.common.errors import (
    BloomswarmError,
    FormatError,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
)
from bloomswarm.common.filter_index import (
    INLINE_TORRENT_MAX,
    FilterIndex,
    IndexEntry,
    read_index_unverified,
    seal_index,
)
from bloomswarm.common.filter_names import FILTERS_PREFIX, check_filter_name, filter_prefix
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.pointer import read_pointer_unverified
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signing import SigningKey
from bloomswarm.common.storage import ObjectStore

from .latest import recovery_sequence

log = logging.getLogger("bloomswarm.filter_index")

MAX_INDEX_ATTEMPTS = 64
"""Compare-and-swap rounds before giving up. Many publishers of different filters may
race for index.json (each lost round means another one won), so this is higher than
:data:`~.latest.MAX_SWAP_ATTEMPTS`."""
BACKOFF_BASE_S = 0.01
"""First retry waits up to this long; each further lost round doubles the bound..."""
BACKOFF_CAP_S = 2.0
"""...up to this. The wait is drawn uniformly below the bound (full jitter)."""
READ_WORKERS = 16
"""Filters whose entries are read at once (each entry is four or five small GETs: a
hundred filters published together are synced in a few round trips, not five hundred)."""
ENTRY_READ_ATTEMPTS = 3
"""Tries to read one filter's entry while its latest.json keeps moving under the reader."""


def backoff_s(attempt: int, rng: Callable[[float, float], float] = random.uniform) -> float:
    """Seconds to wait after losing round ``attempt`` (1, 2, ...): full jitter below
    ``min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**(attempt - 1))``."""
    return rng(0.0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(attempt - 1, 16)))


def filter_names_in(root_store: ObjectStore) -> list[str]:
    """The names NAME of every ``filters/NAME/latest.json`` in the store, sorted. Keys
    under ``filters/`` whose NAME is not a valid filter name are logged and left out."""
    names: list[str] = []
    start = f"{FILTERS_PREFIX}/"
    for key in root_store.list(start):
        name, sep, rest = key[len(start):].partition("/")
        if sep and rest == LATEST_KEY:
            try:
                names.append(check_filter_name(name))
            except ValueError as exc:
                log.warning("index: ignoring %s: %s", key, exc)
    return sorted(names)


def read_entry(root_store: ObjectStore, name: str) -> IndexEntry | None:
    """Filter ``name``'s current entry from its folder; None when it has no latest.json.

    FormatError when its latest.json or manifest is malformed; StorageError as the store
    raises it, and when the manifest, signature or torrent stays missing while
    latest.json keeps moving (retention deleted a version under the reader).
    """
    store = PrefixedStore(root_store, filter_prefix(name))
    for attempt in range(1, ENTRY_READ_ATTEMPTS + 1):
        try:
            latest = store.get(LATEST_KEY)
        except ObjectNotFound:
            return None
        assert latest is not None  # no if_none_match given
        pointer = read_pointer_unverified(latest.data)
        try:
            manifest = store.get(pointer.manifest_key)
            signature = store.get(signature_key_of(pointer.manifest_key))
            assert manifest is not None and signature is not None
            torrent_key = Manifest.from_bytes(manifest.data).torrent_key
            torrent = None
            if store.head(torrent_key).size <= INLINE_TORRENT_MAX:
                stored = store.get(torrent_key)
                assert stored is not None
                torrent = stored.data
        except ObjectNotFound as exc:
            if attempt == ENTRY_READ_ATTEMPTS:
                raise StorageError(f"filter {name!r}: latest.json names v{pointer.version}, "
                                   f"but its objects are missing: {exc}") from exc
            log.info("index: filter %r: v%d's objects went missing; reading latest.json again",
                     name, pointer.version)
            continue
        return IndexEntry(pointer=latest.data, manifest=manifest.data,
                          manifest_signature=signature.data, torrent=torrent)
    raise AssertionError("unreachable")  # pragma: no cover


def _sequence(entry: IndexEntry) -> int:
    """The sequence of an entry's pointer; 0 for one that no longer parses (replaced by
    any readable entry)."""
    try:
        return read_pointer_unverified(entry.pointer).sequence
    except FormatError:
        return 0


def merge_entries(
    current: FilterIndex | None, fresh: Mapping[str, IndexEntry]
) -> dict[str, IndexEntry] | None:
    """The index's entries with ``fresh`` merged in; None when nothing would change.

    An entry replaces the current one for its name only when its pointer's sequence is
    greater (monotonic: racing writers never regress an entry).
    """
    merged = dict(current.filters) if current is not None else {}
    changed = False
    for name, entry in fresh.items():
        old = merged.get(name)
        if old is None or _sequence(entry) > _sequence(old):
            merged[name] = entry
            changed = True
    return merged if changed else None


REPLACE_MALFORMED_HINT = ("`bloomswarm index sync --replace-malformed` rebuilds it from every "
                          "filter's latest.json")
"""How a malformed ``index.json`` is replaced, as its FormatError says."""


def _read_index(root_store: ObjectStore) -> tuple[bytes | None, str | None]:
    """The current index's bytes and ETag; (None, None) when absent."""
    try:
        stored = root_store.get(INDEX_KEY)
    except ObjectNotFound:
        if not root_store.exists(INDEX_KEY):  # a missing bucket raises here
            return None, None
        raise
    assert stored is not None
    return stored.data, stored.etag


def _shown_sequence(data: bytes) -> int:
    """The ``sequence`` a malformed index still shows (``{"index": {"sequence": N}}``), 0
    when it shows none or none a valid index could carry: the replacement's must be above
    it."""
    try:
        value = json.loads(data)["index"]["sequence"]
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        return 0
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 < value < MAX_INT
    return value if valid else 0  # beyond MAX_INT no agent accepted it: no bound to keep above


def _read_entries(
    root_store: ObjectStore, names: list[str], failed: dict[str, str] | None
) -> dict[str, IndexEntry]:
    """The entries of the filters ``names`` that have ``latest.json`` (read in parallel).

    A filter whose entry cannot be read (FormatError, StorageError) raises, the first in
    name order, when ``failed`` is None; otherwise it is logged, recorded in ``failed``
    (name -> why) and left out."""
    def read(name: str) -> IndexEntry | BloomswarmError | None:
        try:
            return read_entry(root_store, name)
        except (FormatError, StorageError) as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(READ_WORKERS, len(names)))) as pool:
        entries = list(pool.map(read, names))
    fresh: dict[str, IndexEntry] = {}
    for name, found in zip(names, entries, strict=True):
        if isinstance(found, BloomswarmError):
            if failed is None:
                raise found
            log.warning("index: filter %r left as the index has it: %s", name, found)
            failed[name] = str(found)
        elif found is None:
            log.info("index: filter %r has no latest.json yet; skipped", name)
        else:
            fresh[name] = found
    return fresh


def _new_index_sequence(root_store: ObjectStore, fresh: Mapping[str, IndexEntry], now: float) -> int:
    """The sequence of an ``index.json`` written where there is none, by the rule of
    :func:`~.latest.first_sequence`: 1 for a new bucket's first index (its one filter, at
    its first ``latest.json``); otherwise the Unix time ``now``. A missing index with
    filters that moved before is a recovery (an operator deleted a corrupt one): agents
    saw sequences up to the number of earlier writes, far below the time, and would
    refuse a restart at 1 as a replay."""
    new_bucket = (len(fresh) == 1 and all(_sequence(e) == 1 for e in fresh.values())
                  and filter_names_in(root_store) == list(fresh))
    return 1 if new_bucket else recovery_sequence(now)  # as for version 1, or a later one


def sync_index(
    root_store: ObjectStore,
    names: Iterable[str],
    signing_key: SigningKey,
    publisher_id: str,
    *,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    failed: dict[str, str] | None = None,
    replace_malformed: bool = False,
) -> FilterIndex | None:
    """Bring the entries of filters ``names`` in ``index.json`` up to date (module
    docstring); return the index written, or None when nothing changed.

    A filter without ``filters/NAME/latest.json`` is skipped (logged). ValueError for an
    invalid name; FormatError when index.json is malformed (unless ``replace_malformed``:
    then it is replaced by an index of every filter in the bucket), and when a filter's
    latest.json or manifest is malformed; StorageError after :data:`MAX_INDEX_ATTEMPTS`
    lost races, and as the store raises it.

    With ``failed`` (a dict), a filter whose entry cannot be read (FormatError,
    StorageError) does not stop the others: it is logged and recorded there (name -> why),
    and its entry in the index is left as it was; the caller reports it.
    """
    wanted = sorted({check_filter_name(name) for name in names})
    fresh = _read_entries(root_store, wanted, failed)
    if not fresh and not replace_malformed:
        return None
    for attempt in range(1, MAX_INDEX_ATTEMPTS + 1):
        data, etag = _read_index(root_store)
        current: FilterIndex | None = None
        sequence_above = 0  # a malformed index being replaced: the sequence it shows
        if data is not None:
            try:
                current = read_index_unverified(data)
            except FormatError as exc:
                if not replace_malformed:
                    raise FormatError(f"{INDEX_KEY} is malformed ({exc}): {REPLACE_MALFORMED_HINT}") from exc
                log.warning("index: %s is malformed (%s); replacing it with an index of every filter",
                            INDEX_KEY, exc)
                sequence_above = _shown_sequence(data)
                others = [n for n in filter_names_in(root_store)
                          if n not in fresh and (failed is None or n not in failed)]
                fresh.update(_read_entries(root_store, others, failed))
        if not fresh:
            return None
        merged = merge_entries(current, fresh)
        if merged is None:
            log.info("index: %s already up to date", INDEX_KEY)
            return None
        carried = {n: bad for n, bad in (current.unreadable if current is not None else {}).items()
                   if n not in merged}
        for name, bad in carried.items():
            log.warning("index: entry %r does not parse (%s); carried over unchanged", name, bad.problem)
        if current is not None:
            sequence = current.sequence + 1
        elif data is not None:  # replacing a malformed index: never a new bucket's first
            sequence = max(recovery_sequence(now()), sequence_above + 1)
        else:
            sequence = _new_index_sequence(root_store, fresh, now())
        index = FilterIndex(
            sequence=sequence,
            issued_at=int(now()),
            publisher_id=publisher_id,
            filters=merged,
            unreadable=carried,
            extra=current.extra if current is not None else {},  # a newer writer's fields
        )
        signed = seal_index(index, signing_key)
        try:
            if etag is None:
                root_store.put(INDEX_KEY, signed, if_none_match_any=True, content_type="application/json")
            else:
                root_store.put(INDEX_KEY, signed, if_match=etag, content_type="application/json")
        except (PreconditionFailed, ObjectNotFound):  # moved or deleted meanwhile
            delay = backoff_s(attempt)
            log.info("index: %s changed while writing it (round %d); reading it again in %.2fs",
                     INDEX_KEY, attempt, delay)
            sleep(delay)
            continue
        for name, entry in fresh.items():
            if merged[name] is entry:
                pointer = read_pointer_unverified(entry.pointer)
                log.info("index: filter %r -> v%d (sequence %d)", name, pointer.version, pointer.sequence)
        log.info("index: %s sequence %d, %d filters", INDEX_KEY, index.sequence, len(merged))
        return index
    raise StorageError(
        f"could not update {INDEX_KEY}: other writers moved it {MAX_INDEX_ATTEMPTS} times in a row"
    )


__all__ = [
    "MAX_INDEX_ATTEMPTS",
    "REPLACE_MALFORMED_HINT",
    "filter_names_in",
    "merge_entries",
    "read_entry",
    "sync_index",
]
