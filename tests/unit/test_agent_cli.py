"""``bloomswarm agent run`` / ``agent status``: one-line errors, and the status for a person."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bloomswarm.agent.memory_transfer import MemoryOrigin
from bloomswarm.agent.status_server import StatusServer
from bloomswarm.agent_commands import format_status
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.main import main
from tests.unit.agent_helpers import agent_config, make_daemon, publish, run_until


def test_status_of_a_running_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryObjectStore()
    publish(store, ["a"])
    daemon = make_daemon(agent_config(tmp_path), MemoryOrigin(store))
    endpoint = StatusServer(daemon.metrics, daemon.status, "127.0.0.1", 0)
    url = endpoint.start()
    try:
        run_until(daemon, lambda: daemon.metrics.is_ready)
        daemon.step()
        assert main(["agent", "status", "--url", url]) == 0
        out = capsys.readouterr().out
        assert "ready        yes" in out and "current      v1, created" in out
        assert "installed    v1 (seeding v1)" in out and "swaps        1, last v- -> v1" in out
        assert main(["agent", "status", "--url", url, "--json"]) == 0
        assert '"current_version": 1' in capsys.readouterr().out
    finally:
        endpoint.stop()
        daemon.shutdown()


def test_status_formats_failures_and_downloads() -> None:
    text = format_status("http://x", {
        "ready": False, "current_version": None, "installed_versions": [], "seeding": [],
        "download": {"version": 3, "state": "waiting", "progress": 0.0, "size": 5 << 20, "peers": 0,
                     "retry_in_s": 4.0, "failures": 2},
        "last_error": "v3: not enough disk space", "last_error_at": 0,
        "metrics": {'bloomswarm_agent_refusals_total{reason="disk_space"}': 2.0,
                    "bloomswarm_agent_origin_errors_total": 1.0},
    })
    assert "ready        no" in text and "current      none" in text
    assert "download     v3: waiting 0.0% of 5.0 MiB, 0 peers, 2 failures, retry in 4s" in text
    assert "refused: disk_space 2" in text and "origin errors 1" in text
    assert text.endswith("v3: not enough disk space")


def test_status_without_an_agent_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on (bound, never listening)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert main(["agent", "status", "--url", f"http://127.0.0.1:{port}", "--timeout", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bloomswarm agent: error: no agent answering at") and "\n" not in err


def test_run_with_a_bad_configuration_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('data_dir = "/d"\npublic_keys = ["/k.pub"]\npoll = 1\n')
    assert main(["agent", "run", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip()
    assert "unknown setting 'poll'" in err and "\n" not in err
    config.write_text(f'data_dir = "{tmp_path}"\npublic_keys = ["{tmp_path}/missing.pub"]\n'
                      '[origin]\ncdn_base_url = "http://127.0.0.1:1"\n')
    assert main(["agent", "run", "--config", str(config), "--transfer", "direct"]) == 1
    assert "missing.pub does not exist" in capsys.readouterr().err


def test_agent_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent"]) == 2
    assert "ACTION" in capsys.readouterr().err
