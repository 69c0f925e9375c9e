"""Render the Grafana dashboard's panels from a real Prometheus, without Grafana, to a PNG.

    .venvs/gateway/bin/python scripts/render_dashboard.py --prometheus http://127.0.0.1:9090 \\
        --minutes 15 --out docs/screenshots/dashboard.png

Grafana cannot be installed on these machines (no Debian package, no downloads), so the docs'
picture of the dashboard comes from this: every visible panel of
``deploy/grafana/stack-gateway.json`` at its place in the grid, each target's query sent as
written (``$__rate_interval`` replaced by ``--rate-interval``) to Prometheus's
``/api/v1/query_range`` over the last ``--minutes``, drawn as plain SVG lines (time series) or the
last value (stats), and screenshotted in headless Chromium. The data and queries are real; the
look is not Grafana's (no themes, no thresholds or overrides), and the page says so in its header.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import math
import re
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "stack-gateway.json"
ROW_HEIGHT = 30   # pixels per grid unit of height, as Grafana
WIDTH = 1600      # pixels for the 24 columns
PLOT = (420, 150)  # a time series' SVG viewBox
LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
COLOURS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0"]


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat: ``{{label}}`` replaced by the series' label (empty when it has none)."""
    out = LABEL.sub(lambda match: labels.get(match.group(1), ""), template).strip()
    return out or json.dumps(labels)


