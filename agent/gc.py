"""Garbage collection of installed versions and staging leftovers.

Retention keeps ``keep`` installed versions: the one ``current`` points at, always, plus
the highest-numbered others (normally the previous version, so a pinned rollback
needs no download and peers still find it). Every other version stops being seeded
(``stop_seeding``, normally ``Transfer.remove``) and its directory is deleted. A process
that still has a deleted file mapped keeps reading it: unlinking never pulls pages from
under a mapping.

Staging: every entry of the staging directory except the download in progress is a
leftover (an abandoned or failed download) and is deleted, as is any version directory
without its filter file (an install interrupted before its final rename), and any
temporary link left by a flip of ``current`` that a crash interrupted. Paths are
:class:`~bloomswarm.common.datadir.DataDir`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bloomswarm.common.datadir import DataDir, version_of_dir_name

from .install import remove_tree


@dataclass(frozen=True)
class Collected:
    """What one collection removed."""

    versions: list[int] = field(default_factory=list)
    """Installed versions deleted (and no longer seeded)."""
    leftovers: list[str] = field(default_factory=list)
    """Staging entries and incomplete version directories deleted (paths relative to the
    data directory)."""


def installed_versions(data_dir: Path) -> list[int]:
    """Versions whose filter file is installed, ascending."""
    layout = DataDir(data_dir)
    if not layout.versions.is_dir():
        return []
    found = [version_of_dir_name(entry.name) for entry in layout.versions.iterdir()]
    return sorted(v for v in found if v is not None and layout.filter_file(v).is_file())


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
    leftovers: bool = True,
) -> Collected:
    """Apply retention to ``versions/`` and (with ``leftovers``) clean ``staging/``.

    ``stop_seeding(version)`` is called before a version's files are deleted.
    ``downloading`` is the version whose staging directory is in use. The version
    ``current`` points at is never removed: the link is read again right before each
    deletion. Without ``leftovers`` only retention is applied: a crash's leftovers
    (incomplete version directories, a flip's temporary link, staging entries) are not
    looked for, which an agent does once it has started and after a rollback, not after
    each install (the failures it survives delete what they leave).
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    layout = DataDir(data_dir)
    current = layout.current_version()
    installed = installed_versions(data_dir)
    kept = versions_to_keep(installed, current, keep)
    result = Collected()
    for version in installed:
        if version in kept or version == layout.current_version():
            continue
        stop_seeding(version)
        remove_tree(layout.version_dir(version))
        result.versions.append(version)
    if leftovers:
        _collect_leftovers(layout, current, downloading, result)
    return result


def _collect_leftovers(layout: DataDir, current: int | None, downloading: int | None,
                       result: Collected) -> None:
    data_dir = layout.root
    if layout.versions.is_dir():
        current_dir = layout.version_dir(current) if current is not None else None
        for entry in sorted(layout.versions.iterdir()):
            if entry.is_dir() and not layout.filter_in(entry).exists() and entry != current_dir:
                remove_tree(entry)
                result.leftovers.append(str(entry.relative_to(data_dir)))
    for link in layout.flip_leftovers():  # a flip interrupted by a crash
        link.unlink(missing_ok=True)
        result.leftovers.append(link.name)
    active = layout.staging_dir(downloading) if downloading is not None else None
    if layout.staging.is_dir():
        for entry in sorted(layout.staging.iterdir()):
            if entry == active:
                continue
            if entry.is_dir():
                remove_tree(entry)
            else:
                entry.unlink(missing_ok=True)
            result.leftovers.append(str(entry.relative_to(data_dir)))


__all__ = ["Collected", "collect_garbage", "installed_versions", "versions_to_keep"]
