"""bench.instructions' report: ratios against the bare relay, and figures with failed requests marked."""

from __future__ import annotations

from bench import instructions
from bench.instructions import report


def test_ratios_are_against_the_bare_relay_and_failed_requests_are_named():
    results = {"bare-relay": {"stream": {"completed": 8, "instructions_per_request": 2e6}},
               "sqlite": {"stream": {"completed": 6, "instructions_per_request": 3e6}}}
    text = report(results, requests=8, concurrency=4)
    assert "| sqlite | - | - | 3.00 | 1.50x |" in text
    assert "**Not comparable, requests failed:** sqlite stream (2 of 8)" in text
    assert "Not comparable" not in report({"bare-relay": results["bare-relay"]}, requests=8, concurrency=4)


def test_net_figures_subtract_the_idle_count_and_keep_the_raw_table():
    results = {"bare-relay": {"non-stream": {"completed": 10, "instructions_per_request": 6e5,
                                             "idle_instructions": 1e6, "net_instructions_per_request": 5e5}},
               "sqlite": {"non-stream": {"completed": 10, "instructions_per_request": 2e6,
                                         "idle_instructions": 1e7, "net_instructions_per_request": 1e6}}}
    text = report(results, requests=10, concurrency=4)
    assert "| sqlite | 2.00 | 3.33x | - | - |" in text  # the raw figures, as without --idle
    assert "| sqlite | 1.00 | 2.00x | - | - | 10.00 |" in text
    assert "| bare-relay | 0.50 | 1.00x | - | - | 1.00 |" in text
    assert "Net of the idle rate" not in report({"bare-relay": {"stream": {"completed": 1,
                                                                         "instructions_per_request": 1.0}}},
                                                requests=1, concurrency=1)


def test_the_clock_driven_work_is_stretched_within_the_settings_bounds(tmp_path):
    from gateway.config import Settings

    env = instructions.server_env("sqlite", 8000, "http://127.0.0.1:9", tmp_path, None, slowdown=50.0)
    assert float(env["BATCH_POLL_SECONDS"]) == 50.0 and float(env["USAGE_FLUSH_SECONDS"]) == 100.0
    stretched = {name: env[name] for name in ("BATCH_POLL_SECONDS", "USAGE_FLUSH_SECONDS", "ENGINE_POLL_INTERVAL",
                                              "ENGINE_METRICS_INTERVAL", "SESSION_FLUSH_INTERVAL")}
    settings = Settings(**{name.lower(): value for name, value in stretched.items()})  # (the gateway must start)
    assert settings.batch_poll_seconds == 50.0 and settings.usage_flush_seconds == 100.0
