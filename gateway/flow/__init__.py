"""Flow control: requests queue by priority band and share fairly between tenants instead of being refused.

``bands`` (which band a request runs in, what vLLM's ``priority`` is for it), ``demand`` (a
request as the flow sees it, the grant it gets), ``capacity`` (an engine's free slots),
``fairness`` (virtual token counters), ``queue`` (one model's waiting requests),
``scheduler`` (who goes next; synchronous, driven by events), ``control`` (the async facade the
request path awaits), ``errors`` (status-free refusals, mapped to 429/503 in ``gateway.http``),
``observe`` (its metrics). See docs/flow-control.md.

The package sits below ``gateway.http`` and ``gateway.engines`` in the layers, so both the
request path and the engine router can use it; it reads engines through the small
``capacity.EngineView`` protocol and never imports them.
"""
