"""Garbage collection of installed versions and staging leftovers.

Retention keeps ``keep`` installed versions: the one ``current`` points at, always, plus
the highest-numbered others (normally the previous version, so a pinned rollback
needs no download and peers still find it). Every other version stops being seeded
(``stop_seeding``, normally ``Transfer.remove``) and its directory is deleted: renamed to
a hidden trash name in ``versions/`` first (:meth:`~bloomswarm.common.datadir.DataDir.trash_dir`),
so that a crash during the deletion never leaves a half-deleted ``vN`` that would count as
installed; trash is deleted by every collection (only garbage collection makes it). A process
that still has a deleted file mapped keeps reading it: unlinking never pulls pages from
under a mapping.

Staging: every entry of the staging directory except the download in progress is a
leftover (an abandoned or failed download) and is deleted, as is any version directory
without its filter file (an install interrupted before its final rename), and any
temporary link left by a flip of ``current`` that a crash interrupted, and (with
``temporaries``, at start) the temporary files atomic writes left in the data directory's
root and in ``versions/vN`` (``.tmp-*``: a ``state.json`` write a crash interrupted). Paths are
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
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bloomswarm.common.atomic_file import fsync_directory, temporaries_in
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
    """Staging entries, incomplete version directories, trash of earlier deletions and
    temporary files deleted (paths relative to the data directory)."""
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
    temporaries: bool = False,
) -> Collected:
    """Apply retention to ``versions/`` and (with ``leftovers``) clean ``staging/``.

    ``stop_seeding(version)`` is called before a version's files are deleted. A version's
    directory is renamed to a trash name before it is deleted: once renamed it is no
    longer installed (counted in ``versions`` even when its deletion then fails: the trash
    is recorded in ``failed`` and deleted by a later collection); a version whose rename
    fails stays installed whole, and is recorded in ``failed``. Trash is deleted first by
    every collection.
    ``downloading`` is the version whose staging directory is in use. The version
    ``current`` points at is never removed: the link is read again right before each
    deletion. Without ``leftovers`` only retention is applied: a crash's leftovers
    (incomplete version directories, a flip's temporary link, staging entries) are not
    looked for, which an agent does once it has started and after a rollback, not after
    each install (the failures it survives delete what they leave). ``temporaries``
    (with ``leftovers``) also deletes the ``.tmp-*`` files of atomic writes in the data
    directory's root and in ``versions/vN``: only when none is in progress (the agent's
    start, before anything is written).
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    layout = DataDir(data_dir)
    current = layout.current_version()
    installed = installed_versions(data_dir)
    kept = versions_to_keep(installed, current, keep)
    result = Collected()
    for trash in layout.trash_leftovers():  # deletions a crash or a failure interrupted
        if _delete(layout, trash, result):
            result.leftovers.append(_relative(layout, trash))
    for version in installed:
        if version in kept or version == layout.current_version():
            continue
        stop_seeding(version)
        if _delete_version(layout, version, result):
            result.versions.append(version)
    if leftovers:
        _collect_leftovers(layout, current, downloading, result)
        if temporaries:
            _collect_temporaries(layout, result)
    return result


def retire_version(layout: DataDir, version: int) -> Path:
    """Rename installed ``version``'s directory to a new trash name (durably: the
    ``versions/`` directory is fsynced) and return that name, for the caller to delete:
    readers never see the version half deleted, and a collection deletes what a crash
    leaves of it. OSError when the rename fails (the version is then untouched). The
    caller makes sure ``current`` does not point at it."""
    trash = layout.trash_dir(version)
    os.rename(layout.version_dir(version), trash)
    fsync_directory(layout.versions)
    return trash


def _delete_version(layout: DataDir, version: int, result: Collected) -> bool:
    """Retire and delete installed ``version``; whether it is no longer installed. A
    failure is logged and recorded, not raised."""
    path = layout.version_dir(version)
    try:
        trash = retire_version(layout, version)
    except OSError as exc:
        log_event(log, logging.WARNING, "gc_delete_failed", path=path, failed=path,
                  error=exc.strerror or exc, detail="left in place; collected again later")
        result.failed.append(_relative(layout, path))
        return False
    _delete(layout, trash, result)  # what remains is trash: no version, deleted later
    return True


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
        if layout.is_trash(entry.name):
            continue  # deleted before retention, by every collection
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


def _collect_temporaries(layout: DataDir, result: Collected) -> None:
    """Delete the temporary files of atomic writes a crash interrupted, in the data
    directory's root (``state.json``'s) and in the installed versions' directories."""
    directories = [layout.root]
    directories += [layout.version_dir(v) for v in installed_versions(layout.root)]
    for directory in directories:
        for temporary in temporaries_in(directory):
            if _delete(layout, temporary, result):
                result.leftovers.append(_relative(layout, temporary))


__all__ = ["Collected", "collect_garbage", "installed_versions", "retire_version", "versions_to_keep"]
