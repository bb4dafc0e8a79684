"""Review fixes of the agent's configuration: a TOML file nested too deeply, IPv6 status
hosts, signals during start-up, NUL characters in data_dir and status.host, dead code."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent import config as agent_config_module
from bloomswarm.agent.config import AgentConfig, StatusConfig, load_config
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.status_server import StatusServer
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.settings import SettingsLoader
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.main import main

from . import agent_helpers
from .agent_helpers import PUBLIC_PEM
from .test_filter_set import Fleet, publish_filter

offline = agent_helpers.offline

DEPTH = 5000


def _config_file(tmp_path: Path, body: str = "", *, data_dir: str | None = None) -> Path:
    """An agent config of a direct transfer from a CDN nobody answers at, plus ``body``."""
    public = tmp_path / "publisher.pub"
    public.write_bytes(PUBLIC_PEM)
    data = data_dir if data_dir is not None else json.dumps(str(tmp_path / "data"))
    path = tmp_path / "agent.toml"
    path.write_text(f'data_dir = {data}\npublic_keys = [{json.dumps(str(public))}]\ntransfer = "direct"\n'
                    f'[origin]\ncdn_base_url = "http://127.0.0.1:1"\n{body}')
    return path


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")


# --- 1: a TOML file nested too deeply ---------------------------------------------------------


@pytest.mark.parametrize("value", ["[" * DEPTH + "]" * DEPTH, "{a=" * DEPTH + "1" + "}" * DEPTH],
                         ids=["arrays", "inline_tables"])
def test_a_deeply_nested_file_is_a_one_line_config_error_naming_it(tmp_path: Path, value: str) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(f"x = {value}\n")
    with pytest.raises(ConfigError) as caught:
        SettingsLoader.read_document(path)
    message = str(caught.value)
    assert str(path) in message and "nested too deeply" in message and "\n" not in message


def test_a_deeply_nested_config_exits_1_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config_file(tmp_path, "[status]\nport = 0\n")
    path.write_text(path.read_text().replace("[origin]", "x = " + "[" * DEPTH + "]" * DEPTH + "\n[origin]"))
    assert main(["agent", "run", "--config", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "nested too deeply" in err and "internal error" not in err and "\n" not in err


@pytest.mark.usefixtures("offline")
def test_a_reload_of_a_too_deep_file_or_an_unexpected_error_keeps_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryObjectStore()
    publish_filter(store, "a", ["a"])
    fleet = Fleet(tmp_path, store, ["a"])
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * DEPTH + "]" * DEPTH + "\n")
    with caplog.at_level(logging.ERROR):
        fleet.agent._reload(lambda: load_config(deep, environ={}))
    assert "nested too deeply" in fleet.agent.status()["reload_error"]
    assert "reload_failed" in caplog.text

    def broken() -> AgentConfig:
        raise RecursionError("maximum recursion depth exceeded")

    fleet.agent._reload(broken)  # a bug in loading: logged, the running filters kept
    assert "RecursionError" in fleet.agent.status()["reload_error"]
    assert sorted(fleet.agent.status()["filters"]) == ["a"]
    fleet.agent.shutdown()


# --- 2: IPv6 status hosts ------------------------------------------------------------------------


def test_status_urls_bracket_ipv6_and_reach_a_wildcard_on_loopback() -> None:
    assert StatusConfig(host="::1", port=9731).local_url == "http://[::1]:9731"
    assert StatusConfig(host="::", port=1).local_url == "http://127.0.0.1:1"
    assert StatusConfig(host="0.0.0.0", port=1).local_url == "http://127.0.0.1:1"
    assert StatusConfig(host="localhost", port=1).local_url == "http://localhost:1"
    assert StatusServer(AgentMetrics(), dict, "::1", 5).url == "http://[::1]:5"
    from bloomswarm.agent.status_server import address_family

    assert address_family("::1") == socket.AF_INET6 and address_family("127.0.0.1") == socket.AF_INET


@needs_ipv6
@pytest.mark.parametrize("host", ["::1", "::"])
def test_the_status_endpoint_listens_on_ipv6_and_agent_status_finds_it(
    tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status: dict[str, Any] = {"ready": False, "current_version": None, "data_dir": "/d", "metrics": {}}
    endpoint = StatusServer(AgentMetrics(), lambda: status, host, 0)
    endpoint.start()
    try:
        with urllib.request.urlopen(f"http://[::1]:{endpoint.port}/healthz", timeout=5) as answer:
            assert answer.read() == b"ok\n"
        if host == "::":  # the wildcard takes IPv4 too
            with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/healthz", timeout=5) as answer:
                assert answer.read() == b"ok\n"
        path = _config_file(tmp_path, f'[status]\nhost = "{host}"\nport = {endpoint.port}\n')
        assert main(["agent", "status", "--config", str(path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["data_dir"] == "/d"
    finally:
        endpoint.stop()


@pytest.mark.parametrize("host", ["", "a\0b", "[::1]", "not a host", "::g", "a\nb", "a/b"])
def test_a_bad_status_host_is_refused_at_load_naming_it(tmp_path: Path, host: str) -> None:
    path = _config_file(tmp_path, f"[status]\nhost = {json.dumps(host)}\n")
    with pytest.raises(ConfigError, match=r"^status\.host") as caught:
        load_config(path, environ={})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "0.0.0.0", "::", "::1", "fe80::1%lo", "localhost", "agent-1.local", "999.1.1.1"]
)
def test_good_status_hosts_load(tmp_path: Path, host: str) -> None:
    path = _config_file(tmp_path, f"[status]\nhost = {json.dumps(host)}\n")
    assert load_config(path, environ={}).status.host == host


# --- 3: signals during start-up -------------------------------------------------------------------


def test_signals_are_remembered_until_the_agent_knows_whether_it_reloads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from bloomswarm.agent_commands import _signals

    with caplog.at_level(logging.INFO), _signals() as signals:
        os.kill(os.getpid(), signal.SIGHUP)  # while starting: remembered
        assert signals.reload.is_set() and "reload_requested" in caplog.text
        signals.set_reloads(False)  # one filter: forgotten, said so
        assert not signals.reload.is_set() and "reload_ignored" in caplog.text
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.stop.is_set()
    with caplog.at_level(logging.INFO), _signals() as signals:
        signals.set_reloads(True)
        os.kill(os.getpid(), signal.SIGHUP)
        assert signals.reload.is_set() and "event=reloading" in caplog.text


_EARLY = textwrap.dedent("""
    import logging, os, signal, sys
    from pathlib import Path
    from bloomswarm import agent_commands
    from bloomswarm.agent.config import load_config
    from bloomswarm.main import main

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    def slow_start(args):  # the signals arrive while the agent starts
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)
        return load_config(Path(sys.argv[1]), environ={})

    agent_commands.load_agent_config = slow_start
    sys.exit(main(["agent", "run", "--config", sys.argv[1]]))
