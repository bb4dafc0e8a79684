"""The swarm benchmark's delta mode (issue 13, "Rollout"): a version by delta against the
same version as a full file, on one fleet, in one run.

Per fleet size N and file size F, one :class:`~bloomswarm.sandbox.fleet.LocalFleet`
(the P2P fleet of ``benchmarks/swarm.py``: same caps, same ``[swarm]`` settings, the
agent's defaults otherwise, deltas on) receives three versions, each awaited on every
agent before the next:

1. ``first``: v1, ``keys`` generated keys at the publisher's sizing (the sizing policy's
   resize: capacity ``keys × (1 + headroom)`` at 1% fpp, ``keys`` chosen so the file is
   about F); every agent downloads the full file;
2. ``delta``: v2, the same count of keys with ``churn`` of them removed and as many added:
   the sizing policy keeps v1's parameters, so the publisher (default
   :class:`DeltaConfig`) lists a delta from v1, which the agents fetch over the swarm and
   apply;
3. ``full``: v3, v2's filter again, published with ``DeltaConfig(max_bases=0)``: its
   manifest lists no delta, so the same agents fetch the whole file.

The full round changes the publisher, not the agents: the agents keep their defaults
(``install.deltas`` on) and their sessions, peers and installed versions, and the file
has v2's size and body; only the manifest's delta list differs. (Turning
``install.deltas`` off instead would need a second fleet, or restarting every agent with
a non-default config, and another v1 rollout.)
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks._common import Check
from benchmarks.delta import mixed_keys
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.params import Layout
from bloomswarm.common.sizing import size_filter
from bloomswarm.publisher.config import DeltaConfig, SizingConfig
from bloomswarm.publisher.sizing_policy import SizingTarget, decide_sizing
from bloomswarm.sandbox.fleet import FleetError, FleetSpec, LocalFleet, Published
from bloomswarm.sandbox.origin import PayloadRequest

if TYPE_CHECKING:
    from benchmarks.swarm import Setup

MIB = 1024 * 1024
FPP = 0.01
KEY_CHUNK = 4_000_000
TARGET_SPEEDUP = 8.0
TARGET_ORIGIN_OVER_DELTA = 1.2


# -- filters --------------------------------------------------------------------------------


def keys_for_size(size: int, sizing: SizingConfig) -> int:
    """The key count whose sizing-policy resize (``keys × (1 + headroom)`` at 1%) gives a
    filter body of about ``size`` bytes."""
    probe = 10_000_000
    bits, _k = size_filter(probe, FPP, Layout.BLOCKED)
    capacity = size * 8 * probe / bits
    return max(1, math.floor(capacity / (1.0 + sizing.headroom)))


@dataclass(frozen=True)
class Versions:
    """v1 and v2 of one filter: ``keys`` keys each, v2 with ``churn`` of v1's replaced."""

    keys: int
    churn: float
    v1: FilterBuilder
    v2: FilterBuilder
    build_s: float


def build_versions(size: int, churn: float, seed: int = 0) -> Versions:
    """v1 at the publisher's sizing for about ``size`` bytes, v2 at the parameters the
    sizing policy keeps for it (checked: ``decide_sizing`` says "kept")."""
    sizing = SizingConfig()
    target = SizingTarget(FPP, Layout.BLOCKED, seed)
    keys = keys_for_size(size, sizing)
    started = time.monotonic()
    first = decide_sizing(None, keys, target, sizing)
    builders = []
    for start in (0, round(churn * keys)):  # v2 drops keys 0..c·n-1 and adds as many new ones
        builder = FilterBuilder(first.params, capacity=first.capacity, target_fpp=first.target_fpp)
        for chunk in range(start, start + keys, KEY_CHUNK):
            builder.add_many(mixed_keys(chunk, min(KEY_CHUNK, start + keys - chunk)))
        builders.append(builder)
    second = decide_sizing(FilterSummary.from_header(builders[0].header()), keys, target, sizing)
    if second.action != "kept":
        raise FleetError(f"the sizing policy would resize v2: {second.reason}")
    return Versions(keys, churn, builders[0], builders[1], time.monotonic() - started)


