"""One agent, many filters, with real parts: moto's S3 server over HTTP, opentracker, and
``bloomswarm agent run`` processes with ``[[filters]]`` sharing one libtorrent session.

Named filters are published under ``filters/NAME/`` and listed in one signed index.json;
each agent installs each filter into ``data_dir/filters/NAME``, where LiveFilter opens it
by name; a new version of one filter reaches every agent while the others stay put; a
SIGHUP that adds a filter starts it without restarting the others; a filter the index
lists but no agent follows is reported and never downloaded.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.live import LiveFilter
from bloomswarm.common.storage import S3Config
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.fleet import LocalFleet
from bloomswarm.sandbox.tracker import OpenTracker
from tests.functional.fleet_setup import KEY, fleet_spec

pytestmark = pytest.mark.skipif(shutil.which("opentracker") is None, reason="opentracker is not installed")

AGENTS = 3


SMALL = 20_000
"""Keys of a small filter (about 24 KB: fetched by one HTTP GET, swarm.direct_max_bytes)."""
LARGE = 400_000
"""Keys of a filter large enough for the swarm (about 480 KB)."""


def _builder(keys: list[str], capacity: int = SMALL) -> FilterBuilder:
    builder = FilterBuilder.for_capacity(capacity, 0.01)
    builder.add_many(keys)
    return builder


def _versions(agent: AgentProcess) -> dict[str, int | None]:
    """Each filter's installed version, from the agent's /status."""
    filters = agent.status().get("filters", {})
    return {name: status.get("current_version") for name, status in filters.items()}


def _filter_metrics(agent: AgentProcess, name: str) -> dict[str, float]:
    """Filter ``name``'s metrics from the agent's /status, without the common prefix."""
    metrics = agent.status()["filters"][name]["metrics"]
    return {key.removeprefix("bloomswarm_agent_"): float(value) for key, value in metrics.items()}


def _all_on(fleet: LocalFleet, wanted: dict[str, int]) -> None:
    for agent in fleet.agents:
        agent.wait_for(f"filters at {wanted}",
                       lambda a: all(_versions(a).get(n) == v for n, v in wanted.items()), limit_s=90)


def test_agents_follow_many_filters_through_one_index(
    tmp_path: Path, s3_bucket: S3Config, opentracker: OpenTracker
) -> None:
    spec = fleet_spec(agents=AGENTS, filters=("alpha", "beta"))
    with LocalFleet(tmp_path, spec, s3=s3_bucket, tracker=opentracker, signing_key=KEY) as fleet:
        published = fleet.publish_filters({"alpha": _builder(["a-1"]), "beta": _builder(["b-1"], LARGE),
                                           "stranger": _builder(["s-1"])})
        assert published.manifests["alpha"].size <= 256 * 1024 < published.manifests["beta"].size
        _all_on(fleet, {"alpha": 1, "beta": 1})

        first = fleet.agents[0]
        with LiveFilter(first.data_dir, filter="alpha", watch=False) as alpha:
            assert "a-1" in alpha and "b-1" not in alpha
        status = first.status()
        assert status["index"]["unknown_filters"] == ["stranger"]
        assert not (first.data_dir / "filters" / "stranger").exists()
        assert first.http_status("/readyz") == 200

        beta_swap = status["filters"]["beta"]["last_swap"]
        fleet.publish_filters({"alpha": _builder(["a-1", "a-2"])})
        _all_on(fleet, {"alpha": 2, "beta": 1})
        assert first.status()["filters"]["beta"]["last_swap"] == beta_swap

        code, metrics = first.get("/metrics")
        assert code == 200
        assert b'bloomswarm_agent_current_version{filter="alpha"} 2.0' in metrics
        assert b'bloomswarm_agent_current_version{filter="beta"} 1.0' in metrics
        assert b"bloomswarm_agent_index_unknown_filters 1.0" in metrics
        # The small filter's files came by plain HTTP (its v2 whole or as a delta, both
        # under swarm.direct_max_bytes): no byte of them from peers; the large one through
        # the one shared session, where the agents served it to each other.
        counted = [_filter_metrics(a, "alpha") for a in fleet.agents]
        assert all(m["bytes_from_peers_total"] == 0 for m in counted), counted
        alpha_size = published.manifests["alpha"].size
        assert all(m["bytes_from_origin_total"] >= alpha_size for m in counted), counted
        assert sum(_filter_metrics(a, "beta")["bytes_from_peers_total"] for a in fleet.agents) > 0

        # SIGHUP with one more filter: it starts; the running ones are not restarted.
        config = first.config_path.read_text()
        first.config_path.write_text(config + '[[filters]]\nname = "gamma"\n\n')
        fleet.publish_filters({"gamma": _builder(["g-1"])})
        assert first.process is not None
        first.process.send_signal(signal.SIGHUP)
        first.wait_for("gamma installed", lambda a: _versions(a).get("gamma") == 1, limit_s=60)
        assert _versions(first) == {"alpha": 2, "beta": 1, "gamma": 1}
        assert first.status()["filters"]["beta"]["last_swap"] == beta_swap
        assert "reloaded" in first.log()
        swaps = [line for line in first.log().splitlines() if "event=swapped" in line]
        assert swaps and all(" filter=" in line for line in swaps)  # each line names its filter
        assert any("event=swapped filter=alpha version=2" in line for line in swaps)


def test_a_bad_reload_keeps_the_running_filters(
    tmp_path: Path, s3_bucket: S3Config, opentracker: OpenTracker
) -> None:
    spec = fleet_spec(agents=1, filters=("alpha",))
    with LocalFleet(tmp_path, spec, s3=s3_bucket, tracker=opentracker, signing_key=KEY) as fleet:
        fleet.publish_filters({"alpha": _builder(["a-1"])})
        _all_on(fleet, {"alpha": 1})
        agent = fleet.agents[0]
        config = agent.config_path.read_text()
        agent.config_path.write_text(config + '[[filters]]\nname = "alpha"\n\n')  # a duplicate name
        assert agent.process is not None
        agent.process.send_signal(signal.SIGHUP)
        agent.wait_for("the reload refused", lambda a: "reload_failed" in a.log(), limit_s=30)
        assert "listed twice" in agent.log()
        assert _versions(agent) == {"alpha": 1}
        assert agent.process.poll() is None


def test_sighup_does_not_stop_an_agent_of_one_filter(
    tmp_path: Path, s3_bucket: S3Config, opentracker: OpenTracker
) -> None:
    spec = fleet_spec(agents=1)
    with LocalFleet(tmp_path, spec, s3=s3_bucket, tracker=opentracker, signing_key=KEY) as fleet:
        fleet.wait_until_up()
        agent = fleet.agents[0]
        assert agent.process is not None
        agent.process.send_signal(signal.SIGHUP)
        agent.wait_for("the SIGHUP logged", lambda a: "reload_ignored" in a.log(), limit_s=30)
        assert agent.process.poll() is None and agent.http_status("/healthz") == 200
