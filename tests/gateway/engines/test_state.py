"""Engine state: readiness survives a slow engine, not a dead one."""

from __future__ import annotations

from gateway.config import Settings
from gateway.engines.errors import EngineTimeout, EngineUnavailable
from gateway.engines.state import TIMEOUTS_BEFORE_NOT_READY, EngineState


async def test_engine_state_survives_slow_health_answers_but_not_a_dead_engine():
    class Upstream:
        failure: Exception | None = None

        async def request_bytes(self, *args, **kwargs):
            if self.failure:
                raise self.failure
            return 200, b""

        async def get_json(self, *args, **kwargs):
            return {"data": [{"id": "m", "max_model_len": 100, "root": "/m"}]}

    upstream = Upstream()
    engine = EngineState(Settings(), upstream)
    await engine.refresh()
    assert engine.ready and engine.served_models == ["m"] and engine.max_model_len == 100
    upstream.failure = EngineTimeout()
    for _ in range(TIMEOUTS_BEFORE_NOT_READY - 1):
        await engine.refresh()
        assert engine.ready
    await engine.refresh()
    assert not engine.ready
    upstream.failure = None
    await engine.refresh()
    assert engine.ready
    upstream.failure = EngineUnavailable("the inference engine is unreachable (refused)")
    await engine.refresh()
    assert not engine.ready and not engine.reachable
