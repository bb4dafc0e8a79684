"""Keeping opentracker's whitelist equal to the info-hashes of the versions in the bucket.

Debian's opentracker is built in whitelist mode: it answers announces only for
info-hashes listed in its whitelist file, one 40-hex-character hash per line, and
re-reads the file on SIGHUP. A v1 torrent is announced under its v1 info-hash (SHA-1);
a hybrid torrent under two hashes: its v1 info-hash and its v2 info-hash (SHA-256)
truncated to 20 bytes, the first 40 hex characters. The whitelist therefore holds every
hash a version is announced under, for every complete version in the bucket (retention
decides which versions exist), and the same for each delta its manifest lists (a delta
has a torrent of its own). A complete version whose filter file or torrent is missing
(deleted by hand or by a lifecycle rule) is left out and logged: agents could not fetch
it from the origin. That check costs no request: the manifest is read anyway and its keys
are looked up in the listing of the version folders.

Every complete version of the bucket's own layout and of each named filter's folder
(``filters/NAME/``) is listed: one tracker serves them all.

An empty whitelist makes the tracker refuse every announce, so a sync that finds nothing
to list does not write one without ``allow_empty`` when every version was left out (a
wrong public key) or when the file it would replace lists hashes (a wrong bucket or
prefix). The whitelist's path must be a regular file or nothing: a FIFO would block the
read, and the atomic write would replace a device, a socket or a symbolic link.

The file is replaced atomically and only when its content changes, and the tracker is
sent SIGHUP only then: running the sync again changes nothing. The process named by the
PID must be opentracker (its ``/proc/PID/comm``), checked before the file is written: a
stale PID file never signals another process. When the signal fails after all, the
previous file is put back, so that the next sync writes it again and signals again. One SIGHUP is enough:
opentracker blocks it in every thread before it answers anything, and one thread takes
it with ``sigwait`` and re-reads the file, so a signal that arrives during a reload waits
for the next. (Sent in the first milliseconds of the process, before that, SIGHUP ends
it: start syncing once the tracker answers HTTP.) A probe that reports a whitelisted
hash refused must percent-encode every byte: ``urlencode`` sends 0x20 as ``+``, which
opentracker reads as 0x2b (see ``bloomswarm.sandbox.tracker``).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bloomswarm.common.atomic_file import write_atomically
from bloomswarm.common.errors import ConfigError, FormatError, ObjectNotFound, VerificationError
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signing import VerifyKey
from bloomswarm.common.storage import ObjectStore

from .filter_index import filter_names_in
from .versions import (
    complete_versions,
    missing_objects,
    read_manifest,
    read_verified_manifest,
    scan_versions,
)

log = logging.getLogger("bloomswarm.tracker_sync")


@dataclass(frozen=True)
class SyncResult:
    """What one sync found and did."""

    versions: tuple[int, ...]
    """Versions of the bucket's own layout whose hashes are in the whitelist."""
    filter_versions: dict[str, tuple[int, ...]]
    """The same for each named filter (``filters/NAME/``) that has versions."""
    left_out: int
    """Complete versions left out because they did not verify (or were malformed), or
    because their filter file or torrent is missing."""
    hashes: tuple[str, ...]
    """The whitelist's lines."""
    changed: bool
    """The file was rewritten."""
    signalled_pid: int | None
    """The tracker process sent SIGHUP, if any."""


def announced_hashes(manifest: Manifest) -> tuple[str, ...]:
    """The 40-hex-character hashes a tracker sees for ``manifest``'s torrents (the filter's,
    then each delta's): the v1 info-hash, and for a hybrid torrent also the v2 info-hash's
    first 40 characters."""
    torrents = [(manifest.info_hash_v1, manifest.info_hash_v2)]
    torrents += [(d.info_hash_v1, d.info_hash_v2) for d in manifest.deltas]
    return tuple(
        h for v1, v2 in torrents for h in ((v1,) if v2 is None else (v1, v2[:40]))
    )


def whitelist_lines(manifests: Iterable[Manifest]) -> list[str]:
    """Sorted, unique whitelist lines: every hash the versions are announced under."""
    return sorted({h for m in manifests for h in announced_hashes(m)})


