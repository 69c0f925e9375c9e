"""``is_error`` on a tool's result, said in words (``anthropic.tool_errors``): which blocks, and how."""

from __future__ import annotations

import orjson

from gateway.protocols.anthropic.tool_errors import MARK, mark_failed_results


def result(content, **flag) -> dict:
    return {"type": "tool_result", "tool_use_id": "t", "content": content, **flag}


def marked(*blocks: dict, role: str = "user") -> tuple[bool, list]:
    payload = {"messages": [{"role": role, "content": list(blocks)}]}
    done = mark_failed_results(payload, orjson.dumps(payload))
    return done, payload["messages"][0]["content"]


def test_a_failed_result_opens_with_the_words_and_keeps_its_own_content():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    cases = [("boom", [{"type": "text", "text": "boom"}]), ("", []), (None, []),
             ([{"type": "text", "text": "a"}, image], [{"type": "text", "text": "a"}, image])]
    for content, kept in cases:
        done, blocks = marked(result(content, is_error=True))
        assert done and blocks[0]["content"] == [{"type": "text", "text": MARK}, *kept]


def test_only_a_json_true_on_a_users_tool_result_counts():
    for block in (result("ok"), result("ok", is_error=False), result("ok", is_error="true"), result("ok", is_error=1),
                  {"type": "text", "text": '"is_error": true'}):
        assert marked(block) == (False, [block])
    assert marked(result("ok", is_error=True), role="assistant")[0] is False
    assert marked(result(7, is_error=True)) == (False, [result(7, is_error=True)])  # vLLM refuses it, naming it


def test_a_body_without_the_flag_is_not_walked():
    payload = {"messages": [{"role": "user", "content": [result("x", is_error=True)]}]}
    assert mark_failed_results(payload, b'{"messages": []}') is False  # (the raw bytes decide)
