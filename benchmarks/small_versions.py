"""Small-version benchmark (issue 12): how fast a small version reaches a fleet on the
agent's default settings, and how much of it the origin sends.

Run from the repository root (needs moto's S3 server, the ``demo`` extra, and opentracker
for the default ``--discovery tracker``)::

    python benchmarks/small_versions.py [--agents 8] [--versions 5] [--size-mib 1]
        [--json docs/benchmarks/small_versions.json]

One :class:`~bloomswarm.sandbox.fleet.LocalFleet` (moto's S3 server behind the counting
origin, opentracker, N ``bloomswarm agent run`` processes on 127.0.0.1, no rate caps)
receives ``--versions`` versions one after another; each is published only once every
agent has swapped to the one before. Every agent runs on the agent's defaults
(agent/config.py): the fleet sets addresses and discovery, no rate cap and no other
``[swarm]`` setting (the origin policy is the production one), and polls every 0.5 s
(jitter 0.25 s). Each version is a full file of random bits
with its own seed, so no delta applies: every version is the whole file's rollout.

Per version it measures publish → last swap (``latest.json`` moving to the last agent's
swap, by the agents' own swap times) and the origin's egress over the file size
(counted where the bytes leave the origin, 0.5 s after the last swap). The targets
(issue 12): the median over the versions of publish → last swap at most 1.5 s, and the
origin at most 1.2× the file in every version.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    format_table,
    load_average,
    machine_info,
    output_path,
    positive_float,
    positive_int,
    section,
    stop_on_signals,
    write_json,
)
from benchmarks.swarm import CpuMeter, random_filter
from bloomswarm.agent.config import SwarmConfig
from bloomswarm.publisher.config import DeltaConfig
from bloomswarm.sandbox.fleet import FleetError, FleetSpec, LocalFleet

MIB = 1024 * 1024
POLL_INTERVAL_S = 0.5
"""The agents' ``[watch] poll_interval_s`` (the sandbox fleet's, with 0.25 s jitter)."""
TARGET_MEDIAN_S = 1.5
"""Median over the versions of publish → last swap, seconds (at most)."""
TARGET_ORIGIN = 1.2
"""Origin egress over the file size, in every version (at most)."""
COUNTER_SETTLE_S = 0.5
"""Wait after the last swap before reading the origin's count (requests in flight)."""


@dataclass(frozen=True)
class VersionPoint:
    """One version's rollout to the whole fleet."""

    version: int
    size_bytes: int
    """The filter file's size (header included)."""
    seconds: list[float]
    """Publish → swap, per agent, sorted."""
    origin_bytes: int
    """Filter bytes the origin sent for this version."""
    cpu_busy: float
    """Fraction of the machine's CPU time busy while the version rolled out."""

    @property
    def first_s(self) -> float:
        return self.seconds[0]

    @property
    def last_s(self) -> float:
        return self.seconds[-1]

    @property
    def origin_ratio(self) -> float:
        return self.origin_bytes / self.size_bytes

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "first_s": self.first_s, "last_s": self.last_s,
                "origin_ratio": self.origin_ratio}


@dataclass(frozen=True)
class Summary:
    """What the targets judge, over all versions of a run."""

    median_last_s: float
    max_origin_ratio: float

    @classmethod
    def of(cls, points: Sequence[VersionPoint]) -> Summary:
        """The summary of ``points`` (at least one)."""
        if not points:
            raise ValueError("no versions measured")
        return cls(statistics.median(p.last_s for p in points), max(p.origin_ratio for p in points))

    def checks(self) -> list[Check]:
        return [
            Check("publish -> last swap, median over the versions", self.median_last_s,
                  TARGET_MEDIAN_S, "<=", "s"),
            Check("origin egress / file size, worst version", self.max_origin_ratio,
                  TARGET_ORIGIN, "<=", "x"),
        ]


def origin_defaults() -> dict[str, object]:
    """The agent's default origin-policy settings (``[swarm] origin_*``), for the record."""
    defaults = SwarmConfig()
    return {f.name: getattr(defaults, f.name) for f in fields(SwarmConfig) if f.name.startswith("origin_")}


