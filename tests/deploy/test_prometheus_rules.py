"""deploy/prometheus: promtool checks the rules and the example configuration, and runs the
alerts' unit tests (tests/deploy/rules_test.yml); every alert is tested there and every name the
rules read is one the gateway exports."""

from __future__ import annotations

import subprocess

import yaml

from gateway.http.metrics import Metrics
from tests.support.deploy import (
    RULES,
    RULES_TEST,
    SCRAPE_CONFIG,
    alerting_rules,
    metric_names,
    recording_rules,
)


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def exported_names() -> set[str]:
    """The sample names the gateway's /metrics can carry (counters' _total, histograms' _bucket/_sum/_count)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.update(family.name + suffix for suffix in suffixes[family.type])
    return names


def test_promtool_checks_the_rules(promtool):
    done = run(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(recording_rules()) + len(alerting_rules())} rules found" in done.stdout


def test_promtool_checks_the_example_configuration(promtool):
    # --syntax-only: the key file it names exists only where it is deployed.
    done = run(promtool, "check", "config", "--syntax-only", str(SCRAPE_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    assert config["rule_files"] == ["rules.yml"]  # beside it, as shipped
    assert {job["job_name"] for job in config["scrape_configs"]} == {"stack-gateway", "vllm"}


def test_promtool_unit_tests_of_the_alerts_pass(promtool):
    done = run(promtool, "test", "rules", str(RULES_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_unit_tested_firing_and_silent():
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test", ()):
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerting_rules()}
    assert names - fired == set(), "alerts never seen firing in rules_test.yml"
    assert names - silent == set(), "alerts never checked silent (pending, or on healthy series) in rules_test.yml"


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section():
    for rule in alerting_rules():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        assert annotations["runbook"].startswith("docs/operations.md#"), rule["alert"]


def test_the_rules_read_only_names_the_gateway_exports():
    exported = exported_names()
    read = {name for rule in recording_rules() + alerting_rules() for name in metric_names(rule["expr"])}
    gateway_names = {name for name in read if name.startswith("gateway_")}
    assert gateway_names, "the rules read no gateway metric"
    assert gateway_names - exported == set()
    # The vLLM names are checked against a real engine by test_prometheus_live.py.
    assert {name for name in read if name.startswith("vllm:")} >= {
        "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total"}
