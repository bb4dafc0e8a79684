"""Many-filters benchmark (issue 16): F named filters published at once to N agents that
each follow all of them, on the agent's default settings.

Run from the repository root (needs moto's S3 server, the ``demo`` extra, and opentracker
for the default ``--discovery tracker``)::

    python benchmarks/many_filters.py [--agents 16] [--filters 100] [--size-kib 100]
        [--rounds 3] [--compare-direct-max-bytes 0,262144] [--idle-s 10]
        [--json docs/benchmarks/many_filters.json]

Each arm is a fresh :class:`~bloomswarm.sandbox.fleet.LocalFleet` (moto's S3 server behind
the counting origin, opentracker, N ``bloomswarm agent run`` processes on 127.0.0.1, each
with one ``[[filters]]`` table per filter). The agents run on the agent's defaults
(agent/config.py): the fleet sets addresses and discovery and no rate cap; the agents poll
at their default interval (2 s, jitter 0.5 s) unless ``--poll-interval-s`` is given
(before 2026-11-25 14:00 UTC the fleet polled every 0.5 s). The default arm changes
nothing else; each ``--compare-direct-max-bytes`` arm sets ``[swarm] direct_max_bytes``
alone (an arm equal to the default is the default arm, run once).

Per arm, v1 of every filter is published, then ``--rounds`` more rounds each publish a new
version of every filter at once (random bits, a seed per filter and round: no delta
applies; the publisher makes none). Per round it measures publish → last swap
(``index.json`` moving, i.e. ``publish_filters`` returning, to the last agent's swap of
the last filter, by when each agent's ``current`` link of each filter was made: read
from the data directories, so that watching costs the agents nothing), the median and
p90 over the filters of each filter's own publish → last swap, the origin's egress over
the round's bytes (the F files' sizes, counted at the origin 0.5 s after the last swap),
the agents' CPU per (agent, filter) install (utime + stime of /proc/PID/stat over the
round), and after the round each agent's USS (``Private_Clean + Private_Dirty`` of
/proc/PID/smaps_rollup).

Then, idle (nothing published), it counts the GETs of ``index.json`` the origin receives
per agent per second over ``--idle-s`` seconds, and does the same for ``latest.json`` on
a fleet of as many agents following one unnamed filter (one version published): the
ratio is the index's poll rate over one filter's.

Targets (issue 16), on the default arm: at 16 agents × 100 filters × 100 KiB, publish →
last swap at most 5 s (the median over the rounds, and the worst round) and every agent
at most 100 MiB USS; at any shape, the index's poll rate within 1/1.2 .. 1.2× one filter's (a rate far below
one filter's means agents too busy to poll).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    fmt_bytes,
    format_table,
    load_average,
    machine_info,
    non_negative_float,
    non_negative_int,
    output_path,
    positive_float,
    positive_int,
    section,
    smaps_rollup,
    stop_on_signals,
    write_json,
)
from benchmarks.agent_cost import cpu_ticks
from benchmarks.swarm import CpuMeter, random_filter
from bloomswarm.agent.config import SwarmConfig
from bloomswarm.common.datadir import DataDir, filter_data_dir, version_of_dir_name
from bloomswarm.publisher.config import DeltaConfig
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.fleet import FleetError, FleetSpec, LocalFleet

KIB = 1024
MIB = 1024 * KIB
TARGET_SHAPE = (16, 100, 100 * KIB)
"""(agents, filters, filter size) the time and memory targets are stated for."""
TARGET_LAST_SWAP_S = 5.0
"""Publish → last swap over all agents and filters, seconds (at most)."""
TARGET_USS_BYTES = 100 * MIB
"""Each agent's unique set size (at most)."""
TARGET_INDEX_RATIO = 1.2
"""index.json GETs per agent per second over one filter's latest.json GETs (at most)."""
COUNTER_SETTLE_S = 0.5
"""Wait after the last swap before reading the origin's count (requests in flight)."""
IDLE_SETTLE_S = 2.0
"""Wait after a rollout before an idle window starts (post-swap work finishing)."""
WATCH_INTERVAL_S = 0.5
"""Between two looks at the agents' data directories while a round rolls out (swap times
come from the ``current`` links themselves: this only delays noticing the end). The
agents are not asked: an agent's /status with 100 filters costs it about 50 ms of CPU,
so polling it every 3 s through a 10 s round adds, by that estimate, about 1.5 ms of
agent CPU per install (not measured apart)."""

