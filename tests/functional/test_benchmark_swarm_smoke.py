"""The swarm benchmark's smoke run: ``benchmarks/swarm.py --quick`` (3 agents, one 8 MiB
version over P2P and the same over the direct baseline, real processes on loopback)
completes and writes well-formed JSON, Markdown and plots; so does its delta mode
(``--quick --delta-churn 0.01``: 3 agents, 8 MiB, by delta and in full). Not a timing:
no number is compared with a target here.
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


def test_quick_delta_rollout_completes_with_well_formed_output(tmp_path: Path) -> None:
    """``--quick --delta-churn 0.01``: 3 agents, 8 MiB; v1 in full, v2 by delta, v2's
    filter again in full (the publisher's deltas off). Not a timing."""
    out = tmp_path / "delta.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "swarm.py"), "--quick", "--delta-churn", "0.01",
               "--discovery", "auto", "--json", str(out), "--markdown", str(tmp_path / "delta.md")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=200, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    result = json.loads(out.read_text())
    assert result["p2p"] == [] and result["direct"] == []  # the delta mode alone
    [point] = result["delta"]
    assert (point["agents"], point["churn"]) == (3, 0.01)
    assert point["size_bytes"] >= 8 * MIB
    assert 0 < point["delta_bytes"] < point["size_bytes"] // 2  # the publisher's max_share
    first, delta, full = point["first"], point["delta"], point["full"]
    assert [first["version"], delta["version"], full["version"]] == [1, 2, 3]
    assert first["deltas_listed"] == [] and full["deltas_listed"] == []
    assert delta["deltas_listed"] == [point["delta_bytes"]]
    assert delta["file_bytes"] == full["file_bytes"] == point["size_bytes"]
    for rollout in (first, delta, full):
        assert len(rollout["seconds"]) == 3 and all(s > 0 for s in rollout["seconds"])
    assert delta["by_delta"] == 3 and first["by_delta"] == full["by_delta"] == 0
    # by delta, the origin sent at least the delta and far less than the file
    assert point["delta_bytes"] <= delta["origin_bytes"] < point["size_bytes"]
    assert full["origin_bytes"] >= point["size_bytes"]  # in full, the whole file left the origin
    names = {c["name"] for c in result["checks"]}
    assert any(name.startswith("full-file / delta rollout") for name in names)
    assert "| 3 | 8 MiB |" in (tmp_path / "delta.md").read_text()