# -- measurements ---------------------------------------------------------------------------


@dataclass
class Round:
    """One version's rollout to every agent of the fleet."""

    version: int
    file_bytes: int
    deltas_listed: list[int]
    """Sizes of the deltas the manifest lists (empty: a full-file version)."""
    seconds: list[float]
    """Publish → swap, per agent, sorted."""
    origin_bytes: int
    """Payload bytes (filter and delta files) the origin sent for this version."""
    peer_bytes: float
    """Bytes the agents received from peers for this version (their own counts, summed)."""
    by_delta: int
    """Agents whose swap to this version applied a delta (``last_swap.delta_from``)."""
    cpu_busy: float
    load_average: list[float]
    """1, 5, 15-minute load averages when the round ended."""
    apply_s: list[float] = field(default_factory=list)
    """Per agent that installed by delta, seconds its apply took (sorted): the part of
    ``seconds`` spent after the delta was in."""
    origin_resent_bytes: int = 0
    """Of ``origin_bytes``, bytes the origin had already sent in this round (the same file's
    same 16 KiB blocks): the origin's over-fetch."""
    origin_cut_bytes: int = 0
    """Of ``origin_bytes``, bytes of requests the client left before their end (a web seed
    taken out mid-request)."""
    origin_requests: list[dict[str, Any]] = field(default_factory=list)
    """The round's answered origin requests: path, first, last, sent, seconds after the
    publish, client port."""

    @property
    def max(self) -> float:
        return max(self.seconds)

    @property
    def p50(self) -> float:
        return float(np.percentile(self.seconds, 50))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "p50_s": self.p50, "max_s": self.max}


@dataclass
class DeltaPoint:
    """One (N, file size) measurement of the delta mode."""

    agents: int
    size_bytes: int
    keys: int
    churn: float
    upload_cap: int
    origin_cap: int
    first: Round
    delta: Round
    full: Round
    delta_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.delta_bytes = self.delta.deltas_listed[0] if self.delta.deltas_listed else 0

    @property
    def speedup(self) -> float:
        """Full-file rollout time over delta rollout time (last agent)."""
        return self.full.max / self.delta.max

    @property
    def origin_over_delta(self) -> float | None:
        return self.delta.origin_bytes / self.delta_bytes if self.delta_bytes else None

    @property
    def delta_percent(self) -> float:
        return 100.0 * self.delta_bytes / self.size_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "agents": self.agents, "size_bytes": self.size_bytes, "keys": self.keys, "churn": self.churn,
            "upload_cap": self.upload_cap, "origin_cap": self.origin_cap, "delta_bytes": self.delta_bytes,
            "delta_percent": self.delta_percent, "speedup": self.speedup,
            "origin_over_delta": self.origin_over_delta, "first": self.first.as_dict(),
            "delta": self.delta.as_dict(), "full": self.full.as_dict(),
        }


def _cpu_times() -> tuple[int, int]:
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0, 0
    return sum(values), values[3] + (values[4] if len(values) > 4 else 0)


ORIGIN_BLOCK = 16 * 1024
"""Granularity of :func:`origin_waste`: BitTorrent's block."""


