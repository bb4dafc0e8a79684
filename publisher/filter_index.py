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
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY, signature_key_of
from bloomswarm.common.errors import FormatError, ObjectNotFound, PreconditionFailed, StorageError
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


def _read_index(root_store: ObjectStore) -> tuple[FilterIndex | None, str | None]:
    """The current index (signature not checked) and its ETag; (None, None) when absent."""
    try:
        stored = root_store.get(INDEX_KEY)
    except ObjectNotFound:
        if not root_store.exists(INDEX_KEY):  # a missing bucket raises here
            return None, None
        raise
    assert stored is not None
    return read_index_unverified(stored.data), stored.etag


def sync_index(
    root_store: ObjectStore,
    names: Iterable[str],
    signing_key: SigningKey,
    publisher_id: str,
    *,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> FilterIndex | None:
    """Bring the entries of filters ``names`` in ``index.json`` up to date (module
    docstring); return the index written, or None when nothing changed.

    A filter without ``filters/NAME/latest.json`` is skipped (logged). ValueError for an
    invalid name; FormatError when index.json, or a filter's latest.json or manifest, is
    malformed; StorageError after :data:`MAX_INDEX_ATTEMPTS` lost races, and as the store
    raises it.
    """
    wanted = sorted({check_filter_name(name) for name in names})
    fresh: dict[str, IndexEntry] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(READ_WORKERS, len(wanted)))) as pool:
        entries = list(pool.map(lambda name: read_entry(root_store, name), wanted))
    for name, found in zip(wanted, entries, strict=True):
        if found is None:
            log.info("index: filter %r has no latest.json yet; skipped", name)
            continue
        fresh[name] = found
    if not fresh:
        return None
    for attempt in range(1, MAX_INDEX_ATTEMPTS + 1):
        current, etag = _read_index(root_store)
        merged = merge_entries(current, fresh)
        if merged is None:
            log.info("index: %s already up to date", INDEX_KEY)
            return None
        carried = {n: bad for n, bad in (current.unreadable if current is not None else {}).items()
                   if n not in merged}
        for name, bad in carried.items():
            log.warning("index: entry %r does not parse (%s); carried over unchanged", name, bad.problem)
        index = FilterIndex(
            sequence=current.sequence + 1 if current is not None else 1,
            issued_at=int(now()),
            publisher_id=publisher_id,
            filters=merged,
            unreadable=carried,
        )
        data = seal_index(index, signing_key)
        try:
            if etag is None:
                root_store.put(INDEX_KEY, data, if_none_match_any=True, content_type="application/json")
            else:
                root_store.put(INDEX_KEY, data, if_match=etag, content_type="application/json")
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
    "filter_names_in",
    "merge_entries",
    "read_entry",
    "sync_index",
]
