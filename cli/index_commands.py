"""``bloomswarm index sync`` and ``bloomswarm index show``: the signed index of a bucket's
named filters (``index.json``, docs/publishing.md "Many filters"), and the ``--filter NAME``
option that ``publish``, ``pin``, ``unpin``, ``refresh`` and ``versions`` share.

With ``--filter NAME`` a command works on ``filters/NAME/`` under the configured prefix
exactly as it works on a single-filter bucket, then brings NAME's entry in
``index.json`` up to date (:func:`sync_filter`). ``index sync`` does that for the named
filters, or every filter in the bucket; ``index show`` prints the verified index.

Heavy modules (boto3, cryptography) are imported by the handlers when they run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bloomswarm.common.errors import (
    BloomswarmError,
    ConfigError,
    FormatError,
    ObjectNotFound,
    VerificationError,
)
from bloomswarm.common.filter_names import check_filter_name, filter_prefix

from .commands import HELP
from .publish_commands import (
    _add_signing_key_option,
    _add_store_options,
    _open_store,
    _signing_key,
    _trusted_keys,
    load_cli_config,
)

if TYPE_CHECKING:
    from bloomswarm.common.filter_index import FilterIndex
    from bloomswarm.common.signing import SigningKey, VerifyKey
    from bloomswarm.common.storage import ObjectStore
    from bloomswarm.publisher.config import PublisherConfig


def filter_name_value(text: str) -> str:
    """An argument type: a valid filter name (:func:`check_filter_name`)."""
    try:
        return check_filter_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_filter_option(parser: argparse.ArgumentParser) -> None:
    """``--filter NAME``: work on the named filter ``filters/NAME/`` of a many-filter bucket."""
    parser.add_argument("--filter", type=filter_name_value, metavar="NAME", dest="filter_name",
                        help="the named filter filters/NAME/ of a many-filter bucket (index.json "
                             "is updated after latest.json moves)")


def filter_config(config: PublisherConfig, name: str) -> PublisherConfig:
    """The configuration of filter ``name``: the same bucket with ``filters/NAME`` joined to
    the prefix (and to ``public_base_url``), its own delta cache folder."""
    folder = filter_prefix(name)
    s3 = config.s3
    prefix = f"{s3.prefix}/{folder}" if s3.prefix else folder
    base_url = f"{s3.public_base_url.rstrip('/')}/{folder}" if s3.public_base_url else None
    deltas = config.deltas
    if deltas.cache_dir is not None:
        deltas = dataclasses.replace(deltas, cache_dir=deltas.cache_dir / folder)
    return dataclasses.replace(
        config, s3=dataclasses.replace(s3, prefix=prefix, public_base_url=base_url), deltas=deltas)


def sync_filter(config: PublisherConfig, name: str, signing_key: SigningKey) -> None:
    """Bring filter ``name``'s entry in ``index.json`` up to date and print one line.
    ``config`` is the bucket's (not the filter's) configuration."""
    from bloomswarm.common.storage import S3ObjectStore
    from bloomswarm.publisher.filter_index import sync_index

    index = sync_index(S3ObjectStore(config.s3), [name], signing_key, config.publisher_id)
    if index is None:
        print(f"index.json already lists filter {name}'s latest.json", flush=True)
    else:
        print(f"index.json -> sequence {index.sequence} ({len(index.filters)} filters), "
              f"filter {name} updated", flush=True)


def register(commands: Any) -> None:
    """Add ``index sync`` and ``index show`` to the ``commands`` subparsers object."""
    index = commands.add_parser("index", help=HELP["index"])
    sub = index.add_subparsers(dest="index_command", metavar="ACTION", parser_class=type(index))
    sub.required = True

    sync = sub.add_parser("sync", help="bring index.json up to date with the filters' latest.json")
    _add_store_options(sync)
    _add_signing_key_option(sync)
    sync.add_argument("--filter", type=filter_name_value, action="append", default=[],
                      metavar="NAME", dest="filter_names",
                      help="sync this filter (repeatable; default: every filters/NAME/latest.json)")
    sync.add_argument("--replace-malformed", action="store_true",
                      help="when index.json is malformed, replace it with an index of every filter "
                           "(refused by default)")
    sync.set_defaults(handler=run_sync)

    show = sub.add_parser("show", help="print the verified index.json")
    _add_store_options(show)
    _add_signing_key_option(show)
    show.add_argument("--public-key", type=Path, action="append", default=[], metavar="PATH",
                      help="also trust this publisher public key (repeatable)")
    show.add_argument("--json", action="store_true", help="print the index as JSON")
    show.set_defaults(handler=run_show)


def run_sync(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.filter_index import filter_names_in, sync_index

    config = load_cli_config(args)
    signing_key = _signing_key(config)
    store = _open_store(config)
    names: list[str] = args.filter_names or filter_names_in(store)
    if not names:
        print(f"no filters in {config.s3.url}/filters/: nothing to index")
        return 0
    failed: dict[str, str] = {}
    index = sync_index(store, names, signing_key, config.publisher_id, failed=failed,
                       replace_malformed=args.replace_malformed)
    synced = [name for name in names if name not in failed]
    if index is None:
        if synced:
            print(f"index.json up to date ({', '.join(synced)}; a filter without latest.json is skipped)")
    else:
        print(f"index.json -> sequence {index.sequence}, {len(index.filters)} filters "
              f"({', '.join(index.filters)})")
    if failed:
        left = ", ".join(sorted(failed))
        first = min(failed)
        raise BloomswarmError(f"index.json: {len(failed)} filter(s) left as they were, their entry "
                              f"unreadable: {left} ({first}: {failed[first]})")
    return 0


def _show_keys(config: PublisherConfig, extra: list[Path]) -> list[VerifyKey]:
    """The signing key's public key (when configured), accepted keys and ``--public-key``."""
    from bloomswarm.common.signing import load_public_keys

    signing_key = _signing_key(config) if config.signing_key is not None else None
    keys = _trusted_keys(config, signing_key)
    if extra:
        keys += load_public_keys(extra)
    if not keys:
        raise ConfigError("no key to verify index.json with: pass --public-key or --key")
    return keys


