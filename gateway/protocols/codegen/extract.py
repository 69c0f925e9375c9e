"""Pull code out of a model's markdown answer.

The rules, in the order they are applied:

1. **Lines.** The text is split into lines at ``\\n``; a line that ends in ``\\r\\n`` is a
   CRLF line. Only ``\\n`` and ``\\r\\n`` end lines: a lone ``\\r``, form feed or Unicode line
   separator is ordinary content, so code containing them survives intact.
2. **Opening fence** (CommonMark): at most 3 spaces of indentation, then a run of at least
   three backticks or at least three tildes, then an optional info string. A backtick
   fence's info string may not contain a backtick (three backticks, a word and three more
   backticks on one line are inline code, not a fence). A line indented by 4 or more
   spaces, or by a tab, is never a fence.
3. **Language tag**: the first word of the info string, whether or not a space separates
   it from the fence, case-insensitive, read up to the first character that cannot belong
   to a name (``python3.11`` and ``python:main.py`` read as
   ``python3`` and ``python``; ``{.python}`` as ``python``). Aliases map to one name:
   ``py``, ``py3``, ``python3`` are ``python``; ``js``/``node`` ``javascript``; ``ts``
   ``typescript``; ``sh``/``shell``/``zsh`` ``bash``; a few more in ``LANGUAGE_ALIASES``.
   No tag: the block's language is ``None``.
4. **Closing fence**: at most 3 spaces of indentation, the *same* character as the
   opening fence, at least as many of them, then only spaces or tabs. Anything else,
   including a shorter fence, the other fence character or a fence followed by a tag, is
   content: a block opened with four backticks may hold three-backtick blocks inside it.
5. **Content**: the lines between the fences, each with its own line ending kept
   byte-for-byte (CRLF stays CRLF, LF stays LF, even mixed), except the line ending just
   before the closing fence, which belongs to the fence. If the opening fence is indented
   by N spaces, up to N leading spaces are removed from each content line (CommonMark), so
   a fence indented together with its code gives back the code unindented. Nothing else is
   stripped: indentation, blank lines and trailing spaces are part of the code.
6. **Empty block**: a block with no content lines (or one empty line) is the empty
   string; an empty preferred block is returned as ``""``, never replaced by the next one.
7. **Unclosed fence**: the block runs to the end of the text; its code is everything after
   the opening line (indentation removed as in rule 5), minus one final line ending.
8. **Choosing**: with a preferred language (``python`` by default; ``None`` or ``""`` for
   no preference) the first block in that language wins over earlier blocks in other
   languages; when no block has it, the first block of any language. With
   ``all_blocks=True`` every block in the preferred language is returned in order (every
   block, when none has it or there is no preference), joined by a blank line.
9. **No fence at all**: the whole text, stripped of surrounding whitespace.

One ambiguity is resolved by rule 1: code that ends in a lone ``\\r`` and is closed by an
LF fence reads as a CRLF line, so that trailing ``\\r`` is not returned.

The parser is one pass over the lines with plain string operations (no backtracking
regular expressions), so its cost is linear in the size of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BLOCK_SEPARATOR = "\n\n"

# Tags that name the same language as their canonical name on the right.
LANGUAGE_ALIASES: dict[str, str] = {
    "py": "python",
    "py3": "python",
    "python3": "python",
    "js": "javascript",
    "node": "javascript",
    "nodejs": "javascript",
    "ts": "typescript",
    "sh": "bash",
    "shell": "bash",
    "zsh": "bash",
    "c++": "cpp",
    "cxx": "cpp",
    "cs": "csharp",
    "c#": "csharp",
    "golang": "go",
    "rs": "rust",
    "rb": "ruby",
    "yml": "yaml",
    "kt": "kotlin",
    "md": "markdown",
}

# A language name: letters, digits and the few symbols real names use (c++, c#, objective-c).
_LANGUAGE_NAME = re.compile(r"[a-z0-9_+#-]+")
_MAX_FENCE_INDENT = 3
_FENCE_LINE_STARTS = frozenset("`~ ")


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block: its canonical language (None when untagged) and its code."""

    language: str | None
    code: str
    info: str = ""
    closed: bool = True


@dataclass(frozen=True, slots=True)
class _Fence:
    char: str
    length: int
    indent: int
    info: str


