"""Distribution benchmark: a version's rollout to N agents over P2P against every agent
downloading it from the origin, under the same bandwidth caps.

Run from the repository root (needs opentracker; matplotlib for the plots)::

    python benchmarks/swarm.py [--agents 8,16,32] [--sizes-mib 64,256,1024]
        [--direct-sizes-mib 64] [--upload-mib 4] [--json docs/benchmarks/swarm.json]
        [--plots docs/benchmarks] [--markdown docs/benchmarks/swarm.md] [--quick]
        [--delta-churn 0.01 [--delta-sizes-mib 256] [--delta-agents 16,32]]

For every fleet size N, one :class:`~bloomswarm.sandbox.fleet.LocalFleet` (moto's S3
server behind the counting, capped origin proxy, opentracker, N ``bloomswarm agent run``
processes on 127.0.0.1) receives one version per file size, smallest first; the time of
a point runs from the moment just before ``latest.json`` moved to each agent's swap
(poll, download, SHA-256 check, install). Each agent's libtorrent session is capped at
``--upload-mib`` MiB/s up and down, for loopback peers too (peer classes); the origin's
total egress is capped at the same rate, the acceptance case "the origin's cap equals
one agent's cap". The baseline fleet uses the direct transfer (every agent GETs the
whole file from the origin, paced at the same per-agent cap) for the sizes in
``--direct-sizes-mib``: its time is N·F/U by construction, so it is measured at the
smaller sizes only, and said so.

Every agent runs on the agent's defaults (agent/config.py): the fleet sets only
addresses, the rate caps above and its poll interval (0.5 s). ``--swarm KEY=VALUE`` adds
a ``[swarm]`` setting to the P2P agents, for experiments; the default run uses none.
The published tables of docs/benchmarks/swarm.md were measured before that rule, with
shortened origin waits (1 s grace, stagger and starvation, 1 MiB origin requests).

Theoretical minimum of a P2P point: every byte leaves the origin at least once at U, and
N copies must cross links of total upload (N+1)·U, so ``max(F/U, N·F/((N+1)·U))`` =
F/U, plus the pipeline of the last piece (size P): it reaches its first agent and must
then reach the other N−1, doubling its holders at best every P/U, so
``ceil(log2 N)·P/U`` more.

``--delta-churn C`` adds the delta mode (benchmarks/_swarm_delta.py): per fleet size in
``--delta-agents`` and file size in ``--delta-sizes-mib``, one P2P fleet rolls out v1 in
full, then v2 (C of the keys replaced) by delta, then v2's filter again with the
publisher's deltas off; it reports full/delta time, origin egress over the delta's size
and the agents that installed by delta. Pass ``--sizes-mib ''`` and ``--direct-sizes-mib
''`` to run the delta mode alone; ``--quick --delta-churn C`` is its smoke run alone.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from benchmarks._common import (
    Check,
    fill_defaults,
    format_table,
    input_file,
    int_list,
    load_average,
    machine_info,
    open_fraction,
    output_path,
    positive_float,
    read_json_arg,
    section,
    stop_on_signals,
    work_dir,
    write_json,
)
from benchmarks._swarm_delta import (
    DELTA_HEADERS,
    DeltaPoint,
    Versions,
    build_versions,
    delta_checks,
    delta_table_rows,
    load_delta_points,
    run_delta_fleet,
)
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.params import BLOCK_BITS, FilterParams, Layout
from bloomswarm.sandbox.fleet import FleetError, FleetSpec, LocalFleet

MIB = 1024 * 1024
Mode = Literal["p2p", "direct"]


@dataclass
class Point:
    """One (mode, N, file size) measurement."""

    mode: Mode
    agents: int
    size_bytes: int
    """The filter file's size (header included)."""
    piece_size: int
    upload_cap: int
    origin_cap: int
    seconds: list[float]
    """Publish → swap, per agent, sorted."""
    origin_bytes: int
    """Filter bytes the origin sent for this version (counted at the proxy)."""
    peer_bytes: list[float]
    """Bytes each agent received from peers for this version (its own count)."""
    agent_origin_bytes: list[float]
    """Bytes each agent received from the origin for this version (its own count)."""
    cpu_busy: float
    """Fraction of the machine's CPU time busy while the point ran (all processes)."""
    minimum_s: float = field(init=False)

    def __post_init__(self) -> None:
        if self.mode == "direct":  # every copy crosses the origin's cap
            self.minimum_s = self.agents * self.size_bytes / (self.origin_cap or self.upload_cap)
        else:
            self.minimum_s = theoretical_minimum(self.size_bytes, self.agents, self.upload_cap,
                                                 self.piece_size)

    def quantile(self, q: float) -> float:
        return float(np.percentile(self.seconds, q * 100))

    @property
    def p50(self) -> float:
        return self.quantile(0.5)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)

    @property
    def max(self) -> float:
        return max(self.seconds)

    @property
    def origin_copies(self) -> float:
        return self.origin_bytes / self.size_bytes

    @property
    def peer_copies(self) -> float:
        return sum(self.peer_bytes) / self.size_bytes

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(p50_s=self.p50, p99_s=self.p99, max_s=self.max, origin_copies=self.origin_copies,
                    peer_copies=self.peer_copies, max_over_minimum=self.max / self.minimum_s)
        return data


