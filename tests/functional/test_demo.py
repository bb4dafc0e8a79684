"""The README's run command, `bloomswarm demo`, end to end as a user runs it.

The demo runs as a subprocess with its output on a pipe (as in CI: plain lines, no live
table): moto's S3 server, opentracker or the DHT, three agents as processes, the
publisher and the lookup client, all on 127.0.0.1 (with ``--filters 3``: two agents
following three named filters). TMPDIR points into the test's own folder, so the test
sees that a run leaves no files behind. The Ctrl-C test collects the demo's child
processes before the signal and checks each one is gone after; any that survive are
killed by PID and the test fails.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.timeout(240)

SMALL = ["--agents", "3", "--keys", "50000", "--pause", "0.5", "--timeout", "120"]


def _demo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bloomswarm", "demo", *SMALL, *args]


def _env(tmp: Path) -> dict[str, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}


def _leftovers(tmp: Path) -> list[str]:
    """Files a run left in its TMPDIR (multiprocessing's own helper folders excepted)."""
    return sorted(p.name for p in tmp.iterdir() if not p.name.startswith("pymp-"))


def _check_run(result: subprocess.CompletedProcess[str], rounds: int, agents: int = 3) -> None:
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "\x1b[" not in out  # not a terminal: plain lines, no live table
    assert "Traceback" not in result.stderr, result.stderr
    for version in range(1, rounds + 1):
        for agent in range(agents):
            swapped = rf"^  agent{agent} swapped to v{version} [0-9.]+ s after the publish"
            assert re.search(swapped, out, re.M), out
        assert f"round {version}: all {agents} agents on v{version}" in out
        assert re.search(rf"^  {version} +v{version} .* all agents$", out, re.M), out
    setup = rf"^summary: {agents} agents, (opentracker|DHT), 50,000 keys per version"
    assert re.search(setup, out, re.M), out
    assert re.search(r"lookup client .*: [0-9.]+[MK]/s on average, versions v1( -> v\d+)*, 0 errors, "
                     r"0 false negatives", out), out
    assert out.rstrip().endswith("result: OK")


def test_demo_publishes_every_round_to_every_agent_and_reports_a_clean_summary(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    result = subprocess.run(_demo_command("--rounds", "2"), capture_output=True, text=True, timeout=200,
                            stdin=subprocess.DEVNULL, env=_env(tmp), check=False)
    _check_run(result, rounds=2)
    assert "lookup client started (pid" in result.stdout
    assert _leftovers(tmp) == []


def test_demo_with_named_filters_brings_every_filter_to_every_agent(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    command = [sys.executable, "-m", "bloomswarm", "demo", "--agents", "2", "--filters", "3",
               "--keys", "3000", "--rounds", "2", "--plain", "--pause", "0.5", "--timeout", "120"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
                            env=_env(tmp), check=False)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "lookup client started (pid" in out and "LiveFilter on agent0's filter f01" in out
    for version in (1, 2):
        for agent in range(2):
            done = rf"^  agent{agent} has all 3 filters on v{version}, last swap [0-9.]+ s"
            assert re.search(done, out, re.M), out
        assert f"round {version}: all 2 agents have all 3 filters on v{version}" in out
        assert re.search(rf"^  {version} +v{version} .* all agents, all filters$", out, re.M), out
    setup = r"^summary: 2 agents, (opentracker|DHT), 3 filters \(f01 to f03\) of 1,000 keys"
    assert re.search(setup, out, re.M), out
    assert re.search(r"lookup client \(agent0's filter f01, .*versions v1( -> v\d+)*, 0 errors, "
                     r"0 false negatives", out), out
    assert out.rstrip().endswith("result: OK")
    assert _leftovers(tmp) == []


class _Lines:
    """A process's stdout lines, read by a thread, awaited with a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout

        def pump() -> None:
            for line in stream:
                self._queue.put(line)
            self._queue.put(None)

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()

    def wait_for(self, text: str, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return
        raise AssertionError(f"the demo never printed {text!r}:\n{''.join(self.lines)}")

    def rest(self, limit_s: float = 10.0) -> str:
        self._thread.join(limit_s)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return "".join(self.lines)


def test_ctrl_c_stops_every_process_and_a_second_run_works(tmp_path: Path) -> None:
    """The second run uses the DHT, so that both discovery paths run here."""
    tmp = tmp_path / "first"
    process = subprocess.Popen(_demo_command("--rounds", "50"), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp))
    children: list[psutil.Process] = []
    try:
        lines = _Lines(process)
        lines.wait_for("lookup client started", limit_s=120)  # agents, tracker, S3 and the client run
        children = psutil.Process(process.pid).children(recursive=True)
        commands = [" ".join(c.cmdline()) for c in children]
        assert sum("bloomswarm agent run" in c for c in commands) == 3, commands
        assert any("moto.server" in c for c in commands), commands
        assert any("spawn_main" in c for c in commands), commands  # the lookup client
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
        took = time.monotonic() - interrupted
        output = lines.rest()
        assert process.stderr is not None
        errors = process.stderr.read()
        # 130, or death by SIGINT after the clean-up (which a shell reports as 130 too): a
        # loaded CI machine saw the latter a few times, cause not found yet; the checks below
        # (one clean line, every child gone, no files left) hold either way.
        assert code in (130, -signal.SIGINT), output + errors
        assert "interrupted: stopping" in output and "bloomswarm: interrupted" in errors
        assert "Traceback" not in errors, errors
        assert took < 45, f"the demo took {took:.0f} s to stop"  # a bound on hanging, not a timing
        _, alive = psutil.wait_procs(children, timeout=10)
        survivors = [p for p in alive if _running(p)]
        assert survivors == [], [(p.pid, " ".join(p.cmdline())) for p in survivors]
        assert _leftovers(tmp) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        for child in children:
            if _running(child):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
    second = tmp_path / "second"
    result = subprocess.run([*_demo_command("--rounds", "1"), "--agents", "2", "--discovery", "dht"],
                            capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
                            env=_env(second), check=False)
    _check_run(result, rounds=1, agents=2)
    assert "discovery: the DHT, bootstrapped from agent0" in result.stdout
    assert _leftovers(second) == []


def _running(process: psutil.Process) -> bool:
    """Still there and not merely a zombie waiting for its (new) parent to reap it."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
