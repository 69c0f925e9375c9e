"""deploy/grafana/stack-gateway.json: a dashboard Grafana can import, whose queries read only
what the gateway exports (what they return from a real Prometheus: test_prometheus_live.py)."""

from __future__ import annotations

from gateway.http.metrics import Metrics
from tests.support.deploy import all_panels, dashboard, metric_names, panel_queries

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def gateway_families() -> set[str]:
    return {family.name for family in Metrics().registry.collect()}


def test_the_dashboard_asks_for_its_prometheus_and_every_query_goes_there():
    board = dashboard()
    assert board["uid"] == "stack-gateway" and board["schemaVersion"] >= 36
    [variable] = board["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    for panel in all_panels(board):
        for target in panel.get("targets", ()):
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_have_unique_ids_and_do_not_overlap():
    panels = list(all_panels())
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:  # the visible ones (a collapsed row's own panels lie below it)
        box = panel["gridPos"]
        assert 0 <= box["x"] and box["x"] + box["w"] <= 24, panel["title"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_visible_panel_but_rows_and_notes_has_a_query():
    for panel in all_panels():
        if panel["type"] in ("row", "text"):
            continue
        assert panel.get("targets"), panel["title"]


def test_the_queue_row_shows_the_queue_length_and_wait():
    """Flow control's queue (docs/flow-control.md): its length per model and band, its wait per band."""
    [queue] = [panel for panel in dashboard()["panels"] if panel["type"] == "row" and panel["title"] == "Queue"]
    assert queue["collapsed"] is False
    read = {name for query in panel_queries() for name in metric_names(query.expr) if "queue" in name}
    assert read == {"gateway_queue_length", "gateway_queue_wait_seconds_bucket"}


def test_the_dashboard_reads_only_names_the_gateway_exports():
    families = gateway_families()
    read = {name for query in panel_queries() for name in metric_names(query.expr) if name.startswith("gateway_")}
    bare = {name.removesuffix("_total").removesuffix("_bucket") for name in read}
    assert bare - families == set()


def test_the_dashboard_covers_what_an_operator_looks_at():
    """Requests and errors, TTFT and latency, tokens per key and model, engines' load and caches,
    admission, sessions and continuations: each has a panel reading its metric."""
    read = {name for query in panel_queries() for name in metric_names(query.expr)}
    assert read >= {
        "gateway_requests_total", "gateway_request_duration_seconds_bucket",
        "gateway_time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_bucket",
        "gateway_tokens_total", "vllm:generation_tokens_total", "gateway_engine_up",
        "gateway_model_engines_ready", "gateway_engine_load_score", "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "gateway_rejected_total",
        "gateway_engine_continuations_total", "gateway_session_store_backlog_bytes", "gateway_streams_ended_total",
    }