def load_points(path: Path) -> tuple[list[Point], list[Point], list[str]]:
    """The P2P and direct points and the failures of a JSON file this benchmark wrote."""
    return points_of(json.loads(path.read_text(encoding="utf-8")))


def points_of(data: dict[str, Any]) -> tuple[list[Point], list[Point], list[str]]:
    """The P2P and direct points and the failures of a run's results (as loaded)."""
    names = {f.name for f in fields(Point) if f.init}

    def points(key: str) -> list[Point]:
        return [Point(**{k: v for k, v in item.items() if k in names}) for item in data[key]]

    return points("p2p"), points("direct"), list(data.get("failures", []))


def theoretical_minimum(size: int, agents: int, upload: int, piece: int) -> float:
    """Seconds for ``agents`` downloaders of a ``size``-byte file to all have it, with one
    origin and every node (origin included) uploading at most ``upload`` bytes/s; pieces
    of ``piece`` bytes (module docstring)."""
    bound = max(size / upload, agents * size / ((agents + 1) * upload))
    return bound + math.ceil(math.log2(max(agents, 1))) * piece / upload if agents > 1 else bound


def random_filter(size: int, seed: int) -> FilterBuilder:
    """A blocked filter whose bit array is ``size`` random bytes (rounded down to whole
    512-bit blocks): incompressible, and built in a second whatever the size."""
    blocks = max(size * 8 // BLOCK_BITS, 1)
    params = FilterParams(Layout.BLOCKED, blocks * BLOCK_BITS, 7, seed)
    body = np.random.default_rng(seed).bytes(params.num_bytes)
    return FilterBuilder(params, capacity=size, body=body, key_count=size // 2)


class CpuMeter:
    """The machine's busy CPU fraction between :meth:`start` and :meth:`busy` (/proc/stat)."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        try:
            with open("/proc/stat", encoding="ascii") as fh:
                values = [int(v) for v in fh.readline().split()[1:]]
        except OSError:
            return 0, 0
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values), idle

    def busy(self) -> float:
        total, idle = self._read()
        spent = total - self._start[0]
        return 0.0 if spent <= 0 else 1.0 - (idle - self._start[1]) / spent


@dataclass(frozen=True)
class Setup:
    """What every fleet of a run shares."""

    upload_cap: int
    download_cap: int
    origin_cap: int
    swarm: dict[str, object]
    discovery: Literal["tracker", "dht", "auto"]
    work: Path
    seed: int = 1


def run_fleet(setup: Setup, mode: Mode, agents: int, sizes: Sequence[int], points: list[Point]) -> None:
    """One fleet of ``agents`` agents; one published version per size, in order; each
    point is appended to ``points`` as soon as it is measured."""
    spec = FleetSpec(
        agents=agents, discovery=setup.discovery, transfer="swarm" if mode == "p2p" else "direct",
        upload_rate_limit=setup.upload_cap, download_rate_limit=setup.download_cap,
        origin_rate_limit=setup.origin_cap, swarm=setup.swarm if mode == "p2p" else {},
        keep_versions=1,
    )
    root = setup.work / f"{mode}-{agents}"
    started = time.monotonic()
    with LocalFleet(root, spec) as fleet:
        fleet.wait_until_up(limit_s=60.0 + 10.0 * agents)
        print(f"  {mode} fleet of {agents} up in {time.monotonic() - started:.0f} s ({fleet.discovery})",
              flush=True)
        for index, size in enumerate(sizes):
            builder = random_filter(size, setup.seed + index)
            before = {v.name: (v.bytes_from_peers, v.bytes_from_origin) for v in fleet.views()}
            origin_before = fleet.origin_bytes()
            cpu = CpuMeter()
            published = fleet.publish(builder)
            del builder
            manifest = published.manifest
            copies = agents if mode == "direct" else 1
            limit = 120.0 + 3.0 * copies * manifest.size / setup.origin_cap if setup.origin_cap else 600.0
            swaps = fleet.wait_for_version(published.version, limit_s=limit)
            busy = cpu.busy()
            time.sleep(0.5)  # let the agents' counters catch their last bytes
            views = fleet.views()
            point = Point(
                mode=mode, agents=agents, size_bytes=manifest.size, piece_size=manifest.piece_size,
                upload_cap=setup.upload_cap, origin_cap=setup.origin_cap,
                seconds=sorted(at - published.announced_at for at in swaps.values()),
                origin_bytes=fleet.origin_bytes() - origin_before,
                peer_bytes=[v.bytes_from_peers - before.get(v.name, (0.0, 0.0))[0] for v in views],
                agent_origin_bytes=[v.bytes_from_origin - before.get(v.name, (0.0, 0.0))[1] for v in views],
                cpu_busy=busy,
            )
            print(f"  {describe(point)}", flush=True)
            points.append(point)
    shutil.rmtree(root, ignore_errors=True)


def describe(point: Point) -> str:
    return (f"{point.mode:6} N={point.agents:<3} {point.size_bytes / MIB:7.0f} MiB: p50 {point.p50:7.1f} s, "
            f"p99 {point.p99:7.1f} s, max {point.max:7.1f} s (min {point.minimum_s:6.1f} s, "
            f"{point.max / point.minimum_s:4.2f}x), origin {point.origin_copies:5.2f}x, "
            f"peers {point.peer_copies:5.1f}x, CPU busy {point.cpu_busy:4.0%}")


def acceptance(p2p: Sequence[Point], direct: Sequence[Point]) -> list[Check]:
    """The issue's targets, from this run's points (largest N measured)."""
    checks: list[Check] = []
    if not p2p:
        return checks
    top = max(p.agents for p in p2p)
    at_top = [p for p in p2p if p.agents == top]
    checks.append(Check(f"origin egress at N={top} (worst size)", max(p.origin_copies for p in at_top),
                        1.2, "<=", "x", "file sizes"))
    checks.append(Check("convergence max / theoretical minimum (worst point)",
                        max(p.max / p.minimum_s for p in p2p), 1.5, "<="))
    pairs = [(p, d) for d in direct for p in p2p if (p.agents, p.size_bytes) == (d.agents, d.size_bytes)]
    if pairs:
        p, d = max(pairs, key=lambda pd: (pd[0].agents, pd[0].size_bytes))
        checks.append(Check(f"direct max / P2P max at N={p.agents}, {p.size_bytes / MIB:.0f} MiB",
                            d.max / p.max, 8.0, ">=", "x", "origin cap = one agent's cap"))
    return checks


def run_delta_mode(setup: Setup, churn: float, agents: Sequence[int], sizes: Sequence[int], *,
                   points: list[DeltaPoint], failures: list[str]) -> None:
    """The delta mode: build each size's v1 and v2 once, then one fleet per N."""
    versions: list[tuple[int, Versions]] = []
    for size in sizes:
        section(f"delta mode: building v1 and v2 of {size / MIB:.0f} MiB (churn {churn:g})")
        pair = build_versions(size, churn, setup.seed)
        print(f"  {pair.keys:,} keys each, {pair.v1.params.num_bytes / MIB:.1f} MiB body, "
              f"built in {pair.build_s:.0f} s", flush=True)
        versions.append((size, pair))
    for n in agents:
        section(f"delta mode, {n} agents")
        try:
            run_delta_fleet(setup, n, versions, points)
        except FleetError as exc:
            failures.append(f"delta N={n}: {str(exc).splitlines()[0]}")
            print(f"  FAILED: {failures[-1]}", flush=True)


def parse_settings(items: Sequence[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as [swarm] settings (numbers parsed)."""
    settings: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--swarm wants KEY=VALUE, got {item!r}")
        try:
            settings[key] = int(value)
        except ValueError:
            try:
                settings[key] = float(value)
            except ValueError:
                settings[key] = value
    return settings


def main(argv: list[str] | None = None) -> int:
    """Run the sweep, print the table and the checks; write JSON, plots, Markdown."""
    stop_on_signals()
    fleets, sizes_mib = int_list(1, 1000), int_list(1, 64 * 1024)
    rate = positive_float(1024 * 1024)
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--agents", type=fleets, help="fleet sizes (comma-separated; 8,16,32)")
    parser.add_argument("--sizes-mib", type=sizes_mib, help="P2P file sizes, MiB (64,256,1024; empty: none)")
    parser.add_argument("--direct-sizes-mib", type=sizes_mib,
                        help="file sizes of the direct baseline, MiB (64; empty: no baseline)")
    parser.add_argument("--direct-agents", type=fleets, default=None,
                        help="fleet sizes of the baseline (default: --agents)")
    parser.add_argument("--large-agents", type=fleets, default=None,
                        help="fleet sizes that also get the sizes above 256 MiB (default: all)")
    parser.add_argument("--upload-mib", type=rate, help="per-agent upload (and download) cap (4)")
    parser.add_argument("--origin-mib", type=rate, default=None,
                        help="origin's total cap (default: = upload)")
    parser.add_argument("--download-mib", type=rate, default=None,
                        help="per-agent download cap (default: = upload)")
    parser.add_argument("--discovery", default="tracker", choices=("tracker", "dht", "auto"))
    parser.add_argument("--swarm", action="append", default=[], metavar="KEY=VALUE",
                        help="[swarm] setting of the P2P agents, for experiments (default: none, "
                        "the agent's defaults)")
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--plots", type=work_dir, help="directory for swarm_time.png and swarm_origin.png")
    parser.add_argument("--markdown", type=output_path, help="write the results table here")
    parser.add_argument("--from-json", type=input_file, metavar="RESULTS",
                        help="measure nothing: redo the table, checks, plots and Markdown of a saved run "
                             "(not with --json)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 agents, 8 MiB, no caps beyond 8 MiB/s, baseline included "
                             "(with --delta-churn: the delta mode alone; options given explicitly win)")
    parser.add_argument("--delta-churn", type=open_fraction, default=None, metavar="C",
                        help="add the delta mode: v2 replaces this share of v1's keys (e.g. 0.01)")
    parser.add_argument("--delta-sizes-mib", type=sizes_mib, help="file sizes of the delta mode, MiB (256)")
    parser.add_argument("--delta-agents", type=fleets, default=None,
                        help="fleet sizes of the delta mode (default: --agents)")
    args = parser.parse_args(argv)
    defaults: dict[str, object] = {"agents": [8, 16, 32], "sizes_mib": [64, 256, 1024],
                                   "direct_sizes_mib": [64], "upload_mib": 4.0, "delta_sizes_mib": [256]}
    if args.quick:
        defaults.update(agents=[3], sizes_mib=[8], direct_sizes_mib=[8], upload_mib=16.0)
        if args.delta_churn is not None:
            defaults.update(sizes_mib=[], direct_sizes_mib=[], delta_sizes_mib=[8], delta_agents=[3])
    fill_defaults(args, defaults)
    if not args.agents:
        parser.error("argument --agents: needs at least one fleet size")
    if args.from_json is not None and args.json is not None:
        parser.error("--json cannot be combined with --from-json (it would overwrite a measured run's "
                     "settings with this command's)")
    try:
        swarm_settings = parse_settings(args.swarm)
    except ValueError as exc:
        parser.error(str(exc))
    loaded: tuple[list[Point], list[Point], list[str], list[DeltaPoint]] | None = None
    if args.from_json is not None:
        data = read_json_arg(parser, "--from-json", args.from_json)
        try:
            loaded = (*points_of(data), load_delta_points(data.get("delta", [])))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            parser.error(f"argument --from-json: {str(args.from_json)!r} is not a swarm.py results file "
                         f"({exc!r})")
    upload = int(args.upload_mib * MIB)
    agents: list[int] = args.agents
    sizes = [s * MIB for s in args.sizes_mib]
    direct_sizes = [s * MIB for s in args.direct_sizes_mib]
    direct_agents: list[int] = args.direct_agents or agents
    large_agents = set(args.large_agents or agents)
    delta_sizes = [s * MIB for s in args.delta_sizes_mib] if args.delta_churn is not None else []
    delta_agents: list[int] = args.delta_agents or agents
    began = time.time()
    p2p: list[Point] = []
    direct: list[Point] = []
    failures: list[str] = []
    delta_points: list[DeltaPoint] = []
    plan: list[tuple[Mode, int, list[int]]] = [
        ("p2p", n, [s for s in sizes if s <= 256 * MIB or n in large_agents]) for n in agents
    ]
    plan = [(mode, n, s) for mode, n, s in plan if s]  # --sizes-mib '': no P2P sweep
    plan += [("direct", n, direct_sizes) for n in direct_agents if direct_sizes]
    if loaded is not None:
        p2p, direct, failures, delta_points = loaded
        plan, delta_sizes = [], []
    setup = Setup(
        upload_cap=upload,
        download_cap=int((args.download_mib or args.upload_mib) * MIB),
        origin_cap=int((args.origin_mib or args.upload_mib) * MIB),
        swarm=swarm_settings,
        discovery=args.discovery,
        work=Path(),
    )
    with tempfile.TemporaryDirectory(prefix="bench-swarm-", ignore_cleanup_errors=True) as tmp:
        setup = replace(setup, work=Path(tmp))
        for mode, n, fleet_sizes in plan:
            section(f"{'P2P' if mode == 'p2p' else 'direct baseline'}, {n} agents")
            points: list[Point] = []
            try:
                run_fleet(setup, mode, n, fleet_sizes, points)
            except FleetError as exc:  # keep the points measured so far, report the rest
                failures.append(f"{mode} N={n}: {str(exc).splitlines()[0]}")
                print(f"  FAILED: {failures[-1]}", flush=True)
            (p2p if mode == "p2p" else direct).extend(points)
        if delta_sizes:
            run_delta_mode(setup, args.delta_churn, delta_agents, delta_sizes, points=delta_points,
                           failures=failures)

    from benchmarks._swarm_report import markdown_table, plot

    section("results")
    rows = [[p.mode, str(p.agents), f"{p.size_bytes / MIB:.0f}", f"{p.p50:.1f}", f"{p.p99:.1f}",
             f"{p.max:.1f}", f"{p.minimum_s:.1f}", f"{p.max / p.minimum_s:.2f}x", f"{p.origin_copies:.2f}x",
             f"{p.peer_copies:.1f}x", f"{p.cpu_busy:.0%}"] for p in p2p + direct]
    if rows:
        print(format_table(["mode", "N", "MiB", "p50 s", "p99 s", "max s", "min s", "max/min", "origin",
                            "from peers", "CPU"], rows))
    for d in direct:
        match = [p for p in p2p if (p.agents, p.size_bytes) == (d.agents, d.size_bytes)]
        if match:
            print(f"N={d.agents} {d.size_bytes / MIB:.0f} MiB: direct/P2P (max) = "
                  f"{d.max / match[0].max:.1f}x, (p50) = {d.p50 / match[0].p50:.1f}x")
    if delta_points:
        print(format_table(DELTA_HEADERS, delta_table_rows(delta_points)))
    checks = acceptance(p2p, direct) + delta_checks(delta_points)
    section("acceptance")
    for check in checks:
        print(check.line())
    for failure in failures:
        print(f"FAILED  {failure}")
    result = {
        "benchmark": "swarm",
        "machine": machine_info(),
        "seconds": time.time() - began,
        "settings": {"upload_cap": setup.upload_cap, "download_cap": setup.download_cap,
                     "origin_cap": setup.origin_cap, "swarm": setup.swarm, "discovery": args.discovery,
                     "agents": agents, "sizes": sizes, "direct_sizes": direct_sizes,
                     "direct_agents": direct_agents, "large_agents": sorted(large_agents),
                     "delta_churn": args.delta_churn, "delta_sizes": delta_sizes,
                     "delta_agents": delta_agents if delta_sizes else [],
                     "command": " ".join(["python benchmarks/swarm.py", *(argv if argv is not None
                                                                           else sys.argv[1:])])},
        "p2p": [p.as_dict() for p in p2p],
        "direct": [p.as_dict() for p in direct],
        "delta": [p.as_dict() for p in delta_points],
        "load_average_end": load_average(),
        "checks": [c.as_dict() for c in checks],
        "failures": failures,
    }
    if args.json:
        write_json(args.json, result)
    if args.plots:
        plot(p2p, direct, args.plots)
    if args.markdown:
        args.markdown.write_text(markdown_table(p2p, direct, checks, delta_points), encoding="utf-8")
    if failures:
        return 2
    return 0 if args.quick or all(c.passed is not False for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
