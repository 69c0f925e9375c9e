"""The routing receipt says whether prefix affinity hit: the engine chosen is the one the request's
prompt prefix (or affinity key) hashes to, where its KV blocks are cached from earlier requests.

Two fake engines; the prefix policy sends a chat to its prefix's engine (a hit), least load
never looks at prefixes (not a hit). With flow control on, the engine comes from the request's
grant, and the receipt still tells whether the router's pick for the grant hit.
"""

from __future__ import annotations

import pytest

from tests.gateway.fleet.fakes import fake_fleet, fleet_settings
from tests.gateway.tracing.conftest import traced
from tests.gateway.tracing.test_spans import wait_trace
from tests.support.gateway import serving

CHAT = {"model": "fake-model", "messages": [{"role": "system", "content": "You are terse."},
                                            {"role": "user", "content": "Name a colour."}], "max_tokens": 2}


@pytest.mark.parametrize("flow_control", [False, True])
@pytest.mark.parametrize(("policy", "hit"), [("prefix", True), ("least_load", False)])
async def test_the_receipt_says_whether_prefix_affinity_hit(policy, hit, flow_control, receiver):
    async with fake_fleet(2, models=["fake-model"]) as engines, \
            serving(fleet_settings(engines, **traced(receiver), routing_policy=policy,
                                   flow_control=flow_control)) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200
    spans = await wait_trace(receiver, response.headers["x-trace-id"], {"chat fake-model"})
    receipt = next(span for span in spans if span.kind == "CLIENT").attributes
    assert receipt["gateway.routing.policy"] == policy
    assert receipt["gateway.routing.reason"] == ("flow_control_grant" if flow_control
                                                 else "prefix" if hit else "least_load")
    assert receipt["gateway.routing.prefix_affinity_hit"] is hit