def origin_waste(requests: Sequence[PayloadRequest]) -> tuple[int, int]:
    """``(resent, cut)`` bytes of ``requests`` (in the order they ended): bytes of blocks the
    origin had sent before, and bytes of requests the client left unfinished."""
    sent_blocks: dict[str, set[int]] = {}
    resent = cut = 0
    for r in requests:
        blocks = sent_blocks.setdefault(r.path, set())
        end = r.first + r.sent
        for block in range(r.first // ORIGIN_BLOCK, -(-end // ORIGIN_BLOCK)):
            overlap = min(end, (block + 1) * ORIGIN_BLOCK) - max(r.first, block * ORIGIN_BLOCK)
            if block in blocks:
                resent += overlap
            blocks.add(block)
        if r.sent < r.last - r.first + 1:
            cut += r.sent
    return resent, cut


def measure_round(fleet: LocalFleet, builder: FilterBuilder, origin_cap: int,
                  deltas: DeltaConfig | None = None) -> Round:
    """Publish ``builder`` (with ``deltas``) and wait until every agent has swapped to it."""
    before = {v.name: v.bytes_from_peers for v in fleet.views()}
    origin_before = fleet.origin_bytes()
    requests_since, wall_since = time.monotonic(), time.time()
    cpu_before = _cpu_times()
    published: Published = fleet.publish(builder, deltas=deltas)
    manifest = published.manifest
    limit = 120.0 + 3.0 * manifest.size / origin_cap if origin_cap else 600.0
    swaps = fleet.wait_for_version(published.version, limit_s=limit)
    total, idle = _cpu_times()
    spent = total - cpu_before[0]
    busy = 0.0 if spent <= 0 else 1.0 - (idle - cpu_before[1]) / spent
    time.sleep(0.5)  # let the agents' counters catch their last bytes
    views = fleet.views()
    requests = fleet.proxy.payload_requests(requests_since) if fleet.proxy is not None else []
    resent, cut = origin_waste(requests)
    published_at = requests_since + (published.announced_at - wall_since)  # monotonic
    return Round(
        version=published.version, file_bytes=manifest.size,
        deltas_listed=[d.size for d in manifest.deltas],
        seconds=sorted(at - published.announced_at for at in swaps.values()),
        origin_bytes=fleet.origin_bytes() - origin_before,
        peer_bytes=sum(v.bytes_from_peers - before.get(v.name, 0.0) for v in views),
        by_delta=sum(v.swapped_by_delta(published.version) for v in views),
        cpu_busy=busy, load_average=[round(x, 2) for x in os.getloadavg()],
        apply_s=sorted(s for v in views if (s := v.apply_seconds(published.version)) is not None),
        origin_resent_bytes=resent, origin_cut_bytes=cut,
        origin_requests=[{"path": r.path.rsplit("/", 2)[-1], "first": r.first, "last": r.last, "sent": r.sent,
                          "at_s": round(r.at - published_at, 3), "port": r.client[1]} for r in requests],
    )


def run_delta_fleet(setup: Setup, agents: int, versions: Sequence[tuple[int, Versions]],
                    points: list[DeltaPoint]) -> None:
    """One P2P fleet of ``agents`` agents; per ``(size, versions)``, the three rounds of
    the module docstring; each point is appended to ``points`` once measured."""
    spec = FleetSpec(
        agents=agents, discovery=setup.discovery, transfer="swarm",
        upload_rate_limit=setup.upload_cap, download_rate_limit=setup.download_cap,
        origin_rate_limit=setup.origin_cap, swarm=setup.swarm,
    )
    root = setup.work / f"delta-{agents}"
    started = time.monotonic()
    with LocalFleet(root, spec) as fleet:
        fleet.wait_until_up(limit_s=60.0 + 10.0 * agents)
        print(f"  delta fleet of {agents} up in {time.monotonic() - started:.0f} s ({fleet.discovery})",
              flush=True)
        for size, pair in versions:
            first = measure_round(fleet, pair.v1, setup.origin_cap)
            print(f"  {_describe('v1 full', first)}", flush=True)
            delta = measure_round(fleet, pair.v2, setup.origin_cap)
            if not delta.deltas_listed:
                raise FleetError(f"v{delta.version} was published without a delta")
            print(f"  {_describe('v2 delta', delta)}", flush=True)
            full = measure_round(fleet, pair.v2, setup.origin_cap, DeltaConfig(max_bases=0))
            print(f"  {_describe('v2 full', full)}", flush=True)
            point = DeltaPoint(agents, first.file_bytes, pair.keys, pair.churn, setup.upload_cap,
                               setup.origin_cap, first, delta, full)
            print(f"  N={agents} {size / MIB:.0f} MiB: delta {point.delta_bytes / MIB:.2f} MiB "
                  f"({point.delta_percent:.2f}% of the file), full/delta {point.speedup:.1f}x, "
                  f"origin {point.origin_over_delta or 0:.2f}x the delta", flush=True)
            points.append(point)
    shutil.rmtree(root, ignore_errors=True)


def _describe(label: str, r: Round) -> str:
    applies = (f", apply p50 {float(np.percentile(r.apply_s, 50)):.1f} s max {max(r.apply_s):.1f} s"
               if r.apply_s else "")
    return (f"{label:9} v{r.version}: p50 {r.p50:6.1f} s, max {r.max:6.1f} s, origin "
            f"{r.origin_bytes / MIB:7.2f} MiB (resent {r.origin_resent_bytes / MIB:.2f}, cut "
            f"{r.origin_cut_bytes / MIB:.2f}), peers {r.peer_bytes / MIB:8.1f} MiB, by delta {r.by_delta}, "
            f"CPU {r.cpu_busy:4.0%}, load {r.load_average[0]:.1f}{applies}")


def delta_checks(points: Sequence[DeltaPoint]) -> list[Check]:
    """The issue's rollout targets, per measured point."""
    checks: list[Check] = []
    for p in points:
        where = f"N={p.agents}, {p.size_bytes / MIB:.0f} MiB, churn {p.churn:g}"
        checks.append(Check(f"full-file / delta rollout (last agent) at {where}", p.speedup,
                            TARGET_SPEEDUP, ">=", "x", "same fleet, same run"))
        checks.append(Check(f"origin egress / delta size at {where}", p.origin_over_delta,
                            TARGET_ORIGIN_OVER_DELTA, "<=", "x"))
        checks.append(Check(f"agents that installed by delta at {where}", p.delta.by_delta / p.agents,
                            1.0, ">=", "", f"{p.delta.by_delta} of {p.agents}"))
    return checks


def delta_table_rows(points: Sequence[DeltaPoint]) -> list[list[str]]:
    """Rows for the text and Markdown tables (:data:`DELTA_HEADERS`)."""
    return [[str(p.agents), f"{p.size_bytes / MIB:.0f} MiB", f"{p.delta_bytes / MIB:.2f} MiB",
             f"{p.delta_percent:.2f}%", f"{p.first.max:.1f}", f"{p.delta.p50:.1f}", f"{p.delta.max:.1f}",
             f"{max(p.delta.apply_s):.1f}" if p.delta.apply_s else "-",
             f"{p.full.p50:.1f}", f"{p.full.max:.1f}", f"{p.speedup:.1f}×",
             f"{p.origin_over_delta or 0:.2f}×", f"{p.full.origin_bytes / p.size_bytes:.2f}×",
             f"{p.delta.by_delta}/{p.agents}",
             f"{p.delta.cpu_busy:.0%} / {p.full.cpu_busy:.0%}",
             f"{p.delta.load_average[0]:.1f} / {p.full.load_average[0]:.1f}"] for p in points]


DELTA_HEADERS = ["N", "file", "delta", "delta / file", "v1 full max (s)", "delta p50 (s)", "delta max (s)",
                 "apply max (s)",
                 "full p50 (s)", "full max (s)", "full / delta (max)", "origin / delta",
                 "origin (full) / file", "by delta", "CPU busy (delta / full)", "load 1 min (delta / full)"]


def load_delta_points(items: Sequence[dict[str, Any]]) -> list[DeltaPoint]:
    """DeltaPoints from the ``delta`` list of a saved run."""
    def round_of(data: dict[str, Any]) -> Round:
        return Round(**{k: v for k, v in data.items() if k not in ("p50_s", "max_s")})

    return [DeltaPoint(d["agents"], d["size_bytes"], d["keys"], d["churn"], d["upload_cap"],
                       d["origin_cap"], round_of(d["first"]), round_of(d["delta"]), round_of(d["full"]))
            for d in items]
