"""Subcommands that work on filter files: ``build``, ``inspect`` and ``query``.

``inspect`` also reads a delta file's header (told apart by its magic), through
:mod:`.delta_commands`.

The handlers import the reader and the publisher's build code when they run: parsing a
command line, or printing its ``--help``, loads neither.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.params import Layout

from .arguments import count_value, filter_version_value, fpp_value, layout_value, seed_value
from .commands import HELP
from .output_files import check_output

if TYPE_CHECKING:
    from bloomswarm.common.reader import Filter
    from bloomswarm.publisher.source_keys import KeyType


def register(commands: Any) -> None:
    """Add the filter subcommands to the ``commands`` subparsers object."""
    build = commands.add_parser("build", help=HELP["build"])
    build.add_argument("inputs", nargs="+", metavar="INPUT",
                       help="files, directories, globs or s3://bucket/prefix URLs of keys: text "
                            "(plain, gzip or zstd), CSV or Parquet, detected by content; the S3 "
                            "endpoint comes from $BLOOMSWARM_S3_ENDPOINT_URL or the AWS settings")
    build.add_argument("-o", "--output", required=True, type=Path, help="filter file to write")
    _add_key_options(build)
    build.add_argument("--csv-column", metavar="NAME", help="read keys from this CSV column")
    build.add_argument("--parquet-column", metavar="NAME",
                       help="read keys from this Parquet column (default: a file's only column; "
                            "needs bloomswarm[parquet])")
    build.add_argument("--expected-keys", type=count_value, metavar="N",
                       help="size for N keys (default: count the input first)")
    build.add_argument("--fpp", type=fpp_value, default=0.01, help="target false-positive rate (0.01)")
    build.add_argument("--layout", type=layout_value, default=Layout.BLOCKED,
                       help="blocked (default) or standard")
    build.add_argument("--seed", type=seed_value, default=0, help="hash seed, 0..2**32-1")
    build.add_argument("--filter-version", type=filter_version_value, default=0, metavar="N",
                       help="version number stored in the header")
    add_build_engine_options(build)
    build.set_defaults(handler=run_build)

    inspect = commands.add_parser("inspect", help=HELP["inspect"])
    inspect.add_argument("file", type=Path)
    inspect.add_argument("--verify", action="store_true",
                         help="check the body's SHA-256 (a delta: decode its streams)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(handler=run_inspect)

    query = commands.add_parser(
        "query", help=HELP["query"],
        description="Test keys against a filter file. The header is always validated; the "
                    "body is trusted unless --verify checks its SHA-256 (a corrupt body "
                    "gives wrong answers, not an error). The agent verifies every file it "
                    "installs, so a file in its data directory needs no --verify.")
    query.add_argument("file", type=Path)
    query.add_argument("keys", nargs="*", metavar="KEY", help="keys to test (default: read stdin)")
    query.add_argument("--verify", action="store_true",
                       help="check the body's SHA-256 before answering (reads the whole file); "
                            "without it query trusts the file, as a lookup does (the agent "
                            "verifies what it installs)")
    _add_key_options(query)
    query.set_defaults(handler=run_query)


def add_build_engine_options(parser: argparse.ArgumentParser) -> None:
    """``--engine local|dask`` and ``--scheduler``: where the build runs."""
    parser.add_argument("--engine", choices=["local", "dask"], default="local",
                        help="build in this process (default) or on a Dask cluster")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="Dask scheduler address (default: start a LocalCluster)")
    parser.add_argument("--workers", type=count_value, metavar="N",
                        help="worker processes of that LocalCluster (default: one per CPU)")


def _add_key_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key-type", choices=["str", "bytes", "int"], default="str",
                        help="how keys are read: UTF-8 text (default), raw bytes, 64-bit integers")


def run_build(args: argparse.Namespace) -> int:
    from bloomswarm.publisher.build import BuildSpec, build_filter
    from bloomswarm.publisher.sources import SourceSpec

    check_output(args.output, args.inputs)
    if args.engine != "dask" and (args.scheduler or args.workers):
        raise ConfigError("--scheduler and --workers need --engine dask")
    source = SourceSpec(args.inputs, key_type=args.key_type, csv_column=args.csv_column,
                        parquet_column=args.parquet_column)
    spec = BuildSpec(target_fpp=args.fpp, layout=args.layout, hash_seed=args.seed,
                     expected_keys=args.expected_keys, engine=args.engine,
                     scheduler=args.scheduler, workers=args.workers or None,
                     progress=not args.quiet)
    builder = build_filter(source, spec)
    header = builder.write(args.output, version=args.filter_version)
    p = header.params
    print(f"wrote {args.output}: {builder.key_count:,} keys, {p.layout.label} layout, "
          f"{p.num_bits / max(builder.key_count, 1):.2f} bits/key, k={p.num_probes}, "
          f"{header.file_size:,} bytes")
    return 0


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def format_unix_time(seconds: int) -> str:
    """A header's ``created_at`` (signed Unix seconds) as ISO-8601 UTC, for ``inspect``.

    A value datetime cannot represent (outside years 1..9999) is still a valid header
    field: it is shown as ``out of range (N s since the epoch)`` rather than refused.
    """
    try:
        return (_EPOCH + dt.timedelta(seconds=seconds)).isoformat()
    except OverflowError:  # timedelta and datetime raise only this, on any platform
        return f"out of range ({seconds} s since the epoch)"


def describe(f: Filter) -> dict[str, Any]:
    """A filter's header and statistics as a JSON-ready dict."""
    h, p = f.header, f.params
    return {
        "path": str(f.path),
        "filter_version": h.filter_version,
        "layout": p.layout.label,
        "hash": p.hash_id.name.lower(),
        "hash_seed": p.hash_seed,
        "num_probes": p.num_probes,
        "num_bits": p.num_bits,
        "file_size": h.file_size,
        "key_count": h.key_count,
        "capacity": h.capacity,
        "bits_per_key": round(p.num_bits / h.key_count, 3) if h.key_count else None,
        "target_fpp": h.target_fpp,
        "fill_ratio": round(f.fill_ratio(), 6),
        "expected_fpp": f.expected_fpp(),
        "created_at": format_unix_time(h.created_at),
        "body_sha256": h.body_sha256.hex(),
    }