def _read_verified(store: ObjectStore, keys: list[VerifyKey]) -> FilterIndex | None:
    from bloomswarm.common.bucket_layout import INDEX_KEY
    from bloomswarm.common.filter_index import open_index

    try:
        stored = store.get(INDEX_KEY)
    except ObjectNotFound:
        return None
    assert stored is not None
    return open_index(stored.data, keys)


def _rows(index: FilterIndex, keys: list[VerifyKey]) -> list[dict[str, Any]]:
    """One row per filter: its verified pointer's fields, or why it did not verify."""
    from bloomswarm.common.pointer import open_pointer

    rows: list[dict[str, Any]] = []
    for name, entry in index.filters.items():
        row: dict[str, Any] = {"name": name, "torrent_inline": entry.torrent is not None}
        try:
            pointer = open_pointer(entry.pointer, keys)
        except (FormatError, VerificationError) as exc:
            row["error"] = str(exc)
        else:
            row.update(version=pointer.version, sequence=pointer.sequence,
                       issued_at=pointer.issued_at, pinned=pointer.pinned)
        rows.append(row)
    return rows


def _utc(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def run_show(args: argparse.Namespace) -> int:
    config = load_cli_config(args)
    keys = _show_keys(config, args.public_key)
    store = _open_store(config)
    index = _read_verified(store, keys)
    if index is None:
        print(f"no index.json in {config.s3.url}")
        return 0
    rows = _rows(index, keys)
    if args.json:
        print(json.dumps({"sequence": index.sequence, "issued_at": index.issued_at,
                          "publisher_id": index.publisher_id, "filters": rows}, indent=2))
        return 0
    print(f"index.json: sequence {index.sequence}, issued {_utc(index.issued_at)} UTC "
          f"by {index.publisher_id}, {len(rows)} filters")
    width = max([len("NAME"), *(len(row["name"]) for row in rows)])
    print(f"{'NAME':<{width}}  {'VERSION':>7}  {'SEQUENCE':>8}  {'ISSUED (UTC)':<19}  NOTE")
    for row in rows:
        if "error" in row:
            print(f"{row['name']:<{width}}  {'':>7}  {'':>8}  {'':<19}  not verified: {row['error']}")
            continue
        note = ", ".join(n for n, on in (("pinned", row["pinned"]),
                                         ("torrent inline", row["torrent_inline"])) if on)
        print(f"{row['name']:<{width}}  {row['version']:>7}  {row['sequence']:>8}  "
              f"{_utc(row['issued_at']):<19}  {note}".rstrip())
    return 0
