"""Benchmark suite: what the gateway costs compared with calling the upstream directly.

``python -m bench.run`` is the one command; ``python -m bench.relay_clients`` measures the
upstream HTTP clients a relay could use; ``python -m bench.fake_upstream`` is the fast fake
vLLM both use to isolate the gateway's own cost.
"""
