"""How the soak's agents installed each version: by delta or in full, and how restarts caught up.

Read from an agent's log (one log per agent across its restarts; logfmt lines of
:mod:`bloomswarm.agent.logfmt`), so counts survive the SIGKILLs that reset the agent's
``/metrics``:

- ``event=listening``: a process start; the log between two starts is one process's life;
- ``event=swapped ... downloaded=true [delta_from=N]``: a version installed from a
  delta of version N, or in full when ``delta_from`` is absent; ``downloaded=false`` is a
  swap to a version already installed (a rollback or a reinstated version), no install;
- ``event=delta_fallback ... reason=R``: a delta given up for the full file.

A restarted process's **catch-up** is its first swap (:func:`catch_ups`): ``delta``,
``full``, ``installed`` (a version already on disk) or ``none`` (no swap before the
process ended or the run did: the agent was already on the latest version, or was killed
again first), with the fallbacks that process logged before it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Way = Literal["delta", "full", "installed", "none"]
WAYS: tuple[Way, ...] = ("delta", "full", "installed", "none")

_EVENT = re.compile(r"\bevent=(\S+)")
_VERSION = re.compile(r"\bversion=(\d+)")
_DELTA_FROM = re.compile(r"\bdelta_from=(\d+)")
_DOWNLOADED = re.compile(r"\bdownloaded=(true|false)")
_REASON = re.compile(r"\breason=([A-Za-z_]+)")


@dataclass(frozen=True)
class Swap:
    """One ``swapped`` event."""

    process: int
    """Which process start logged it: 1 for the first, 2 after the first restart, ..."""
    version: int
    downloaded: bool
    delta_from: int | None
    """The base version of the delta applied; None: the full file (or no download)."""

    @property
    def way(self) -> Way:
        if not self.downloaded:
            return "installed"
        return "full" if self.delta_from is None else "delta"


@dataclass(frozen=True)
class Fallback:
    """One ``delta_fallback`` event."""

    process: int
    version: int
    reason: str


@dataclass
class DeltaLog:
    """The delta-related events of one agent's log, in order."""

    starts: int = 0
    swaps: list[Swap] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)

    def installs(self, way: Way) -> int:
        """Swaps that installed a version ``way`` ("delta" or "full")."""
        return sum(s.way == way for s in self.swaps)

    def fallback_reasons(self) -> dict[str, int]:
        return dict(sorted(Counter(f.reason for f in self.fallbacks).items()))


def delta_log(text: str) -> DeltaLog:
    """Parse an agent's log (lines before the first ``listening`` count as process 1)."""
    result = DeltaLog()
    for line in text.splitlines():
        match = _EVENT.search(line)
        if match is None:
            continue
        event = match.group(1)
        if event == "listening":
            result.starts += 1
            continue
        process = max(result.starts, 1)
        version = _VERSION.search(line)
        if version is None:
            continue
        if event == "swapped":
            downloaded = _DOWNLOADED.search(line)
            base = _DELTA_FROM.search(line)
            result.swaps.append(Swap(process, int(version.group(1)),
                                     downloaded is None or downloaded.group(1) == "true",
                                     int(base.group(1)) if base else None))
        elif event == "delta_fallback":
            reason = _REASON.search(line)
            result.fallbacks.append(Fallback(process, int(version.group(1)),
                                             reason.group(1) if reason else "unknown"))
    return result


@dataclass(frozen=True)
class CatchUp:
    """How one restarted process caught up (see the module docstring)."""

    process: int
    way: Way
    version: int | None
    delta_from: int | None
    fallbacks: tuple[str, ...]
    """Reasons of the fallbacks the process logged before its first swap."""


def catch_ups(log: DeltaLog) -> list[CatchUp]:
    """One :class:`CatchUp` per restarted process (process 2 onwards), in order."""
    result = []
    for process in range(2, log.starts + 1):
        first = next((s for s in log.swaps if s.process == process), None)
        fallbacks = tuple(f.reason for f in log.fallbacks if f.process == process
                          and (first is None or f.version <= first.version))
        if first is None:
            result.append(CatchUp(process, "none", None, None, fallbacks))
        else:
            result.append(CatchUp(process, first.way, first.version, first.delta_from, fallbacks))
    return result


def agent_delta_summary(log: DeltaLog) -> dict[str, Any]:
    """One agent's JSON-ready counts: installs by way, fallbacks by reason, catch-ups."""
    ups = catch_ups(log)
    return {
        "installs_by_delta": log.installs("delta"),
        "installs_in_full": log.installs("full"),
        "fallbacks": log.fallback_reasons(),
        "catch_ups": [{"process": c.process, "way": c.way, "version": c.version,
                       "delta_from": c.delta_from, "fallbacks": list(c.fallbacks)} for c in ups],
        "catch_up_ways": {way: sum(c.way == way for c in ups) for way in WAYS},
    }


def total_delta_summary(agents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of :func:`agent_delta_summary` results (their ``catch_ups`` lists left out)."""
    fallbacks: Counter[str] = Counter()
    ways: Counter[str] = Counter({way: 0 for way in WAYS})
    by_delta = in_full = 0
    for agent in agents:
        by_delta += agent["installs_by_delta"]
        in_full += agent["installs_in_full"]
        fallbacks.update(agent["fallbacks"])
        ways.update(agent["catch_up_ways"])
    installs = by_delta + in_full
    return {
        "installs_by_delta": by_delta,
        "installs_in_full": in_full,
        "delta_share": round(by_delta / installs, 4) if installs else None,
        "fallbacks": dict(sorted(fallbacks.items())),
        "catch_up_ways": {way: ways[way] for way in WAYS},
    }


def metrics_disagreement(log: DeltaLog, metrics: Mapping[str, float]) -> list[str]:
    """Where the agent's ``/metrics`` (its last process's counters, from ``/status``)
    disagree with that process's log: delta installs, swaps, fallbacks by reason."""
    last = max(log.starts, 1)
    swaps = [s for s in log.swaps if s.process == last]
    fallbacks = Counter(f.reason for f in log.fallbacks if f.process == last)
    expected = {
        "bloomswarm_agent_delta_installs_total": float(sum(s.way == "delta" for s in swaps)),
        "bloomswarm_agent_swaps_total": float(len(swaps)),
    }
    prefix = 'bloomswarm_agent_delta_fallbacks_total{reason="'
    reasons = set(fallbacks) | {k[len(prefix):-2] for k in metrics if k.startswith(prefix)}
    for reason in reasons:
        expected[f'{prefix}{reason}"}}'] = float(fallbacks[reason])
    return [f"{name}: /metrics {metrics.get(name, 0.0):g}, log {value:g}"
            for name, value in sorted(expected.items()) if metrics.get(name, 0.0) != value]


__all__ = [
    "WAYS", "CatchUp", "DeltaLog", "Fallback", "Swap", "Way", "agent_delta_summary", "catch_ups",
    "delta_log", "metrics_disagreement", "total_delta_summary",
]