def read_pid_file(path: Path) -> int:
    """The PID in ``path``; ConfigError when missing or not a positive integer."""
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read tracker pid file {path}: {exc.strerror or exc}") from exc
    if not text.isdigit() or int(text) <= 0:
        raise ConfigError(f"tracker pid file {path} does not hold a PID: {text[:40]!r}")
    return int(text)


TRACKER_NAME = "opentracker"
"""The name (``/proc/PID/comm``) of the only process a sync signals."""


def sync_whitelist(
    store: ObjectStore,
    whitelist: Path,
    *,
    public_keys: Sequence[VerifyKey] = (),
    tracker_pid: int | None = None,
    proc: Path = Path("/proc"),
    allow_empty: bool = False,
) -> SyncResult:
    """Make ``whitelist`` list the info-hashes of every complete version in ``store``, its
    own and each named filter's.

    With ``public_keys``, a version whose signature no key verifies is left out (and
    logged); so is a version whose filter file or torrent is missing. When the content
    changed and ``tracker_pid`` is given, that process gets SIGHUP; ConfigError, with the
    file left as it was, when it does not exist or is not opentracker (``proc``: where to
    read its name).

    An empty result is refused (ConfigError, the file left as it was) unless
    ``allow_empty``: when the store has versions but every one was left out (a wrong
    public key), and when it would replace a whitelist that lists hashes (a wrong bucket
    or prefix: every tracker would stop serving the fleet). ConfigError too when
    ``whitelist`` exists and is not a regular file (a FIFO, a device, a symbolic link):
    it is neither read nor replaced.
    """
    check_whitelist_path(whitelist)  # before the bucket is read
    refused: list[str] = []
    unfetchable: list[str] = []
    own = _manifests(store, public_keys, "", refused, unfetchable)
    filters = {name: _manifests(PrefixedStore(store, filter_prefix(name)), public_keys,
                                f"filter {name!r} ", refused, unfetchable)
               for name in filter_names_in(store)}
    everything = [*own, *(m for manifests in filters.values() for m in manifests)]
    lines = whitelist_lines(everything)
    content = "".join(f"{line}\n" for line in lines).encode("ascii")
    previous = _read_or_none(whitelist)
    if not lines and not allow_empty:
        _refuse_empty(whitelist, previous, refused, unfetchable, bool(public_keys))
    changed = previous != content
    signalled: int | None = None
    if changed:
        if tracker_pid is not None:
            check_tracker(tracker_pid, proc)
        _write(whitelist, content)
        log.info("whitelist %s: %d hashes for versions %s%s", whitelist, len(lines),
                 [m.version for m in own], "".join(f", filter {n!r} {[m.version for m in ms]}"
                                                   for n, ms in filters.items() if ms))
        if tracker_pid is not None:
            try:
                _reload(tracker_pid)
            except ConfigError:
                _restore(whitelist, previous)  # the next sync writes it again, and signals
                raise
            signalled = tracker_pid
    return SyncResult(tuple(m.version for m in own),
                      {name: tuple(m.version for m in ms) for name, ms in filters.items() if ms},
                      len(refused) + len(unfetchable), tuple(lines), changed, signalled)


def _refuse_empty(
    whitelist: Path, previous: bytes | None, refused: list[str], unfetchable: list[str],
    verified: bool,
) -> None:
    """ConfigError when an empty whitelist is no outcome to write without ``allow_empty``:
    every version was left out, or the whitelist being replaced lists hashes."""
    if refused or unfetchable:
        if not refused:
            why, hint = "can be fetched (objects missing)", ""
        else:
            why, hint = (("verified with the public keys given", "wrong --public-key? ") if verified
                         else ("could be read", ""))
        raise ConfigError(
            f"none of the {len(refused) + len(unfetchable)} versions in the bucket {why} "
            f"({(refused or unfetchable)[0]}): "
            f"whitelist {whitelist} left as it was ({hint}--allow-empty writes an empty whitelist)")
    if previous is not None and previous.strip():
        count = len(previous.split())
        raise ConfigError(
            f"no versions in the bucket: not replacing whitelist {whitelist} ({count} hashes) "
            "with an empty one, which would make the tracker refuse every version (wrong "
            "--bucket or --prefix? --allow-empty writes it)")


