"""What the soak measures on the agents from outside: memory, file descriptors, disk, logs.

- :func:`process_sample`: an agent process's resident memory and open file descriptors
  (psutil).
- :func:`disk_sample`: a data directory's disk usage (allocated blocks, each inode
  counted once, so a file renamed from ``staging/`` to ``versions/`` mid-walk is not
  counted twice), its installed versions and its ``staging/`` entries.
- :func:`agent_log_events`: the swaps, starts and errors in an agent's log (logfmt lines,
  one log per agent across its restarts).
- :func:`skipped_versions`: the published versions an agent never swapped to, each
  excused or not by the agent being down while the version was the latest.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bloomswarm.common.datadir import DataDir  # type: ignore[import-not-found, unused-ignore]


@dataclass(frozen=True)
class ProcessSample:
    """One agent process at one moment."""

    at: float
    """Seconds since the soak started."""
    pid: int
    rss: int
    fds: int
    files: int
    """Open FDs of regular files (the rest are sockets, pipes, eventfds...)."""


def process_sample(pid: int, at: float) -> ProcessSample | None:
    """RSS and open FDs of ``pid``, or None when it is gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return ProcessSample(at, pid, int(proc.memory_info().rss), int(proc.num_fds()),
                                 len(proc.open_files()))
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


@dataclass(frozen=True)
class DiskSample:
    """A data directory at one moment."""

    at: float
    bytes: int
    """Allocated bytes (st_blocks * 512) of every file under it, each inode once."""
    versions: int
    """``versions/vN`` directories holding a filter file."""
    staging: int
    """Entries in ``staging/`` (a download in progress, or a leftover)."""
    current: int | None
    """The version ``current`` points at."""


def disk_sample(data_dir: Path, at: float) -> DiskSample:
    """Walk ``data_dir`` now (the agent may be changing it: vanished files are skipped)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    layout = DataDir(data_dir)
    versions = 0
    try:
        for entry in os.scandir(layout.versions):
            if layout.filter_in(Path(entry.path)).exists():
                versions += 1
    except FileNotFoundError:
        pass
    try:
        staging = len(os.listdir(layout.staging))
    except FileNotFoundError:
        staging = 0
    return DiskSample(at, total, versions, staging, layout.current_version())


_EVENT = re.compile(r"event=(\S+)")
_SWARM_WARNING = re.compile(r" WARNING bloomswarm\.swarm: v\d+: ([a-z ]+)")
_FIELD = re.compile(r"\b(version|pid)=(\d+)")


@dataclass
class AgentLog:
    """What an agent's log says about its life."""

    swapped: list[int] = field(default_factory=list)
    """Versions swapped to, in order, across restarts."""
    swapped_at: dict[int, float] = field(default_factory=dict)
    """When (``time.time()``, from the line's local timestamp) each version was swapped to."""
    seen_at: dict[int, float] = field(default_factory=dict)
    """When the agent first logged each version's announcement (its poll returned it)."""
    starts: int = 0
    """``listening`` events: one per process start."""
    errors: Counter[str] = field(default_factory=Counter)
    """ERROR/WARNING events by name (download_failed, origin_error, ...)."""
    internal_errors: list[str] = field(default_factory=list)
    """``internal_error`` lines and tracebacks: agent bugs."""


def agent_log_events(text: str) -> AgentLog:
    """Parse an agent's log (see :mod:`bloomswarm.agent.logfmt`)."""
    result = AgentLog()
    for line in text.splitlines():
        match = _EVENT.search(line)
        swarm = _SWARM_WARNING.search(line) if match is None else None
        if swarm is not None:
            result.errors[f"swarm: {swarm.group(1).strip()}"] += 1
            continue
        if match is None:
            if line.startswith("Traceback") and len(result.internal_errors) < 20:
                result.internal_errors.append(line)
            continue
        event = match.group(1)
        fields = dict(_FIELD.findall(line))
        if event == "announcement" and "version" in fields:
            stamp = _timestamp(line)
            if stamp is not None:
                result.seen_at.setdefault(int(fields["version"]), stamp)
        if event == "swapped" and "version" in fields:
            result.swapped.append(int(fields["version"]))
            stamp = _timestamp(line)
            if stamp is not None:
                result.swapped_at.setdefault(int(fields["version"]), stamp)
        elif event == "listening":
            result.starts += 1
        elif event == "internal_error" and len(result.internal_errors) < 20:
            result.internal_errors.append(line[-400:])
        if " ERROR " in line or " WARNING " in line:
            result.errors[event] += 1
    return result


def _timestamp(line: str) -> float | None:
    """The ``YYYY-MM-DD HH:MM:SS,mmm`` local time a log line starts with, as epoch seconds."""
    try:
        stamp = _dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return None
    return stamp.timestamp()


@dataclass(frozen=True)
class Skip:
    """A published version an agent never swapped to."""

    version: int
    excused: bool
    why: str


def skipped_versions(
    swapped: set[int],
    announced: dict[int, float],
    end: float,
    down: list[tuple[float, float]],
) -> list[Skip]:
    """The versions in ``announced`` (version -> when latest.json moved to it, seconds since
    the start) that are not in ``swapped``. A skip is excused when the agent was down (from
    its kill until it answered /healthz again, intervals in ``down``) at some moment while
    the version was the latest: from its announcement to the next one's (``end`` for the
    last)."""
    order = sorted(announced)
    skips = []
    for i, version in enumerate(order):
        if version in swapped:
            continue
        start = announced[version]
        stop = announced[order[i + 1]] if i + 1 < len(order) else end
        overlap = [(a, b) for a, b in down if a < stop and b > start]
        if overlap:
            a, b = overlap[0]
            why = (f"down from {a:.1f} s to {b:.1f} s while v{version} was the latest "
                   f"({start:.1f} s to {stop:.1f} s)")
        else:
            why = f"up the whole time v{version} was the latest ({start:.1f} s to {stop:.1f} s)"
        skips.append(Skip(version, bool(overlap), why))
    return skips


__all__ = [
    "AgentLog", "DiskSample", "ProcessSample", "Skip", "agent_log_events", "disk_sample",
    "process_sample", "skipped_versions",
]
