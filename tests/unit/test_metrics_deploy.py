"""deploy/monitoring/ against the portal's real metrics: the alert rules pass promtool's checker and its rule unit
tests (each alert fires when it should and stays quiet otherwise), every metric the rules and the Grafana dashboard
query is one the portal exports (names read from a real scrape of /metrics), every dashboard query parses as PromQL,
the runbook links land on a heading of the operator guide, and each monitor scrapes a port that exists with the
token the processes read. The negative tests show each check can fail.

promtool comes from Debian's prometheus package (Makefile SYSTEM_PACKAGES); without it these tests fail in CI and
skip elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
MONITORING = REPO_ROOT / "deploy" / "monitoring"
OPERATOR_GUIDE = REPO_ROOT / "docs" / "operator-guide.md"
ALERTS = {
    "GPUPortalNodeBroken",
    "GPUPortalIdleAllocatedGPUs",
    "GPUPortalReconfigurationFailed",
    "GPUPortalNoAdmissionCycle",
    "GPUPortalReconcileLagging",
}
#: The portal's metric names all start so; other names in a query (up, vector) are Prometheus's own.
PORTAL_METRIC = re.compile(r"\bgpuportal_[a-z0-9_]+\b")


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((MONITORING / name).read_text()) if doc]


def rule_groups() -> dict[str, Any]:
    (rule,) = documents("20-prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    return rule["spec"]


def dashboard() -> dict[str, Any]:
    (config_map,) = documents("30-grafana-dashboard.yaml")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    return json.loads(config_map["data"]["gpu-portal.json"])


def dashboard_queries() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


@pytest.fixture(scope="module")
def promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        reason = "promtool is not installed (Debian's prometheus package; `make system-packages`)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return binary


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


def write_rules(directory: Path, spec: dict[str, Any]) -> Path:
    path = directory / "rules.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


# -- the rules ------------------------------------------------------------------------------------------------------


def test_the_five_alerts_are_declared_with_for_severity_and_a_runbook() -> None:
    rules = [rule for group in rule_groups()["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == ALERTS
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATOR_GUIDE.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        anchor = rule["annotations"]["runbook_url"].rpartition("#")[2]
        assert anchor == f"alert-{rule['alert'].lower()}" and anchor in headings, rule["alert"]


def test_promtool_accepts_the_rules(promtool, tmp_path) -> None:
    result = run_promtool(promtool, "check", "rules", str(write_rules(tmp_path, rule_groups())), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_promtool_refuses_a_broken_rule(promtool, tmp_path) -> None:
    spec = rule_groups()
    spec["groups"][0]["rules"][0]["expr"] = "max(gpuportal_nodes{verdict=error}) >"
    result = run_promtool(promtool, "check", "rules", str(write_rules(tmp_path, spec)), cwd=tmp_path)
    assert result.returncode != 0
    assert "parse error" in result.stdout + result.stderr


def alert(name: str, at: str, *firing: dict[str, str]) -> dict[str, Any]:
    return {"alertname": name, "eval_time": at, "exp_alerts": [{"exp_labels": labels} for labels in firing]}


#: Series as two web replicas and one worker report them (the database facts twice, alike).
RULE_TESTS = {
    "rule_files": ["rules.yml"],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                {"series": 'gpuportal_nodes{verdict="error",pod="web-1"}', "values": "0 0 1x30"},
                {"series": 'gpuportal_nodes{verdict="error",pod="web-2"}', "values": "0 0 1x30"},
                {
                    "series": 'gpuportal_allocated_idle_gpus{team="vision",resource_class="h100",pod="web-1"}',
                    "values": "3x10 5x40",
                },
                {
                    "series": 'gpuportal_allocated_idle_gpus{team="vision",resource_class="h100",pod="web-2"}',
                    "values": "3x10 5x40",
                },
                {"series": 'gpuportal_node_reconfiguration_failed{node="gpu-a",pod="web-1"}', "values": "_x5 1x10"},
                {
                    "series": "gpuportal_admission_cycle_duration_seconds_count{pod='worker-1'}",
                    "values": "0+6x10 60x10",
                },
                {"series": "gpuportal_inventory_reconcile_lag_seconds{pod='web-1'}", "values": "30x5 0+60x20"},
            ],
            "alert_rule_test": [
                # A node broken for 10 minutes fires once (max, not the sum of the replicas); not before.
                alert("GPUPortalNodeBroken", "10m"),
                alert("GPUPortalNodeBroken", "13m", {"severity": "warning"}),
                # 3 idle GPUs stay under the threshold of 4; 5 for 30 minutes fire (not 10, the replicas' sum).
                alert("GPUPortalIdleAllocatedGPUs", "9m"),
                alert("GPUPortalIdleAllocatedGPUs", "30m"),
                alert("GPUPortalIdleAllocatedGPUs", "42m", {"severity": "info"}),
                alert("GPUPortalReconfigurationFailed", "4m"),
                alert("GPUPortalReconfigurationFailed", "8m", {"severity": "warning", "node": "gpu-a"}),
                # Cycles run every 10 s for 10 minutes, then stop: quiet while they run, firing 6 minutes after.
                alert("GPUPortalNoAdmissionCycle", "9m"),
                alert("GPUPortalNoAdmissionCycle", "17m", {"severity": "critical"}),
                # The lag grows by a minute a minute from 5m: over 300 s from 11m, firing 5 minutes later.
                alert("GPUPortalReconcileLagging", "12m"),
                alert("GPUPortalReconcileLagging", "17m", {"severity": "warning"}),
            ],
        },
        {
            # No worker ever reported: no cycle is no cycle.
            "interval": "1m",
            "input_series": [{"series": "gpuportal_nodes{verdict='error'}", "values": "0x10"}],
            "alert_rule_test": [alert("GPUPortalNoAdmissionCycle", "3m", {"severity": "critical"})],
        },
    ],
}


def without_annotations(spec: dict[str, Any]) -> dict[str, Any]:
    """The rules as promtool's unit tests compare them: labels only (the annotations' templates are checked by
    ``promtool check rules``)."""
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return spec


def test_each_alert_fires_when_it_should_and_only_then(promtool, tmp_path) -> None:
    write_rules(tmp_path, without_annotations(rule_groups()))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(RULE_TESTS))
    result = run_promtool(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rule_tests_can_fail(promtool, tmp_path) -> None:
    spec = rule_groups()
    for rule in spec["groups"][0]["rules"]:
        if rule["alert"] == "GPUPortalIdleAllocatedGPUs":
            rule["expr"] = "sum(gpuportal_allocated_idle_gpus) > 4"  # counts each web replica's report
    write_rules(tmp_path, without_annotations(spec))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(RULE_TESTS))
    result = run_promtool(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode != 0 and "GPUPortalIdleAllocatedGPUs" in result.stdout + result.stderr


# -- the metrics they use exist -------------------------------------------------------------------------------------

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


@pytest.fixture
def exported(client, db) -> set[str]:
    """Every series name /metrics can show, read from a real scrape (an empty database lists every family)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def test_rules_and_dashboard_query_only_metrics_the_portal_exports(exported) -> None:
    used = {
        name
        for expr in [rule["expr"] for g in rule_groups()["groups"] for rule in g["rules"]] + dashboard_queries()
        for name in PORTAL_METRIC.findall(expr)
    }
    assert len(used) >= 15
    assert used - exported == set()
    assert "gpuportal_no_such_metric" not in exported  # the check compares against something real


