"""docs/tracing.md: its configuration example builds the exporter it says, and every span attribute and
event the gateway emits (read from spans a real OTLP receiver decoded) is documented there."""

from __future__ import annotations

import asyncio
import re

from gateway.config import Settings
from gateway.tracing.provider import Tracing
from tests.gateway.tracing.conftest import traced
from tests.support.docs import code_blocks, read_doc
from tests.support.gateway import serving

PAGE = read_doc("tracing.md")


def test_the_configuration_example_sends_spans_where_it_says():
    block = code_blocks(PAGE, "## Turning it on", "bash")[0]
    values = dict(line.split("=", 1) for line in block.strip().splitlines())
    settings = Settings(**{name.lower(): value for name, value in values.items()})
    tracing = Tracing.from_settings(settings)
    try:
        assert tracing is not None
        exporter = tracing.processor._batch_processor._exporter
        assert exporter._endpoint == values["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        assert tracing.provider.sampler.get_description() == \
            f"ParentBased{{root:TraceIdRatioBased{{{values['OTEL_TRACES_SAMPLER_ARG']}}},remoteParentSampled:" \
            "AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler," \
            "localParentNotSampled:AlwaysOffSampler}"
    finally:
        if tracing is not None:
            tracing.shutdown()


async def test_every_attribute_and_event_emitted_is_documented(make_settings, receiver):
    async with serving(make_settings(**traced(receiver))) as client:
        ids = []
        for body in ({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                      "temperature": 0.2, "top_p": 0.9, "seed": 1},
                     {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                      "stream": True}):
            response = await client.post("/v1/chat/completions", json=body)
            ids.append(response.headers["x-trace-id"])
    spans = await asyncio.to_thread(receiver.wait_for, lambda spans: [
        span for span in spans if span.trace_id in ids] if len({span.trace_id for span in spans} & set(ids)) == 2
        and len([span for span in spans if span.trace_id in ids]) >= 4 else None)
    documented = set(re.findall(r"`([a-z_.]+)`", PAGE))
    emitted = {key for span in spans for key in span.attributes} | {name for span in spans for name, _ in span.events}
    assert emitted - documented == set()
