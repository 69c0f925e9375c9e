"""Request bodies of the engine-API routes: a JSON object or a 400 that names what is wrong, never a 500.

orjson parses the body (fast, and most bodies are fine). It quietly turns an integer beyond
64 bits into a float and refuses ``NaN`` or ``1e400``; the engine would parse those
differently again (Python ints, floats), and integers beyond 64 bits make parts of it fail
with a 500. So a body with a long run of digits, or one orjson refuses, is read again by the
standard library, which keeps every number as written, and a number out of range is a 400
naming its field (``max_output_tokens``, ``input.0.content``).

Nesting is bounded (``MAX_DEPTH``): orjson refuses to read past 1024 levels and to write
past 255, the standard library's reader runs out of stack, and a body the gateway rewrites
(a model alias, a budget) is written again; a body nested deeper than any real request is a
400 naming ``body`` (code ``depth_limit_exceeded``), before anything else reads it.

The small ``expect_*`` helpers check the fields a protocol reads itself, with the same kind
of error: ``'stream' must be a boolean``.
"""

from __future__ import annotations

import json
import math
import re

import orjson

from gateway.http.errors import GatewayError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DEPTH = 255  # levels of arrays and objects: what orjson writes (real tools' JSON schemas use a dozen)
_LONG_NUMBER = re.compile(rb"\d{19}")  # int64's largest value has 19 digits


def json_object(raw: bytes) -> dict:
    """The body as a JSON object, or a 400 naming the field (or the position) that is wrong."""
    return read_object(raw)[0]


def read_object(raw: bytes) -> tuple[dict, bool]:
    """:func:`json_object`, and whether it is ``orjson.loads(raw)`` (False: the standard library
    read what orjson refused), which is what a request may keep for later readers (``keep_parsed``)."""
    if not raw:
        raise GatewayError(400, "request body is empty: expected a JSON object", param="body")
    as_read = True
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):  # deeper than orjson reads (1024 levels)
            raise too_deep() from None
        payload, as_read = _reread(raw, exc), False
    else:
        check_depth(raw, payload)
        if _LONG_NUMBER.search(raw) is not None:
            _check_numbers(_reread(raw, None), "")
    if not isinstance(payload, dict):
        raise GatewayError(400, "request body must be a JSON object", param="body")
    return payload, as_read


def check_depth(raw: bytes, payload: object) -> None:
    """A 400 if ``payload`` (parsed from ``raw``) nests arrays and objects deeper than ``MAX_DEPTH``.

    Writing it again with orjson finds out at C speed (orjson refuses to write deeper than
    255 levels); a body with fewer brackets than that cannot be that deep and is not written.
    """
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return
    try:
        orjson.dumps(payload)
    except orjson.JSONEncodeError as exc:
        if "recursion" in str(exc).lower():
            raise too_deep() from None


def too_deep() -> GatewayError:
    return GatewayError(400, f"request body is nested too deeply: at most {MAX_DEPTH} levels of arrays and objects",
                        param="body", code="depth_limit_exceeded")


def _reread(raw: bytes, orjson_error: Exception | None) -> object:
    """The body parsed by the standard library (numbers as written); a 400 if it is not JSON at all."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise too_deep() from None
    except (ValueError, UnicodeDecodeError) as exc:
        detail = exc if orjson_error is None else orjson_error
        raise GatewayError(400, f"request body is not valid JSON: {detail}", param="body") from exc
    check_depth(raw, value)
    _check_numbers(value, "")
    return value


def _check_numbers(value: object, path: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise GatewayError(400, f"'{path or 'body'}': integer {_shorten(value)} is out of range "
                                    "(at most 64 bits)", param=path or "body")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise GatewayError(400, f"'{path or 'body'}': number must be finite", param=path or "body")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, f"{path}.{index}" if path else str(index))


def _shorten(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


# --- the fields a protocol reads itself -------------------------------------------------------
def expect_bool(payload: dict, field: str, *, default: bool = False) -> bool:
    value = payload.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise GatewayError(400, f"'{field}' must be a boolean", param=field)
    return value


def expect_str(payload: dict, field: str, *, required: bool = False) -> str | None:
    value = payload.get(field)
    if value is None:
        if required:
            raise GatewayError(400, f"'{field}' is required", param=field)
        return None
    if not isinstance(value, str):
        raise GatewayError(400, f"'{field}' must be a string", param=field)
    return value


def expect_int(payload: dict, field: str, *, required: bool = False, minimum: int | None = None) -> int | None:
    value = payload.get(field)
    if value is None:
        if required:
            raise GatewayError(400, f"'{field}' is required", param=field)
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise GatewayError(400, f"'{field}' must be an integer", param=field)
    if minimum is not None and value < minimum:
        raise GatewayError(400, f"'{field}' must be at least {minimum}", param=field)
    return value


def expect_list(payload: dict, field: str, *, required: bool = False) -> list | None:
    value = payload.get(field)
    if value is None:
        if required:
            raise GatewayError(400, f"'{field}' is required", param=field)
        return None
    if not isinstance(value, list):
        raise GatewayError(400, f"'{field}' must be an array", param=field)
    return value
