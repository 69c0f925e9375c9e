"""Request bodies the tests send to a gateway in front of the fake engine (tests/support/fake_engine.py)."""

from __future__ import annotations

CHAT = "/v1/chat/completions"


def chat_body(**extra) -> dict:
    """A chat completion for the fake engine's model (not streamed unless ``stream=True``): 4 tokens."""
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}


def stream_body(max_tokens: int = 8, **extra) -> dict:
    """A streamed chat completion for the fake engine's model, of ``max_tokens`` content events."""
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": max_tokens, **extra}
