"""Prometheus config, alert rules and the Grafana dashboard: valid, tested, and about real metrics.

promtool (Prometheus's own checker) validates the config and the PromQL of every rule and
dashboard query, and runs the alert unit tests in alerts_test.yml. It comes from Debian's
`prometheus` package via ops/install-promtool.sh; missing, these tests skip on a developer
machine and fail under CI=true.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client import CollectorRegistry

from tests.conftest import service_missing
from tests.deploy.ops_kit import OPS, promtool
from worker.metrics import QueueCollector, QueueInspector, WorkerMetrics

PROM = OPS / "prometheus"
ALERTS = PROM / "alerts.yml"
DASHBOARD = OPS / "grafana" / "dashboard-evalq.json"
RUNBOOK = OPS / "RUNBOOK.md"
HERE = Path(__file__).parent
NAME = re.compile(r"\b((?:evalq|flower)_[a-z0-9_]+|up)\b")
FLOWER_METRICS = {
    "flower_events_total",
    "flower_task_runtime_seconds_bucket",
    "flower_task_runtime_seconds_count",
    "flower_task_runtime_seconds_sum",
    "flower_task_prefetch_time_seconds",
    "flower_worker_prefetched_tasks",
    "flower_worker_online",
    "flower_worker_number_of_currently_executing_tasks",
}


@pytest.fixture(scope="module")
def tool() -> str:
    """Path of promtool; missing, skip on a developer machine and fail under CI=true."""
    path = promtool()
    if path is None:
        service_missing("promtool", "install it with `bash ops/install-promtool.sh`")
    assert path is not None  # service_missing fails or skips
    return path


def run(tool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run promtool with ``args``; output captured."""
    argv = [tool, *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of alerts.yml."""
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    """Every query of the dashboard, Grafana variables replaced by PromQL-valid values."""
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    return [e.replace("$__rate_interval", "5m").replace("$lane", ".*") for e in exprs]


def test_prometheus_config_is_valid(tool: str) -> None:
    """`promtool check config` accepts prometheus.yml and the rule file it loads."""
    result = run(tool, "check", "config", PROM / "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_alert_rules_are_valid_promql(tool: str) -> None:
    """`promtool check rules` parses every alert expression."""
    result = run(tool, "check", "rules", ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_alert_unit_tests_pass(tool: str) -> None:
    """`promtool test rules`: each alert fires on its scenario and stays silent on near-misses."""
    result = run(tool, "test", "rules", HERE / "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    """Every alert in alerts.yml is exercised by at least one case in alerts_test.yml."""
    tests = yaml.safe_load((HERE / "alerts_test.yml").read_text(encoding="utf-8"))["tests"]
    tested = {case["alertname"] for t in tests for case in t.get("alert_rule_test", [])}
    assert {rule["alert"] for rule in alert_rules()} <= tested


def test_dashboard_queries_are_valid_promql(tool: str, tmp_path: Path) -> None:
    """Every dashboard query parses (checked by promtool as recording rules)."""
    rules = [{"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(dashboard_exprs())]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run(tool, "check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr


def _anchors(markdown: str) -> set[str]:
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def test_alerts_have_severity_summary_and_an_existing_runbook_section() -> None:
    """Each alert is labelled page|ticket, has a summary, and links a RUNBOOK.md heading."""
    anchors = _anchors(RUNBOOK.read_text(encoding="utf-8"))
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        path, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert path == "ops/RUNBOOK.md", rule["alert"]
        assert anchor in anchors, (rule["alert"], anchor)


def _exported_names(redis_url: str) -> set[str]:
    """Sample names evalq really exports: worker metrics, the queue collector, Flower, up."""
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    client = redis.Redis.from_url(redis_url)
    registry.register(QueueCollector(QueueInspector(client)))
    names = {"up"} | FLOWER_METRICS
    for family in registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        names |= {family.name + s for s in suffixes.get(family.type, [""])}
    client.close()
    return names


def test_alerts_and_dashboard_only_use_exported_metrics(redis_url: str) -> None:
    """Every metric name in alerts and dashboard is one that evalq, Flower or Prometheus exports."""
    exported = _exported_names(redis_url)
    used = {name for rule in alert_rules() for name in NAME.findall(rule["expr"])}
    used |= {name for expr in dashboard_exprs() for name in NAME.findall(expr)}
    assert used - exported == set()
    assert {"evalq_queue_depth", "evalq_judge_http_responses_total"} <= used


def test_flower_metric_names_match_the_installed_flower() -> None:
    """The Flower metric names assumed above are the ones the installed Flower defines."""
    source = Path(__import__("flower.events").events.__file__).read_text(encoding="utf-8")
    defined = set(re.findall(r"'(flower_[a-z_]+)'", source))
    bases = {re.sub(r"_(bucket|count|sum)$", "", n) for n in FLOWER_METRICS}
    assert bases <= defined


def test_dashboard_structure() -> None:
    """The dashboard loads: unique ids, panels within 24 columns, the provisioned datasource."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    provisioned = yaml.safe_load(
        (OPS / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    uid = provisioned["datasources"][0]["uid"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid, panel["title"]
            assert panel["targets"], panel["title"]
    assert dashboard["uid"] == "evalq-overview"
