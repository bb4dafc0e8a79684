"""Private swarm benchmark: the cost of TLS between agents (issue 14).

Run from the repository root::

    python benchmarks/private_swarm.py [--agents 8] [--size-mib 256] [--upload-mib 4]
        [--rounds 1] [--json docs/benchmarks/private_swarm.json]

Each round runs two :class:`~bloomswarm.sandbox.fleet.LocalFleet` rollouts of one fresh
version of ``--size-mib`` to ``--agents`` agents on the agent's defaults (only addresses
and rate caps set; the tracker finds the peers), once **public** and once **private**
(``FleetSpec.private``: the publisher's torrents carry a fleet CA, every agent holds a
certificate from it and ``require_private``, peers speak TLS). The order alternates from
round to round, so that drift on this shared machine falls on both sides alike. Per
rollout:

- **convergence**: publish to the last agent's swap (``max``), and its ratio to the
  theoretical minimum under the caps;
- **CPU per MiB**: the agents' CPU seconds (``/proc/PID/stat``, utime + stime) from just
  before the publish to the last swap, divided by the MiB delivered (N x size);
- the origin's egress in copies of the file.

Target: private within 10% of public in convergence time; the CPU ratio is reported.
``--smoke``: 2 agents, 4 MiB, 16 MiB/s caps (the test's size).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    fill_defaults,
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

MIB = 1024 * 1024
TIME_TOLERANCE = 0.10
"""Private may take at most this much longer than public (issue 14)."""
Mode = Literal["public", "private"]


@dataclass(frozen=True)
class Rollout:
    """One version to one fleet."""

    mode: Mode
    round: int
    agents: int
    size_bytes: int
    max_s: float
    minimum_s: float
    cpu_s: float
    """The agents' CPU seconds during the rollout."""
    origin_copies: float
    load: list[float] | None

    @property
    def cpu_ms_per_mib(self) -> float:
        return 1000 * self.cpu_s / (self.agents * self.size_bytes / MIB)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_ms_per_mib": self.cpu_ms_per_mib,
                "max_over_minimum": self.max_s / self.minimum_s}


def run_rollout(mode: Mode, round_: int, *, agents: int, size: int, cap: int, work: Path) -> Rollout:
    """Start a fleet in ``mode``, publish one version, measure, stop the fleet."""
    from benchmarks.agent_cost import _read_ticks
    from benchmarks.swarm import random_filter, theoretical_minimum
    from bloomswarm.sandbox.fleet import FleetSpec, LocalFleet

    spec = FleetSpec(agents=agents, discovery="tracker", upload_rate_limit=cap, download_rate_limit=cap,
                     origin_rate_limit=cap, keep_versions=1, private=mode == "private")
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    with LocalFleet(work / f"{mode}-{round_}", spec) as fleet:
        fleet.wait_until_up(limit_s=60.0 + 10.0 * agents)
        builder = random_filter(size, seed=round_)
        pids = [a.process.pid for a in fleet.agents if a.process is not None]
        origin_before = fleet.origin_bytes()
        cpu_before = sum(_read_ticks(pid) for pid in pids)
        published = fleet.publish(builder)
        del builder
        swaps = fleet.wait_for_version(published.version, limit_s=120.0 + 3.0 * size / cap)
        cpu_s = (sum(_read_ticks(pid) for pid in pids) - cpu_before) / ticks_per_s
        manifest = published.manifest
        assert manifest.private == (mode == "private")
        return Rollout(
            mode=mode, round=round_, agents=agents, size_bytes=manifest.size,
            max_s=max(at - published.announced_at for at in swaps.values()),
            minimum_s=theoretical_minimum(manifest.size, agents, cap, manifest.piece_size),
            cpu_s=cpu_s, origin_copies=(fleet.origin_bytes() - origin_before) / manifest.size,
            load=load_average(),
        )


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def ratios(rollouts: list[Rollout]) -> dict[str, float]:
    """Private over public (means over the rounds): convergence time, agents' CPU per MiB."""
    public = [r for r in rollouts if r.mode == "public"]
    private = [r for r in rollouts if r.mode == "private"]
    if not public or not private:
        return {}
    return {"time": mean([r.max_s for r in private]) / mean([r.max_s for r in public]),
            "cpu_per_mib": (mean([r.cpu_ms_per_mib for r in private])
                            / mean([r.cpu_ms_per_mib for r in public]))}


def checks(found: dict[str, float]) -> list[Check]:
    """The issue's target: private converges within 10% of public."""
    if not found:
        return []
    return [Check("private/public convergence time", found["time"], 1 + TIME_TOLERANCE, "<=", "x")]


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--agents", type=positive_int(1000), help="agents (8)")
    parser.add_argument("--size-mib", type=positive_int(64 * 1024), help="file size, MiB (256)")
    parser.add_argument("--upload-mib", type=positive_float(1024 * 1024),
                        help="per-agent and origin cap, MiB/s (4)")
    parser.add_argument("--rounds", type=positive_int(1000),
                        help="public+private pairs, order alternating (1)")
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--smoke", action="store_true",
                        help="2 agents, 4 MiB, 16 MiB/s (options given explicitly win)")
    args = parser.parse_args(argv)
    defaults = ({"agents": 2, "size_mib": 4, "upload_mib": 16.0, "rounds": 1} if args.smoke else
                {"agents": 8, "size_mib": 256, "upload_mib": 4.0, "rounds": 1})
    fill_defaults(args, defaults)
    cap, size = int(args.upload_mib * MIB), args.size_mib * MIB
    rollouts: list[Rollout] = []
    with tempfile.TemporaryDirectory(prefix="bench-private-") as tmp:
        for round_ in range(args.rounds):
            order: list[Mode] = ["public", "private"] if round_ % 2 == 0 else ["private", "public"]
            for mode in order:
                section(f"round {round_ + 1}: {mode}, {args.agents} agents x {args.size_mib} MiB")
                rollout = run_rollout(mode, round_, agents=args.agents, size=size, cap=cap, work=Path(tmp))
                print(f"  last swap {rollout.max_s:.1f} s ({rollout.max_s / rollout.minimum_s:.2f}x the "
                      f"minimum), agents' CPU {rollout.cpu_ms_per_mib:.2f} ms/MiB, origin "
                      f"{rollout.origin_copies:.2f}x, load {rollout.load}", flush=True)
                rollouts.append(rollout)
    section("results")
    print(format_table(
        ["round", "mode", "max s", "max/min", "CPU ms/MiB", "origin"],
        [[str(r.round + 1), r.mode, f"{r.max_s:.1f}", f"{r.max_s / r.minimum_s:.2f}x",
          f"{r.cpu_ms_per_mib:.2f}", f"{r.origin_copies:.2f}x"] for r in rollouts]))
    found = ratios(rollouts)
    if found:
        print(f"private/public: convergence time {found['time']:.3f}x, agents' CPU per MiB "
              f"{found['cpu_per_mib']:.3f}x")
    section("acceptance")
    for check in checks(found):
        print(check.line())
    if args.json:
        write_json(args.json, {"machine": machine_info(), "agents": args.agents, "size_mib": args.size_mib,
                               "upload_mib": args.upload_mib, "rollouts": [r.as_dict() for r in rollouts],
                               "ratios": found, "checks": [c.as_dict() for c in checks(found)]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
