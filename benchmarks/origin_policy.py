"""Origin load of a fleet: the swarm's "fallback" origin policy against "always".

Run from the repository root (needs opentracker for the tracker rows)::

    python benchmarks/origin_policy.py [--agents 5] [--size-mib 32] [--runs 5]
        [--origin-connection-mib 8] [--discovery tracker,dht] [--json out.json]

For each discovery mode (opentracker, or the DHT alone bootstrapped from the first
agent) and each policy, ``--runs`` times: ``--agents`` agents, each a separate process
with its own libtorrent session on 127.0.0.1, start downloading the same random file at
once; the origin is an HTTP server that counts the bytes it sends and caps each
connection at ``--origin-connection-mib`` MiB/s (like S3: per-connection throughput is
bounded, the aggregate is not). Reported per row: the origin's bytes as a multiple of
the file size (mean, min, max over the runs), the agents' own count of bytes from the
origin, and the seconds until every agent had the whole file. The settings are the
swarm tests' loopback settings (sandbox/worker_swarm.py: 1 s grace, 2 s stagger, 1 s
starvation, 1 MiB origin requests — scaled down with the file). docs/origin-policy.md
records a run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    choice_list,
    output_path,
    positive_float,
    positive_int,
    stop_on_signals,
    write_json,
)
from bloomswarm.common.bucket_layout import FILTER_FILE_NAME
from bloomswarm.sandbox.origin import Origin
from bloomswarm.sandbox.tracker import OpenTracker
from bloomswarm.sandbox.worker_swarm import (
    MIB,
    WorkersResult,
    loopback_swarm,
    make_test_torrent,
    run_workers,
    write_random_file,
)


def _row(discovery: str, policy: str, results: list[WorkersResult]) -> dict[str, Any]:
    copies = [r.origin_copies for r in results]
    reported = [sum(r.reported_origin) / r.file_size for r in results]
    seconds = [r.seconds for r in results]
    return {
        "discovery": discovery,
        "policy": policy,
        "runs": len(results),
        "origin_copies_mean": statistics.mean(copies),
        "origin_copies_min": min(copies),
        "origin_copies_max": max(copies),
        "agents_counted_copies_mean": statistics.mean(reported),
        "seconds_mean": statistics.mean(seconds),
        "all_correct": all(all(r.correct) for r in results),
        "results": [asdict(r) for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the matrix, print a table, optionally write JSON."""
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=positive_int(1000), default=5)
    parser.add_argument("--size-mib", type=positive_int(64 * 1024), default=32)
    parser.add_argument("--runs", type=positive_int(1000), default=5)
    parser.add_argument("--origin-connection-mib", type=positive_float(1024 * 1024), default=8.0)
    parser.add_argument("--discovery", type=choice_list(("tracker", "dht")), default=["tracker", "dht"],
                        help="comma-separated: tracker, dht (tracker,dht)")
    parser.add_argument("--policies", type=choice_list(("fallback", "always")),
                        default=["fallback", "always"],
                        help="comma-separated: fallback, always (fallback,always)")
    parser.add_argument("--json", type=output_path)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="origin-policy-"))
    rows: list[dict[str, Any]] = []
    tracker: OpenTracker | None = None
    try:
        file = work / "origin" / FILTER_FILE_NAME
        write_random_file(file, args.size_mib * MIB)
        torrent = make_test_torrent(file)
        discoveries = args.discovery
        if "tracker" in discoveries:
            tracker = OpenTracker().start()
            tracker.allow(torrent.info_hash_v1, torrent.info_hash_v2)
        cap = int(args.origin_connection_mib * MIB)
        with Origin(files=file.parent, connection_rate=cap) as origin:
            for discovery in discoveries:
                for policy in args.policies:
                    trackers = [tracker.announce_url] if discovery == "tracker" and tracker else []
                    settings = loopback_swarm(origin_policy=policy, trackers=trackers)
                    results = []
                    for run in range(args.runs):
                        result = run_workers(args.agents, torrent, origin, settings,
                                           work / f"{discovery}-{policy}-{run}", dht=discovery == "dht")
                        print(f"{discovery:8} {policy:8} run {run + 1}: {result.summary()}", flush=True)
                        shutil.rmtree(work / f"{discovery}-{policy}-{run}", ignore_errors=True)
                        results.append(result)
                    rows.append(_row(discovery, policy, results))
    finally:
        if tracker is not None:
            tracker.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.agents} agents, {args.size_mib} MiB, origin {args.origin_connection_mib:g} MiB/s "
          f"per connection, {args.runs} runs per row\n")
    print("| discovery | policy | origin bytes / file size: mean (min–max) | agents counted | "
          "all done (s, mean) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['discovery']} | {row['policy']} | {row['origin_copies_mean']:.2f}× "
              f"({row['origin_copies_min']:.2f}–{row['origin_copies_max']:.2f}) | "
              f"{row['agents_counted_copies_mean']:.2f}× | {row['seconds_mean']:.1f} |")
    if args.json:
        shown = {k: ",".join(v) if isinstance(v, list) else str(v) for k, v in vars(args).items()}
        write_json(args.json, {"args": shown, "rows": rows})
    return 0 if all(row["all_correct"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
