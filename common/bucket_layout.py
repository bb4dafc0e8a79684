"""The bucket's object keys: the one place that spells them.

Keys are relative to the store's prefix::

    v{N}/{attempt}/filter.bsf      the filter file, uploaded by one publish attempt
    v{N}/{attempt}/filter.torrent  its torrent (v1, or hybrid v1+v2)
    v{N}/{attempt}/delta-from-v{B}.bsd      a delta from version B's filter to this one
    v{N}/{attempt}/delta-from-v{B}.torrent  its torrent
    v{N}/manifest.json             the Manifest, canonical JSON; claims vN (IfNoneMatch='*')
                                   and names the attempt's two objects
    v{N}/manifest.json.sig         detached Ed25519 signature over those exact bytes (base64)
    latest.json                    signed Pointer envelope; moved by compare-and-swap (IfMatch)
    index.json                     many filters only: signed FilterIndex envelope of every
                                   filters/NAME/ layout's latest version, moved by CAS

The file and torrent live in a folder only one publish attempt writes, because two
publishers racing for vN both upload before either claims it: under fixed names the
loser would overwrite the winner's file. The claim (the manifest) decides which attempt
is vN; a loser's folder is garbage that retention removes. Attempt ids are
``YYYYmmddTHHMMSSZ-<8 hex>`` (UTC start time, random): the time lets retention tell an
attempt still uploading from an abandoned one without object timestamps.
docs/publishing.md gives the whole protocol.

Version folders are plain ``v{N}`` (no zero padding), so a listing sorts "v10" before
"v9": use :func:`parse_version_prefix` and sort numerically.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets

LATEST_KEY = "latest.json"
"""Key of the signed pointer to the current version."""
INDEX_KEY = "index.json"
"""Key of the signed index of every named filter (:mod:`bloomswarm.common.filter_index`)."""

FILTER_FILE_NAME = "filter.bsf"
"""Name of the filter file inside an attempt folder (and inside its torrent)."""
TORRENT_FILE_NAME = "filter.torrent"
"""Name of the torrent inside an attempt folder."""
MANIFEST_FILE_NAME = "manifest.json"
"""Name of the manifest inside a version folder."""
DELTA_FILE_PREFIX = "delta-from-v"
"""Start of a delta's file name inside an attempt folder (then the base version)."""
DELTA_FILE_SUFFIX = ".bsd"
"""End of a delta file's name (:data:`bloomswarm.common.delta.DELTA_SUFFIX`)."""
DELTA_TORRENT_SUFFIX = ".torrent"
"""End of a delta torrent's name."""
SIGNATURE_SUFFIX = ".sig"
"""Appended to a manifest's key (or file name) to name its detached signature."""

MAX_VERSION = 2**63 - 1
"""The highest version number (a signed 64-bit integer, like the header's)."""

_VERSION_PREFIX = re.compile(r"v([1-9][0-9]*)(?:/|$)")
_ATTEMPT = re.compile(r"([0-9]{8}T[0-9]{6}Z)-[0-9a-f]{8}")
_ATTEMPT_TIME = "%Y%m%dT%H%M%SZ"


def _check_version(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise ValueError(f"version numbers are integers >= 1, got {version!r}")
    return version


def version_prefix(version: int) -> str:
    """The folder of version ``version``: "v{N}/"."""
    return f"v{_check_version(version)}/"


def new_attempt_id(now: float) -> str:
    """A fresh publish-attempt id for Unix time ``now``: "YYYYmmddTHHMMSSZ-<8 hex>"."""
    stamp = dt.datetime.fromtimestamp(int(now), dt.timezone.utc).strftime(_ATTEMPT_TIME)
    return f"{stamp}-{secrets.token_hex(4)}"


def attempt_started_at(attempt: str) -> int | None:
    """The Unix time encoded in an attempt id; None when ``attempt`` is not one."""
    match = _ATTEMPT.fullmatch(attempt)
    if match is None:
        return None
    try:
        stamp = dt.datetime.strptime(match.group(1), _ATTEMPT_TIME)
    except ValueError:
        return None
    return int(stamp.replace(tzinfo=dt.timezone.utc).timestamp())


def attempt_prefix(version: int, attempt: str) -> str:
    """The folder of one publish attempt for ``version``: "v{N}/{attempt}/"."""
    if attempt_started_at(attempt) is None:
        raise ValueError(f"not a publish attempt id: {attempt!r}")
    return f"{version_prefix(version)}{attempt}/"


def filter_key(version: int, attempt: str) -> str:
    """Key of the filter file uploaded by ``attempt`` for ``version``."""
    return attempt_prefix(version, attempt) + FILTER_FILE_NAME


def torrent_key(version: int, attempt: str) -> str:
    """Key of the torrent uploaded by ``attempt`` for ``version``."""
    return attempt_prefix(version, attempt) + TORRENT_FILE_NAME


def delta_file_name(base: int) -> str:
    """Name of the delta from version ``base`` inside an attempt folder (and its torrent)."""
    return f"{DELTA_FILE_PREFIX}{_check_version(base)}{DELTA_FILE_SUFFIX}"


def delta_key(version: int, attempt: str, base: int) -> str:
    """Key of the delta from version ``base`` to ``version``, uploaded by ``attempt``."""
    return attempt_prefix(version, attempt) + delta_file_name(base)


def delta_torrent_key(version: int, attempt: str, base: int) -> str:
    """Key of the torrent of the delta from version ``base`` to ``version``."""
    name = f"{DELTA_FILE_PREFIX}{_check_version(base)}{DELTA_TORRENT_SUFFIX}"
    return attempt_prefix(version, attempt) + name


def manifest_key(version: int) -> str:
    """Key of the manifest of ``version``."""
    return version_prefix(version) + MANIFEST_FILE_NAME


def signature_key(version: int) -> str:
    """Key of the detached signature of the manifest of ``version``."""
    return manifest_key(version) + SIGNATURE_SUFFIX


def signature_key_of(manifest_key: str) -> str:
    """Key of the detached signature of the manifest stored at ``manifest_key``."""
    return manifest_key + SIGNATURE_SUFFIX


def is_manifest_key(key: str) -> bool:
    """Whether ``key`` is the manifest of some version ("vN/manifest.json")."""
    version = parse_version_prefix(key)
    return version is not None and version <= MAX_VERSION and key == manifest_key(version)


def parse_version_prefix(key: str) -> int | None:
    """Return N when ``key`` is "vN" or lies under "vN/" (no leading zeros, at most
    :data:`MAX_VERSION`); else None."""
    match = _VERSION_PREFIX.match(key)
    if match is None or len(match.group(1)) > len(str(MAX_VERSION)):
        return None
    version = int(match.group(1))
    return version if version <= MAX_VERSION else None


__all__ = [
    "DELTA_FILE_PREFIX",
    "DELTA_FILE_SUFFIX",
    "DELTA_TORRENT_SUFFIX",
    "FILTER_FILE_NAME",
    "INDEX_KEY",
    "LATEST_KEY",
    "MANIFEST_FILE_NAME",
    "MAX_VERSION",
    "SIGNATURE_SUFFIX",
    "TORRENT_FILE_NAME",
    "attempt_prefix",
    "attempt_started_at",
    "delta_file_name",
    "delta_key",
    "delta_torrent_key",
    "filter_key",
    "is_manifest_key",
    "manifest_key",
    "new_attempt_id",
    "parse_version_prefix",
    "signature_key",
    "signature_key_of",
    "torrent_key",
    "version_prefix",
]