def test_every_dashboard_query_is_valid_promql(promtool, tmp_path) -> None:
    # promtool checks expressions as rules: each query becomes a recording rule ($__rate_interval as Grafana sets it).
    queries = dashboard_queries()
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expr.replace("$__rate_interval", "5m")}
        for i, expr in enumerate(queries)
    ]
    result = run_promtool(
        promtool,
        "check",
        "rules",
        str(write_rules(tmp_path, {"groups": [{"name": "dashboard", "rules": rules}]})),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "gpu-portal" and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panel_ids = [panel["id"] for panel in board["panels"]]
    assert len(panel_ids) == len(set(panel_ids)) >= 10
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]


# -- the monitors scrape what exists --------------------------------------------------------------------------------


def deploy_docs(kind: str) -> list[dict[str, Any]]:
    found = []
    # The plain manifests (rendered from the chart); the chart's templates under deploy/chart/ are not YAML yet.
    for path in sorted((REPO_ROOT / "deploy").rglob("*.yaml")):
        if "chart" in path.relative_to(REPO_ROOT / "deploy").parts:
            continue
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] == kind]
    return found


def named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in deploy_docs(kind) if d["metadata"]["name"] == name]
    return doc


WORKERS = ("worker", "worker-webhooks", "worker-background")


def selects(selector: dict, labels: dict) -> bool:
    """A Kubernetes label selector's verdict on ``labels`` (matchLabels and the In/NotIn/Exists expressions)."""
    if not selector["matchLabels"].items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        held = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values, "Exists": key in labels}
        if not held[operator]:
            return False
    return True


def test_the_monitors_select_the_portal_and_send_its_token() -> None:
    config = named("ConfigMap", "gpu-portal-config")["data"]
    secret = named("Secret", "gpu-portal-secrets")["stringData"]
    service = named("Service", "gpu-portal-web")
    (monitor,) = deploy_docs("ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"

    (pod_monitor,) = deploy_docs("PodMonitor")
    (pod_endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    for component in WORKERS:  # every worker Deployment (control loop, webhooks, background) is scraped
        worker = named("Deployment", f"gpu-portal-{component}")["spec"]["template"]
        assert selects(pod_monitor["spec"]["selector"], worker["metadata"]["labels"]), component
        ports = {p["name"]: p["containerPort"] for p in worker["spec"]["containers"][0]["ports"]}
        assert ports[pod_endpoint["port"]] == int(config["PORTAL_WORKER_METRICS_PORT"]), component
    assert not selects(pod_monitor["spec"]["selector"], service["metadata"]["labels"])

    for scrape in (endpoint, pod_endpoint):
        token = scrape["bearerTokenSecret"]
        assert token["name"] == "gpu-portal-secrets" and token["key"] in secret
        for component in ("web", *WORKERS):
            container = named("Deployment", f"gpu-portal-{component}")["spec"]["template"]["spec"]["containers"][0]
            refs = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {}) for e in container.get("env", [])}
            assert refs[token["key"]]["key"] == token["key"], component
    assert config["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")  # the pods' writable emptyDir
