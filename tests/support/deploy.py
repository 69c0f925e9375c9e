"""The shipped operations files (deploy/), read the way Prometheus and Grafana read them.

The tests take every query from the files themselves (never a copy): the recording and
alerting rules of ``deploy/prometheus/rules.yml``, the example scrape configuration, and every
panel's queries in ``deploy/grafana/stack-gateway.json`` with Grafana's variables replaced the
way Grafana would (``$__rate_interval``: a window; the datasource variable appears only in
``datasource`` fields, never in a query).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES = REPO_ROOT / "deploy" / "prometheus" / "rules.yml"
SCRAPE_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "stack-gateway.json"
RULES_TEST = REPO_ROOT / "tests" / "deploy" / "rules_test.yml"
OPERATIONS_DOC = REPO_ROOT / "docs" / "operations.md"

# PromQL identifiers: metric names (with colons), label names, functions, keywords.
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class PanelQuery:
    panel: str   # the panel's title
    ref: str     # the target's refId
    expr: str    # as written in the dashboard


def rule_groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"]


def recording_rules() -> list[dict]:
    return [rule for group in rule_groups() for rule in group["rules"] if "record" in rule]


def alerting_rules() -> list[dict]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(board: dict | None = None) -> Iterator[dict]:
    """Every panel, those inside collapsed rows too."""
    for panel in (board or dashboard())["panels"]:
        yield panel
        yield from panel.get("panels", ())


def panel_queries(board: dict | None = None) -> list[PanelQuery]:
    return [PanelQuery(panel["title"], target["refId"], target["expr"])
            for panel in all_panels(board) for target in panel.get("targets", ())]


def as_grafana_sends(expr: str, rate_interval: str) -> str:
    """``expr`` with Grafana's ``$__rate_interval`` replaced; fails on any other variable."""
    expr = expr.replace("$__rate_interval", rate_interval)
    assert "$" not in expr, f"a dashboard query uses a variable the tests do not know: {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    """The gateway_* and vllm:* names a PromQL expression reads (string literals skipped)."""
    names = IDENTIFIER.findall(STRING.sub('""', expr))
    return {name for name in names if name.startswith(("gateway_", "vllm:"))}