def canonical_language(tag: str | None) -> str | None:
    """The canonical name for a language tag or requested language (None when there is none)."""
    if not tag:
        return None
    words = tag.split(maxsplit=1)
    if not words:
        return None
    match = _LANGUAGE_NAME.match(words[0].lower().lstrip("{."))
    if match is None:
        return None
    name = match.group()
    return LANGUAGE_ALIASES.get(name, name)


def parse_code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block of a markdown text, in order."""
    # Lines keep a CRLF's "\r": joining content lines with "\n" then gives back the
    # original bytes, and the fence checks ignore a trailing "\r".
    lines = text.split("\n")
    ends_with_newline = lines[-1] == ""
    if ends_with_newline:
        lines.pop()
    blocks: list[CodeBlock] = []
    fence: _Fence | None = None
    content: list[str] = []
    for line in lines:
        # Cheap first-character test: most lines cannot be fences at all.
        parts = _fence_parts(line) if line[:1] in _FENCE_LINE_STARTS else None
        if fence is None:
            if parts is not None:
                fence = _opening_fence(*parts)
                content = []
        elif parts is not None and _closes(fence, *parts):
            blocks.append(_block(fence, content, closed=True, last_line_terminated=True))
            fence = None
        else:
            content.append(line)
    if fence is not None:
        blocks.append(_block(fence, content, closed=False, last_line_terminated=ends_with_newline))
    return blocks


def select_code_blocks(blocks: list[CodeBlock], language: str | None) -> list[CodeBlock]:
    """The blocks in the preferred language, or all of them when none is in it."""
    preferred = canonical_language(language)
    if preferred is not None:
        matching = [block for block in blocks if block.language == preferred]
        if matching:
            return matching
    return blocks


def extract_code_blocks(text: str, *, language: str | None = None) -> list[CodeBlock]:
    """The blocks of a text in the preferred language, in order (all blocks when none is)."""
    return select_code_blocks(parse_code_blocks(text), language)


def code_of(text: str, blocks: list[CodeBlock], *, all_blocks: bool = False) -> str:
    """The code selected blocks give: the first, all joined, or the stripped text if none."""
    if not blocks:
        return text.strip()
    if all_blocks:
        return BLOCK_SEPARATOR.join(block.code for block in blocks)
    return blocks[0].code


def extract_code(text: str, *, language: str | None = "python", all_blocks: bool = False) -> str:
    """The code of a model's answer: the preferred block, all of them joined, or the text."""
    return code_of(text, extract_code_blocks(text, language=language), all_blocks=all_blocks)


def _fence_parts(line: str) -> tuple[int, str, int, str] | None:
    """(indent, fence character, run length, rest of the line) for a line that is a fence."""
    body = line.lstrip(" ")
    indent = len(line) - len(body)
    if indent > _MAX_FENCE_INDENT or not body or body[0] not in "`~":
        return None
    char = body[0]
    rest = body.lstrip(char)
    length = len(body) - len(rest)
    if length < 3:
        return None
    return indent, char, length, rest


def _opening_fence(indent: int, char: str, length: int, rest: str) -> _Fence | None:
    info = rest.strip(" \t\r")
    if char == "`" and "`" in info:
        return None  # ```x``` on one line is inline code, not a fence
    return _Fence(char=char, length=length, indent=indent, info=info)


def _closes(fence: _Fence, indent: int, char: str, length: int, rest: str) -> bool:
    # A trailing "\r" is allowed: it is what a CRLF line end leaves on the line.
    return char == fence.char and length >= fence.length and not rest.strip(" \t\r")


def _dedent(line: str, indent: int) -> str:
    return line[min(indent, len(line) - len(line.lstrip(" "))) :]


def _block(
    fence: _Fence, content: list[str], *, closed: bool, last_line_terminated: bool
) -> CodeBlock:
    if fence.indent:
        content = [_dedent(line, fence.indent) for line in content]
    code = "\n".join(content)
    if last_line_terminated:
        code += "\n"
    # Exactly one final line end belongs to the closing fence (or ends the text).
    if code.endswith("\r\n"):
        code = code[:-2]
    elif code.endswith("\n"):
        code = code[:-1]
    return CodeBlock(
        language=canonical_language(fence.info), code=code, info=fence.info, closed=closed
    )