Swaps = dict[tuple[str, str], float]
"""(agent, filter) -> when that agent swapped that filter to the round's version."""


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values`` (at least one)."""
    if not values:
        raise ValueError("no values")
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} is not within (0, 1]")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 1))  # ceil(n q), at least 1
    return ordered[int(rank) - 1]


def filter_last_seconds(swaps: Swaps, announced_at: float, *, unfinished: Sequence[str] = (),
                        waited_s: float = 0.0) -> list[float]:
    """Each filter's publish → swap on its last agent, ascending; a filter in
    ``unfinished`` (some agent never swapped it) counts as ``waited_s``, a lower bound."""
    last: dict[str, float] = {}
    for (_agent, name), at in swaps.items():
        last[name] = max(last.get(name, at), at)
    for name in unfinished:
        last[name] = announced_at + waited_s
    return sorted(at - announced_at for at in last.values())


class RoundStalled(FleetError):
    """A round did not reach every filter of every agent within its limit."""

    def __init__(self, message: str, swaps: Swaps, missing: dict[str, set[str]], waited_s: float) -> None:
        super().__init__(message)
        self.swaps = swaps
        self.missing = missing
        """Agent -> filters it had not swapped."""
        self.waited_s = waited_s


@dataclass(frozen=True)
class RoundPoint:
    """One round: a new version of every filter, published at once."""

    round: int
    """0: v1 of every filter (agents hold nothing yet); 1..R: the rounds after it."""
    version: int
    filters: int
    file_bytes: int
    """The filter files' sizes summed (F × S, headers included)."""
    publish_s: float
    """The publisher's time until index.json moved (not part of the rollout)."""
    index_sync_s: float
    """Of which: ``sync_index`` (reading every filter's entry back, then moving index.json)."""
    filter_last_s: list[float]
    """Per filter, index.json moving → its last agent's swap, ascending."""
    origin_bytes: int
    """Filter bytes the origin sent during the round."""
    uss_bytes: list[int]
    """Per agent after the round, ascending."""
    cpu_busy: float
    """Fraction of the machine's CPU busy while the round rolled out."""
    agents_cpu_s: float
    """The agents' CPU seconds (utime + stime, summed over the agents) from index.json
    moving to the last swap."""
    peers: list[int]
    """Per agent after the round, its peer connections over all filters (the
    ``bloomswarm_agent_peers`` series summed)."""
    missing_pairs: int = 0
    """(agent, filter) pairs not swapped when the round gave up (0: complete); the
    times are then lower bounds (an unfinished filter counts as the time waited)."""

    @property
    def last_s(self) -> float:
        return self.filter_last_s[-1]

    @property
    def p50_s(self) -> float:
        return statistics.median(self.filter_last_s)

    @property
    def p90_s(self) -> float:
        return nearest_rank(self.filter_last_s, 0.9)

    @property
    def origin_ratio(self) -> float:
        return self.origin_bytes / self.file_bytes

    @property
    def cpu_ms_per_install(self) -> float:
        """The agents' CPU per (agent, filter) install, in ms."""
        return 1000 * self.agents_cpu_s / max(len(self.uss_bytes) * self.filters, 1)

    @property
    def uss_max(self) -> int:
        return self.uss_bytes[-1]

    @property
    def uss_median(self) -> float:
        return statistics.median(self.uss_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "complete": self.missing_pairs == 0, "last_s": self.last_s,
                "p50_s": self.p50_s, "p90_s": self.p90_s, "origin_ratio": self.origin_ratio,
                "uss_max": self.uss_max, "uss_median": self.uss_median,
                "cpu_ms_per_install": self.cpu_ms_per_install}


@dataclass(frozen=True)
class PollRate:
    """GETs of one object the origin received over an idle window."""

    key: str
    """The object's name: index.json or latest.json."""
    agents: int
    window_s: float
    gets: int
    """GETs of ``key`` (304s included)."""
    all_gets: int
    """GETs of anything during the window (polls should be all there is)."""

    @property
    def per_agent_per_s(self) -> float:
        return self.gets / self.agents / self.window_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_agent_per_s": self.per_agent_per_s}


