"""Untrusted text made safe to place in a prompt: the one cleaning every part uses.

Product and supplier fields are written by suppliers, chat messages and search queries by
users: none of it may become prompt structure. The chat template renders each message
between ``<|im_start|>role`` and ``<|im_end|>``, and the engine turns those strings into
control tokens wherever they appear in the rendered text. So every untrusted string is
normalised (NFKC, so full-width look-alikes such as ``＜｜im_start｜＞`` become plain ASCII
first), stripped of control and invisible format characters, and stripped of anything shaped
like a template token (``<|...|>``, ``<tool_call>``, ``<think>``, ...), as often as it takes,
so removing one cannot join the remains into another (one linear pass: nested input such as
``"<|" * n + "|>" * n`` must not cost n passes of a regex over the text while the event loop
waits). Structured data reaches a model only through ``data_block``: one ASCII JSON document
in which ``<`` and ``>`` are written as ``\\u003c``/``\\u003e``, so it cannot hold a tag of any
kind even if a future template adds a token this module does not know. Used by the chat's
prompt (``marketplace.chat.service.prompt``) and the engine's reading of a search query
(``marketplace.search.service.extraction``).
"""

from __future__ import annotations

import json
import re
import unicodedata

TEMPLATE_TOKEN = re.compile(
    r"<\|[^<>|]{0,64}\|>|</?\s*(?:tool_call|tool_response|tools|think)\s*>",
    re.IGNORECASE,
)
ELLIPSIS = "..."


def strip_template_tokens(text: str, *, collapse_spaces: bool = False) -> str:
    """``text`` without anything shaped like a chat-template token, however the tokens nest.

    The result is what removing tokens until none is left would give (it is unique: a token
    holds no ``<`` or ``>``, so two tokens never overlap), computed in one pass: a token is
    always the text from the last ``<`` not yet followed by a ``>`` up to the next ``>``, and
    removing it can only complete a token that ends at a later ``>``. Each character is
    looked at in at most one such candidate, so the work is linear in ``len(text)``.
    ``collapse_spaces`` also turns every whitespace run into one space as it goes, so a
    removal cannot leave a run that collapsing afterwards would shrink into a new token.
    """
    out: list[str] = []
    opens: list[int] = []  # indexes in ``out`` of "<" characters with no ">" after them yet
    for char in text:
        if char == ">":
            if opens:
                start = opens.pop()
                if TEMPLATE_TOKEN.fullmatch("".join(out[start:]) + ">"):
                    del out[start:]
                    continue
                opens.clear()  # nothing before this ">" can start a token that ends after it
        elif char == "<":
            opens.append(len(out))
        elif collapse_spaces and char.isspace():
            if out and out[-1] == " ":
                continue
            char = " "
        out.append(char)
    return "".join(out)


def _drop_invisible(text: str, *, keep_newlines: bool) -> str:
    out = []
    for char in text:
        if char in "\n\t" and keep_newlines:
            out.append(char)
        elif char in "\n\r\t\v\f":
            out.append(" ")
        elif unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            continue  # control, format (zero-width, bidi overrides), surrogate, private, unassigned
        else:
            out.append(char)
    return "".join(out)


def clean_text(text: str | None, *, max_chars: int | None = None, keep_newlines: bool = False) -> str:
    """Untrusted text made safe to place in a prompt; cut to ``max_chars`` if given."""
    text = unicodedata.normalize("NFKC", text or "")
    text = strip_template_tokens(_drop_invisible(text, keep_newlines=keep_newlines),
                                 collapse_spaces=not keep_newlines).strip()
    if max_chars is not None and len(text) > max_chars:
        text = text[: max_chars - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return text


def data_block(document: object) -> str:
    """``document`` as ASCII JSON with no ``<`` or ``>`` characters in it."""
    text = json.dumps(document, ensure_ascii=True, separators=(",", ":"), sort_keys=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def clean_user_message(text: str) -> str:
    """The user's message as it will be sent: template tokens and control characters removed."""
    return clean_text(text, keep_newlines=True)
