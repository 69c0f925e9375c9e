"""Writing a run's results: results.json, results.md (tables) and results.png (chart)."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.contenders import BARE_RELAY, display_name
from bench.rounds import DIRECT


def _f(value: float | None, spec: str = ".2f", sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return format(value, ("+" if sign else "") + spec)


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.0f}%"


def _scenario_rows(results: dict) -> list[str]:
    lines = ["| scenario | target | req/s | req/s ratio | p50 ms | p50 added | p99 ms "
             "| p99 added | TTFT p50 added | TTFT p99 added | chunks/s | chunks/s ratio "
             "| gateway CPU us/req | load CPU us/req | others' CPU | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, block in results["scenarios"].items():
        for name, target in block["targets"].items():
            m = target["median"]
            v = target.get("vs_direct", {})
            streaming = block["scenario"]["stream"]
            label = "direct" if name == DIRECT else display_name(name)
            lines.append(
                f"| {key} | {label} | {m['rps']:.0f} | "
                f"{_f(v.get('rps_ratio')) if v else '1.00'} | {_f(m['latency_p50_ms'])} | "
                f"{_f(v.get('added_p50_ms'), sign=True) if v else '-'} | "
                f"{_f(m['latency_p99_ms'])} | "
                f"{_f(v.get('added_p99_ms'), sign=True) if v else '-'} | "
                f"{_f(v.get('added_ttft_p50_ms'), sign=True) if v and streaming else '-'} | "
                f"{_f(v.get('added_ttft_p99_ms'), sign=True) if v and streaming else '-'} | "
                f"{_f(m['chunks_per_s'], '.0f') if streaming else '-'} | "
                f"{(_f(v.get('chunks_per_s_ratio')) if v else '1.00') if streaming else '-'} | "
                f"{_f(m.get('server_cpu_us_per_request'), '.0f') if v else '-'} | "
                f"{_f(m.get('load_cpu_us_per_request'), '.0f')} | "
                f"{_percent(m.get('others_cpu_share'))} | {m['errors']} |")
    return lines


def _ok(results: dict) -> list[str]:
    """The contenders that started: gateway variants, then the references."""
    everyone = {**results["variants"], **results.get("references", {})}
    return [name for name, status in everyone.items() if status["status"] == "ok"]


def _target_rows(results: dict) -> list[str]:
    variants = _ok(results)
    header = "| target | " + " | ".join(display_name(v) for v in variants) + " |"
    lines = ["Bold: the variant the issue states the target for; the other columns show how "
             "the same figure fares with the other variants.", "", header,
             "|---|" + "---:|" * len(variants)]
    for row in results["targets"]:
        cells = []
        for variant in variants:
            figure = row["by_variant"].get(variant)
            passed = row["passed_by_variant"].get(variant)
            mark = "" if passed is None else (" pass" if passed else " FAIL")
            text = "n/a" if figure is None else f"{figure:.2f}{row['unit']}{mark}"
            if variant == row["variant"]:  # the variant the issue states the target for
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {row['target']} | " + " | ".join(cells) + " |")
    return lines


def _comparison(row: dict, comparison: dict | None) -> str:
    if comparison is None or comparison["median"] is None:
        return "n/a"
    if row["compare"] == "difference":
        return (f"{comparison['median']:+.2f} ms ({comparison['low']:+.2f} to "
                f"{comparison['high']:+.2f})")
    return f"{comparison['median']:.2f}x ({comparison['low']:.2f}-{comparison['high']:.2f})"


def _relative_rows(results: dict) -> list[str]:
    rows = results.get("relative_targets") or []
    names = [n for n in _ok(results) if any(n in row["by_name"] for row in rows)]
    if not rows or not names:
        return ["Not measured (needs the nonstream-c1, nonstream-c32 and stream-c32 scenarios)."]
    default = results.get("default_variant")
    lines = ["Each cell: the figure (median of rounds), then the comparison with the bare relay "
             "taken round by round (median, lowest-highest round), and whether the bound is met. "
             f"Bold: the gateway with its default settings ({display_name(default)}).", "",
             "| target | " + " | ".join(display_name(n) for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for row in rows:
        cells = []
        for name in names:
            entry = row["by_name"].get(name)
            if entry is None or entry["figure"] is None:
                cells.append("n/a")
                continue
            text = f"{entry['figure']:.2f}{row['unit']}"
            if name != BARE_RELAY:
                verdict = {True: "met", False: "missed", None: "n/a"}[entry["passed"]]
                text += f"; {_comparison(row, entry['vs_bare_relay'])}: {verdict}"
            cells.append(f"**{text}**" if name == default else text)
        lines.append(f"| {row['target']} | " + " | ".join(cells) + " |")
    lines += ["", "The same figures against nginx, round by round (no bound; how far from a "
              "compiled relay):", "",
              "| figure vs nginx | " + " | ".join(display_name(n) for n in names if n != "nginx")
              + " |", "|---|" + "---:|" * len([n for n in names if n != "nginx"])]
    for row in rows:
        cells = [_comparison(row, (row["by_name"].get(n) or {}).get("vs_nginx"))
                 for n in names if n != "nginx"]
        lines.append(f"| {row['target'].split(' <=')[0].split(' >=')[0]} | "
                     + " | ".join(cells) + " |")
    return lines


def _memory_rows(results: dict) -> list[str]:
    lines = ["| variant | streams | open at once | errors | RSS before MiB | RSS during MiB "
             "| RSS after MiB | per stream KiB |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for variant, m in results.get("memory", {}).items():
        if "error" in m:
            lines.append(f"| {display_name(variant)} | failed: {m['error']} "
                         "| | | | | | |")
            continue
        per = m["bytes_per_stream"]
        lines.append(
            f"| {display_name(variant)} | {m['streams']} | "
            f"{m['open_concurrently']} | {m['errors']} | {m['rss_before_bytes'] / 2**20:.1f} | "
            f"{m['rss_during_bytes'] / 2**20:.1f} | {m['rss_after_bytes'] / 2**20:.1f} | "
            f"{_f(None if per is None else per / 1024, '.1f')} |")
    return lines


def _engine_rows(results: dict) -> list[str]:
    engine = results.get("engine") or {}
    if "skipped" in engine:
        return [f"Real engine: skipped ({engine['skipped']})."]
    lines = [f"Real engine at {engine.get('url')} (model `{engine.get('model')}`), "
             f"{engine.get('rounds')} interleaved rounds of {engine.get('duration_s')} s. "
             f"Placement: {engine.get('placement', 'gateway unpinned')}. "
             "\"Engine requests by others\": requests the engine "
             "finished for other clients during the measured windows (from its "
             "`vllm:request_success_total`); non-zero means a shared, disturbed engine.", "",
             "| scenario | variant | direct req/s | gateway req/s | req/s ratio "
             "| chunks/s ratio | p50 added ms | TTFT p50 added ms | errors "
             "| engine requests by others |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for variant, block in engine.get("variants", {}).items():
        if "error" in block:
            lines.append(f"| - | {variant} | failed: {block['error']} | | | | | | | |")
            continue
        for key, s in block["by_scenario"].items():
            lines.append(
                f"| {key} | {display_name(variant)} | {s['direct_rps']:.1f} | "
                f"{s['gateway_rps']:.1f} | {_f(s['rps_ratio'])} | "
                f"{_f(s['chunks_per_s_ratio'])} | {_f(s['added_p50_ms'], sign=True)} | "
                f"{_f(s['added_ttft_p50_ms'], sign=True)} | {s['errors']} | "
                f"{_f(s.get('engine_requests_by_others'), '.0f')} |")
    return lines


def render_markdown(results: dict) -> str:
    """results.md: how it was measured, the scenario table, targets, memory, engine."""
    info, config = results["machine"], results["config"]
    everyone = {**results["variants"], **results.get("references", {})}
    failed = [f"- **{display_name(v)} ({v}) failed:** `{s.get('error', '')[:300]}`"
              for v, s in everyone.items() if s["status"] != "ok"]
    lines = [
        "# Gateway overhead benchmark",
        "",
        f"Run {info['when']} on {info['cpu_model']} ({info['cpu_count']} cores), Python "
        f"{info['python']}, commit {info['git_commit']}{' (dirty)' if info['git_dirty'] else ''}."
        f" Fake upstream (bench/fake_upstream.py) unless stated. {results['pinning']}; "
        f"niceness {results['niceness']}. Load average at start/end: "
        f"{results['loadavg_start']} / {results['loadavg_end']}.",
        "",
        f"{config['rounds']} interleaved rounds (direct, then each gateway variant) of "
        f"{config['duration']:g} s per target (longer when needed: a window lasts at least 5 "
        f"typical requests, as measured in the warm-up) after {config['warmup']:g} s warm-up. "
        "Ratios "
        "and added milliseconds are computed per round against the direct run of the same "
        "round, then the median across rounds is reported; raw figures are medians across "
        f"rounds. Non-streaming: max_tokens {config['nonstream_tokens']}; streaming: "
        f"{config['stream_tokens']} chunks per response. CPU columns cover the measured window: "
        "gateway CPU per request; load CPU per request (load generator + fake upstream); "
        "others' CPU = share of the whole machine used by processes outside the benchmark "
        "(high values mark disturbed measurements).",
        "",
        *failed,
        "",
        "## Targets against the bare relay (issue 23)",
        "",
        *_relative_rows(results),
        "",
        "## Targets (issue 7)",
        "",
        *_target_rows(results),
        "",
        "## By scenario",
        "",
        *_scenario_rows(results),
        "",
        f"## Memory: {config['memory_streams']} concurrent open streams",
        "",
        *_memory_rows(results),
        "",
        "## End to end with the real engine",
        "",
        *_engine_rows(results),
        "",
    ]
    return "\n".join(lines)


def render_chart(results: dict, path: Path) -> None:
    """results.png: per mode, latency p50/p99 by concurrency and throughput ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = ["nonstream", "stream"]
    figure, axes = plt.subplots(2, 2, figsize=(12, 8), squeeze=False)
    for column, mode in enumerate(modes):
        blocks = [b for b in results["scenarios"].values() if b["scenario"]["mode"] == mode]
        blocks.sort(key=lambda b: b["scenario"]["concurrency"])
        if not blocks:
            continue
        concurrency = [b["scenario"]["concurrency"] for b in blocks]
        names = list(blocks[0]["targets"])
        latency, ratio = axes[0][column], axes[1][column]
        highest = 1.0
        for name in names:
            label = "direct" if name == DIRECT else display_name(name)
            p50 = [b["targets"][name]["median"]["latency_p50_ms"] for b in blocks]
            p99 = [b["targets"][name]["median"]["latency_p99_ms"] for b in blocks]
            line = latency.plot(concurrency, p50, marker="o", label=f"{label} p50")[0]
            latency.plot(concurrency, p99, marker="x", linestyle="--", color=line.get_color(),
                         label=f"{label} p99")
            if name != DIRECT:
                field = "chunks_per_s_ratio" if mode == "stream" else "rps_ratio"
                ratios = [b["targets"][name]["vs_direct"][field] for b in blocks]
                highest = max([highest, *(r for r in ratios if r is not None)])
                ratio.plot(concurrency, ratios, marker="o", color=line.get_color(), label=label)
        latency.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="latency (ms)",
                    title=f"{mode}: end-to-end latency")
        latency.set_xticks(concurrency, [str(c) for c in concurrency])
        latency.legend(fontsize=7)
        ratio.axhline(1.0, color="grey", linewidth=0.8)
        bound = 0.6 if mode == "stream" else 0.75
        ratio.axhline(bound, color="red", linestyle=":", linewidth=1, label=f"target {bound}x")
        ratio.set(xscale="log", ylim=(0, highest * 1.15), xlabel="concurrency",
                  ylabel="chunks/s ratio" if mode == "stream" else "req/s ratio",
                  title=f"{mode}: gateway / direct throughput")
        ratio.set_xticks(concurrency, [str(c) for c in concurrency])
        ratio.legend(fontsize=7)
    figure.suptitle(f"Gateway vs direct (fake upstream), {results['machine']['cpu_count']} "
                    f"cores, commit {results['machine']['git_commit']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_results(results: dict, out_dir: Path) -> None:
    """results.json, results.md and results.png into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    (out_dir / "results.md").write_text(render_markdown(results))
    if results["scenarios"]:
        render_chart(results, out_dir / "results.png")