@dataclass(frozen=True)
class ArmSummary:
    """What an arm's rounds say, over all rounds (v1 included)."""

    median_last_s: float
    worst_last_s: float
    median_p90_s: float
    median_origin_ratio: float
    worst_origin_ratio: float
    max_uss_bytes: int
    incomplete_rounds: int
    """Rounds given up on: the times above are then lower bounds."""

    @classmethod
    def of(cls, points: Sequence[RoundPoint]) -> ArmSummary:
        """The summary of ``points`` (at least one)."""
        if not points:
            raise ValueError("no rounds measured")
        return cls(
            median_last_s=statistics.median(p.last_s for p in points),
            worst_last_s=max(p.last_s for p in points),
            median_p90_s=statistics.median(p.p90_s for p in points),
            median_origin_ratio=statistics.median(p.origin_ratio for p in points),
            worst_origin_ratio=max(p.origin_ratio for p in points),
            max_uss_bytes=max(p.uss_max for p in points),
            incomplete_rounds=sum(1 for p in points if p.missing_pairs),
        )


@dataclass
class Arm:
    """One fleet's run: the agent's defaults, or ``direct_max_bytes`` set."""

    label: str
    direct_max_bytes: int | None
    """The arm's ``[swarm] direct_max_bytes``; None: the agent's default (not set)."""
    rounds: list[RoundPoint] = field(default_factory=list)
    poll_rate: PollRate | None = None
    failure: str | None = None
    load_average_start: list[float] | None = None
    load_average_end: list[float] | None = None

    @property
    def swarm_overrides(self) -> dict[str, object]:
        return {} if self.direct_max_bytes is None else {"direct_max_bytes": self.direct_max_bytes}

    def summary(self) -> ArmSummary | None:
        return ArmSummary.of(self.rounds) if self.rounds else None

    def as_dict(self) -> dict[str, Any]:
        summary = self.summary()
        return {"label": self.label, "swarm_overrides": self.swarm_overrides,
                "rounds": [p.as_dict() for p in self.rounds],
                "summary": None if summary is None else asdict(summary),
                "index_poll_rate": None if self.poll_rate is None else self.poll_rate.as_dict(),
                "failure": self.failure, "load_average_start": self.load_average_start,
                "load_average_end": self.load_average_end}


def checks(default: Arm, reference: PollRate | None, *, on_target_shape: bool) -> list[Check]:
    """The targets, judged on the default arm; the time and memory ones only at the shape
    they are stated for."""
    out: list[Check] = []
    summary = default.summary()
    if on_target_shape and summary is not None:
        bound = (f"lower bound: {summary.incomplete_rounds} round(s) never reached every agent"
                 if summary.incomplete_rounds else "")
        out += [
            Check("publish -> last swap, median over the rounds", summary.median_last_s,
                  TARGET_LAST_SWAP_S, "<=", "s", bound),
            Check("publish -> last swap, worst round", summary.worst_last_s, TARGET_LAST_SWAP_S, "<=", "s",
                  bound),
            Check("agent USS, largest after any round", summary.max_uss_bytes / MIB,
                  TARGET_USS_BYTES / MIB, "<=", "MiB"),
        ]
    if default.poll_rate is not None and reference is not None:
        ratio = index_ratio(default.poll_rate, reference)
        name = "index.json GETs per agent / one filter's latest.json GETs"
        out.append(Check(name, ratio, TARGET_INDEX_RATIO, "<=", "x"))
        # far below 1 is no saving: the agents are too busy to poll on time
        out.append(Check(name + " (not starved)", ratio, 1 / TARGET_INDEX_RATIO, ">=", "x"))
    return out


def index_ratio(index: PollRate, single: PollRate) -> float | None:
    """The index's poll rate per agent over one filter's (None when the latter is 0)."""
    if single.per_agent_per_s == 0:
        return None
    return index.per_agent_per_s / single.per_agent_per_s


# -- measuring a fleet --------------------------------------------------------------------


def uss(pid: int) -> int:
    """Process ``pid``'s unique set size: its private pages, clean and dirty, in bytes."""
    rollup = smaps_rollup(pid)
    return rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)


def agent_uss(agent: AgentProcess) -> int:
    """An agent's USS (FleetError when its process is gone)."""
    if agent.process is None or agent.process.poll() is not None:
        raise FleetError(f"{agent.root.name} is not running:\n{agent.log()[-2000:]}")
    return uss(agent.process.pid)


