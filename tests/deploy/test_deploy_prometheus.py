"""deploy/prometheus (alert rules, their promtool tests, the PrometheusRule) and
deploy/grafana (the dashboard) agree with promtool, with each other and with the metrics
the agent exports (read from agent/metrics.py's registry, not from a list kept here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bloomswarm.agent.metrics import AgentMetrics
from tests.deploy.deploy_tree import DEPLOY, ROOT, walk_strings

PROMETHEUS = DEPLOY / "prometheus"
RULES = PROMETHEUS / "bloomswarm-alerts.yml"
RULE_TESTS = PROMETHEUS / "bloomswarm-alerts.test.yml"
PROMETHEUS_RULE = PROMETHEUS / "bloomswarm-prometheusrule.yaml"
DASHBOARD = DEPLOY / "grafana" / "bloomswarm-dashboard.json"
METRIC_NAME = re.compile(r"\bbloomswarm_[a-z0-9_]+")

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian's prometheus package; scripts/test.sh installs it as root)",
)


def exported_series_names() -> set[str]:
    """Every series name the agent's registry exposes, labelled families included.

    Counters expose ``NAME_total``, histograms ``NAME_bucket``/``_sum``/``_count``; a
    labelled counter with no child yet has no sample, so names come from the families'
    types rather than from samples."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names: set[str] = set()
    for family in AgentMetrics().registry.collect():
        names.update(family.name + suffix for suffix in suffixes[family.type])
    return names


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_the_registry_reading_sees_every_metric_family() -> None:
    names = exported_series_names()
    assert {"bloomswarm_agent_ready", "bloomswarm_agent_bytes_from_peers_total",
            "bloomswarm_agent_verification_failures_total",
            "bloomswarm_agent_swap_latency_seconds_bucket"} <= names
    assert "bloomswarm_agent_bytes_from_peers" not in names


def test_every_metric_the_rules_and_the_dashboard_name_is_exported() -> None:
    exported = exported_series_names()
    named = {name for rule in alert_rules() for name in METRIC_NAME.findall(rule["expr"])}
    named |= {name for expr in dashboard_expressions() for name in METRIC_NAME.findall(expr)}
    assert len(named) >= 12, sorted(named)
    assert named <= exported, f"not exported by the agent: {sorted(named - exported)}"


def test_the_dashboard_covers_what_operators_watch() -> None:
    exprs = " ".join(dashboard_expressions())
    for metric in ("current_version", "download_progress", "swap_latency_seconds_bucket",
                   "bytes_from_peers_total", "bytes_from_origin_total", "origin_errors_total",
                   "pointer_age_seconds", "pointer_stale", "verification_failures_total"):
        assert f"bloomswarm_agent_{metric}" in exprs, metric
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    datasources = {s for s in walk_strings(dashboard) if s.startswith("${")}
    assert datasources == {"${datasource}"} and "datasource" in variables


def test_every_alert_is_in_the_operations_table() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    for rule in alert_rules():
        assert f"`{rule['alert']}`" in operations, rule["alert"]


def test_the_operations_table_shows_each_alert_s_expression() -> None:
    """The table's PromQL is the rule's (spaces aside; `|` escaped in a Markdown cell)."""
    operations = (ROOT / "docs" / "operations.md").read_text()
    for rule in alert_rules():
        (row,) = [line for line in operations.splitlines() if line.startswith(f"| `{rule['alert']}` |")]
        expression = row.split("` | `", 1)[1].split("`", 1)[0].replace("\\|", "|")
        assert expression.replace(" ", "") == rule["expr"].replace(" ", ""), rule["alert"]


def test_the_promtool_tests_make_every_alert_fire_and_stay_silent() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    fired: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts == fired, f"never fired: {sorted(alerts - fired)}"
    assert alerts == silent, f"never checked silent: {sorted(alerts - silent)}"


@needs_promtool
def test_promtool_checks_the_rules_and_the_prometheusrule(tmp_path: Path) -> None:
    (document,) = yaml.safe_load_all(PROMETHEUS_RULE.read_text())
    from_kubernetes = tmp_path / "from-prometheusrule.yml"
    from_kubernetes.write_text(yaml.safe_dump({"groups": document["spec"]["groups"]}))
    for path in (RULES, from_kubernetes):
        result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                                text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_rule_tests_pass() -> None:
    result = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], cwd=PROMETHEUS,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_rule_tests_can_fail(tmp_path: Path) -> None:
    """A wrong threshold in the rules makes the promtool tests fail (they are not vacuous)."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("> 10", "> 1000"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0 and "BloomswarmHashFailures" in result.stdout + result.stderr


def test_the_prometheusrule_is_generated_from_the_rules_file() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "prometheus_rule.py"), "--check"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    (document,) = yaml.safe_load_all(PROMETHEUS_RULE.read_text())
    assert document["kind"] == "PrometheusRule"
    assert document["metadata"]["namespace"] == "bloomswarm"
    assert document["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
