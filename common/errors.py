"""The project's error hierarchy: every exception class bloomswarm defines lives here.

Every error bloomswarm raises on purpose derives from :class:`BloomswarmError`, so a
caller (the CLI, the agent's loop) can catch exactly the failures it knows how to
report. Third-party errors (boto3, libtorrent, cryptography) are translated into these
at the boundary where they are raised, with ``raise ... from exc``.

    BloomswarmError
     ├── FormatError            a filter file, manifest or pointer is malformed
     │    └── DeltaError        a delta is malformed, or does not fit its base or target
     │         └── WrongBase    the base is not the file the delta was made from
     ├── VerificationError      a signature, checksum or info-hash does not match
     │    └── CheckFailed       one check of the agent's swap gate failed (``check`` names it)
     ├── StorageError           the object store failed or refused a request
     │    ├── ObjectNotFound    the key (or bucket) does not exist
     │    ├── PreconditionFailed  a conditional write lost its race
     │    ├── RangeNotSatisfiable  a byte range starts past the end (HTTP 416)
     │    └── HTTPStatusError   an HTTP answer other than 200, 304 or 404 (``status``)
     ├── ConfigError            a configuration value or CLI argument is invalid
     │    ├── InsecureKeyFile   a private key file is open to group or others
     │    ├── CertificateError  a TLS certificate or key is missing, malformed, mismatched or expired
     │    └── UsageError        a command line that does not parse (the CLI's exit code 2)
     ├── InputError             the publisher's input data cannot be read or parsed
     ├── NotReadyError          no filter version is installed yet
     ├── DownloadRefused        a version is too large for the limit or the disk (``reason``)
     ├── DeltaFallback          the agent cannot use a delta and fetches the file (``reason``)
     └── FleetError             the local sandbox fleet could not start or did not converge

Anything else that escapes is a bug, not bad input: the CLI reports it as an internal
error (exit code 70) and shows its traceback with ``--debug`` or ``BLOOMSWARM_DEBUG=1``.
Key-encoding mistakes (a ``float`` key, an ``int`` beyond 64 bits) raise the built-in
``TypeError`` / ``OverflowError`` because they are programming errors, not bad data;
code that takes keys from users (the CLI, the publisher's inputs) validates them first
and raises :class:`InputError` or :class:`ConfigError`.

The one exception class kept elsewhere is private control flow, never an error a caller
sees: ``agent.direct._Stopped`` unwinds a download thread whose job was removed, and is
caught in the same module.
"""

from __future__ import annotations

from typing import Any


class BloomswarmError(Exception):
    """Base class of every error bloomswarm raises on purpose."""


class FormatError(BloomswarmError):
    """A filter file, manifest or pointer is malformed, truncated or of an unknown version."""


class DeltaError(FormatError):
    """A delta file is malformed, truncated or of an unknown version, or does not fit.

    Also raised when a delta is applied to the wrong base, when its result does not match
    the target's SHA-256, and when two files cannot be diffed (different parameters).
    """


class WrongBase(DeltaError):
    """The base a delta is applied to is not the file the delta was made from: its header
    records another body SHA-256, or its body no longer hashes to it (modified on disk)."""


class VerificationError(BloomswarmError):
    """A signature, checksum or info-hash does not match what was expected."""


class CheckFailed(VerificationError):
    """One check of the swap gate (or of an announcement) failed.

    ``check`` is a short label ("sha256", "info_hash", "manifest_signature", ...): the
    reason label of the verification-failure metric.
    """

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


class StorageError(BloomswarmError):
    """The object store failed or refused a request."""


class ObjectNotFound(StorageError):
    """The requested object or bucket does not exist."""


class PreconditionFailed(StorageError):
    """A conditional write (``If-None-Match`` / ``If-Match``) lost its race."""


class RangeNotSatisfiable(StorageError):
    """A byte range starts at or beyond the end of the object (HTTP 416)."""


class HTTPStatusError(StorageError):
    """An HTTP answer other than 200, 304 or 404 (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ConfigError(BloomswarmError):
    """A configuration value or command-line argument is invalid."""


class InsecureKeyFile(ConfigError):
    """A private key file grants group or others some access (refused, as ssh does)."""

    def __init__(self, path: str, mode: int, *, acl: bool = False) -> None:
        self.path = path
        self.mode = mode
        self.acl = acl
        shown = f"mode {mode:04o}" + (" with a POSIX ACL" if acl else "")
        super().__init__(
            f"private key file {path} is accessible to group or others ({shown}): run chmod 600 {path}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return _insecure_key_file, (self.path, self.mode, self.acl)


def _insecure_key_file(path: str, mode: int, acl: bool) -> InsecureKeyFile:
    return InsecureKeyFile(path, mode, acl=acl)


class CertificateError(ConfigError):
    """A TLS certificate or key for a private swarm is unusable: missing or unreadable,
    not PEM, a key that does not match its certificate, a certificate expired or not yet
    valid (:mod:`bloomswarm.common.tls_identity`). The message is one line naming the file."""


class UsageError(ConfigError):
    """A command line that does not parse: the message is argparse's, prefixed with the command."""


class InputError(BloomswarmError):
    """Input data (keys to build from) cannot be read or parsed."""


class NotReadyError(BloomswarmError):
    """No verified filter version is installed yet, so there is nothing to answer from."""


class DownloadRefused(BloomswarmError):
    """A version cannot be downloaded here: too large for the configured limit or the disk.

    ``reason`` is "file_too_large" or "disk_space" (the metric label).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class DeltaFallback(BloomswarmError):
    """The agent cannot use a delta and fetches the full file instead.

    ``reason`` is the label of the agent's ``delta_fallbacks_total`` metric (the list is
    :data:`bloomswarm.agent.deltas.FALLBACK_REASONS`).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class FleetError(BloomswarmError):
    """The local sandbox fleet (:mod:`bloomswarm.sandbox`) could not start or did not converge."""