def agents_cpu_ticks(fleet: LocalFleet) -> int:
    """The fleet's agents' CPU (utime + stime, clock ticks) summed (FleetError when one is gone)."""
    total = 0
    for agent in fleet.agents:
        if agent.process is None or agent.process.poll() is not None:
            raise FleetError(f"{agent.root.name} is not running:\n{agent.log()[-2000:]}")
        with open(f"/proc/{agent.process.pid}/stat", encoding="utf-8") as fh:
            total += cpu_ticks(fh.read())
    return total


def agent_peers(agent: AgentProcess) -> int:
    """An agent's peer connections over all its filters (-1: /status did not answer)."""
    try:
        filters = agent.status().get("filters") or {}
    except (OSError, AssertionError, ValueError):
        return -1
    return int(sum((f.get("metrics") or {}).get("bloomswarm_agent_peers", 0) for f in filters.values()))


def current_link(data_dir: Path, name: str) -> str:
    """The path of filter ``name``'s ``current`` link in an agent's ``data_dir``."""
    return str(DataDir(filter_data_dir(data_dir, name)).current)


def swapped_to(link: str) -> tuple[int | None, float]:
    """The version a filter's ``current`` ``link`` (:func:`current_link`) points at, and
    when the link was made (a flip creates the link, then renames it over ``current``).
    (None, 0.0) before the first swap."""
    try:
        made_at = os.lstat(link).st_mtime
        target = os.readlink(link)
    except FileNotFoundError:
        return None, 0.0
    return version_of_dir_name(os.path.basename(target)), made_at


def wait_for_round(fleet: LocalFleet, version: int, names: Sequence[str], *, limit_s: float) -> Swaps:
    """Watch the agents' data directories until every agent serves ``version`` (or newer)
    of every filter in ``names``; each (agent, filter)'s swap time (when its ``current``
    link was made; the time it was seen when the link is a later version's). Read from
    the disk, not /status, so that measuring costs the agents nothing. RoundStalled (with
    what did arrive) after ``limit_s``; FleetError when an agent exits."""
    swaps: Swaps = {}
    pending = {agent.root.name: set(names) for agent in fleet.agents}
    links = {(agent.root.name, name): current_link(agent.data_dir, name)
             for agent in fleet.agents for name in names}
    deadline = time.monotonic() + limit_s
    while True:
        for agent in fleet.agents:
            left = pending[agent.root.name]
            if not left:
                continue
            if agent.process is None or agent.process.poll() is not None:
                raise FleetError(f"{agent.root.name} exited:\n{agent.log()[-3000:]}")
            for name in list(left):
                current, made_at = swapped_to(links[(agent.root.name, name)])
                if current is None or current < version:
                    continue
                swaps[(agent.root.name, name)] = made_at if current == version else time.time()
                left.discard(name)
        if not any(pending.values()):
            return swaps
        if time.monotonic() > deadline:
            missing = {agent: set(left) for agent, left in pending.items() if left}
            counts = {agent: len(left) for agent, left in missing.items()}
            raise RoundStalled(f"v{version} did not reach every filter of every agent in {limit_s:.0f} s; "
                               f"filters missing per agent: {counts}", swaps, missing, limit_s)
        time.sleep(WATCH_INTERVAL_S)


def poll_rate(fleet: LocalFleet, key: str, window_s: float) -> PollRate:
    """Count the origin's GETs of ``key`` over ``window_s`` idle seconds."""
    proxy = fleet.proxy
    if proxy is None:
        raise FleetError("the fleet is not started")
    time.sleep(IDLE_SETTLE_S)
    before, all_before, started = proxy.gets("/" + key), proxy.gets(""), time.monotonic()
    time.sleep(window_s)
    gets, all_gets, elapsed = proxy.gets("/" + key), proxy.gets(""), time.monotonic() - started
    return PollRate(key=key, agents=len(fleet.agents), window_s=elapsed, gets=gets - before,
                    all_gets=all_gets - all_before)


def filter_names(count: int) -> tuple[str, ...]:
    """``count`` filter names, f0000, f0001, ..."""
    return tuple(f"f{i:04d}" for i in range(count))


@dataclass(frozen=True)
class Shape:
    """What every arm of a run shares."""

    agents: int
    filters: int
    size: int
    """Bytes of each filter's bit array (the file adds a small header)."""
    rounds: int
    discovery: Literal["tracker", "dht", "auto"]
    idle_s: float
    round_limit_s: float
    poll_interval_s: float | None
    """The agents' ``[watch] poll_interval_s`` (jitter: half of it); None: the agent's
    default (2 s, jitter 0.5 s)."""


