"""A failed tool's result says it failed: ``is_error: true`` becomes words in the tool's own message.

Anthropic's ``tool_result`` block carries ``is_error: true`` when the tool failed (Claude
Code sets it for a command that failed, a file not found, a refused permission), and the
model is meant to read the result as an error. vLLM's Messages route converts the block to a
chat ``tool`` message of its text and drops the flag: the model cannot tell a failure from a
result. The chat template has no place for it either (Qwen's renders a tool message as
``<tool_response>`` text).

So the gateway says it in words, in the one place that cannot change the prompt's
structure: a fixed text block of its own, :data:`MARK`, put first in that result's content,
which vLLM joins with the result's text (``"Error: the tool failed.\\n<the tool's text>"``)
inside the same tool message. The tool's text is not touched, and the flag is never turned
into markup, a role or a system message; a tool whose output starts with the same words could
always have written them. Only a JSON ``true`` counts. The count of ``count_tokens`` reads the
same rewrite, so it counts what a generation renders.
"""

from __future__ import annotations

MARK = "Error: the tool failed."
FLAG = b'"is_error"'


def mark_failed_results(payload: dict, raw: bytes) -> bool:
    """Put :data:`MARK` first in every ``tool_result`` with ``is_error: true``; whether any was."""
    if FLAG not in raw:  # (most requests: one byte search; a string's escaped quotes never match)
        return False
    marked = False
    for message in payload.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) and message.get("role") == "user" else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error") is True:
                result = block.get("content")
                if isinstance(result, str):
                    result = [{"type": "text", "text": result}] if result else []
                elif result is None:
                    result = []
                if isinstance(result, list):  # (content of another type: left for vLLM to refuse, naming it)
                    block["content"] = [{"type": "text", "text": MARK}, *result]
                    marked = True
    return marked
