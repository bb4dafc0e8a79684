"""The agent's data directory: the one place that spells its paths and file names.

    DATA_DIR/
      current -> versions/v42            symlink, flipped atomically on every swap
      versions/v42/filter.bsf            installed versions, files mode 0444, never modified
      versions/v42/manifest.json         its signed manifest, the manifest's signature and
      versions/v42/manifest.json.sig     its torrent, so a restarted agent can re-seed and
      versions/v42/filter.torrent        re-check it
      versions/v42/delta-from-v41.bsd    a delta this agent fetched to get v42, and its
      versions/v42/delta-from-v41.torrent  torrent: seeded, removed with the version
      versions/v41/...
      staging/v43/filter.bsf             a download in progress; readers never look here
      staging/v43/.resume                its resume data
      staging/v43/.latest.json ...       the announcement's signed documents, to resume it
      staging/v43/delta-from-v42.bsd     a delta being downloaded (then applied into
      staging/v43/.delta-from-v42.torrent  filter.bsf), its torrent and resume data; the
      staging/v43/.delta-from-v42.resume   torrent's presence means "try the delta"
      state.json                         the agent's last accepted pointer sequence (replay guard)
      versions/.trash-v40-1f2e3d4c/      a version being deleted (renamed from v40 first: no
                                         reader sees a version half deleted)

An agent that follows named filters (``[[filters]]``) keeps one such layout per filter in
``DATA_DIR/filters/NAME/`` (:func:`filter_data_dir`); LiveFilter opens one with ``filter=NAME``.

The filter file keeps the name it has in the bucket and in its torrent
(:data:`~bloomswarm.common.bucket_layout.FILTER_FILE_NAME`), as do the manifest, its
signature and the torrent. The agent is the only writer. Readers (LiveFilter) resolve
``current`` and open ``filter.bsf`` inside it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from .atomic_file import fsync_directory
from .bucket_layout import (
    DELTA_FILE_PREFIX,
    DELTA_TORRENT_SUFFIX,
    FILTER_FILE_NAME,
    MANIFEST_FILE_NAME,
    SIGNATURE_SUFFIX,
    TORRENT_FILE_NAME,
    delta_file_name,
)
from .filter_names import check_filter_name

FILTERS_DIR = "filters"
"""The folder of a data directory holding one data directory per named filter."""

_CURRENT = "current"
_VERSIONS = "versions"
_STAGING = "staging"
_STATE_FILE = "state.json"
_RESUME_FILE = ".resume"
_FLIP_TEMP = f".{_CURRENT}.tmp-"
_TRASH_PREFIX = ".trash-"
_VERSION_NAME = re.compile(r"v([1-9][0-9]*)")
_DELTA_TORRENT_NAME = re.compile(
    r"\.?" + re.escape(DELTA_FILE_PREFIX) + r"([1-9][0-9]*)" + re.escape(DELTA_TORRENT_SUFFIX)
)
_DELTA_RESUME_SUFFIX = ".resume"

_STAGED_DOCUMENT_FILES = {  # by the fields of agent.announcements.SignedDocuments
    "pointer_envelope": ".latest.json",
    "manifest": "." + MANIFEST_FILE_NAME,
    "manifest_signature": "." + MANIFEST_FILE_NAME + SIGNATURE_SUFFIX,
    "torrent": "." + TORRENT_FILE_NAME,
}


def filter_data_dir(root: Path, name: str) -> Path:
    """The data directory of filter ``name`` under the agent's ``root``: ``root/filters/NAME``,
    always inside ``root``. ValueError("filter name 'x': why") for an invalid name."""
    return root / FILTERS_DIR / check_filter_name(name)


def version_of_dir_name(name: str) -> int | None:
    """N for a version directory's name "vN" (no leading zeros); None for anything else."""
    match = _VERSION_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class DataDir:
    """The layout of one data directory rooted at ``root``; paths only, plus the
    ``current`` link, which it reads and flips. (Its fixed paths are computed once per
    instance: an agent of many filters asks for them thousands of times a second.)"""

    root: Path

    # -- what readers use --------------------------------------------------------------

    @functools.cached_property
    def current(self) -> Path:
        """The ``current`` symlink."""
        return self.root / _CURRENT

    @property
    def current_filter(self) -> Path:
        """The path readers open: ``current/filter.bsf`` (follows the link when opened)."""
        return self.current / FILTER_FILE_NAME

    @staticmethod
    def is_current_link(name: str | os.PathLike[str] | bytes) -> bool:
        """Whether a directory entry named ``name`` (a watcher's event) is ``current``."""
        return os.path.basename(os.fsdecode(name)) == _CURRENT

    def current_version(self) -> int | None:
        """The version ``current`` points at when it is one installed here: the link reads
        ``versions/vN`` (as :meth:`flip_current` writes it) and that version's filter file
        exists. None when nothing is installed, and for a link that is dangling (its
        version deleted by hand) or points elsewhere: the agent then installs a version
        again and flips the link, and garbage collection protects nothing on its behalf."""
        try:
            target = os.readlink(self.current)
        except OSError:
            return None
        parent, _, name = target.rpartition("/")
        version = version_of_dir_name(name) if parent == _VERSIONS else None
        if version is None or not self.filter_file(version).is_file():
            return None
        return version

    def flip_current(self, version: int) -> None:
        """Point ``current`` at an installed version atomically, durably.

        A temporary symlink is created next to ``current`` and renamed over it (rename is
        atomic), then the directory is fsynced. Readers see the old or the new target,
        never a missing link. FileNotFoundError when ``version`` is not installed.
        """
        target = os.path.join(_VERSIONS, f"v{version}")
        if not self.filter_file(version).is_file():
            raise FileNotFoundError(f"version {version} is not installed under {self.root}")
        tmp = self.root / f"{_FLIP_TEMP}{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(target, tmp)
        os.replace(tmp, self.current)
        fsync_directory(self.root)

    def flip_leftovers(self) -> list[Path]:
        """Temporary links left by flips a crash interrupted."""
        return sorted(self.root.glob(f"{_FLIP_TEMP}*"))

    # -- installed versions ------------------------------------------------------------

    @functools.cached_property
    def versions(self) -> Path:
        """The directory holding one ``vN`` directory per installed version."""
        return self.root / _VERSIONS

    def version_dir(self, version: int) -> Path:
        """The directory where version ``version`` is installed."""
        return self.versions / f"v{version}"

    def filter_file(self, version: int) -> Path:
        """The installed filter of ``version`` (exists only complete and verified)."""
        return self.filter_in(self.version_dir(version))

    @staticmethod
    def filter_in(directory: Path) -> Path:
        """The filter file inside a version or staging directory."""
        return directory / FILTER_FILE_NAME

    def manifest_file(self, version: int) -> Path:
        """The signed manifest stored beside an installed version."""
        return self.version_dir(version) / MANIFEST_FILE_NAME

    def signature_file(self, version: int) -> Path:
        """The manifest's detached signature stored beside an installed version."""
        return self.version_dir(version) / (MANIFEST_FILE_NAME + SIGNATURE_SUFFIX)

    def torrent_file(self, version: int) -> Path:
        """The torrent stored beside an installed version."""
        return self.version_dir(version) / TORRENT_FILE_NAME

    # -- deltas held beside an installed version ---------------------------------------

    def delta_file(self, version: int, base: int) -> Path:
        """The delta from ``base`` that produced installed ``version`` (its torrent's file
        name, the bucket's)."""
        return self.version_dir(version) / delta_file_name(base)

    def delta_torrent_file(self, version: int, base: int) -> Path:
        """The torrent of :meth:`delta_file`."""
        return self.version_dir(version) / _delta_torrent_name(base)

    def trash_dir(self, version: int) -> Path:
        """A new hidden name in ``versions/`` for version ``version``'s directory while it
        is deleted (a random part makes it unique): renamed there first, the version is
        gone for readers at once, whatever a crash leaves of the deletion."""
        return self.versions / f"{_TRASH_PREFIX}v{version}-{secrets.token_hex(4)}"

    @staticmethod
    def is_trash(name: str) -> bool:
        """Whether an entry of ``versions/`` named ``name`` is a :meth:`trash_dir`."""
        return name.startswith(_TRASH_PREFIX)

    def trash_leftovers(self) -> list[Path]:
        """Version directories renamed for deletion and not (completely) deleted yet."""
        try:
            names = os.listdir(self.versions)
        except OSError:
            return []
        return sorted(self.versions / name for name in names if self.is_trash(name))

    def installed_deltas(self, version: int) -> list[int]:
        """Bases of the deltas held beside installed ``version`` (file and torrent), ascending."""
        return sorted(base for base in _delta_bases(self.version_dir(version), hidden=False)
                      if self.delta_file(version, base).is_file())

    # -- downloads in progress ---------------------------------------------------------

    @functools.cached_property
    def staging(self) -> Path:
        """The directory holding downloads in progress."""
        return self.root / _STAGING

    def staging_dir(self, version: int) -> Path:
        """Where version ``version`` is downloaded: ``staging/vN``."""
        return self.staging / f"v{version}"

    def staged_file(self, version: int) -> Path:
        """The filter being downloaded into ``staging/vN`` (its torrent's file name)."""
        return self.filter_in(self.staging_dir(version))

    def resume_file(self, version: int) -> Path:
        """Resume data of the download in ``staging/vN``."""
        return self.resume_in(self.staging_dir(version))

    @staticmethod
    def resume_in(staging_dir: Path) -> Path:
        """Resume data of the download in ``staging_dir``."""
        return staging_dir / _RESUME_FILE

    def staged_delta(self, version: int, base: int) -> Path:
        """The delta from ``base`` being downloaded into ``staging/vN``."""
        return self.staging_dir(version) / delta_file_name(base)

    def staged_delta_torrent(self, version: int, base: int) -> Path:
        """The torrent of the delta being downloaded into ``staging/vN``."""
        return self.staging_dir(version) / ("." + _delta_torrent_name(base))

    def delta_resume_file(self, version: int, base: int) -> Path:
        """Resume data of the delta being downloaded into ``staging/vN``."""
        return self.staging_dir(version) / f".{DELTA_FILE_PREFIX}{base}{_DELTA_RESUME_SUFFIX}"

    @staticmethod
    def staged_delta_bases(staging_dir: Path) -> list[int]:
        """Bases of the deltas whose torrent is kept in ``staging_dir``, ascending."""
        return sorted(_delta_bases(staging_dir, hidden=True))

    @staticmethod
    def staged_documents(staging_dir: Path) -> dict[str, Path]:
        """Where the announcement's signed documents are kept in ``staging_dir``, by
        document ("pointer_envelope", "manifest", "manifest_signature", "torrent": the
        fields of SignedDocuments)."""
        return {name: staging_dir / file for name, file in _STAGED_DOCUMENT_FILES.items()}

    # -- agent state -------------------------------------------------------------------

    @functools.cached_property
    def state_file(self) -> Path:
        """The agent's last accepted pointer sequence (the replay guard)."""
        return self.root / _STATE_FILE


def _delta_torrent_name(base: int) -> str:
    return f"{DELTA_FILE_PREFIX}{base}{DELTA_TORRENT_SUFFIX}"


def _delta_bases(directory: Path, *, hidden: bool) -> set[int]:
    """Bases of the delta torrents in ``directory`` (names with a leading dot: staged)."""
    try:
        names = [entry.name for entry in directory.iterdir()]
    except OSError:
        return set()
    found: set[int] = set()
    for name in names:
        match = _DELTA_TORRENT_NAME.fullmatch(name)
        if match is not None and name.startswith(".") == hidden:
            found.add(int(match.group(1)))
    return found


__all__ = ["FILTERS_DIR", "DataDir", "filter_data_dir", "version_of_dir_name"]