def _manifests(
    store: ObjectStore,
    public_keys: Sequence[VerifyKey],
    what: str,
    refused: list[str],
    unfetchable: list[str],
) -> list[Manifest]:
    """The manifests of the complete versions in ``store`` (verified with ``public_keys``
    when given; those that fail are logged, left out and named in ``refused``). A version
    whose filter file or torrent is missing is left out too, named in ``unfetchable``:
    agents could not fetch it, so the tracker should not announce it."""
    manifests: list[Manifest] = []
    folders = scan_versions(store)
    for version in complete_versions(folders):
        try:
            manifest = (
                read_verified_manifest(store, version, public_keys)
                if public_keys
                else read_manifest(store, version)
            )
        except ObjectNotFound:
            continue  # deleted by retention since the listing
        except (FormatError, VerificationError) as exc:
            log.warning("leaving %sv%d out of the whitelist: %s", what, version, exc)
            refused.append(f"{what}v{version}: {exc}")
            continue
        # A version agents cannot fetch from the origin is not announced: checked against
        # the listing above (no request; one HEAD for a key outside the version's folder).
        missing = missing_objects(store, folders[version], manifest)
        if missing:
            why = " and ".join(f"its {name} {key}" for name, key in missing.items())
            why += " is missing" if len(missing) == 1 else " are missing"
            log.warning("leaving %sv%d out of the whitelist: %s", what, version, why)
            unfetchable.append(f"{what}v{version}: {why}")
            continue
        manifests.append(manifest)
    return manifests


def check_tracker(pid: int, proc: Path = Path("/proc")) -> None:
    """ConfigError unless process ``pid`` runs and is opentracker (read from
    ``proc/PID/comm``): a PID file left by a tracker that stopped may name any process
    since."""
    try:
        name = (proc / str(pid) / "comm").read_text().strip()
    except FileNotFoundError:
        raise ConfigError(f"tracker process {pid} is not running") from None
    except OSError as exc:
        raise ConfigError(f"cannot tell whether process {pid} is {TRACKER_NAME}: "
                          f"{exc.strerror or exc}") from exc
    if name != TRACKER_NAME:
        raise ConfigError(f"process {pid} is {name!r}, not {TRACKER_NAME}: a stale PID file? "
                          "nothing signalled, the whitelist left as it was")


def check_whitelist_path(path: Path) -> bool:
    """Whether the whitelist ``path`` exists; ConfigError when it exists and is not a
    regular file (a FIFO, a device, a socket, a directory, a symbolic link: by ``lstat``,
    a link is not followed): a whitelist there is neither read nor replaced. A FIFO would
    block the read forever, and the atomic write would replace a device, a socket or a
    link with a regular file."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ConfigError(f"cannot read whitelist {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    return True


def _not_regular(path: Path, mode: int) -> ConfigError:
    """The error for a whitelist ``path`` whose file (of ``mode``) is not a regular one."""
    return ConfigError(f"whitelist {path} is {_file_kind(mode)}, not a regular file: "
                       "give the path of the whitelist file itself")


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _write(path: Path, content: bytes) -> None:
    check_whitelist_path(path)
    try:
        write_atomically(path, [content], mode=0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write whitelist {path}: {exc.strerror or exc}") from exc


def _restore(path: Path, previous: bytes | None) -> None:
    """Put back the whitelist a failed reload did not load (none: delete it)."""
    if previous is None:
        path.unlink(missing_ok=True)
    else:
        _write(path, previous)


def _read_or_none(path: Path) -> bytes | None:
    """The whitelist's content; None when absent. ConfigError when it is not a regular
    file (checked before opening it, and on the open file: never blocks on a FIFO)."""
    if not check_whitelist_path(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read whitelist {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):  # swapped since the lstat
            raise _not_regular(path, mode)
        try:
            return handle.read()
        except OSError as exc:
            raise ConfigError(f"cannot read whitelist {path}: {exc.strerror or exc}") from exc


def _reload(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        raise ConfigError(f"tracker process {pid} is not running") from None
    except PermissionError:
        raise ConfigError(f"not allowed to signal tracker process {pid}") from None