def format_value(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "NaN"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "bytes":
        return f"{value / 1024:.1f} KiB" if value >= 1024 else f"{value:.0f} B"
    if unit == "reqps":
        return f"{value:.2f} req/s"
    return f"{value:.3g}"


def svg(series: list[tuple[str, list[tuple[float, float]]]], start: float, end: float, unit: str = "") -> str:
    """Lines of ``series`` [(name, [(t, value)])] over [start, end], scaled to the largest value."""
    width, height = PLOT
    values = [v for _, points in series for _, v in points if math.isfinite(v)]
    top = max(values, default=0.0) or 1.0
    lines = []
    for index, (_, points) in enumerate(series):
        coords = " ".join(f"{(t - start) / (end - start) * width:.1f},{height - v / top * (height - 10):.1f}"
                          for t, v in points if math.isfinite(v))
        if coords:
            lines.append(f'<polyline fill="none" stroke="{COLOURS[index % len(COLOURS)]}" stroke-width="1.5" '
                         f'points="{coords}"/>')
    axis = f'<text x="2" y="10" class="axis">{html.escape(format_value(top, unit))}</text>'
    return (f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" class="plot">'
            f'<line x1="0" y1="{height}" x2="{width}" y2="{height}" class="base"/>{axis}{"".join(lines)}</svg>')


def panel_html(panel: dict, results: list[tuple[dict, list[dict]]], start: float, end: float) -> str:
    """One panel: its title and either its last value (stat) or its lines and legend (time series)."""
    box = panel["gridPos"]
    style = (f"left:{box['x'] / 24 * 100:.3f}%;width:{box['w'] / 24 * 100:.3f}%;"
             f"top:{box['y'] * ROW_HEIGHT}px;height:{box['h'] * ROW_HEIGHT - 6}px")
    title = html.escape(panel["title"])
    if panel["type"] == "row":
        return f'<div class="row" style="{style}">{title}</div>'
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    series = []
    for target, answer in results:
        for item in answer:
            points = [(float(t), float(v)) for t, v in item["values"]]
            series.append((legend(target.get("legendFormat", ""), item["metric"]), points))
    if not series:
        body = '<div class="nodata">No data</div>'
    elif panel["type"] == "stat":
        body = f'<div class="stat">{html.escape(format_value(series[0][1][-1][1], unit))}</div>'
    else:
        keys = "".join(
            f'<div class="key"><span style="background:{COLOURS[i % len(COLOURS)]}"></span>'
            f'{html.escape(name)} <b>{html.escape(format_value(points[-1][1], unit))}</b></div>'
            for i, (name, points) in enumerate(series[:8]))
        more = f'<div class="key">+{len(series) - 8} more</div>' if len(series) > 8 else ""
        body = svg(series, start, end, unit) + f'<div class="legend">{keys}{more}</div>'
    return f'<div class="panel" style="{style}"><div class="title">{title}</div>{body}</div>'


def page(board: dict, rendered: list[str], *, prometheus: str, minutes: float, rate_interval: str) -> str:
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"]) * ROW_HEIGHT
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = (f"{html.escape(board['title'])}: the panels of deploy/grafana/stack-gateway.json, their queries run on "
              f"Prometheus ({html.escape(prometheus)}) over the last {minutes:g} minutes, {when} "
              f"($__rate_interval = {html.escape(rate_interval)}); drawn by scripts/render_dashboard.py, not Grafana")
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; background: #111217; color: #ccccdc; font: 12px sans-serif; width: {WIDTH}px; }}
header {{ padding: 8px 10px; color: #9fa7b3; }}
.grid {{ position: relative; height: {bottom}px; margin: 0 6px; }}
.panel, .row {{ position: absolute; box-sizing: border-box; padding: 0 3px; }}
.panel > * {{ background: #181b1f; }}
.panel {{ display: flex; flex-direction: column; border: 1px solid #2c3235; background: #181b1f; }}
.row {{ font-size: 14px; font-weight: bold; color: #d8d9da; padding-top: 6px; }}
.title {{ font-weight: bold; padding: 4px 6px; color: #d8d9da; }}
.plot {{ flex: 1; width: 100%; min-height: 0; }}
.plot .base {{ stroke: #444; }} .plot .axis {{ fill: #777; font-size: 9px; }}
.legend {{ max-height: 40%; overflow: hidden; padding: 2px 6px; }}
.key {{ white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-size: 11px; }}
.key span {{ display: inline-block; width: 10px; height: 3px; margin-right: 4px; vertical-align: middle; }}
.stat {{ font-size: 30px; font-weight: bold; color: #73bf69; padding: 6px 10px; }}
.nodata {{ color: #777; padding: 20px; }}
</style></head><body><header>{header}</header><div class="grid">{"".join(rendered)}</div></body></html>"""


async def render(prometheus: str, board: dict, *, minutes: float, rate_interval: str) -> str:
    end = time.time()
    start = end - minutes * 60
    step = max(1.0, minutes * 60 / 200)
    rendered = []
    async with httpx.AsyncClient(timeout=30) as client:
        for panel in board["panels"]:  # the visible ones: a collapsed row's panels stay folded
            results = []
            for target in panel.get("targets", ()):
                expr = target["expr"].replace("$__rate_interval", rate_interval)
                answer = (await client.get(f"{prometheus}/api/v1/query_range",
                                           params={"query": expr, "start": start, "end": end, "step": step})).json()
                if answer.get("status") != "success":
                    raise SystemExit(f"{panel['title']}: {expr}: {answer.get('error')}")
                results.append((target, answer["data"]["result"]))
            rendered.append(panel_html(panel, results, start, end))
    return page(board, rendered, prometheus=prometheus, minutes=minutes, rate_interval=rate_interval)


async def screenshot(page_html: str, out: Path, chromium: str) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            tab = await browser.new_page(viewport={"width": WIDTH, "height": 900})
            await tab.set_content(page_html)
            await tab.screenshot(path=str(out), full_page=True)
        finally:
            await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, help="Prometheus's base URL")
    parser.add_argument("--dashboard", type=Path, default=DASHBOARD)
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval stands for")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--html", type=Path, help="also keep the page")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    board = json.loads(args.dashboard.read_text())
    text = asyncio.run(render(args.prometheus.rstrip("/"), board, minutes=args.minutes,
                              rate_interval=args.rate_interval))
    if args.html is not None:
        args.html.write_text(text)
    asyncio.run(screenshot(text, args.out, args.chromium))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
