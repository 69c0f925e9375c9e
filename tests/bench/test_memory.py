"""The open-streams memory probe, against a slow fake upstream started as a real process."""

from __future__ import annotations

import pytest

from bench.memory import measure_open_streams
from bench.procs import start_fake_upstream, stop_server


@pytest.fixture
async def slow_upstream(tmp_path):
    # 20 ms between frames: 15 tokens hold each stream open for about 0.3 s.
    server = await start_fake_upstream(log_dir=tmp_path, cores=None, model="m",
                                       chunk_delay=0.02)
    yield server
    await stop_server(server)


async def test_all_streams_are_open_at_once_and_complete(slow_upstream):
    figures = await measure_open_streams(server=slow_upstream, model="m", streams=40,
                                         tokens=15, open_timeout=10, samples=2)
    assert figures["errors"] == 0, figures["error_kinds"]
    assert figures["open_concurrently"] == 40
    assert figures["seconds_to_open_all"] is not None
    assert figures["rss_during_bytes"] > 0
    assert figures["bytes_per_stream"] == pytest.approx(figures["rss_delta_bytes"] / 40)


async def test_failed_streams_are_errors_not_open_streams(slow_upstream):
    # A model the upstream does not serve: every stream fails and is counted, none as open.
    figures = await measure_open_streams(server=slow_upstream, model="not-served", streams=5,
                                         tokens=3, open_timeout=0.2, samples=1)
    assert figures["errors"] == 5 and figures["error_kinds"] == {"http_404": 5}
    assert figures["open_concurrently"] == 0 and figures["bytes_per_stream"] is None
