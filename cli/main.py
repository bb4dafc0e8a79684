"""The ``bloomswarm`` command: parse arguments, call the library, print.

Every failure is one line on stderr and a non-zero exit code, never a traceback:
2 for a bad command line, 1 for anything that went wrong while running, 130 on Ctrl-C.
Set ``BLOOMSWARM_DEBUG=1`` to get the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from bloomswarm.common.errors import BloomswarmError

from . import agent_commands, demo, filter_commands, publish_commands

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot be parsed."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, raised instead of printed + exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser, with every subcommand registered."""
    parser = _Parser(
        prog="bloomswarm",
        description="Versioned Bloom filter files: build and publish them, run the agent "
        "that distributes them over BitTorrent, query them.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    filter_commands.register(commands)
    publish_commands.register(commands)
    agent_commands.register(commands)
    demo.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Our own progress and events at INFO; libraries (botocore, distributed) only warn
    # unless --verbose, so a failure stays one line.
    logging.getLogger("bloomswarm").setLevel(
        logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    )
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("bloomswarm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except (BloomswarmError, OSError, ValueError, TypeError, OverflowError) as exc:
        if os.environ.get("BLOOMSWARM_DEBUG"):
            raise
        print(f"bloomswarm {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (OSError: strerror and file name)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())
