"""``bloomswarm certs``: the fleet CA and agent certificates of private swarms.

- ``certs init-ca --out DIR`` writes DIR/ca.crt and DIR/ca.key (0600), creating DIR;
- ``certs issue --ca DIR --name NAME --out DIR`` writes DIR/tls.crt, DIR/tls.key (0600)
  and DIR/ca.crt (the CA certificate alone, re-serialised; a CA file that holds a key
  too is refused): the layout of a Kubernetes TLS Secret, which the agent reads from
  ``swarm.certificate_dirs``;
- ``certs show FILE`` prints a certificate's subject, issuer, SAN, validity, SHA-256
  fingerprint and whether it is a CA.

No existing file is replaced without ``--force``; a command writes all its files or none
(temporary files first, renamed into place at the end), and one that fails leaves nothing
it wrote behind and every file it would have replaced as it was. The certificate code (and
cryptography) is imported when a handler runs. docs/private-swarm.md has the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bloomswarm.common.errors import CertificateError, ConfigError, FormatError

from .arguments import int_range
from .commands import HELP

CA_CERTIFICATE = "ca.crt"
CA_KEY = "ca.key"
CERTIFICATE = "tls.crt"
KEY = "tls.key"
DEFAULT_CA_NAME = "bloomswarm fleet CA"
DEFAULT_CA_DAYS = 3650
DEFAULT_DAYS = 365
MAX_DAYS = 36_500
"""``--days`` at most (100 years): ``tls_identity.MAX_DAYS``, not imported here (it loads
cryptography, which parsing a command line must not)."""
PUBLIC_MODE = 0o644
KEY_MODE = 0o600


def register(commands: Any) -> None:
    """Add ``certs init-ca``, ``certs issue`` and ``certs show`` to the ``commands`` subparsers."""
    certs = commands.add_parser("certs", help=HELP["certs"])
    sub = certs.add_subparsers(dest="certs_command", metavar="ACTION", parser_class=type(certs))
    sub.required = True

    init = sub.add_parser("init-ca", help="make a new fleet CA: DIR/ca.crt and DIR/ca.key")
    init.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory to write (created)")
    init.add_argument("--name", default=DEFAULT_CA_NAME, metavar="NAME",
                      help=f"the CA's common name (default: {DEFAULT_CA_NAME!r})")
    init.add_argument("--days", type=int_range(1, MAX_DAYS), default=DEFAULT_CA_DAYS, metavar="N",
                      help=f"days of validity, 1 to {MAX_DAYS:,} (default: {DEFAULT_CA_DAYS})")
    init.add_argument("--force", action="store_true", help="replace existing files")
    init.set_defaults(handler=run_init_ca)

    issue = sub.add_parser("issue", help="issue an agent certificate: DIR/tls.crt, DIR/tls.key, DIR/ca.crt")
    issue.add_argument("--ca", required=True, type=Path, metavar="DIR",
                       help="the CA's directory (ca.crt and ca.key, as init-ca writes them)")
    issue.add_argument("--name", required=True, metavar="NAME",
                       help="the agent's common name (e.g. its host)")
    issue.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory to write (created)")
    issue.add_argument("--days", type=int_range(1, MAX_DAYS), default=DEFAULT_DAYS, metavar="N",
                       help=f"days of validity, 1 to {MAX_DAYS:,} (default: {DEFAULT_DAYS})")
    issue.add_argument("--force", action="store_true", help="replace existing files")
    issue.set_defaults(handler=run_issue)

    show = sub.add_parser("show", help="print a certificate's subject, issuer, SAN, validity and fingerprint")
    show.add_argument("file", type=Path, metavar="FILE", help="a PEM certificate")
    show.set_defaults(handler=run_show)


def run_init_ca(args: argparse.Namespace) -> int:
    from bloomswarm.common.tls_identity import make_ca

    out: Path = args.out
    targets = [out / CA_CERTIFICATE, out / CA_KEY]
    _check_targets(targets, force=args.force)
    cert, key = _certificate_call(make_ca, args.name, days=args.days, now=_now())
    write_files(out, [(targets[1], key, KEY_MODE), (targets[0], cert, PUBLIC_MODE)], force=args.force)
    print(f"wrote {targets[0]} and {targets[1]} (keep {CA_KEY} offline: it signs agent certificates)")
    return 0


def run_issue(args: argparse.Namespace) -> int:
    from bloomswarm.common.tls_identity import ca_certificate_pem, issue_certificate

    ca_dir: Path = args.ca
    out: Path = args.out
    if out.resolve() == ca_dir.resolve():
        raise ConfigError(f"--out {out} is the CA's directory: agents must not get the CA key")
    ca_cert = _read_ca_file(ca_dir / CA_CERTIFICATE)
    ca_key = _read_ca_file(ca_dir / CA_KEY)
    targets = [out / CERTIFICATE, out / KEY, out / CA_CERTIFICATE]
    _check_targets(targets, force=args.force)
    cert, key = _certificate_call(issue_certificate, ca_cert, ca_key, name=args.name, days=args.days,
                                  now=_now())
    try:  # only the certificate goes to the agent, never a key bundled with it
        ca_copy = ca_certificate_pem(ca_cert)
    except FormatError as exc:
        raise CertificateError(f"{ca_dir / CA_CERTIFICATE}: {exc}") from exc
    write_files(out, [(targets[1], key, KEY_MODE), (targets[0], cert, PUBLIC_MODE),
                      (targets[2], ca_copy, PUBLIC_MODE)], force=args.force)
    print(f"wrote {targets[0]}, {targets[1]} and {targets[2]} for {args.name!r}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from bloomswarm.common.tls_identity import describe_certificate

    try:
        described = describe_certificate(Path(args.file).read_bytes())
    except FormatError as exc:
        raise FormatError(f"{args.file}: {exc}") from exc
    width = max(len(label) for label in described) + 1
    for label, value in described.items():
        print(f"{label + ':':<{width}} {value}")
    return 0


# --- helpers ----------------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _certificate_call(function: Any, *args: Any, **kwargs: Any) -> tuple[bytes, bytes]:
    """``function(*args, **kwargs)`` with its ValueError (a bad name or number of days) as
    ConfigError, so that the CLI prints it as bad input."""
    try:
        cert, key = function(*args, **kwargs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return bytes(cert), bytes(key)


def _read_ca_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CertificateError(f"cannot read the CA: {path}: {exc.strerror or type(exc).__name__}") from exc


def _check_targets(targets: Sequence[Path], *, force: bool) -> None:
    for path in targets:
        if path.is_dir():
            raise ConfigError(f"{path} is a directory")
        if path.exists() and not force:
            raise ConfigError(f"{path} exists: give --force to replace it")
        if path.parent.exists() and not path.parent.is_dir():
            raise ConfigError(f"{path.parent} is not a directory")


def write_files(directory: Path, files: Sequence[tuple[Path, bytes, int]], *, force: bool) -> None:
    """Write every (path, data, mode), all or nothing, creating ``directory`` if needed.

    Each file goes to a temporary file beside its target (written, fsynced), then all are
    renamed into place in the order given (keys before their certificates). A failure
    before the renames removes only the temporaries (and ``directory`` if this call
    created it): a file that ``force`` would have replaced is left as it was. A failure
    among the renames (each atomic) also removes the files placed that did not exist
    before. Without ``force`` an existing target is never replaced (FileExistsError)."""
    from bloomswarm.common.atomic_file import fsync_directory

    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    temporaries: list[Path] = []
    placed: list[Path] = []
    try:
        for path, data, mode in files:
            temporaries.append(_write_temporary(path, data, mode))
        for temporary, (path, _, _) in zip(temporaries, files, strict=True):
            new = not os.path.lexists(path)
            _place(temporary, path, force=force)
            if new:
                placed.append(path)
        fsync_directory(directory)
    except BaseException:
        for path in temporaries + placed:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if created:
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _write_temporary(path: Path, data: bytes, mode: int) -> Path:
    """``data`` in a new file ``.tmp-NAME.*`` beside ``path``, with ``mode``, fsynced; an
    OSError names ``path``."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".tmp-{path.name}.", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return temporary


def _place(temporary: Path, path: Path, *, force: bool) -> None:
    """Rename ``temporary`` to ``path`` (atomic); without ``force`` never over an existing
    file (a hard link, then the temporary removed)."""
    if force:
        os.replace(temporary, path)
    else:
        os.link(temporary, path)
        os.unlink(temporary)
