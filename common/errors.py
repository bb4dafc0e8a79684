"""The project's error hierarchy.

Every error bloomswarm raises on purpose derives from :class:`BloomswarmError`, so a
caller (the CLI, the agent's loop) can catch exactly the failures it knows how to
report. Third-party errors (boto3, libtorrent, cryptography) are translated into these
at the boundary where they are raised, with ``raise ... from exc``.

    BloomswarmError
     ├── FormatError            a filter file, manifest or pointer is malformed
     ├── VerificationError      a signature, checksum or info-hash does not match
     ├── StorageError           the object store failed or refused a request
     │    ├── ObjectNotFound    the key (or bucket) does not exist
     │    └── PreconditionFailed  a conditional write lost its race
     ├── ConfigError            a configuration value or CLI argument is invalid
     │    └── InsecureKeyFile   a private key file is open to group or others
     ├── InputError             the publisher's input data cannot be read or parsed
     └── NotReadyError          no filter version is installed yet

Key-encoding mistakes (a ``float`` key, an ``int`` beyond 64 bits) raise the built-in
``TypeError`` / ``OverflowError`` because they are programming errors, not bad data.
"""

from __future__ import annotations

from typing import Any


class BloomswarmError(Exception):
    """Base class of every error bloomswarm raises on purpose."""


class FormatError(BloomswarmError):
    """A filter file, manifest or pointer is malformed, truncated or of an unknown version."""


class VerificationError(BloomswarmError):
    """A signature, checksum or info-hash does not match what was expected."""


class StorageError(BloomswarmError):
    """The object store failed or refused a request."""


class ObjectNotFound(StorageError):
    """The requested object or bucket does not exist."""


class PreconditionFailed(StorageError):
    """A conditional write (``If-None-Match`` / ``If-Match``) lost its race."""


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


class InputError(BloomswarmError):
    """Input data (keys to build from) cannot be read or parsed."""


class NotReadyError(BloomswarmError):
    """No verified filter version is installed yet, so there is nothing to answer from."""
