"""The swarm benchmark's smoke run: ``benchmarks/swarm.py --quick`` (3 agents, one 8 MiB
version over P2P and the same over the direct baseline, real processes on loopback)
completes and writes well-formed JSON, Markdown and plots. Not a timing: no number is
compared with a target here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def test_quick_swarm_benchmark_completes_with_well_formed_output(tmp_path: Path) -> None:
    out = tmp_path / "swarm.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "swarm.py"), "--quick", "--discovery", "auto",
               "--json", str(out), "--plots", str(tmp_path), "--markdown", str(tmp_path / "swarm.md")]
    # subprocess.run kills the benchmark (by its own PID) if it overruns; the benchmark
    # stops its fleet, every process by PID, on the way out.
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=200, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    result = json.loads(out.read_text())
    assert result["benchmark"] == "swarm"
    assert {c["status"] for c in result["checks"]} <= {"PASS", "FAIL", "SKIP"}
    assert [(p["mode"], p["agents"]) for p in result["p2p"] + result["direct"]] == [("p2p", 3), ("direct", 3)]
    for point in result["p2p"] + result["direct"]:
        assert point["size_bytes"] >= 8 * MIB
        assert len(point["seconds"]) == 3 and all(s > 0 for s in point["seconds"])
        assert point["p50_s"] <= point["p99_s"] <= point["max_s"]
        assert point["minimum_s"] > 0
        assert point["origin_bytes"] >= point["size_bytes"]  # nobody had the file: the origin sent it
    direct = result["direct"][0]
    assert direct["origin_bytes"] >= 3 * direct["size_bytes"]  # no P2P: one copy per agent
    assert sum(direct["peer_bytes"]) == 0
    assert (tmp_path / "swarm_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "swarm_origin.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "swarm.md").read_text()
    assert "| P2P | 3 | 8 MiB |" in table and "| direct | 3 | 8 MiB |" in table