def run_arm(shape: Shape, arm: Arm, work: Path, report: Callable[[str], None]) -> None:
    """Run one arm on a fresh fleet, appending its rounds to ``arm.rounds`` as measured
    (what was measured stays when a later round fails: FleetError propagates)."""
    names = filter_names(shape.filters)
    spec = FleetSpec(agents=shape.agents, discovery=shape.discovery, poll_interval_s=shape.poll_interval_s,
                     filters=names, swarm=arm.swarm_overrides)
    started = time.monotonic()
    with LocalFleet(work / f"fleet-{arm.label}", spec) as fleet:
        fleet.wait_until_up(limit_s=60.0 + 10.0 * shape.agents)
        report(f"fleet of {shape.agents} agents x {shape.filters} filters up in "
               f"{time.monotonic() - started:.0f} s ({fleet.discovery})")
        stalled: RoundStalled | None = None
        for number in range(shape.rounds + 1):
            builders = {name: random_filter(shape.size, 1 + number * shape.filters + i)
                        for i, name in enumerate(names)}
            origin_before = fleet.origin_bytes()
            began = time.time()
            published = fleet.publish_filters(builders, deltas=DeltaConfig(max_bases=0))
            moved_at = published.announced_at  # index.json had just moved
            cpu = CpuMeter()
            ticks_before = agents_cpu_ticks(fleet)
            versions = {m.version for m in published.manifests.values()}
            if len(versions) != 1:
                raise FleetError(f"round {number}: filters at different versions {sorted(versions)}")
            version = versions.pop()
            try:
                swaps = wait_for_round(fleet, version, names, limit_s=shape.round_limit_s)
                unfinished: set[str] = set()
            except RoundStalled as exc:
                stalled, swaps = exc, exc.swaps
                unfinished = set().union(*exc.missing.values())
            busy = cpu.busy()
            agents_cpu_s = (agents_cpu_ticks(fleet) - ticks_before) / os.sysconf("SC_CLK_TCK")
            waited = time.time() - moved_at
            time.sleep(COUNTER_SETTLE_S)
            point = RoundPoint(
                round=number, version=version, filters=shape.filters,
                file_bytes=sum(m.size for m in published.manifests.values()),
                publish_s=moved_at - began, index_sync_s=published.index_sync_s,
                filter_last_s=filter_last_seconds(swaps, moved_at,
                                                  unfinished=sorted(unfinished), waited_s=waited),
                origin_bytes=fleet.origin_bytes() - origin_before,
                uss_bytes=sorted(agent_uss(a) for a in fleet.agents), cpu_busy=busy,
                agents_cpu_s=agents_cpu_s,
                peers=[agent_peers(a) for a in fleet.agents],
                missing_pairs=0 if stalled is None else sum(len(m) for m in stalled.missing.values()))
            arm.rounds.append(point)
            bound = "" if stalled is None else f" (>= : {point.missing_pairs} agent-filter pairs missing)"
            report(f"round {number} (v{version}): last swap {point.last_s:.2f} s{bound}, per filter p50 "
                   f"{point.p50_s:.2f} s p90 {point.p90_s:.2f} s, origin {point.origin_ratio:.2f}x, "
                   f"USS max {fmt_bytes(point.uss_max)}, peers per agent max {max(point.peers)}, "
                   f"CPU busy {point.cpu_busy:.0%}, agents' CPU {point.cpu_ms_per_install:.1f} ms per install"
                   f" (publisher {point.publish_s:.1f} s, "
                   f"of which index sync {point.index_sync_s:.1f} s)")
            if stalled is not None:  # later rounds would start with downloads still stuck
                break
        if shape.idle_s > 0:  # no publishing (after a stall, stuck downloads go on)
            arm.poll_rate = poll_rate(fleet, "index.json", shape.idle_s)
            report(f"idle {arm.poll_rate.window_s:.1f} s: {arm.poll_rate.per_agent_per_s:.2f} GETs of "
                   f"index.json per agent per s ({arm.poll_rate.all_gets} GETs of anything)")
        if stalled is not None:
            raise stalled


