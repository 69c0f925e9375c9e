"""Anthropic's error envelope, for every error on the Messages routes: the gateway's own and the engine's.

``{"type": "error", "error": {"type": <Anthropic's type>, "message": ...}}``, with the type
chosen by status from Anthropic's own list (the SDK raises its typed exceptions by status;
clients that switch on ``error.type`` see the names they know). vLLM uses other names on
these routes (``NotFoundError``, ``Bad Request``) and answers request-validation failures in
OpenAI's envelope with a Python-repr message; both are rewritten here, the validation
message as ``<field>: <what is wrong>``, and a message about vLLM's ``max_completion_tokens``
(the field vLLM converts Anthropic's ``max_tokens`` into) names ``max_tokens``.

A prompt the context cannot hold is worded as Anthropic words it, ``prompt is too long: N tokens
> M maximum`` (or, when the prompt fits but leaves no room for an answer, ``input length and
`max_tokens` exceed context limit: N + K > M, ...``): clients recognise it by that text (Claude
Code compacts the conversation on it, and reads the numbers to know by how much).

vLLM answers a non-streamed message it cannot build from the model's output (a tool call whose
arguments are not a JSON object) with a 400 and the dump of its failure, as if the request were
wrong: :func:`output_failure` tells it apart and makes it the 502 it is (``common.tool_calls``).
"""

from __future__ import annotations

import re

import orjson

from gateway.engines.errors import EngineHTTPError
from gateway.failures import Failure
from gateway.http.errors import ErrorShape, GatewayError
from gateway.protocols.common.budget import ContextExceeded
from gateway.protocols.common.tool_calls import invalid_call

ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
# One error of pydantic's dump: 'loc': 'body.<field>', 'msg': '...' (or "..." when the text holds a quote).
_VALIDATION_MSG = re.compile(r"""(?:'loc': '([^']*)', )?'msg': (?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")""")
_VALIDATION_DUMP = re.compile(r"\d+ validation errors?:")
# vLLM's Messages route building its answer: a tool_use block whose input is no object (pydantic's
# words), or arguments that are no JSON at all (json.loads' words; the request was read long before).
_INPUT_NOT_OBJECT = re.compile(r"validation error for AnthropicContentBlock\ninput\n +Input should be a valid "
                               r"dictionary \[type=dict_type, input_value=(.*), input_type=\w+\]")
_ARGUMENTS_NOT_JSON = re.compile(r"(Expecting|Extra data|Unterminated|Invalid control character|Invalid \\escape)"
                                 r"[^\n]*: line \d+ column \d+ \(char \d+\)")


def anthropic_type(status: int) -> str:
    if status in ANTHROPIC_TYPES:
        return ANTHROPIC_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def anthropic_message(error: GatewayError) -> str:
    """The message, with vLLM's validation dump (OpenAI shape, ``param: body.<field>``) made readable."""
    if isinstance(error, ContextExceeded):
        return _context_message(error)
    message = error.message
    if isinstance(error.__cause__, EngineHTTPError) and error.param and _VALIDATION_DUMP.match(message):
        # The most specific of its errors: a field that may be a string or a list of blocks (content,
        # system) fails both ways, and only the deeper error says what is wrong with the list.
        found = max(_VALIDATION_MSG.finditer(message), key=lambda match: (match.group(1) or "").count("."),
                    default=None)
        field = (found.group(1) if found and found.group(1) else error.param).removeprefix("body").lstrip(".")
        text = (found.group(2) if found.group(2) is not None else found.group(3)) if found else "invalid value"
        return f"{field or 'body'}: {text}"
    if isinstance(error.__cause__, EngineHTTPError):  # vLLM checks the converted request: its field, Anthropic's name
        return message.replace("max_completion_tokens", "max_tokens")
    return message


def _context_message(error: ContextExceeded) -> str:
    if error.at_least or error.prompt_tokens > error.context:
        tokens = f"{'at least ' if error.at_least else ''}{error.prompt_tokens}"
        return f"prompt is too long: {tokens} tokens > {error.context} maximum"
    return (f"input length and `max_tokens` exceed context limit: {error.prompt_tokens} + {error.asked} > "
            f"{error.context}, decrease input length or `max_tokens` and try again")


async def output_failure(error: EngineHTTPError) -> Failure:
    """The engine's refusal of a request with tools as what it is: ``error`` itself, or, when vLLM
    could not build the answer from the model's tool call, the 502 of an invalid tool call."""
    if error.upstream_status != 400:
        return error
    found = _INPUT_NOT_OBJECT.search(error.message)
    if found is not None:
        return invalid_call(None, found.group(1))
    if _ARGUMENTS_NOT_JSON.fullmatch(error.message.strip()):
        return invalid_call(None, f"not JSON: {error.message.strip()}")
    return error


def error_body(error: GatewayError) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": anthropic_type(error.status),
                                                    "message": anthropic_message(error)}})


def error_event_data(message: str, type: str = "api_error") -> bytes:
    """The ``data:`` of an in-band ``error`` event (after the stream started)."""
    return orjson.dumps({"type": "error", "error": {"type": type, "message": message}})


ANTHROPIC_SHAPE = ErrorShape("anthropic", error_body, validation_is_400=True)
