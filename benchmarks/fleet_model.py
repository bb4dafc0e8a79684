"""Fleet-scale model (issue 15): calibration on the measured swarm points, predictions
for 1k-100k agents, JSON, tables and plots.

Run from the repository root (matplotlib for the plots)::

    python benchmarks/fleet_model.py --json docs/benchmarks/fleet_model.json \
        --plots docs/benchmarks [--quick]

Calibration runs :mod:`benchmarks.fleet_pieces` (piece level, every agent driving the
real origin policy core) on the points measured on the agent's defaults: the 64 MiB
sweep of docs/benchmarks/swarm_defaults.json (8, 16, 32 agents) and the full 256 MiB
first round of docs/benchmarks/delta-rollout.json (16, 32 agents); 4 MiB/s caps, polls
every 0.5 s + 0.25 s jitter, a fresh fleet (its first version). Predictions run
:mod:`benchmarks.fleet_flow` (flow level, a sample of agents driving the core) with the
agent's default [swarm] and [watch] settings, on a running fleet (the agents seed the
previous version, so the trackers' counts tell them the fleet's size). docs/fleet-scale.md
explains both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from benchmarks._common import (
    format_table,
    machine_info,
    output_path,
    positive_int,
    section,
    stop_on_signals,
    work_dir,
    write_json,
)
from benchmarks.fleet_flow import Fleet, FleetOutcome
from benchmarks.fleet_flow import simulate as simulate_flow
from benchmarks.fleet_pieces import Rollout
from benchmarks.fleet_pieces import simulate as simulate_pieces
from bloomswarm.agent.config import SwarmConfig

MIB = 1 << 20
GIB = 1 << 30
ROOT = Path(__file__).resolve().parent.parent
CALIBRATION = SwarmConfig()
"""The calibration's [swarm] settings: the agent's defaults, as the measured runs had."""
CALIBRATION_PER_AGENT_S = 0.48
"""Seconds per version and per agent of the fleet that the piece model does not see, fitted
(least squares) on the three 64 MiB points after the origin's efficiency: N agents on one
2-core machine start N torrents, N libtorrent sessions and N hashes at once (announces,
connections, the web seed's first requests, the swap), which stretches a version by about
this much per agent. Zero in the predictions (one machine per agent)."""
CALIBRATION_ORIGIN_EFFICIENCY = 0.8
"""Share of the origin's cap that carried payload in the measured runs (the web seed's 4 MiB
range requests, their round trips and abandoned tails, the proxy's token bucket), fitted
on the slope between 64 and 256 MiB at N = 16 and 32 (measured: 0.83 and 0.79)."""
DELTA_SHARE = 0.06
"""A delta at 1% churn: 5.8% of the file (docs/benchmarks/delta.md), rounded up."""


def percentiles(values: np.ndarray[Any, np.dtype[np.float64]]) -> dict[str, float]:
    return {"p50_s": float(np.percentile(values, 50)), "p99_s": float(np.percentile(values, 99)),
            "max_s": float(values.max())}


def measured_points() -> list[dict[str, Any]]:
    """The P2P points measured on the agent's defaults: docs/benchmarks/swarm_defaults.json
    (64 MiB) and the full first round of docs/benchmarks/delta-rollout.json (256 MiB)."""
    bench = ROOT / "docs/benchmarks"
    points = [{"source": "swarm_defaults.json", **{key: point[key] for key in (
        "agents", "size_bytes", "piece_size", "upload_cap", "origin_cap", "p50_s", "p99_s", "max_s",
        "origin_copies")}} for point in json.loads((bench / "swarm_defaults.json").read_text())["p2p"]]
    for point in json.loads((bench / "delta-rollout.json").read_text())["delta"]:
        first = point["first"]
        seconds = np.array(first["seconds"])
        points.append({"source": "delta-rollout.json (first round)", "agents": point["agents"],
                       "size_bytes": first["file_bytes"], "piece_size": 256 * 1024,
                       "upload_cap": point["upload_cap"], "origin_cap": point["origin_cap"],
                       "p50_s": first["p50_s"], "p99_s": float(np.percentile(seconds, 99)),
                       "max_s": first["max_s"], "origin_copies": first["origin_bytes"] / first["file_bytes"]})
    return points


def calibrate(quick: bool) -> list[dict[str, Any]]:
    """Every P2P point measured on the agent's defaults, simulated beside its measurement."""
    rows = []
    for point in measured_points():
        small = point["agents"] == 8 and point["size_bytes"] < 70 * MIB
        if quick and not small:
            continue
        rollout = Rollout(
            agents=point["agents"], file_bytes=point["size_bytes"], piece_bytes=point["piece_size"],
            upload_bps=point["upload_cap"], download_bps=point["upload_cap"],
            origin_bps=point["origin_cap"] * CALIBRATION_ORIGIN_EFFICIENCY, swarm=CALIBRATION,
            poll_interval_s=0.5, poll_jitter_s=0.25,
            fetch_s=0.3 + CALIBRATION_PER_AGENT_S * point["agents"],
            hash_bps=0.5e9, fleet_known=False, dt=0.1,
        )
        began = time.perf_counter()
        out = simulate_pieces(rollout)
        swap = np.array(out.swap_s)
        model = percentiles(swap)
        rows.append({
            "agents": point["agents"], "size_bytes": point["size_bytes"], "source": point["source"],
            "measured": {"p50_s": point["p50_s"], "p99_s": point["p99_s"], "max_s": point["max_s"],
                         "origin_copies": point["origin_copies"]},
            "model": {**model, "origin_copies": out.origin_bytes / point["size_bytes"],
                      "max_on_origin": out.max_on_origin},
            "error_max": model["max_s"] / point["max_s"] - 1,
            "error_p50": model["p50_s"] / point["p50_s"] - 1,
            "sim_seconds": time.perf_counter() - began,
        })
    return rows


def predict(agents: int, file_bytes: int, link_bps: float, delta: bool, quick: bool) -> dict[str, Any]:
    """One prediction at flow level, the agent's default settings."""
    size = int(file_bytes * DELTA_SHARE) if delta else file_bytes
    fleet = Fleet(agents=agents, file_bytes=size, piece_bytes=4 * MIB if file_bytes <= 2 * GIB else 16 * MIB,
                  agent_bps=link_bps, origin_bps=1.25e9, fleet_known=True, sample=60 if quick else 200,
                  dt=0.25 if size <= 2 * GIB else 1.0, model_pieces=128 if quick else 256)
    began = time.perf_counter()
    out: FleetOutcome = simulate_flow(fleet)
    cdn = simulate_cdn(agents, fleet)
    return {
        "agents": agents, "file_bytes": file_bytes, "transfer_bytes": size, "link_bps": link_bps,
        "delta": delta, **percentiles(out.swap_s),
        "origin_copies": out.origin_bytes / size,
        "origin_bytes": out.origin_bytes,
        "origin_range_requests": out.origin_requests,
        "peak_origin_range_rps": out.peak_origin_rps,
        "peak_agents_on_origin": out.peak_on_origin,
        "latest_json_gets_per_s": out.polls_per_s,
        "latest_json_store_rps_with_cdn": cdn,
        "tracker_announces": out.announces,
        "peak_tracker_announces_per_s": out.peak_announce_rps,
        "steady_tracker_announces_per_s": agents / fleet.announce_interval_s,
        "minimum_s": size / link_bps,
        "sim_seconds": time.perf_counter() - began,
    }


def simulate_cdn(agents: int, fleet: Fleet, edges: int = 50, ttl_s: float = 1.0) -> float:
    """latest.json requests per second at the store behind a collapsing CDN: about one
    per edge per TTL, whatever the fleet size (design.md, "Fleet-scale facts")."""
    return min(agents / (fleet.poll_interval_s + fleet.poll_jitter_s / 2), edges / ttl_s)


def plot(predictions: list[dict[str, Any]], calibration: list[dict[str, Any]], out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    names = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for size in sorted({p["file_bytes"] for p in predictions}):
        for link in sorted({p["link_bps"] for p in predictions}):
            for delta in (False, True):
                rows = sorted((p for p in predictions if p["file_bytes"] == size and p["link_bps"] == link
                               and p["delta"] == delta), key=lambda p: p["agents"])
                if rows:
                    label = f"{size // GIB} GiB{' delta' if delta else ''}, {link * 8 / 1e9:.0f} Gbit/s"
                    ax.plot([r["agents"] for r in rows], [r["p99_s"] for r in rows], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("agents")
    ax.set_ylabel("convergence p99 (s)")
    ax.set_title("Predicted rollout time (flow model, default settings)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fleet_model_time.png", dpi=110)
    names.append("fleet_model_time.png")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for delta in (False, True):
        rows = [p for p in predictions if p["delta"] == delta]
        ax.scatter([r["agents"] for r in rows], [r["origin_copies"] for r in rows],
                   label="delta" if delta else "full file")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("agents")
    ax.set_ylabel("origin egress (copies of what is fetched)")
    ax.set_title("Predicted origin egress per version")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fleet_model_origin.png", dpi=110)
    names.append("fleet_model_origin.png")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [f"{r['agents']}×{r['size_bytes'] // MIB}MiB" for r in calibration]
    ax.bar(np.arange(len(xs)) - 0.2, [r["measured"]["max_s"] for r in calibration], 0.4, label="measured")
    ax.bar(np.arange(len(xs)) + 0.2, [r["model"]["max_s"] for r in calibration], 0.4, label="model")
    ax.set_xticks(np.arange(len(xs)), xs, fontsize=8)
    ax.set_ylabel("last agent's swap (s)")
    ax.set_title("Calibration: benchmarks/swarm.py against the piece model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fleet_model_calibration.png", dpi=110)
    names.append("fleet_model_calibration.png")
    plt.close(fig)
    return names


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--plots", type=work_dir, help="write PNG plots into this directory")
    parser.add_argument("--quick", action="store_true", help="smoke run: one calibration point, small fleets")
    parser.add_argument("--large-max-agents", type=positive_int(10**7), default=None,
                        help="simulate 10 GiB only up to this many agents (slow beyond)")
    args = parser.parse_args(argv)
    began = time.time()
    section("calibration (piece level, every agent through the origin policy core)")
    calibration = calibrate(args.quick)
    print(format_table(
        ["N", "file", "measured p50", "model p50", "measured max", "model max", "error (max)",
         "origin measured", "origin model"],
        [[str(r["agents"]), f"{r['size_bytes'] // MIB} MiB", f"{r['measured']['p50_s']:.1f}",
          f"{r['model']['p50_s']:.1f}", f"{r['measured']['max_s']:.1f}", f"{r['model']['max_s']:.1f}",
          f"{r['error_max']:+.0%}", f"{r['measured']['origin_copies']:.2f}x",
          f"{r['model']['origin_copies']:.2f}x"]
         for r in calibration]))
    section("predictions (flow level, default settings, origin 10 Gbit/s)")
    fleets = [1000, 3000] if args.quick else [1000, 10_000, 100_000]
    sizes = [GIB] if args.quick else [GIB, 10 * GIB]
    links = [1.25e8] if args.quick else [1.25e8, 1.25e9]
    predictions = []
    for agents in fleets:
        for size in sizes:
            if size > GIB and args.large_max_agents is not None and agents > args.large_max_agents:
                continue
            for link in links:
                for delta in (False, True):
                    row = predict(agents, size, link, delta, args.quick)
                    predictions.append(row)
                    print(f"  N={agents} {size // GIB} GiB {'delta' if delta else 'full'} "
                          f"{link * 8 / 1e9:.0f} Gbit/s: p50 {row['p50_s']:.1f} s p99 {row['p99_s']:.1f} s "
                          f"max {row['max_s']:.1f} s origin {row['origin_copies']:.2f}x "
                          f"({row['sim_seconds']:.0f} s to simulate)", flush=True)
    print(format_table(
        ["N", "file", "link", "p50 (s)", "p99 (s)", "max (s)", "origin copies", "peak on origin",
         "peak range req/s", "latest.json GET/s", "announces/s (peak)"],
        [[str(r["agents"]), f"{r['file_bytes'] // GIB} GiB{' delta' if r['delta'] else ''}",
          f"{r['link_bps'] * 8 / 1e9:.0f} Gbit/s", f"{r['p50_s']:.1f}", f"{r['p99_s']:.1f}",
          f"{r['max_s']:.1f}", f"{r['origin_copies']:.2f}x", f"{r['peak_agents_on_origin']:.0f}",
          f"{r['peak_origin_range_rps']:.0f}",
          f"{r['latest_json_gets_per_s']:.0f}", f"{r['peak_tracker_announces_per_s']:.0f}"]
         for r in predictions]))
    plots = plot(predictions, calibration, args.plots) if args.plots else []
    command = "python benchmarks/fleet_model.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.json:
        write_json(args.json, {
            "benchmark": "fleet_model", "machine": machine_info(), "seconds": time.time() - began,
            "command": command, "quick": args.quick,
            "settings": {"calibration_per_agent_s": CALIBRATION_PER_AGENT_S,
                         "calibration_swarm": "SwarmConfig() (the agent's defaults)",
                         "prediction_swarm": "SwarmConfig() (the agent's defaults), fleet size known",
                         "calibration_origin_efficiency": CALIBRATION_ORIGIN_EFFICIENCY,
                         "delta_share": DELTA_SHARE, "origin_bps": 1.25e9,
                         "origin_connection_bps": 100e6, "poll_interval_s": 2.0, "poll_jitter_s": 0.5},
            "calibration": calibration, "predictions": predictions, "plots": plots,
        })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