""")


@pytest.mark.parametrize("filters", [False, True], ids=["one_filter", "filters"])
def test_a_sighup_and_sigterm_while_starting_stop_the_agent_cleanly(tmp_path: Path, filters: bool) -> None:
    body = '[status]\nport = 0\n' + ('[[filters]]\nname = "a"\n' if filters else "")
    path = _config_file(tmp_path, body)
    process = subprocess.Popen([sys.executable, "-c", _EARLY, str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, err  # the old code: killed by SIGHUP (-1)
    assert "event=stopping signal=SIGTERM" in err
    assert ("reload_requested" if filters else "reload_ignored") in err


# --- 4: NUL characters ---------------------------------------------------------------------------


def test_a_nul_in_data_dir_is_a_config_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config_file(tmp_path, "[status]\nport = 0\n", data_dir='"/tmp/a\\u0000b"')
    with pytest.raises(ConfigError, match=r"^data_dir must not contain a NUL"):
        load_config(path, environ={})
    assert main(["agent", "run", "--config", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "data_dir" in err and "internal error" not in err and "\n" not in err


def test_a_nul_in_status_host_exits_1_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config_file(tmp_path, '[status]\nhost = "a\\u0000b"\nport = 0\n')
    assert main(["agent", "run", "--config", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "status.host" in err and "internal error" not in err and "\n" not in err


# --- 5: dead code --------------------------------------------------------------------------------


def test_the_unused_tables_constant_is_gone() -> None:
    assert not hasattr(agent_config_module, "TABLES")
