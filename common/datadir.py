"""The on-disk layout of an agent's data directory, shared by the agent and LiveFilter.

    DATA_DIR/
      current -> versions/v42         symlink, flipped atomically on every swap
      versions/v42/filter.bsf         installed versions, files mode 0444, never modified
      versions/v42/manifest.json      its signed manifest (+ .sig) and filter.torrent,
                                      so a restarted agent can re-seed and re-check it
      versions/v41/...
      staging/v43/                    a download in progress (+ .resume); readers never look here
      state.json                      the agent's last accepted pointer sequence (replay guard)

The agent is the only writer. Readers resolve ``current`` and open ``filter.bsf``
inside it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .atomic_file import fsync_directory

CURRENT = "current"
VERSIONS = "versions"
STAGING = "staging"
FILTER_FILE = "filter.bsf"


def version_dir(data_dir: Path, version: int) -> Path:
    """The directory where version ``version`` is installed."""
    return data_dir / VERSIONS / f"v{version}"


def current_filter_path(data_dir: Path) -> Path:
    """The path readers open: ``current/filter.bsf`` (follows the link when opened)."""
    return data_dir / CURRENT / FILTER_FILE


def current_version(data_dir: Path) -> int | None:
    """The version ``current`` points at, or None when nothing is installed."""
    try:
        target = os.readlink(data_dir / CURRENT)
    except (FileNotFoundError, OSError):
        return None
    name = Path(target).name
    if name.startswith("v") and name[1:].isdigit():
        return int(name[1:])
    return None


def flip_current(data_dir: Path, version: int) -> None:
    """Point ``current`` at an installed version atomically, durably.

    A temporary symlink is created next to ``current`` and renamed over it (rename is
    atomic), then the directory is fsynced. Readers see the old or the new target,
    never a missing link.
    """
    target = os.path.join(VERSIONS, f"v{version}")
    if not (data_dir / target / FILTER_FILE).is_file():
        raise FileNotFoundError(f"version {version} is not installed under {data_dir}")
    tmp = data_dir / f".{CURRENT}.tmp-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, data_dir / CURRENT)
    fsync_directory(data_dir)
