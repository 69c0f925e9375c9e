"""scripts/render_dashboard.py, the stand-in for Grafana behind the docs' picture: every visible
panel at its place, each target's query sent as written, lines and last values drawn from what
Prometheus answered (a fake Prometheus here: the real one is in test_prometheus_live.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import re

from aiohttp import web

from tests.support.deploy import REPO_ROOT, dashboard

spec = importlib.util.spec_from_file_location("render_dashboard", REPO_ROOT / "scripts" / "render_dashboard.py")
render_dashboard = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_dashboard)


@contextlib.asynccontextmanager
async def fake_prometheus(handler):
    app = web.Application()
    app.router.add_get("/api/v1/query_range", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


async def test_every_visible_panel_is_drawn_from_its_own_queries():
    asked: list[str] = []

    async def query_range(request: web.Request) -> web.Response:
        expr = request.query["query"]
        asked.append(expr)
        start = float(request.query["start"])
        values = [[start + 60 * i, str(i + 1)] for i in range(3)]
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"route": "/v1/chat/completions", "status": "200", "model": "m"}, "values": values}]}})

    board = dashboard()
    async with fake_prometheus(query_range) as url:
        text = await render_dashboard.render(url, board, minutes=5, rate_interval="1m")
    visible = board["panels"]
    expected = [target["expr"].replace("$__rate_interval", "1m") for panel in visible
                for target in panel.get("targets", ())]
    assert asked == expected  # each query once, as written, nothing folded in a collapsed row
    for panel in visible:
        assert f">{panel['title']}<" in text.replace("&#x27;", "'")
    # One line per series: here each query answers one.
    assert text.count("<polyline") == sum(len(panel["targets"]) for panel in visible if panel["type"] == "timeseries")
    assert ">3 req/s<" not in text and ">3.00 req/s<" in text  # a stat shows the last value in its unit
    assert "{{" not in text  # every legend template filled from the series' labels
    assert "not Grafana" in text


def test_legend_and_units():
    assert render_dashboard.legend("{{route}} {{status}}", {"route": "/v1/models", "status": "429"}) == "/v1/models 429"
    assert render_dashboard.format_value(0.25, "percentunit") == "25.0%"
    assert render_dashboard.format_value(0.042, "s") == "42 ms"
    assert render_dashboard.format_value(float("nan"), "s") == "NaN"
    points = re.findall(r'points="([^"]+)"', render_dashboard.svg([("a", [(0, 0.0), (10, 2.0)])], 0, 10))
    assert points == ["0.0,150.0 420.0,10.0"]  # the largest value at the top, time across
