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

Only what the agent itself creates is ever deleted: in ``versions/`` an entry is a
version only under its canonical name ``vN`` (``v01``, ``v-1``, ``backup`` are left
alone, and logged), and a symbolic link there or in ``staging/`` is removed as a link,
never followed (nothing outside the data directory is touched; a link is no installed
version). Collection is best effort: what cannot be deleted (an immutable file, a
permission) is logged once per collection with its full path and the reason, the rest
is collected all the same, and the next collection tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bloomswarm.common.datadir import DataDir, version_of_dir_name

from .install import remove_tree
from .logfmt import log_event

log = logging.getLogger("bloomswarm.agent")


@dataclass(frozen=True)
class Collected:
    """What one collection removed."""

    versions: list[int] = field(default_factory=list)
    """Installed versions deleted (and no longer seeded)."""
    leftovers: list[str] = field(default_factory=list)
    """Staging entries and incomplete version directories deleted (paths relative to the
    data directory)."""
    failed: list[str] = field(default_factory=list)
    """What could not be deleted, each logged (paths relative to the data directory); the
    next collection tries again."""


def installed_versions(data_dir: Path) -> list[int]:
    """Versions whose filter file is installed, ascending."""
    layout = DataDir(data_dir)
    if not layout.versions.is_dir():
        return []
    found = [version_of_dir_name(entry.name) for entry in layout.versions.iterdir()]
    return sorted(v for v in found if v is not None and layout.filter_file(v).is_file()
                  and not layout.version_dir(v).is_symlink())


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
        if _delete(layout, layout.version_dir(version), result):
            result.versions.append(version)
    if leftovers:
        _collect_leftovers(layout, current, downloading, result)
    return result


def _delete(layout: DataDir, path: Path, result: Collected) -> bool:
    """Delete ``path`` (a link as a link); a failure is logged and recorded, not raised."""
    try:
        remove_tree(path)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else path
        log_event(log, logging.WARNING, "gc_delete_failed", path=path, failed=where,
                  error=exc.strerror or exc, detail="left in place; collected again later")
        result.failed.append(_relative(layout, path))
        return False
    return True


def _relative(layout: DataDir, path: Path) -> str:
    return str(path.relative_to(layout.root))


def _entries(layout: DataDir, directory: Path) -> list[Path]:
    """The entries of ``directory`` sorted; none when it is missing or cannot be listed."""
    try:
        return sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        log_event(log, logging.WARNING, "gc_list_failed", path=directory,
                  error=exc.strerror or exc, detail="its leftovers are not collected")
        return []


def _collect_leftovers(layout: DataDir, current: int | None, downloading: int | None,
                       result: Collected) -> None:
    current_dir = layout.version_dir(current) if current is not None else None
    for entry in _entries(layout, layout.versions):
        version = version_of_dir_name(entry.name)
        if version is None or entry != layout.version_dir(version):  # not a name the agent makes
            log_event(log, logging.WARNING, "gc_left_alone", path=entry,
                      reason="not a version directory (vN) of the agent's")
            continue
        if entry == current_dir:
            continue
        # A link is no installed version whatever it names: removed as a link. A real
        # directory without its filter file is an install a crash interrupted.
        incomplete = entry.is_symlink() or (entry.is_dir() and not layout.filter_in(entry).exists())
        if incomplete and _delete(layout, entry, result):
            result.leftovers.append(_relative(layout, entry))
    for link in layout.flip_leftovers():  # a flip interrupted by a crash
        if _delete(layout, link, result):
            result.leftovers.append(link.name)
    active = layout.staging_dir(downloading) if downloading is not None else None
    for entry in _entries(layout, layout.staging):
        if entry == active:
            continue
        if _delete(layout, entry, result):  # a link is removed as a link
            result.leftovers.append(_relative(layout, entry))


__all__ = ["Collected", "collect_garbage", "installed_versions", "versions_to_keep"]
