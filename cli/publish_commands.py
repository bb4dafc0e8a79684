"""Subcommands that publish and manage versions in the bucket: ``publish``, ``keygen``,
``pin``, ``unpin``, ``refresh``, ``versions`` and ``tracker-sync``.

``--filter NAME`` (publish, pin, unpin, refresh, versions) works on the named filter
``filters/NAME/`` of a many-filter bucket, then updates ``index.json``
(:mod:`.index_commands`).

Settings come from ``--config FILE`` (or ``$BLOOMSWARM_CONFIG``), ``BLOOMSWARM_*``
variables and the flags here, in that order of precedence (see
:mod:`bloomswarm.publisher.config`).

The publisher's modules (boto3, libtorrent, cryptography) are imported by the handlers
when they run: parsing a command line, or printing its ``--help``, loads none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from bloomswarm.common.errors import (
    BloomswarmError,
    ConfigError,
    FormatError,
    ObjectNotFound,
    VerificationError,
)

from .arguments import fpp_value, layout_value, pid_value, positive_int, seed_value, version_value
from .commands import HELP
from .filter_commands import _add_key_options, add_build_engine_options, format_unix_time
from .signals import sigterm_interrupts

if TYPE_CHECKING:
    from bloomswarm.common.manifest import Manifest
    from bloomswarm.common.pointer import Pointer
    from bloomswarm.common.signing import SigningKey, VerifyKey
    from bloomswarm.common.storage import ObjectStore, S3ObjectStore
    from bloomswarm.publisher.config import PublisherConfig
    from bloomswarm.publisher.publish import PublishResult
    from bloomswarm.publisher.versions import LatestPointer, VersionFolder

CONFIG_ENV = "BLOOMSWARM_CONFIG"

log = logging.getLogger("bloomswarm.cli")


def register(commands: Any) -> None:
    """Add the publishing subcommands to the ``commands`` subparsers object."""
    from .index_commands import add_filter_option

    publish = commands.add_parser("publish", help=HELP["publish"])
    publish.add_argument("inputs", nargs="*", metavar="INPUT",
                         help="files, directories or globs of keys (default with --watch: DIR)")
    _add_store_options(publish)
    _add_signing_key_option(publish)
    publish.add_argument("--force", action="store_true",
                         help="publish even when the filter equals the latest version")
    publish.add_argument("--allow-empty", action="store_true",
                         help="publish even when the input holds no keys (an empty filter answers "
                              "no to every key)")
    publish.add_argument("--watch", type=Path, metavar="DIR",
                         help="keep running and publish again after DIR changes (debounced)")
    publish.add_argument("--refresh", action="store_true",
                         help="when this run does not move latest.json (unchanged data, a pin), re-sign "
                              "it unchanged as `bloomswarm refresh` does (agents' watch.max_pointer_age_s)")
    publish.add_argument("--no-index", action="store_true",
                         help="with --filter: leave index.json alone (a job publishing many filters "
                              "then moves it once with `bloomswarm index sync`)")
    publish.add_argument("--keep", type=positive_int, metavar="K", dest="keep_versions",
                         help="versions retention keeps (default 5)")
    _add_key_options(publish)
    publish.set_defaults(key_type=None)  # None: the configured key type
    publish.add_argument("--csv-column", metavar="NAME", help="read keys from this CSV column")
    publish.add_argument("--parquet-column", metavar="NAME",
                         help="read keys from this Parquet column (pyarrow extra)")
    publish.add_argument("--expected-keys", type=positive_int, metavar="N",
                         help="size for N keys (default: count the input first)")
    publish.add_argument("--fpp", type=fpp_value, help="target false-positive rate (0.01)")
    publish.add_argument("--layout", type=layout_value, help="blocked (default) or standard")
    publish.add_argument("--seed", type=seed_value, help="hash seed, 0..2**32-1")
    publish.add_argument("--torrent-format", choices=("v1", "hybrid"),
                         help="v1 (default: every BitTorrent client reads it) or hybrid v1+v2")
    add_build_engine_options(publish)
    add_filter_option(publish)
    publish.set_defaults(handler=run_publish)

    keygen = commands.add_parser("keygen", help=HELP["keygen"])
    keygen.add_argument("private_key", type=Path, metavar="PRIVATE_KEY",
                        help="private key file to write (mode 0600)")
    keygen.add_argument("--public", type=Path, metavar="PUBLIC_KEY",
                        help="public key file to write (default: PRIVATE_KEY with suffix .pub)")
    keygen.set_defaults(handler=run_keygen)

    pin_parser = commands.add_parser("pin", help=HELP["pin"])
    pin_parser.add_argument("version", type=version_value, metavar="VERSION")
    _add_store_options(pin_parser)
    _add_signing_key_option(pin_parser)
    add_filter_option(pin_parser)
    pin_parser.set_defaults(handler=run_pin)

    unpin_parser = commands.add_parser("unpin", help=HELP["unpin"])
    _add_store_options(unpin_parser)
    _add_signing_key_option(unpin_parser)
    add_filter_option(unpin_parser)
    unpin_parser.set_defaults(handler=run_unpin)

    refresh_parser = commands.add_parser("refresh", help=HELP["refresh"])
    _add_store_options(refresh_parser)
    _add_signing_key_option(refresh_parser)
    add_filter_option(refresh_parser)
    refresh_parser.set_defaults(handler=run_refresh)

    versions = commands.add_parser("versions", help=HELP["versions"])
    _add_store_options(versions)
    add_filter_option(versions)
    versions.set_defaults(handler=run_versions)

    sync = commands.add_parser("tracker-sync", help=HELP["tracker-sync"])
    _add_store_options(sync)
    sync.add_argument("--whitelist", type=Path, metavar="PATH", help="whitelist file to keep")
    pid = sync.add_mutually_exclusive_group()
    pid.add_argument("--pid-file", type=Path, metavar="PATH", help="file with the tracker's PID")
    pid.add_argument("--tracker-pid", type=pid_value, metavar="PID", help="the tracker's PID")
    sync.add_argument("--public-key", type=Path, action="append", default=[], metavar="PATH",
                      help="leave out versions not signed by these keys (repeatable)")
    sync.add_argument("--allow-empty", action="store_true",
                      help="write an empty whitelist when the bucket has no versions or none "
                           "verifies (refused by default: the tracker would refuse every version)")
    sync.add_argument("--watch", action="store_true", help="keep syncing every --interval seconds")
    sync.add_argument("--interval", type=float, metavar="SECONDS", help="seconds between syncs (30)")
    sync.set_defaults(handler=run_tracker_sync)


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help=f"TOML configuration file (default: ${CONFIG_ENV})")
    parser.add_argument("--bucket", help="S3 bucket")
    parser.add_argument("--prefix", help="key prefix inside the bucket")
    parser.add_argument("--endpoint-url", metavar="URL", help="S3-compatible endpoint (MinIO, ...)")
    parser.add_argument("--region", help="S3 region")
    parser.add_argument("--publisher-id", metavar="NAME", help="recorded in manifests (host name)")


def _add_signing_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", type=Path, dest="signing_key", metavar="PATH",
                        help="Ed25519 private key (PEM) that signs manifests and latest.json")


_FLAG_SETTINGS = {
    "bucket": "s3.bucket",
    "prefix": "s3.prefix",
    "endpoint_url": "s3.endpoint_url",
    "region": "s3.region",
    "publisher_id": "publisher_id",
    "signing_key": "signing_key",
    "keep_versions": "keep_versions",
    "key_type": "build.key_type",
    "csv_column": "build.csv_column",
    "parquet_column": "build.parquet_column",
    "expected_keys": "build.expected_keys",
    "fpp": "build.fpp",
    "layout": "build.layout",
    "seed": "build.seed",
    "torrent_format": "torrent_format",
    "whitelist": "tracker.whitelist",
    "pid_file": "tracker.pid_file",
    "interval": "tracker.interval_s",
}
"""Flag destination -> dotted setting it overrides."""


def load_cli_config(args: argparse.Namespace) -> PublisherConfig:
    """The configuration: file (``--config`` or $BLOOMSWARM_CONFIG), environment, flags."""
    from bloomswarm.publisher.config import load_config

    path = args.config or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    overrides = {setting: getattr(args, dest, None) for dest, setting in _FLAG_SETTINGS.items()}
    return load_config(path, environ=os.environ, overrides=overrides)


def _signing_key(config: PublisherConfig) -> SigningKey:
    from bloomswarm.common.signing import load_private_key

    if config.signing_key is None:
        raise ConfigError("no signing key: pass --key, set signing_key or BLOOMSWARM_SIGNING_KEY")
    return load_private_key(config.signing_key)


def _trusted_keys(config: PublisherConfig, signing_key: SigningKey | None) -> list[VerifyKey]:
    from bloomswarm.common.signing import load_public_keys

    keys = [signing_key.public_key()] if signing_key is not None else []
    if config.accepted_public_keys:
        keys += load_public_keys(config.accepted_public_keys)
    return keys


def _filter_config(config: PublisherConfig, args: argparse.Namespace) -> PublisherConfig:
    """``config`` of the filter ``--filter NAME`` names (the bucket's own without it)."""
    if getattr(args, "filter_name", None) is None:
        return config
    from .index_commands import filter_config

    return filter_config(config, args.filter_name)


def _sync_index(config: PublisherConfig, args: argparse.Namespace, signing_key: SigningKey) -> None:
    """With ``--filter NAME``: bring NAME's entry in index.json up to date (``config``: the
    bucket's configuration, not the filter's)."""
    if getattr(args, "filter_name", None) is not None and not getattr(args, "no_index", False):
        from .index_commands import sync_filter

        sync_filter(config, args.filter_name, signing_key)


def _open_store(config: PublisherConfig) -> S3ObjectStore:
    """The bucket's store, after one request proving it is reachable and exists."""
    from bloomswarm.common.bucket_layout import LATEST_KEY
    from bloomswarm.common.storage import S3ObjectStore

    store = S3ObjectStore(config.s3)
    store.exists(LATEST_KEY)
    return store


# --- publish ------------------------------------------------------------------------------


def run_publish(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.build import BuildSpec, build_filter
    from bloomswarm.publisher.fingerprint import source_fingerprint
    from bloomswarm.publisher.publish import publish_filter
    from bloomswarm.publisher.refresh import refresh_latest
    from bloomswarm.publisher.sources import SourceSpec
    from bloomswarm.publisher.versions import newest_manifests
    from bloomswarm.publisher.watch import stop_on_signals, watch_and_publish

    bucket_config = load_cli_config(args)
    config = _filter_config(bucket_config, args)
    signing_key = _signing_key(config)
    inputs = list(args.inputs) or ([str(args.watch)] if args.watch else [])
    if not inputs:
        raise ConfigError("nothing to publish: give INPUT files or --watch DIR")
    if args.engine != "dask" and (args.scheduler or args.workers):
        raise ConfigError("--scheduler and --workers need --engine dask")
    store = _open_store(config)
    build = config.build
    source = SourceSpec(inputs, key_type=build.key_type, csv_column=build.csv_column,
                        parquet_column=build.parquet_column)
    spec = BuildSpec(target_fpp=build.fpp, layout=build.layout, hash_seed=build.seed,
                     expected_keys=build.expected_keys, engine=args.engine,
                     scheduler=args.scheduler, workers=args.workers or None,
                     progress=not args.quiet)

    def refresh() -> None:
        pointer = refresh_latest(store, signing_key, _trusted_keys(config, signing_key), config.publisher_id)
        print(_refreshed(pointer), flush=True)

    def publish_once() -> None:
        newest = newest_manifests(store, 1)
        builder = build_filter(source, dataclasses.replace(
            spec, sizing=config.sizing, previous=newest[0].filter if newest else None))
        if builder.key_count == 0 and not args.allow_empty:
            raise ConfigError(f"the input holds no keys ({', '.join(inputs)}): not publishing an empty "
                              "filter to the fleet (--allow-empty does)")
        result = publish_filter(store, config, builder, signing_key, source_fingerprint(source),
                                force=args.force, progress=not args.quiet)
        manifest = result.manifest
        if result.status == "unchanged":
            print(f"unchanged: the filter equals v{result.version}, the version latest.json "
                  "names; nothing published (--force publishes anyway)", flush=True)
            if args.refresh:
                refresh()
            _sync_index(bucket_config, args, signing_key)
            return
        print(f"published v{result.version}: {config.s3.url}/{manifest.filter_key}, "
              f"{manifest.size:,} bytes, {manifest.filter.key_count:,} keys, "
              f"{manifest.torrent_format} torrent, info-hash v1 {manifest.info_hash_v1}"
              + (f" v2 {manifest.info_hash_v2}" if manifest.info_hash_v2 else ""), flush=True)
        print(_sizing_line(result), flush=True)
        if result.latest_moved:
            print(f"latest.json -> v{result.version}", flush=True)
        elif result.pinned_at is not None:
            print(f"the fleet is pinned at v{result.pinned_at}: latest.json not moved "
                  "(bloomswarm unpin releases it)", flush=True)
        elif result.latest is not None:
            print(f"latest.json already names v{result.latest.version}: left alone", flush=True)
        if args.refresh and not result.latest_moved:
            refresh()
        # Retention of the filter's own versions does not depend on index.json: a failed
        # index sync (a malformed index.json, say) must not stop it, or every retry of the
        # publish would leave one more version behind. Its error comes after retention.
        index_error: BloomswarmError | OSError | None = None
        try:
            _sync_index(bucket_config, args, signing_key)
        except (BloomswarmError, OSError) as exc:
            index_error = exc
        _retention(store, config)
        if index_error is not None:
            raise index_error

    if args.watch:  # SIGINT/SIGTERM: stop; a publish under way is interrupted (watch.py)
        with stop_on_signals() as stop:
            watch_and_publish(args.watch, publish_once, stop, debounce_s=config.watch_debounce_s)
        return 0
    with sigterm_interrupts():
        publish_once()
    return 0


def _retention(store: ObjectStore, config: PublisherConfig) -> None:
    """Retention after a publish, with one line when it deleted or aborted anything; its
    failure is only logged (the version is out; the next publish retries it)."""
    from bloomswarm.publisher.retention import apply_retention

    try:
        plan = apply_retention(store, config.keep_versions, config.orphan_grace_s)
    except BloomswarmError as exc:
        log.warning("retention failed: %s", exc)
        return
    if plan.delete_keys or plan.abort_uploads:
        print(f"retention: deleted {len(plan.delete_keys)} objects "
              f"(versions {_ranges(plan.deleted_versions) or 'none'}), "
              f"aborted {len(plan.abort_uploads)} unfinished uploads", flush=True)


# --- keys, pins, listing --------------------------------------------------------------------


def run_keygen(args: argparse.Namespace) -> int:
    from bloomswarm.common.signing import write_keypair

    private: Path = args.private_key
    public: Path = args.public or private.with_suffix(".pub")
    key_id = write_keypair(private, public)  # refuses existing files, one file named twice
    print(f"wrote private key {private} (mode 0600) and public key {public}, key id {key_id}")
    print("give the public key to every agent before publishing with the private key")
    return 0


def run_pin(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.pinning import pin

    bucket_config = load_cli_config(args)
    config = _filter_config(bucket_config, args)
    signing_key = _signing_key(config)
    store = _open_store(config)
    pointer = pin(store, args.version, signing_key, _trusted_keys(config, signing_key),
                  config.publisher_id)
    print(f"pinned: latest.json -> v{pointer.version} (pinned, sequence {pointer.sequence}); "
          "new versions are published but not rolled out until `bloomswarm unpin`")
    _sync_index(bucket_config, args, signing_key)
    return 0


def run_unpin(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.pinning import unpin

    bucket_config = load_cli_config(args)
    config = _filter_config(bucket_config, args)
    signing_key = _signing_key(config)
    store = _open_store(config)
    public_keys = _trusted_keys(config, signing_key)
    pointer = unpin(store, signing_key, public_keys, config.publisher_id)
    if pointer is None:
        print(_not_unpinned(store, public_keys))
    else:
        print(f"unpinned: latest.json -> v{pointer.version} (sequence {pointer.sequence})")
    _sync_index(bucket_config, args, signing_key)
    return 0


def _not_unpinned(store: ObjectStore, public_keys: list[VerifyKey]) -> str:
    """What ``unpin`` printing "not pinned" found: the version latest.json names, and why
    it was left there (the newest version, or newer than every version that checks out)."""
    from bloomswarm.publisher.pinning import check_version, newest_valid_version
    from bloomswarm.publisher.versions import read_latest

    current = read_latest(store)
    if current is None:  # deleted since: the next unpin writes it
        return "not pinned: latest.json was deleted meanwhile (run unpin again to write it)"
    named = current.pointer.version
    try:
        check_version(store, named, public_keys)
    except (ConfigError, FormatError, VerificationError) as exc:
        problem = exc
    else:
        return f"not pinned: latest.json already names v{named}, the newest version"
    # quiet: unpin has just logged the versions it skipped
    newest = newest_valid_version(store, public_keys, below=named, quiet=True)
    older = (f"the newest version that does is v{newest} (`bloomswarm pin {newest}` moves the "
             "fleet there)" if newest is not None else "no older version does either")
    return (f"not pinned: latest.json names v{named}, left there although it does not check out "
            f"({problem}): unpin never moves latest.json back; {older}")


def run_refresh(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.refresh import refresh_latest

    bucket_config = load_cli_config(args)
    config = _filter_config(bucket_config, args)
    signing_key = _signing_key(config)
    store = _open_store(config)
    pointer = refresh_latest(store, signing_key, _trusted_keys(config, signing_key), config.publisher_id)
    print(_refreshed(pointer))
    _sync_index(bucket_config, args, signing_key)
    return 0


def _sizing_line(result: PublishResult) -> str:
    """Whether the version kept the previous parameters (and which deltas it lists)."""
    if result.sizing == "resized":
        return ("sizing: resized (new filter parameters or no earlier version): a version "
                "without deltas")
    deltas = ", ".join(f"v{d.base_version} ({d.size:,} bytes)" for d in result.manifest.deltas)
    return (f"sizing: kept the parameters of v{result.previous}; "
            + (f"deltas from {deltas}" if deltas else "no deltas (none made or all too large)"))


def _refreshed(pointer: Pointer) -> str:
    issued = dt.datetime.fromtimestamp(pointer.issued_at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"refreshed: latest.json -> v{pointer.version}{' (pinned)' if pointer.pinned else ''}, "
            f"sequence {pointer.sequence}, issued {issued}")


def run_versions(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.versions import read_latest, scan_versions

    config = _filter_config(load_cli_config(args), args)
    store = _open_store(config)
    unreadable: FormatError | None = None
    try:
        latest = read_latest(store)
    except FormatError as exc:  # list the versions all the same, then say so
        latest, unreadable = None, exc
    folders = scan_versions(store)
    if not folders:
        print(f"no versions in {config.s3.url}")
    else:
        _print_versions(store, folders, latest)
    if unreadable is not None:
        raise FormatError(f"latest.json is unreadable: {unreadable} (versions listed without it; "
                          "to replace it, delete it, then publish or pin)")
    return 0


def _print_versions(
    store: ObjectStore, folders: dict[int, VersionFolder], latest: LatestPointer | None
) -> None:
    """The table of ``versions``: newest first, ``latest`` marked. A version whose
    manifest and signature exist but whose filter file or torrent does not (deleted by
    hand, a lifecycle rule) shows as incomplete, with what is missing: agents cannot
    fetch it. The check uses the listing ``folders`` came from (no extra request)."""
    from bloomswarm.publisher.versions import missing_objects, read_manifest

    print(f"{'VERSION':>7}  {'STATE':<20} {'SIZE':>15}  {'CREATED (UTC)':<19}  {'KEYS':<13}  DELTAS FROM")
    for version in sorted(folders, reverse=True):
        folder = folders[version]
        state = "complete" if folder.complete else "claimed, unsigned" if folder.claimed \
            else "unfinished upload"
        is_latest = latest is not None and latest.pointer.version == version
        if latest is not None and is_latest:
            state = "latest, pinned" if latest.pointer.pinned else "latest"
        size = created = keys = deltas = ""
        if folder.claimed:
            try:
                manifest = read_manifest(store, version)
            except (FormatError, ObjectNotFound) as exc:
                state = f"unreadable manifest: {exc}"[:60]
            else:
                missing = missing_objects(store, folder, manifest) if folder.complete else []
                if missing:
                    state = (f"{state + ', ' if is_latest else ''}incomplete: "
                             f"{' and '.join(missing)} missing")
                size = f"{manifest.size:,}"
                created = _created_column(manifest.created_at)
                keys = f"{manifest.filter.key_count:,}"
                deltas = _deltas_column(manifest)
        print(f"{version:>7}  {state:<20} {size:>15}  {created:<19}  {keys:<13}  {deltas}".rstrip())


def _created_column(created_at: int) -> str:
    """"2026-11-25 07:53:16" (UTC); a time datetime cannot show (past year 9999, before
    year 1) as :func:`~.filter_commands.format_unix_time` shows it, "out of range (N s
    since the epoch)", so that one odd manifest does not stop the listing."""
    shown = format_unix_time(created_at)  # ISO 8601: "2026-11-25T07:53:16+00:00"
    return shown if shown.startswith("out of range") else shown[:19].replace("T", " ")


def _deltas_column(manifest: Manifest) -> str:
    """"v41 (612,000), v40 (1,030,000)": each delta's base version and size in bytes."""
    return ", ".join(f"v{d.base_version} ({d.size:,})" for d in manifest.deltas)


# --- tracker whitelist ----------------------------------------------------------------------


def run_tracker_sync(args: argparse.Namespace) -> int:
    from bloomswarm.common.signing import load_public_keys
    from bloomswarm.publisher.tracker_sync import check_whitelist_path, read_pid_file, sync_whitelist

    config = load_cli_config(args)
    if config.tracker.whitelist is None:
        raise ConfigError("no whitelist file: pass --whitelist or set tracker.whitelist")
    whitelist = config.tracker.whitelist
    check_whitelist_path(whitelist)  # a FIFO or a device: refused before the bucket is read
    store = _open_store(config)
    # The publisher's own key too, when configured: during a key rotation the new versions
    # are signed by it while accepted_public_keys still names the old one.
    keys = _trusted_keys(config, _signing_key(config) if config.signing_key is not None else None)
    if args.public_key:
        keys += load_public_keys(args.public_key)

    def sync_once() -> None:
        pid = args.tracker_pid
        if pid is None and config.tracker.pid_file is not None:
            pid = read_pid_file(config.tracker.pid_file)
        result = sync_whitelist(store, whitelist, public_keys=keys, tracker_pid=pid,
                                allow_empty=args.allow_empty)
        versions = _ranges(result.versions) or "none"
        versions += "".join(f"; filter {name} {_ranges(list(numbers))}"
                            for name, numbers in result.filter_versions.items())
        if not result.changed:
            print(f"whitelist {whitelist} up to date (versions {versions})", flush=True)
            return
        reloaded = f", sent SIGHUP to {result.signalled_pid}" if result.signalled_pid else ""
        print(f"wrote {whitelist}: {len(result.hashes)} hashes for versions {versions}{reloaded}",
              flush=True)

    sync_once()
    if args.watch:
        with _stop_on_signals() as stop:
            while not stop.wait(config.tracker.interval_s):
                try:
                    sync_once()
                except BloomswarmError as exc:  # keep the tracker's last whitelist; retry
                    log.error("tracker-sync failed: %s", exc)
    return 0


# --- helpers --------------------------------------------------------------------------------


def _ranges(versions: tuple[int, ...] | list[int]) -> str:
    """"1-3, 7" for [1, 2, 3, 7]."""
    parts: list[str] = []
    for n in sorted(versions):
        if parts and parts[-1].split("-")[-1] == str(n - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{n}"
        else:
            parts.append(str(n))
    return ", ".join(parts)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set on SIGINT or SIGTERM, for loops that should end cleanly."""
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


