"""Agent cost benchmark: CPU and memory of an idle agent, and CPU per MiB of a rollout.

Run from the repository root::

    python benchmarks/agent_cost.py [--agents 8] [--window-s 30] [--size-mib 64]
        [--json docs/benchmarks/agent_cost.json] [--baseline]

A :class:`~bloomswarm.sandbox.fleet.LocalFleet` (moto, the origin, opentracker) runs N
agents as ``bloomswarm agent run`` processes on the agent's **default settings**: each
agent's TOML holds only what names an address (data directory, key, bucket and
endpoint, status port, listen address, tracker), the loopback origin's
``allow_private_origin``, and the rate caps (:func:`agent_toml`). Not the fleet's usual
fast polling: the idle agent is measured as it would run in production.

Two rows:

- **idle**: a version of ``--idle-size-mib`` (1) is published and every agent swaps to it
  and seeds it; after ``--settle-s`` the benchmark stops asking the agents anything and
  reads each agent's ``/proc/PID/stat`` (utime + stime) at the start and end of a
  ``--window-s`` window: CPU as % of one core. USS (``Private_Clean + Private_Dirty`` of
  ``/proc/PID/smaps_rollup``) at the end of the window. Targets (issue 12): <= 0.2 % of a
  core and <= 50 MiB USS per agent (mean over the agents).
- **rollout**: a version of ``--size-mib`` (64) goes to the N agents under 4 MiB/s upload
  caps (the origin capped at 4 MiB/s, like benchmarks/swarm.py); the agents' CPU seconds
  from just before the publish to the last agent's swap (``/status`` polled every second
  meanwhile), divided by the MiB delivered to them (N x size). Target: half the
  baseline's.

``--baseline`` stores the results as the baseline (with ``git rev-parse --short HEAD``)
in the JSON file; without it, an existing baseline in that file is kept and the ratios
to it are printed. ``--smoke``: 2 agents, 2 MiB, 3 s windows (the test's size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    fill_defaults,
    fmt_ratio,
    format_table,
    load_average,
    machine_info,
    non_negative_float,
    output_path,
    positive_float,
    positive_int,
    read_json_arg,
    section,
    stop_on_signals,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
DEFAULT_JSON = ROOT / "docs" / "benchmarks" / "agent_cost.json"
IDLE_CPU_TARGET_PCT = 0.2
IDLE_USS_TARGET_MIB = 50.0
ROLLOUT_TARGET_RATIO = 0.5
"""Rollout CPU per MiB, at most this fraction of the baseline's (issue 12)."""
ALLOWED_SETTINGS = {
    "": {"data_dir", "public_keys", "transfer"},
    "s3": {"bucket", "prefix", "endpoint_url", "region"},
    "status": {"port"},
    "swarm": {"listen_interfaces", "trackers", "allow_private_origin", "upload_rate_limit",
              "download_rate_limit"},
}
"""Table ("" for the top level) -> the settings :func:`agent_toml` may set: addresses, the
loopback origin's SSRF switch and rate caps; everything else stays at its default."""


# -- pure parts --------------------------------------------------------------------------


def cpu_ticks(stat: str) -> int:
    """utime + stime (clock ticks) from the text of ``/proc/PID/stat``; the command name
    (field 2) may hold spaces and parentheses, so fields are counted after its last ')'."""
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def uss_bytes(rollup: Mapping[str, int]) -> int:
    """Unique set size: ``Private_Clean + Private_Dirty`` of smaps_rollup (bytes)."""
    return int(rollup.get("Private_Clean", 0)) + int(rollup.get("Private_Dirty", 0))


