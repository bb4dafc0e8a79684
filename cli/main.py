"""The ``bloomswarm`` command: parse arguments, call the library, print.

Every failure is one line on stderr and a non-zero exit code, never a traceback
(:data:`EXIT_CODES`). The project's errors (:class:`~bloomswarm.common.errors.BloomswarmError`)
and ``OSError`` are the user's to fix: exit code 1 for a failure while running, 2 for a
command line that does not parse. Any other exception is a bug: the line says "internal
error", names the exception and exits 70; ``--debug`` (or ``BLOOMSWARM_DEBUG=1``) prints the
traceback above that line, for every error. A reader that closes stdout early (``| head``)
is no error: the command stops quietly with exit code 141, as a process killed by SIGPIPE
would (:func:`stdout_closed`).

Start-up stays light: a command line imports the module of its own command only (the
others are listed by name, :mod:`.commands`), and the command modules import their heavy
dependencies (libtorrent, boto3, prometheus_client, cryptography) inside the handlers, so
``--help``, ``build``, ``inspect`` and ``query`` never load what they do not use
(tests/unit/test_cli_startup_imports.py, benchmarks/startup.py).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Collection, Mapping, Sequence
from typing import NoReturn

from bloomswarm.common.errors import BloomswarmError, UsageError

from . import demo
from .commands import COMMAND_MODULES, module_of

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70
"""sysexits.h's EX_SOFTWARE: an internal software error."""
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a command whose stdout reader went away."""
DEBUG_ENV = "BLOOMSWARM_DEBUG"

EXIT_CODES = {
    0: "success",
    EXIT_FAILURE: "the command failed (bad input, a missing file, an unreachable bucket...)",
    EXIT_USAGE: "the command line does not parse",
    EXIT_INTERNAL: "internal error: a bug in bloomswarm (--debug shows the traceback)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "stdout closed before the output ended (e.g. `| head`): nothing more printed",
}
"""Exit code -> meaning, as the help's epilog lists them."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, raised instead of printed + exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _epilog() -> str:
    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    return f"exit codes:\n{codes}\n\nenvironment:\n  {DEBUG_ENV}=1  as --debug"


def build_parser(full: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser.

    ``full``: the modules of :data:`~.commands.COMMAND_MODULES` whose subcommands get all
    their arguments; the others' subcommands are only named, with their help line (enough
    for ``--help`` and for argparse's list of choices) and their modules are not imported.
    None (the default): every subcommand in full.
    """
    parser = _Parser(
        prog="bloomswarm",
        description="Versioned Bloom filter files: build and publish them, run the agent that\n"
        "distributes them over BitTorrent, query them.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    parser.add_argument("--debug", action="store_true",
                        help=f"print the traceback of an error (as {DEBUG_ENV}=1 does)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for module, names in COMMAND_MODULES.items():
        if full is None or module in full:
            importlib.import_module(f"{__package__}.{module}").register(commands)
        else:
            for name, text in names.items():
                commands.add_parser(name, help=text, add_help=False)
    demo.register(commands)
    return parser


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the global
    options take no values); None when there is none."""
    return next((word for word in argv if not word.startswith("-")), None)


def debug_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``$BLOOMSWARM_DEBUG`` (in ``environ``, default os.environ) is set to
    anything but "", 0, false or no."""
    value = (os.environ if environ is None else environ).get(DEBUG_ENV, "")
    return value.strip().lower() not in ("", "0", "false", "no")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]); return the exit code."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except BrokenPipeError:  # argparse's help or usage written to a closed stdout
        if not stdout_closed():
            raise
        return discard_stdout()


def _main(argv: list[str]) -> int:
    word = command_word(argv)
    module = module_of(word) if word is not None else None
    parser = build_parser(full=[module] if module is not None else [])
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit:  # --help: argparse printed it; a closed stdout shows in main()
        sys.stdout.flush()
        raise
    configure_logging(verbose=args.verbose)
    # Our own progress and events at INFO; libraries (botocore, distributed) only warn
    # unless --verbose, so a failure stays one line.
    logging.getLogger("bloomswarm").setLevel(
        logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    )
    debug = args.debug or debug_requested()
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # now, so that a closed stdout is told apart below, not at exit
        return code
    except KeyboardInterrupt:
        print("bloomswarm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # every error ends here as one line; see report_error
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            return discard_stdout()
        if debug:
            traceback.print_exc(file=sys.stderr)
        code, line = report_error(args.command, exc)
        print(line, file=sys.stderr)
        return code


def configure_logging(*, verbose: bool) -> None:
    """Log to stderr (``logging.basicConfig``: nothing changes when the root logger has
    a handler already). Unless ``verbose``, the handler passes records of other loggers
    than ``bloomswarm``'s at WARNING and above only, whatever level a library sets its
    own logger to (``distributed`` sets INFO on import, after this runs)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if not verbose:
        handler.addFilter(library_warnings_only)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])


def library_warnings_only(record: logging.LogRecord) -> bool:
    """Whether a record passes the non-verbose handler: any of ``bloomswarm``'s, or a
    library's at WARNING and above."""
    ours = record.name == "bloomswarm" or record.name.startswith("bloomswarm.")
    return ours or record.levelno >= logging.WARNING


def stdout_closed() -> bool:
    """True when stdout's reader has gone (a pipe to ``head`` that exited): flushing it
    fails with a broken pipe, or, with nothing left to flush, ``poll`` reports an error on
    it. A broken pipe elsewhere (a socket) leaves stdout open: an error like any other."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        return False
    try:
        import select

        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no descriptor, or no poll() here
        return False


def discard_stdout() -> int:
    """Point stdout's descriptor at /dev/null, so that what is still buffered (flushed
    when the interpreter exits) and anything printed later fail no more; return
    :data:`EXIT_BROKEN_PIPE`. Nothing is said on stderr: the reader chose to stop."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return EXIT_BROKEN_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def report_error(command: str, exc: Exception) -> tuple[int, str]:
    """The exit code and the one stderr line for ``exc`` escaping ``command``'s handler.

    Usage errors carry argparse's own text; the project's errors and ``OSError`` are the
    user's to fix; anything else is a bug, said so, with the exception's type.
    """
    if isinstance(exc, UsageError):
        return EXIT_USAGE, one_line(exc)
    if isinstance(exc, (BloomswarmError, OSError)):
        return EXIT_FAILURE, f"bloomswarm {command}: error: {one_line(exc)}"
    message = " ".join(str(exc).split())
    named = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return EXIT_INTERNAL, (
        f"bloomswarm {command}: internal error (a bug in bloomswarm): {named} "
        f"(run again with --debug or {DEBUG_ENV}=1 to see the traceback)"
    )


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (OSError: strerror and file name)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())
