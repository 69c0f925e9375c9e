"""Ids of the jobs objects, in the forms OpenAI and Anthropic use (``file-...``, ``batch_...``, ``msgbatch_...``)."""

from __future__ import annotations

import re
import secrets

ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")  # whole value (fullmatch: "$" would let a trailing newline in)


def _token() -> str:
    return secrets.token_hex(12)


def file_id() -> str:
    return f"file-{_token()}"


def batch_id(api: str) -> str:
    return f"msgbatch_{_token()}" if api == "anthropic" else f"batch_{_token()}"


def endpoint_id() -> str:
    return f"we_{_token()}"


def event_id() -> str:
    return f"evt_{_token()}"


def delivery_id() -> str:
    return f"msg_{_token()}"


def is_valid(value: str) -> bool:
    """Whether ``value`` can be an id at all (anything else is a plain 404, never a query)."""
    return ID_PATTERN.fullmatch(value) is not None
