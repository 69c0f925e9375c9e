"""Anthropic's Messages API over the engine: /v1/messages and /v1/messages/count_tokens."""