def run(agents: int, versions: int, size: int, *, discovery: Literal["tracker", "dht", "auto"],
        work: Path, points: list[VersionPoint], seed: int = 1) -> None:
    """Publish ``versions`` versions of ``size`` bytes to a fleet of ``agents``, each after
    the last has reached every agent; append each version's point to ``points`` as soon
    as it is measured."""
    spec = FleetSpec(agents=agents, discovery=discovery, poll_interval_s=POLL_INTERVAL_S)
    started = time.monotonic()
    with LocalFleet(work / f"fleet-{agents}", spec) as fleet:
        fleet.wait_until_up(limit_s=60.0 + 10.0 * agents)
        print(f"  fleet of {agents} up in {time.monotonic() - started:.0f} s ({fleet.discovery})", flush=True)
        for index in range(versions):
            builder = random_filter(size, seed + index)
            origin_before = fleet.origin_bytes()
            cpu = CpuMeter()
            published = fleet.publish(builder, deltas=DeltaConfig(max_bases=0))
            swaps = fleet.wait_for_version(published.version, limit_s=120.0)
            busy = cpu.busy()
            time.sleep(COUNTER_SETTLE_S)
            point = VersionPoint(
                version=published.version, size_bytes=published.manifest.size,
                seconds=sorted(at - published.announced_at for at in swaps.values()),
                origin_bytes=fleet.origin_bytes() - origin_before, cpu_busy=busy)
            print(f"  v{point.version}: first swap {point.first_s:.2f} s, last {point.last_s:.2f} s, "
                  f"origin {point.origin_ratio:.2f}x, CPU busy {point.cpu_busy:.0%}", flush=True)
            points.append(point)


def table(points: Sequence[VersionPoint]) -> str:
    rows = [[f"v{p.version}", f"{p.size_bytes / MIB:.2f}", f"{p.first_s:.2f}",
             f"{statistics.median(p.seconds):.2f}", f"{p.last_s:.2f}", f"{p.origin_ratio:.2f}x",
             f"{p.cpu_busy:.0%}"] for p in points]
    return format_table(["version", "MiB", "first s", "p50 s", "last s", "origin", "CPU"], rows)


def main(argv: list[str] | None = None) -> int:
    """Run the fleet, print the table and the targets; write JSON. Exit 0 when every
    target is met (or ``--no-targets``), 1 when one is not, 2 when the rollout failed."""
    stop_on_signals()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--agents", type=positive_int(1000), default=8, help="agents (8)")
    parser.add_argument("--versions", type=positive_int(10_000), default=5,
                        help="versions published one after another (5)")
    parser.add_argument("--size-mib", type=positive_float(64 * 1024), default=1.0, help="file size, MiB (1)")
    parser.add_argument("--discovery", default="tracker", choices=("tracker", "dht", "auto"))
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--no-targets", action="store_true",
                        help="exit 0 whatever the figures (smoke runs)")
    args = parser.parse_args(argv)
    size = int(args.size_mib * MIB)
    if size < 1:
        parser.error("argument --size-mib: must be at least one byte")
    began = time.time()
    load_start = load_average()
    points: list[VersionPoint] = []
    failure: str | None = None
    work = Path(tempfile.mkdtemp(prefix="bench-small-"))
    section(f"{args.versions} versions of {args.size_mib:g} MiB to {args.agents} agents, agent defaults")
    try:
        run(args.agents, args.versions, size, discovery=args.discovery, work=work, points=points)
    except FleetError as exc:  # keep the versions measured so far
        failure = str(exc).splitlines()[0]
        print(f"  FAILED: {failure}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    section("results")
    checks: list[Check] = []
    summary: Summary | None = None
    if points:
        print(table(points))
        summary = Summary.of(points)
        checks = summary.checks()
    section("targets")
    for check in checks:
        print(check.line())
    print(f"load average at start {load_start}, at end {load_average()}")
    result = {
        "benchmark": "small_versions",
        "machine": machine_info(),
        "seconds": time.time() - began,
        "settings": {"agents": args.agents, "versions": args.versions, "size_bytes": size,
                     "discovery": args.discovery, "poll_interval_s": POLL_INTERVAL_S,
                     "rate_limits": {"upload": 0, "download": 0, "origin": 0},
                     "swarm_overrides": {}, "agent_origin_defaults": origin_defaults(),
                     "command": " ".join(["python benchmarks/small_versions.py",
                                          *(argv if argv is not None else sys.argv[1:])])},
        "versions": [p.as_dict() for p in points],
        "summary": None if summary is None else asdict(summary),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "checks": [c.as_dict() for c in checks],
        "failure": failure,
    }
    if args.json:
        write_json(args.json, result)
    if failure is not None or not points:
        return 2
    return 0 if args.no_targets or all(c.passed is not False for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
