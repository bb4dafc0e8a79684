"""Example application for deploy/: answers lookups from an agent's data directory.

    python lookup_app.py --data-dir /var/lib/bloomswarm --key user:1 --key nobody --interval 5

It shares nothing with the agent but the data directory (mounted read-only) and never
talks to it: ``LiveFilter`` maps ``current/filter.bsf`` and follows every swap the agent
makes. Until the first version is installed it prints a waiting line; then, every
INTERVAL seconds, one line: the version serving, the answer for each ``--key``, and the
lookups per second of a short loop. SIGTERM or SIGINT ends it with exit code 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

from bloomswarm import LiveFilter


def report(live: LiveFilter, keys: Sequence[str], loop_s: float = 0.2) -> str:
    """One status line: version, each key's answer, lookups per second over ``loop_s``."""
    version = live.version
    if version is None:
        return f"waiting for the first version in {live.directory}"
    answers = " ".join(f"{key}={key in live}" for key in keys)
    probe = keys[0] if keys else "probe"
    count = 0
    started = time.perf_counter()
    deadline = started + loop_s
    while time.perf_counter() < deadline:
        for _ in range(1000):
            _ = probe in live
        count += 1000
    rate = count / (time.perf_counter() - started)
    return f"version={version} {answers} lookups_per_s={rate:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="the agent's data directory")
    parser.add_argument("--key", action="append", default=[], help="a key to look up (repeatable)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between two lines")
    parser.add_argument("--count", type=int, default=0, help="stop after this many lines (0: never)")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    printed = 0
    with LiveFilter(args.data_dir) as live:
        while not stop.is_set():
            print(report(live, args.key), flush=True)
            printed += 1
            if args.count and printed >= args.count:
                break
            stop.wait(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
