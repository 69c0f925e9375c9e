"""A real OTLP/HTTP receiver (tests/support/otlp_receiver.py) for the tracing tests."""

from __future__ import annotations

import pytest

from tests.support.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver():
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.close()


def traced(receiver: OtlpReceiver, **values) -> dict:
    """Settings values that send the gateway's spans to ``receiver`` at once (50 ms batches)."""
    return {"otel_exporter_otlp_traces_endpoint": receiver.endpoint, "otel_bsp_schedule_delay": 50, **values}