def run_reference(shape: Shape, work: Path, report: Callable[[str], None]) -> PollRate:
    """One unnamed filter on a fleet of as many agents: its latest.json GETs when idle."""
    spec = FleetSpec(agents=shape.agents, discovery=shape.discovery, poll_interval_s=shape.poll_interval_s)
    with LocalFleet(work / "fleet-single", spec) as fleet:
        fleet.wait_until_up(limit_s=60.0 + 10.0 * shape.agents)
        published = fleet.publish(random_filter(shape.size, 0), deltas=DeltaConfig(max_bases=0))
        fleet.wait_for_version(published.version, limit_s=shape.round_limit_s)
        rate = poll_rate(fleet, "latest.json", shape.idle_s)
    report(f"one filter, idle {rate.window_s:.1f} s: {rate.per_agent_per_s:.2f} GETs of latest.json "
           f"per agent per s ({rate.all_gets} GETs of anything)")
    return rate


# -- output -------------------------------------------------------------------------------


def rounds_table(arms: Sequence[Arm]) -> str:
    rows = [[arm.label, str(p.round), f"{p.last_s:.2f}", f"{p.p50_s:.2f}", f"{p.p90_s:.2f}",
             f"{p.origin_ratio:.2f}x", f"{p.uss_max / MIB:.1f}", f"{p.uss_median / MIB:.1f}",
             f"{p.cpu_busy:.0%}", f"{p.cpu_ms_per_install:.1f}", f"{p.publish_s:.1f}"]
            for arm in arms for p in arm.rounds]
    return format_table(["arm", "round", "last s", "filter p50 s", "filter p90 s", "origin",
                         "USS max MiB", "USS p50 MiB", "CPU", "agent ms/install", "publisher s"], rows)


def arms_table(arms: Sequence[Arm], reference: PollRate | None) -> str:
    rows = []
    for arm in arms:
        s = arm.summary()
        if s is None:
            continue
        rate = arm.poll_rate
        ratio = index_ratio(rate, reference) if rate is not None and reference is not None else None
        rows.append([arm.label, f"{s.median_last_s:.2f}", f"{s.worst_last_s:.2f}", f"{s.median_p90_s:.2f}",
                     f"{s.median_origin_ratio:.2f}x", f"{s.worst_origin_ratio:.2f}x",
                     f"{s.max_uss_bytes / MIB:.1f}",
                     "n/a" if rate is None else f"{rate.per_agent_per_s:.2f}",
                     "n/a" if ratio is None else f"{ratio:.2f}x"])
    return format_table(["arm", "last s p50", "last s worst", "filter p90 s p50", "origin p50",
                         "origin worst", "USS max MiB", "index GET/agent/s", "vs one filter"], rows)


def parse_sizes(text: str) -> list[int]:
    """``"0,262144"`` -> [0, 262144] (each a non-negative integer)."""
    values = [int(part) for part in text.split(",") if part.strip()]
    if any(v < 0 for v in values):
        raise ValueError("direct_max_bytes must not be negative")
    return values


def plan_arms(compare: Sequence[int], default: int) -> list[Arm]:
    """The default arm, then one arm per compared value other than the default's."""
    arms = [Arm(f"default({default})", None)]
    for value in dict.fromkeys(compare):
        if value != default:
            arms.append(Arm(f"direct_max_bytes={value}", value))
    return arms