def core_percent(ticks: int, seconds: float, ticks_per_s: float) -> float:
    """CPU time of ``ticks`` spent over ``seconds`` of wall time, in % of one core."""
    return 100.0 * ticks / ticks_per_s / seconds if seconds > 0 else 0.0


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def agent_toml(tables: Mapping[str, Mapping[str, object]]) -> str:
    """An agent config file from ``tables`` ("" holds the top-level keys); ValueError for
    any setting outside :data:`ALLOWED_SETTINGS` (the agent runs on its defaults)."""
    lines: list[str] = []
    for table, values in sorted(tables.items()):
        extra = set(values) - ALLOWED_SETTINGS.get(table, set())
        if extra:
            raise ValueError(f"not a default setting: {table}.{sorted(extra)[0]}")
        if table:
            lines.append(f"[{table}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)


@dataclass(frozen=True)
class IdleRow:
    agents: int
    window_s: float
    cpu_pct_mean: float
    """% of one core, mean over the agents."""
    cpu_pct_max: float
    uss_mib_mean: float
    uss_mib_max: float
    load: list[float] | None


@dataclass(frozen=True)
class RolloutRow:
    agents: int
    size_mib: int
    seconds: float
    """Publish to the last agent's swap."""
    cpu_s: float
    """CPU seconds of all agents over that time."""
    cpu_ms_per_mib: float
    load: list[float] | None


def idle_row(agents: int, window_s: float, cpu_pct: Sequence[float], uss: Sequence[int],
             load: list[float] | None) -> IdleRow:
    """The idle row from per-agent CPU % and USS bytes."""
    return IdleRow(agents, window_s, round(statistics.fmean(cpu_pct), 4), round(max(cpu_pct), 4),
                   round(statistics.fmean(uss) / MIB, 2), round(max(uss) / MIB, 2), load)


def rollout_row(agents: int, size_mib: int, seconds: float, cpu_s: float,
                load: list[float] | None) -> RolloutRow:
    """The rollout row: CPU milliseconds per MiB delivered (agents x size)."""
    return RolloutRow(agents, size_mib, round(seconds, 2), round(cpu_s, 3),
                      round(1000.0 * cpu_s / (agents * size_mib), 3), load)


def checks(idle: IdleRow, rollout: RolloutRow | None, baseline: Mapping[str, Any] | None) -> list[Check]:
    """The issue-12 targets; the rollout one needs a baseline."""
    result = [
        Check("idle agent CPU (mean)", idle.cpu_pct_mean, IDLE_CPU_TARGET_PCT, "<=", "% of a core"),
        Check("idle agent USS (mean)", idle.uss_mib_mean, IDLE_USS_TARGET_MIB, "<=", "MiB"),
    ]
    if rollout is not None:
        base = (baseline or {}).get("rollout", {}).get("cpu_ms_per_mib")
        ratio = rollout.cpu_ms_per_mib / base if base else None
        result.append(Check("rollout CPU per MiB / baseline", ratio, ROLLOUT_TARGET_RATIO, "<=", "x"))
    return result


# -- the fleet ---------------------------------------------------------------------------


def _read_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        return cpu_ticks(fh.read())


def _start_default_agent(fleet: Any, index: int) -> Any:
    """Start agent ``index`` of ``fleet`` on the default settings (see module docstring)."""
    from bloomswarm.common.storage import S3Config
    from bloomswarm.sandbox.agent_process import AgentProcess
    from bloomswarm.sandbox.processes import free_port

    s3 = S3Config(bucket=fleet.s3.bucket, prefix=fleet.s3.prefix, endpoint_url=fleet.proxy.endpoint,
                  region=fleet.s3.region or "us-east-1")
    agent = AgentProcess(fleet.root / f"agent{index}", s3, fleet.public_key_path, transfer="swarm")
    spec = fleet.spec
    tables: dict[str, dict[str, object]] = {
        "": {"data_dir": str(agent.data_dir), "public_keys": [str(fleet.public_key_path)],
             "transfer": "swarm"},
        "s3": {"bucket": s3.bucket, "prefix": s3.prefix, "endpoint_url": s3.endpoint_url,
               "region": s3.region},
        "status": {"port": agent.port},
        "swarm": {"listen_interfaces": f"127.0.0.1:{free_port(udp=True)}",
                  "trackers": [fleet.tracker.announce_url], "allow_private_origin": True,
                  "upload_rate_limit": spec.upload_rate_limit,
                  "download_rate_limit": spec.download_rate_limit},
    }
    agent.config_path.write_text(agent_toml(tables))
    agent.start()
    fleet.agents.append(agent)
    return agent


def _publish_and_wait(fleet: Any, size: int, seed: int, limit_s: float) -> float:
    from benchmarks.swarm import random_filter

    started = time.monotonic()
    published = fleet.publish(random_filter(size, seed))
    fleet.wait_for_version(published.version, limit_s=limit_s, interval_s=1.0)
    return time.monotonic() - started


def run(agents: int, window_s: float, size_mib: int, *, idle_size_mib: int, settle_s: float,
        upload_cap: int, root: Path, rollout: bool = True) -> tuple[IdleRow, RolloutRow | None]:
    """Start the fleet, measure both rows, stop it."""
    from bloomswarm.sandbox.fleet import FleetSpec, LocalFleet

    spec = FleetSpec(agents=0, discovery="tracker", upload_rate_limit=upload_cap,
                     origin_rate_limit=upload_cap)
    ticks_per_s = float(os.sysconf("SC_CLK_TCK"))
    from benchmarks._common import smaps_rollup

    with LocalFleet(root, spec) as fleet:
        for index in range(agents):
            _start_default_agent(fleet, index)
        fleet.wait_until_up()
        _publish_and_wait(fleet, idle_size_mib * MIB, 1, limit_s=300.0)
        time.sleep(settle_s)
        pids = [a.process.pid for a in fleet.agents if a.process is not None]
        before = [_read_ticks(pid) for pid in pids]
        t0 = time.monotonic()
        time.sleep(window_s)
        after = [_read_ticks(pid) for pid in pids]
        elapsed = time.monotonic() - t0
        uss = [uss_bytes(smaps_rollup(pid)) for pid in pids]
        cpu = [core_percent(b - a, elapsed, ticks_per_s) for a, b in zip(before, after, strict=True)]
        idle = idle_row(agents, round(elapsed, 2), cpu, uss, load_average())
        if not rollout:
            return idle, None
        before_s = sum(_read_ticks(pid) for pid in pids) / ticks_per_s
        seconds = _publish_and_wait(fleet, size_mib * MIB, 2, limit_s=900.0)
        cpu_s = sum(_read_ticks(pid) for pid in pids) / ticks_per_s - before_s
        return idle, rollout_row(agents, size_mib, seconds, cpu_s, load_average())


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(idle: IdleRow, rollout: RolloutRow | None, baseline: Mapping[str, Any] | None) -> list[Check]:
    """Print the rows, the ratios to the baseline and the checks; return the checks."""
    base_idle = (baseline or {}).get("idle", {})
    base_roll = (baseline or {}).get("rollout", {})

    def ratio(value: float, base: float | None) -> str:
        return fmt_ratio(value / base) if base else "n/a"

    rows = [["idle CPU (% of a core, mean / max)", f"{idle.cpu_pct_mean:.3f} / {idle.cpu_pct_max:.3f}",
             ratio(idle.cpu_pct_mean, base_idle.get("cpu_pct_mean"))],
            ["idle USS (MiB, mean / max)", f"{idle.uss_mib_mean:.1f} / {idle.uss_mib_max:.1f}",
             ratio(idle.uss_mib_mean, base_idle.get("uss_mib_mean"))]]
    if rollout is not None:
        rows.append([f"rollout CPU ms per MiB ({rollout.size_mib} MiB x {rollout.agents}, "
                     f"{rollout.seconds:.1f} s)", f"{rollout.cpu_ms_per_mib:.2f}",
                     ratio(rollout.cpu_ms_per_mib, base_roll.get("cpu_ms_per_mib"))])
    print(format_table(["measure", "value", "/ baseline"], rows))
    print(f"load average: idle {idle.load}, after rollout {rollout.load if rollout else None}")
    found = checks(idle, rollout, baseline)
    for check in found:
        print(check.line())
    return found


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--agents", type=positive_int(1000), help="agents in the fleet (8)")
    parser.add_argument("--window-s", type=positive_float(86400), help="idle measuring window (30)")
    parser.add_argument("--settle-s", type=non_negative_float(3600), help="wait after convergence (5)")
    parser.add_argument("--size-mib", type=positive_int(64 * 1024), help="the rollout's file size (64)")
    parser.add_argument("--idle-size-mib", type=positive_int(64 * 1024), default=1,
                        help="the seeded version's size (1)")
    parser.add_argument("--upload-cap-mib", type=positive_float(1024 * 1024), default=4.0,
                        help="each agent's and the origin's upload cap (4)")
    parser.add_argument("--no-rollout", action="store_true", help="the idle row only")
    parser.add_argument("--smoke", action="store_true",
                        help="2 agents, 2 MiB, 3 s windows (options given explicitly win)")
    parser.add_argument("--json", type=output_path, metavar="PATH",
                        help=f"write the results (e.g. {DEFAULT_JSON})")
    parser.add_argument("--baseline", action="store_true", help="store this run as the JSON's baseline")
    args = parser.parse_args(argv)
    defaults = {"agents": 2, "window_s": 3.0, "settle_s": 1.0, "size_mib": 2} if args.smoke else {
        "agents": 8, "window_s": 30.0, "settle_s": 5.0, "size_mib": 64}
    fill_defaults(args, defaults)
    previous: dict[str, Any] = {}
    if args.json is not None and args.json.exists():
        previous = read_json_arg(parser, "--json", args.json)
        if not isinstance(previous, dict):
            parser.error(f"argument --json: {str(args.json)!r} does not hold a JSON object")
    section(f"agent cost: {args.agents} agents, idle {args.window_s:.0f} s, rollout {args.size_mib} MiB")
    with tempfile.TemporaryDirectory(prefix="bloomswarm-agent-cost-") as tmp:
        idle, rollout = run(args.agents, args.window_s, args.size_mib, idle_size_mib=args.idle_size_mib,
                            settle_s=args.settle_s, upload_cap=int(args.upload_cap_mib * MIB), root=Path(tmp),
                            rollout=not args.no_rollout)
    result = {"commit": _commit(), "idle": asdict(idle), "rollout": asdict(rollout) if rollout else None}
    baseline = result if args.baseline else previous.get("baseline")
    found = report(idle, rollout, None if args.baseline else baseline)
    if args.json is not None:
        write_json(args.json, {
            "machine": machine_info(),
            "config": {"agents": args.agents, "window_s": args.window_s, "size_mib": args.size_mib,
                       "idle_size_mib": args.idle_size_mib, "upload_cap_mib": args.upload_cap_mib,
                       "command": "python benchmarks/agent_cost.py " + " ".join(argv or sys.argv[1:])},
            "baseline": baseline,
            "current": result,
            "checks": [check.as_dict() for check in found],
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