def run_inspect(args: argparse.Namespace) -> int:
    from bloomswarm.common.delta_format import DELTA_MAGIC
    from bloomswarm.common.reader import Filter

    if _starts_with(args.file, DELTA_MAGIC):
        info = _inspect_delta(args.file, verify=args.verify)
    else:
        with Filter.open(args.file, verify=args.verify) as f:
            info = describe(f)
    if args.verify:
        info["verified"] = True
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(map(len, info))
        for name, value in info.items():
            print(f"{name:<{width}}  {value}")
    return 0


def _starts_with(path: Path, magic: bytes) -> bool:
    """Whether ``path`` is a regular file that starts with ``magic``.

    False for anything else, a FIFO included (opened without blocking, never read:
    Filter.open then reports it, as it reports a missing or unreadable file).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, len(magic), 0) == magic
    except OSError:
        return False
    finally:
        os.close(fd)


def _inspect_delta(path: Path, *, verify: bool) -> dict[str, Any]:
    from bloomswarm.common.delta import read_delta_header

    from .delta_commands import describe_delta, verify_delta_streams

    header = read_delta_header(path)
    if verify:
        verify_delta_streams(path, header)
    return describe_delta(path, header)


def run_query(args: argparse.Namespace) -> int:
    from bloomswarm.common.reader import Filter
    from bloomswarm.publisher.source_keys import convert_key

    key_type: KeyType = args.key_type
    if args.keys:
        raw_keys = [k.encode("utf-8", "surrogateescape") for k in args.keys]
    else:
        raw_keys = [line.rstrip(b"\r\n") for line in sys.stdin.buffer if line.strip(b"\r\n")]
    keys = [convert_key(raw, key_type, "argument" if args.keys else "stdin", i + 1)
            for i, raw in enumerate(raw_keys)]
    if not keys:
        raise ConfigError("no keys given (pass them as arguments or on stdin)")
    with Filter.open(args.file, verify=args.verify) as f:
        answers = f.contains_many(keys)
    for raw, present in zip(raw_keys, answers, strict=True):
        print(f"{'present' if present else 'absent'}\t{raw.decode('utf-8', 'backslashreplace')}")
    return 0
