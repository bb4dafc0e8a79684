"""``bloomswarm demo``: the whole read path on one machine, with nothing to set up.

Builds version 1 of a filter from generated keys, installs it in a data directory the
way the agent does, starts a lookup client in another process (LiveFilter), then builds
and installs version 2 and shows the client follow the swap. The client checks every
answer: keys present in both versions must always be found (no false negative, no
failed lookup) while the swap happens under it.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import FILTER_FILE, flip_current, version_dir

from .arguments import positive_int


def register(commands: Any) -> None:
    """Add the ``demo`` subcommand."""
    demo = commands.add_parser("demo", help="show versions being built, installed and hot-swapped")
    demo.add_argument("--keys", type=positive_int, default=1_000_000, help="keys per version (1M)")
    demo.add_argument("--rounds", type=positive_int, default=2, help="versions to publish (2)")
    demo.add_argument("--dir", type=Path, help="data directory to use (default: a temporary one)")
    demo.set_defaults(handler=run_demo)


@dataclass(frozen=True)
class ClientReport:
    """What the lookup client saw in one reporting interval."""

    version: int | None
    lookups: int
    rate: float
    errors: int
    false_negatives: int
    swaps: int


def lookup_client(directory: str, keys: list[bytes], reports: Any, stop: EventType) -> None:
    """Look up ``keys`` (all present in every version) in a loop until ``stop`` is set."""
    import logging

    from bloomswarm.common.live import LiveFilter

    logging.basicConfig(level=logging.WARNING)
    live = LiveFilter(directory, poll_interval=0.2, wait=10)
    lookups = errors = false_negatives = 0
    window_start, window_lookups = time.monotonic(), 0
    try:
        while not stop.is_set():
            for key in keys:
                try:
                    if key not in live:
                        false_negatives += 1
                except Exception:
                    errors += 1
            lookups += len(keys)
            window_lookups += len(keys)
            now = time.monotonic()
            if now - window_start >= 0.5:
                reports.put(ClientReport(live.version, lookups, window_lookups / (now - window_start),
                                         errors, false_negatives, live.swap_count))
                window_start, window_lookups = now, 0
    finally:
        live.close()


def run_demo(args: argparse.Namespace) -> int:
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bloomswarm-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    n, rounds = max(args.keys, 1000), max(args.rounds, 1)
    churn = n // 100
    print(f"data directory: {directory}")
    print(f"{n:,} keys per version; each new version drops {churn:,} keys and adds {churn:,}")
    common = [f"user:{i}".encode() for i in range(churn * rounds, n, max(1, n // 20000))]
    context = mp.get_context("spawn")
    reports = context.Queue()
    stop = context.Event()
    client = None
    last: ClientReport | None = None
    try:
        _install(directory, 1, n, churn, progress=True)
        client = context.Process(target=lookup_client, args=(str(directory), common, reports, stop),
                                 name="lookup-client", daemon=True)
        client.start()
        last = _wait_for(reports, lambda r: r.version == 1, timeout=60)
        print(f"lookup client (pid {client.pid}) answers from v1 at {last.rate / 1e6:.2f}M lookups/s")
        for version in range(2, rounds + 1):
            started = time.monotonic()
            _install(directory, version, n, churn, progress=True)
            flipped = time.monotonic()
            last = _wait_for(reports, lambda r, v=version: r.version == v, timeout=60)
            print(f"v{version}: built+installed in {flipped - started:.1f}s; the client swapped within "
                  f"{time.monotonic() - flipped:.2f}s and answers at {last.rate / 1e6:.2f}M lookups/s")
        time.sleep(1.0)
    finally:
        stop.set()
        if client is not None:
            last = _stop_client(client, reports, last)
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    assert last is not None
    ok = last.errors == 0 and last.false_negatives == 0
    print(f"summary: {rounds} versions; client did {last.lookups:,} lookups, {last.swaps} swaps, "
          f"{last.errors} errors, {last.false_negatives} false negatives -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def _install(directory: Path, version: int, n: int, churn: int, *, progress: bool) -> None:
    """Build version ``version`` (keys shifted by ``churn`` per version) and flip to it."""
    first = churn * (version - 1)
    builder = FilterBuilder.for_capacity(n, 0.01)
    builder.add_many(f"user:{i}".encode() for i in range(first, first + n))
    target = version_dir(directory, version)
    target.mkdir(parents=True, exist_ok=True)
    builder.write(target / FILTER_FILE, version=version)
    flip_current(directory, version)
    if progress:
        print(f"v{version}: {n:,} keys -> {target / FILTER_FILE} ({builder.params.num_bytes:,} bytes); "
              "current -> v" + str(version))


def _wait_for(reports: Any, done: Any, timeout: float) -> ClientReport:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            report: ClientReport = reports.get(timeout=0.5)
        except queue.Empty:
            continue
        if done(report):
            return report
    raise TimeoutError("the lookup client did not report in time")


def _stop_client(client: Any, reports: Any, last: ClientReport | None) -> ClientReport:
    """Wait for the stopped client to exit (terminate it if it hangs); return its last report."""
    deadline = time.monotonic() + 10
    while client.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            last = reports.get(timeout=0.2)
    if client.is_alive():
        client.terminate()
    client.join(timeout=5)
    while True:
        try:
            last = reports.get_nowait()
        except queue.Empty:
            break
    if last is None:
        raise RuntimeError("the lookup client never reported")
    return last
