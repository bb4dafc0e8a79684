"""Garbage collection of installed versions and staging leftovers.

Retention keeps ``keep`` installed versions: the one ``current`` points at, always, plus
the highest-numbered others (normally the previous version, so a pinned rollback
needs no download and peers still find it). Every other version stops being seeded
(``stop_seeding``, normally ``Transfer.remove``) and its directory is deleted. A process
that still has a deleted file mapped keeps reading it: unlinking never pulls pages from
under a mapping.

Staging: every entry of ``staging/`` except the download in progress is a leftover (an
abandoned or failed download) and is deleted, as is any ``versions/vN`` directory
without its ``filter.bsf`` (an install interrupted before its final rename), and any
temporary ``.current.tmp-*`` link left by a flip that a crash interrupted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bloomswarm.common.datadir import CURRENT, FILTER_FILE, STAGING, VERSIONS, current_version

from .install import remove_tree, staging_dir

_VERSION_DIR = re.compile(r"v([1-9][0-9]*)")


@dataclass(frozen=True)
class Collected:
    """What one collection removed."""

    versions: list[int] = field(default_factory=list)
    """Installed versions deleted (and no longer seeded)."""
    leftovers: list[str] = field(default_factory=list)
    """Staging entries and incomplete version directories deleted (paths relative to the
    data directory)."""


def installed_versions(data_dir: Path) -> list[int]:
    """Versions with ``versions/vN/filter.bsf`` present, ascending."""
    found = []
    root = data_dir / VERSIONS
    if not root.is_dir():
        return []
    for entry in root.iterdir():
        match = _VERSION_DIR.fullmatch(entry.name)
        if match and (entry / FILTER_FILE).is_file():
            found.append(int(match.group(1)))
    return sorted(found)


def versions_to_keep(installed: list[int], current: int | None, keep: int) -> set[int]:
    """The versions retention keeps: ``current`` plus the highest others, ``keep`` in all."""
    kept = {current} if current is not None else set()
    for version in sorted(installed, reverse=True):
        if len(kept) >= keep:
            break
        kept.add(version)
    return {v for v in kept if v is not None}


def collect_garbage(
    data_dir: Path,
    keep: int,
    stop_seeding: Callable[[int], None],
    *,
    downloading: int | None = None,
) -> Collected:
    """Apply retention to ``versions/`` and clean ``staging/``.

    ``stop_seeding(version)`` is called before a version's files are deleted.
    ``downloading`` is the version whose staging directory is in use. The version
    ``current`` points at is never removed: the link is read again right before each
    deletion.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    current = current_version(data_dir)
    kept = versions_to_keep(installed_versions(data_dir), current, keep)
    result = Collected()
    for version in installed_versions(data_dir):
        if version in kept or version == current_version(data_dir):
            continue
        stop_seeding(version)
        remove_tree(data_dir / VERSIONS / f"v{version}")
        result.versions.append(version)
    root = data_dir / VERSIONS
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            if entry.is_dir() and not (entry / FILTER_FILE).exists() and (
                current is None or entry.name != f"v{current}"
            ):
                remove_tree(entry)
                result.leftovers.append(f"{VERSIONS}/{entry.name}")
    for link in sorted(data_dir.glob(f".{CURRENT}.tmp-*")):  # a flip interrupted by a crash
        link.unlink(missing_ok=True)
        result.leftovers.append(link.name)
    staging = data_dir / STAGING
    active = staging_dir(data_dir, downloading) if downloading is not None else None
    if staging.is_dir():
        for entry in sorted(staging.iterdir()):
            if entry == active:
                continue
            if entry.is_dir():
                remove_tree(entry)
            else:
                entry.unlink(missing_ok=True)
            result.leftovers.append(f"{STAGING}/{entry.name}")
    return result


__all__ = ["Collected", "collect_garbage", "installed_versions", "versions_to_keep"]
