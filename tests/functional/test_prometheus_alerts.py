"""Debian's Prometheus server scraping a sandbox fleet with the shipped alert rules: a fault
injected into the fleet makes the matching alert fire in Prometheus's own API.

Two agents (direct transfer, moto's S3 server behind the sandbox origin) install v1 while
a stand-in publisher re-signs latest.json every second (`publish --refresh`); Prometheus
scrapes both every second and evaluates deploy/prometheus/bloomswarm-alerts.yml with every
``for`` shortened to 0s (the expressions are the shipped ones). While the pointer is
refreshed, no alert fires; once the refreshing stops (a frozen pointer, older than the
agents' watch.max_pointer_age_s), BloomswarmPointerStale fires for both agents; then the
origin fails every request and BloomswarmOriginErrors fires for both too. The
dashboard's queries are run against the same server, so a query Prometheus cannot parse
fails here. The Prometheus process is stopped by its PID.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bloomswarm.common.storage import S3Config
from bloomswarm.publisher.refresh import refresh_latest
from bloomswarm.sandbox.fleet import LocalFleet
from bloomswarm.sandbox.processes import free_port, stop_process, wait_for_http
from tests.functional.fleet_setup import KEY, fleet_spec, keys, publish_keys, with_tables

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "bloomswarm-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "bloomswarm-dashboard.json"
MAX_POINTER_AGE_S = 4.0
ALERT = "BloomswarmPointerStale"
ORIGIN_ALERT = "BloomswarmOriginErrors"

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus is not installed (Debian's prometheus package; "
                              "scripts/test.sh installs it with apt-get as root)"),
]


class PrometheusServer:
    """``prometheus`` on a loopback port scraping ``targets`` every second, with ``rules``."""

    def __init__(self, root: Path, targets: list[str], rules: Path) -> None:
        self.root = root
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "bloomswarm-agent", "static_configs": [{"targets": targets}]}],
        }
        self.config = root / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        binary = shutil.which("prometheus")
        assert binary is not None
        with (self.root / "prometheus.log").open("wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        assert wait_for_http("127.0.0.1", self.port, path="/-/ready", process=self.process,
                             timeout_s=60), self.log()
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout_s=15)

    def log(self) -> str:
        return (self.root / "prometheus.log").read_text(errors="replace")[-3000:]

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful API answer."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}{query}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self, name: str) -> dict[str, str]:
        """Instance -> state of the alert ``name``'s active alerts."""
        return {a["labels"].get("instance", ""): a["state"] for a in self.api("alerts")["alerts"]
                if a["labels"]["alertname"] == name}

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])


def _wait(condition: Callable[[], bool], limit_s: float, what: str, server: PrometheusServer) -> None:
    """Poll until ``condition`` holds (a safety bound, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{server.log()}"
        time.sleep(0.5)


class Refresher(threading.Thread):
    """The publisher's hourly ``publish --refresh``, every second: latest.json stays young."""

    def __init__(self, fleet: LocalFleet) -> None:
        super().__init__(name="refresher", daemon=True)
        self.fleet = fleet
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(1.0):
            refresh_latest(self.fleet.store, KEY, [KEY.public_key()], "functional")

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def _rules_without_for(directory: Path) -> Path:
    """The shipped rules with every ``for`` set to 0s (firing at the first evaluation)."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    path = directory / RULES.name
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


@pytest.fixture
def fleet(tmp_path: Path, s3_bucket: S3Config) -> Iterator[LocalFleet]:
    tables = with_tables({"watch": {"max_pointer_age_s": MAX_POINTER_AGE_S}})
    with LocalFleet(tmp_path / "fleet", fleet_spec(transfer="direct", piece_size=None, agent_tables=tables),
                    s3=s3_bucket, signing_key=KEY) as fleet:
        yield fleet


def test_a_frozen_pointer_and_a_failing_origin_fire_their_alerts_in_prometheus(
    fleet: LocalFleet, tmp_path: Path
) -> None:
    started = time.monotonic()
    publish_keys(fleet, keys(1), capacity=10_000)
    refresher = Refresher(fleet)
    refresher.start()
    try:
        agents = [fleet.add_agent(), fleet.add_agent()]
        fleet.wait_all_on(1, "v1 installed")
        targets = [f"127.0.0.1:{agent.port}" for agent in agents]
        server = PrometheusServer(tmp_path, targets, _rules_without_for(tmp_path)).start()
        try:
            _wait(lambda: len(server.query("bloomswarm_agent_ready == 1")) == 2, 60,
                  "both agents scraped, ready", server)
            _wait(lambda: not server.api("rules")["groups"][0]["lastEvaluation"].startswith("0001"), 30,
                  "a rule evaluation", server)
            time.sleep(3.0)  # a few evaluations while the pointer is refreshed
            assert server.alerts(ALERT) == {}, "stale while latest.json is refreshed"
            firing = [a["labels"]["alertname"] for a in server.api("alerts")["alerts"]]
            assert firing == [], f"alerts on a healthy fleet: {firing}"

            for panel in json.loads(DASHBOARD.read_text())["panels"]:
                for target in panel.get("targets", []):
                    expr = re.sub(r"\$__(rate_interval|interval|range)", "1m", target["expr"])
                    server.query(expr)  # answers "success", or the API call fails the test

            refresher.stop()  # the fault: nobody re-signs latest.json any more
            frozen_at = time.monotonic()
            _wait(lambda: server.alerts(ALERT) == {t: "firing" for t in targets}, 60,
                  f"{ALERT} firing for both agents", server)
            assert time.monotonic() - frozen_at >= MAX_POINTER_AGE_S - 1.5
            ages = server.query("bloomswarm_agent_pointer_age_seconds")
            assert all(float(sample["value"][1]) > MAX_POINTER_AGE_S for sample in ages), ages
            others = {a["labels"]["alertname"] for a in server.api("alerts")["alerts"]} - {ALERT}
            assert others == set(), f"other alerts fired: {others}"
            assert all(agent.http_status("/readyz") == 200 for agent in agents)  # still serving v1

            assert server.alerts(ORIGIN_ALERT) == {}
            assert fleet.proxy is not None
            fleet.proxy.fault_rate = 1.0  # the second fault: every origin request fails
            _wait(lambda: server.alerts(ORIGIN_ALERT) == {t: "firing" for t in targets}, 60,
                  f"{ORIGIN_ALERT} firing for both agents", server)
            assert server.alerts(ALERT) == {t: "firing" for t in targets}
        finally:
            server.stop()
    finally:
        refresher.stop()
    print(f"prometheus alert test: {time.monotonic() - started:.1f} s")
