"""A lookup client in its own process: a LiveFilter on an agent's data directory.

Run as ``python -m tests.functional.live_reader DATA_DIR``. Each line on stdin is a JSON
list of keys; the answer on stdout is one JSON line ``{"version": N, "hits": [...]}``,
both taken from one snapshot of the filter (``{"version": null}`` before the first
version). End of input stops it. :class:`LiveReader` drives it from a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bloomswarm.sandbox.processes import stop_process


def main(data_dir: str) -> int:
    from bloomswarm.common.errors import NotReadyError
    from bloomswarm.common.live import LiveFilter

    live = LiveFilter(data_dir, poll_interval=0.05)
    try:
        for line in sys.stdin:
            keys = json.loads(line)
            try:
                snapshot = live.filter
            except NotReadyError:
                print(json.dumps({"version": None, "hits": None}), flush=True)
                continue
            hits = [key in snapshot for key in keys]
            print(json.dumps({"version": snapshot.version, "hits": hits}), flush=True)
    finally:
        live.close()
    return 0


class LiveReader:
    """Starts the reader process; :meth:`ask` queries it; :meth:`stop` ends it by PID."""

    def __init__(self, data_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.functional.live_reader", str(data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )

    def ask(self, keys: list[str]) -> dict[str, Any]:
        """The version serving now and whether each key is in it."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(keys) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"live reader exited with {self.process.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def answers(self, version: int, present: list[str], absent: list[str]) -> bool:
        """True when the reader serves ``version``, finds every present key and no absent one."""
        answer = self.ask(present + absent)
        hits = answer["hits"] or []
        return bool(answer["version"] == version and all(hits[: len(present)])
                    and not any(hits[len(present):]))

    def wait_until_serving(self, version: int, present: list[str], absent: list[str],
                           timeout_s: float = 30.0) -> None:
        """Wait until :meth:`answers` holds for ``version``; AssertionError after the timeout."""
        deadline = time.monotonic() + timeout_s
        while not self.answers(version, present, absent):
            assert time.monotonic() < deadline, f"LiveFilter never served v{version}: {self.ask(present[:1])}"
            time.sleep(0.05)

    def stop(self) -> None:
        """Close its input (it exits), then terminate / kill it by PID if it lingers."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        stop_process(self.process, sig=None, timeout_s=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
