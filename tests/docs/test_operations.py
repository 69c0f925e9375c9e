"""docs/operations.md holds what deploy/ ships: a section for every alert (the one its runbook
annotation links), every recording rule, every dashboard panel, every metric the files read."""

from __future__ import annotations

import re

from tests.support.deploy import (
    OPERATIONS_DOC,
    alerting_rules,
    all_panels,
    metric_names,
    panel_queries,
    recording_rules,
)


def page() -> str:
    return OPERATIONS_DOC.read_text()


def anchors() -> set[str]:
    headings = re.findall(r"^#+ (.+)$", page(), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_alert_has_the_section_its_runbook_links():
    sections = anchors()
    for rule in alerting_rules():
        anchor = rule["annotations"]["runbook"].removeprefix("docs/operations.md#")
        assert anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in sections, f"docs/operations.md has no section for {rule['alert']}"


def test_every_recording_rule_is_listed():
    text = page()
    for rule in recording_rules():
        record = rule["record"]
        # The table names a quantile pair as `...:p50_5m`, `:p99_5m`.
        short = record[record.rindex(":"):]
        assert record in text or (short in text and record[:record.rindex(":")] in text), record


def test_every_panel_is_listed():
    text = page()
    for panel in all_panels():
        if panel["type"] != "text":
            assert panel["title"] in text, panel["title"]


def test_every_vllm_name_read_is_named():
    text = page()
    read = {name for query in panel_queries() for name in metric_names(query.expr)}
    read |= {name for rule in recording_rules() + alerting_rules() for name in metric_names(rule["expr"])}
    vllm = {name.removesuffix("_bucket") for name in read if name.startswith("vllm:")}
    assert {name for name in vllm if name not in text} == set()
