"""Subcommands for delta files: ``diff`` writes one, ``patch`` applies one.

``inspect`` (in :mod:`.filter_commands`) shows a delta's header through :func:`describe_delta`.
The handlers import the delta code when they run: parsing a command line loads none of it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .commands import HELP
from .output_files import check_output

if TYPE_CHECKING:
    from bloomswarm.common.delta_format import DeltaHeader


def register(commands: Any) -> None:
    """Add ``diff`` and ``patch`` to the ``commands`` subparsers object."""
    diff = commands.add_parser("diff", help=HELP["diff"])
    diff.add_argument("old", type=Path, metavar="OLD", help="the base filter file")
    diff.add_argument("new", type=Path, metavar="NEW", help="the target filter file (same parameters)")
    diff.add_argument("-o", "--output", required=True, type=Path, metavar="DELTA", help="delta file to write")
    diff.set_defaults(handler=run_diff)

    patch = commands.add_parser("patch", help=HELP["patch"])
    patch.add_argument("base", type=Path, metavar="BASE", help="the filter file the delta was made from")
    patch.add_argument("delta", type=Path, metavar="DELTA", help="the delta file")
    patch.add_argument("-o", "--output", required=True, type=Path, metavar="NEW", help="filter file to write")
    patch.add_argument("--expected-sha256", type=_sha256_value, metavar="HEX",
                       help="also require this SHA-256 of the result (e.g. from the signed manifest)")
    patch.set_defaults(handler=run_patch)


def _sha256_value(text: str) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) != 32:
        raise argparse.ArgumentTypeError(f"not a SHA-256 (64 hex digits): {text!r}")
    return value


def run_diff(args: argparse.Namespace) -> int:
    from bloomswarm.common.delta import make_delta

    check_output(args.output, [args.old, args.new])
    header = make_delta(args.old, args.new, args.output)
    target_size = header.target.file_size
    print(f"wrote {args.output}: v{header.base_version} -> v{header.target_version}, "
          f"{header.flips:,} bits flipped ({header.flips / (8 * header.body_size):.3%} of the body), "
          f"{header.file_size:,} bytes ({header.file_size / target_size:.2%} of the target file), "
          f"rice_k={header.rice_k}")
    return 0


def run_patch(args: argparse.Namespace) -> int:
    from bloomswarm.common.delta import apply_delta

    check_output(args.output, [args.base, args.delta])
    header = apply_delta(args.base, args.delta, args.output, expected_sha256=args.expected_sha256)
    print(f"wrote {args.output}: v{header.target_version} from v{header.base_version}, "
          f"{header.target.file_size:,} bytes, sha256 {header.target_sha256.hex()}")
    return 0


def describe_delta(path: Path, header: DeltaHeader) -> dict[str, Any]:
    """A delta's header as a JSON-ready dict (what ``inspect`` prints for a delta)."""
    from .filter_commands import format_unix_time

    target = header.target
    p = target.params
    return {
        "path": str(path),
        "kind": "delta",
        "base_version": header.base_version,
        "target_version": header.target_version,
        "encoding": "rice-gaps",
        "rice_k": header.rice_k,
        "flips": header.flips,
        "flipped_share": round(header.flips / (8 * header.body_size), 6),
        "file_size": header.file_size,
        "share_of_target": round(header.file_size / target.file_size, 6),
        "quotient_bytes": header.quotient_bytes,
        "remainder_bytes": header.remainder_bytes,
        "layout": p.layout.label,
        "hash_seed": p.hash_seed,
        "num_probes": p.num_probes,
        "num_bits": p.num_bits,
        "target_key_count": target.key_count,
        "target_created_at": format_unix_time(target.created_at),
        "base_body_sha256": header.base_body_sha256.hex(),
        "target_sha256": header.target_sha256.hex(),
    }


def verify_delta_streams(path: Path, header: DeltaHeader) -> None:
    """Decode the delta's streams: DeltaError unless they hold exactly its flips.

    Applies the checks of :func:`~bloomswarm.common.delta.patch_body` (either engine
    refuses the same streams) without a body: memory stays bounded by the streams' size,
    whatever body size the header declares.
    """
    from bloomswarm.common.delta_format import PAYLOAD_OFFSET
    from bloomswarm.common.rice import decode_positions

    with open(path, "rb") as fh:
        fh.seek(PAYLOAD_OFFSET)
        quotients = fh.read(header.quotient_bytes)
        remainders = fh.read(header.remainder_bytes)
    body_bits = header.body_size * 8
    for _positions in decode_positions(quotients, remainders, header.rice_k, header.flips, body_bits):
        pass  # each chunk is validated as it is decoded