def main(argv: list[str] | None = None) -> int:
    """Run the arms, print the tables and the targets; write JSON. Exit 0 when every
    target is met (or ``--no-targets``), 1 when one is not, 2 when a rollout failed."""
    stop_on_signals()  # stop the fleets and remove the work folder on the way out
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--agents", type=positive_int(1000), default=16, help="agents (16)")
    parser.add_argument("--filters", type=positive_int(100_000), default=100,
                        help="filters every agent follows (100)")
    parser.add_argument("--size-kib", type=positive_float(64 * 1024 * 1024), default=100.0,
                        help="each filter's size, KiB (100)")
    parser.add_argument("--rounds", type=non_negative_int(10_000), default=3, help="rounds after v1 (3)")
    parser.add_argument("--compare-direct-max-bytes", default="",
                        help="comma-separated [swarm] direct_max_bytes values, one arm each")
    parser.add_argument("--idle-s", type=non_negative_float(86400), default=10.0,
                        help="idle window for the poll rates, seconds (10; 0: not measured)")
    parser.add_argument("--round-limit-s", type=positive_float(86400), default=300.0,
                        help="give up on a round after this long: its times become lower bounds (300)")
    parser.add_argument("--discovery", default="tracker", choices=("tracker", "dht", "auto"))
    parser.add_argument("--poll-interval-s", type=positive_float(3600), default=None,
                        help="the agents' [watch] poll_interval_s, jitter half of it (default: the "
                             "agent's default, 2 s and 0.5 s)")
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--no-targets", action="store_true", help="exit 0 whatever the figures (smoke runs)")
    args = parser.parse_args(argv)
    try:
        compare = parse_sizes(args.compare_direct_max_bytes)
    except ValueError as exc:
        parser.error(f"--compare-direct-max-bytes: {exc}")
    size = int(args.size_kib * KIB)
    if size < 1:
        parser.error("argument --size-kib: must be at least one byte")
    shape = Shape(args.agents, args.filters, size, args.rounds, args.discovery, args.idle_s,
                  args.round_limit_s, args.poll_interval_s)
    default_direct = SwarmConfig().direct_max_bytes
    arms = plan_arms(compare, default_direct)
    began = time.time()
    load_start = load_average()
    reference: PollRate | None = None
    failure: str | None = None
    work = Path(tempfile.mkdtemp(prefix="bench-many-filters-"))
    try:
        for arm in arms:
            section(f"{arm.label}: {args.filters} filters x {args.size_kib:g} KiB to {args.agents} agents, "
                    f"{args.rounds} rounds after v1")
            arm.load_average_start = load_average()
            try:
                run_arm(shape, arm, work, lambda line: print(f"  {line}", flush=True))
            except FleetError as exc:  # keep what was measured; the other arms still run
                arm.failure = str(exc).splitlines()[0]
                print(f"  FAILED: {arm.failure}", flush=True)
            arm.load_average_end = load_average()
            print(f"  load average {arm.load_average_start} -> {arm.load_average_end}", flush=True)
        if args.idle_s > 0:
            section(f"one unnamed filter on {args.agents} agents (poll-rate reference)")
            try:
                reference = run_reference(shape, work, lambda line: print(f"  {line}", flush=True))
            except FleetError as exc:
                failure = str(exc).splitlines()[0]
                print(f"  FAILED: {failure}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    section("results")
    measured = [arm for arm in arms if arm.rounds]
    if measured:
        print(rounds_table(measured))
        print()
        print(arms_table(measured, reference))
    on_target_shape = (args.agents, args.filters, size) == TARGET_SHAPE
    results = checks(arms[0], reference, on_target_shape=on_target_shape)
    section("targets")
    if not on_target_shape:
        agents, filters, filter_size = TARGET_SHAPE
        print(f"(time and memory targets are stated for {agents} agents x {filters} filters x "
              f"{filter_size // KIB} KiB: measured only)")
    for check in results:
        print(check.line())
    load_end = load_average()
    print(f"load average at start {load_start}, at end {load_end} (machine: {machine_info()['nproc']} CPUs)")
    ratio = (index_ratio(arms[0].poll_rate, reference)
             if arms[0].poll_rate is not None and reference is not None else None)
    result = {
        "benchmark": "many_filters",
        "machine": machine_info(),
        "seconds": time.time() - began,
        "settings": {"agents": args.agents, "filters": args.filters, "size_bytes": size,
                     "rounds": args.rounds, "discovery": args.discovery,
                     "poll_interval_s": args.poll_interval_s,
                     "idle_s": args.idle_s, "rate_limits": {"upload": 0, "download": 0, "origin": 0},
                     "agent_default_direct_max_bytes": default_direct,
                     "publisher_deltas": "off (max_bases=0)",
                     "command": " ".join(["python benchmarks/many_filters.py",
                                          *(argv if argv is not None else sys.argv[1:])])},
        "arms": [arm.as_dict() for arm in arms],
        "single_filter_poll_rate": None if reference is None else reference.as_dict(),
        "index_poll_ratio": ratio,
        "on_target_shape": on_target_shape,
        "load_average_start": load_start,
        "load_average_end": load_end,
        "checks": [c.as_dict() for c in results],
        "failure": failure or next((a.failure for a in arms if a.failure), None),
    }
    if args.json:
        write_json(args.json, result)
    if result["failure"] is not None or not measured:
        return 2
    return 0 if args.no_targets or all(c.passed is not False for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
