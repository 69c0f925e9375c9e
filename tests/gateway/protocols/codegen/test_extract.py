"""Code extraction: one example test per rule, pathological input, and round-trip properties."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.protocols.codegen.extract import (
    CodeBlock,
    canonical_language,
    extract_code,
    extract_code_blocks,
    parse_code_blocks,
)

# --- fences -----------------------------------------------------------------------------


@pytest.mark.parametrize("fence", ["```", "~~~", "````", "~~~~~", "``````````"])
def test_backtick_tilde_and_longer_fences(fence: str) -> None:
    text = f"Here you go:\n{fence}python\ndef f():\n    return 1\n{fence}\nDone."
    assert extract_code(text) == "def f():\n    return 1"


def test_longer_fence_holds_shorter_fences_inside() -> None:
    text = "````markdown\nUse:\n```python\nprint(1)\n```\n````\n"
    assert parse_code_blocks(text) == [
        CodeBlock(language="markdown", code="Use:\n```python\nprint(1)\n```", info="markdown")
    ]


def test_closing_fence_needs_same_character() -> None:
    text = "~~~python\na = 1\n```\nb = 2\n~~~\n"
    assert extract_code(text) == "a = 1\n```\nb = 2"


def test_closing_fence_needs_at_least_the_opening_length() -> None:
    text = "`````\nx\n````\ny\n``````\n"
    assert extract_code(text) == "x\n````\ny"


def test_fence_with_a_tag_inside_a_block_is_content_not_a_close() -> None:
    # CommonMark: a closing fence has no info string.
    text = "```\nfirst\n```python\nsecond\n```\n"
    assert extract_code(text) == "first\n```python\nsecond"


def test_closing_fence_may_have_trailing_spaces_and_tabs() -> None:
    assert extract_code("```py\nx = 1\n```  \t\nafter") == "x = 1"


def test_backtick_run_with_backticks_in_its_info_is_inline_code_not_a_fence() -> None:
    text = "Call ```f()``` then\n```python\nf()\n```"
    assert parse_code_blocks(text) == [CodeBlock(language="python", code="f()", info="python")]


def test_tilde_fence_info_may_contain_backticks() -> None:
    assert parse_code_blocks("~~~python `x`\ny\n~~~") == [
        CodeBlock(language="python", code="y", info="python `x`")
    ]


def test_two_backticks_are_not_a_fence() -> None:
    assert extract_code("``\ncode\n``") == "``\ncode\n``"


# --- language tags ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "opening",
    [
        "```python",
        "``` python",
        "```   python  ",
        "```\tpython",
        "```py",
        "``` py",
        "```python3",
        "```py3",
        "```Python",
        "```PYTHON",
        "~~~ Python3",
        "```python3.11",
        "```python:main.py",
        "```{.python}",
        "```python {linenos=true}",
    ],
)
def test_python_tags_in_all_spellings_are_preferred(opening: str) -> None:
    text = f"```bash\npip install x\n```\n{opening}\nimport x\n{opening[:3]}\n"
    assert extract_code(text) == "import x"
    assert parse_code_blocks(text)[1].language == "python"


@pytest.mark.parametrize(
    ("tag", "name"),
    [
        ("python", "python"),
        ("Py", "python"),
        ("js", "javascript"),
        ("TS", "typescript"),
        ("sh", "bash"),
        ("c++", "cpp"),
        ("C#", "csharp"),
        ("rust", "rust"),
        ("objective-c", "objective-c"),
        ("", None),
        ("   ", None),
        (None, None),
        ("{}", None),
    ],
)
def test_canonical_language(tag: str | None, name: str | None) -> None:
    assert canonical_language(tag) == name


def test_untagged_block_has_no_language_and_keeps_its_info() -> None:
    assert parse_code_blocks("```\nx\n```") == [CodeBlock(language=None, code="x", info="")]


# --- choosing a block ---------------------------------------------------------------------

ANSWER = (
    "Install it:\n```bash\npip install requests\n```\n"
    "Then:\n```python\nimport requests\n```\n"
    "In JavaScript:\n```js\nfetch(url)\n```\n"
    "And a test:\n```py\nassert True\n```\n"
)


def test_preferred_language_beats_earlier_blocks_in_other_languages() -> None:
    assert extract_code(ANSWER) == "import requests"


@pytest.mark.parametrize("language", ["javascript", "js", "JS", " node "])
def test_preferred_language_is_selectable_by_name_or_alias(language: str) -> None:
    assert extract_code(ANSWER, language=language) == "fetch(url)"


@pytest.mark.parametrize("language", [None, ""])
def test_no_preference_takes_the_first_block(language: str | None) -> None:
    assert extract_code(ANSWER, language=language) == "pip install requests"


def test_without_a_block_in_the_preferred_language_the_first_block_wins() -> None:
    text = "```bash\nls\n```\n```\nprint(1)\n```\n```js\nx()\n```"
    assert extract_code(text) == "ls"
    assert extract_code(text, language="go") == "ls"


def test_all_blocks_in_the_preferred_language_in_order() -> None:
    assert extract_code(ANSWER, all_blocks=True) == "import requests\n\nassert True"
    assert [b.code for b in extract_code_blocks(ANSWER, language="python")] == [
        "import requests",
        "assert True",
    ]


def test_all_blocks_without_preference_is_every_block_in_order() -> None:
    blocks = extract_code_blocks(ANSWER)
    assert [(b.language, b.code) for b in blocks] == [
        ("bash", "pip install requests"),
        ("python", "import requests"),
        ("javascript", "fetch(url)"),
        ("python", "assert True"),
    ]
    assert extract_code(ANSWER, language=None, all_blocks=True) == "\n\n".join(
        b.code for b in blocks
    )


def test_all_blocks_falls_back_to_every_block_when_none_is_preferred() -> None:
    text = "```sh\na\n```\n```js\nb\n```"
    assert extract_code(text, all_blocks=True) == "a\n\nb"


# --- unclosed, missing and empty blocks ---------------------------------------------------


def test_unclosed_fence_runs_to_the_end_of_the_text() -> None:
    text = "Sure:\n```python\ndef f():\n    return 1\n\nprint(f())\n"
    block = parse_code_blocks(text)[0]
    assert block.code == "def f():\n    return 1\n\nprint(f())"
    assert block.closed is False


def test_unclosed_fence_after_closed_blocks() -> None:
    text = "```js\na\n```\n```python\ndef g(\n    x"
    assert extract_code(text) == "def g(\n    x"
    assert [b.closed for b in parse_code_blocks(text)] == [True, False]


def test_unclosed_fence_with_nothing_after_it_is_empty() -> None:
    assert extract_code("text\n```python") == ""
    assert extract_code("text\n```python\n") == ""


@pytest.mark.parametrize(
    "text",
    ["  def f():\n    return 1\n\n", "def f():\n    return 1", "\r\n\tdef f():\n    return 1 \r\n"],
)
def test_no_fence_gives_the_text_stripped(text: str) -> None:
    assert extract_code(text) == "def f():\n    return 1"
    assert extract_code_blocks(text) == []


def test_empty_text() -> None:
    assert extract_code("") == ""
    assert extract_code("   \n ") == ""


@pytest.mark.parametrize("text", ["```python\n```", "```python\n\n```", "~~~\n~~~", "```\r\n```"])
def test_empty_block_is_empty_string(text: str) -> None:
    assert extract_code(text) == ""


def test_empty_preferred_block_is_not_replaced_by_the_next_block() -> None:
    text = "```python\n```\n```python\nprint(1)\n```"
    assert extract_code(text) == ""
    assert [b.code for b in extract_code_blocks(text, language="python")] == ["", "print(1)"]


def test_blank_lines_inside_a_block_are_code() -> None:
    assert extract_code("```\n\n\nx\n\n\n```") == "\n\nx\n\n"


# --- line endings -------------------------------------------------------------------------


def test_crlf_fences_are_found_and_code_keeps_crlf() -> None:
    text = "Here:\r\n```python\r\ndef f():\r\n    return 1\r\n```\r\nBye\r\n"
    assert extract_code(text) == "def f():\r\n    return 1"


def test_mixed_line_endings_are_kept_line_by_line() -> None:
    text = "```python\na = 1\r\nb = 2\nc = 3\r\n```\n"
    assert extract_code(text) == "a = 1\r\nb = 2\nc = 3"


def test_lone_carriage_return_is_content_not_a_line_end() -> None:
    text = "```python\nprint('a\rb')\n```"
    assert extract_code(text) == "print('a\rb')"


def test_closing_fence_on_the_last_line_with_a_lone_carriage_return() -> None:
    assert parse_code_blocks("```\nx\n```\r")[0].closed is True


# --- indentation --------------------------------------------------------------------------


@pytest.mark.parametrize("indent", [1, 2, 3])
def test_indented_fence_removes_its_indent_from_the_code(indent: int) -> None:
    pad = " " * indent
    text = f"1. Do this:\n{pad}```python\n{pad}def f():\n{pad}    return 1\n{pad}```\n"
    assert extract_code(text) == "def f():\n    return 1"


def test_content_indented_less_than_the_fence_loses_only_what_it_has() -> None:
    text = "   ```\n x\ny\n     z\n   ```"
    assert extract_code(text) == "x\ny\n  z"


def test_closing_fence_indent_is_independent_of_the_opening() -> None:
    assert extract_code("```\nx\n   ```\n") == "x"


@pytest.mark.parametrize("opening", ["    ```python", "\t```python"])
def test_four_spaces_or_a_tab_is_not_a_fence(opening: str) -> None:
    text = f"Code:\n{opening}\nx = 1\n```"
    blocks = parse_code_blocks(text)
    # The indented line is not a fence, so the last line opens an (empty, unclosed) block.
    assert blocks == [CodeBlock(language=None, code="", info="", closed=False)]


def test_closing_fence_indented_four_spaces_is_content() -> None:
    assert extract_code("```\nx\n    ```\ny\n```") == "x\n    ```\ny"


# --- pathological input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ("```", [""]),
        ("```\n```", [""]),
        ("```\n```\n```", ["", ""]),
        ("~~~~~~", [""]),
        ("```\n~~~\n```", ["~~~"]),
        ("````\n```\n````", ["```"]),
    ],
)
def test_only_fences(text: str, codes: list[str]) -> None:
    assert [b.code for b in parse_code_blocks(text)] == codes


def test_fence_inside_a_string_on_a_code_line_stays_code() -> None:
    code = 'FENCE = "```"\nprint(f"```python\\n{src}\\n```")'
    assert extract_code(f"```python\n{code}\n```") == code


def test_fence_line_inside_a_multiline_string_needs_a_longer_outer_fence() -> None:
    code = 'DOC = """\n```\nexample\n```\n"""'
    assert extract_code(f"````python\n{code}\n````") == code
    # With a fence of the same length the inner line closes the block (CommonMark).
    assert extract_code(f"```python\n{code}\n```") == 'DOC = """'


def test_unicode_survives() -> None:
    code = "# 你好, мир, مرحبا 🙂\nname = 'Ω'\u2028same_line = 1\x0c\nz = 'e\u0301'"
    assert extract_code(f"Voilà 🎉:\n```python\n{code}\n```\nFin.") == code


def test_non_breaking_space_indent_is_not_a_fence_indent() -> None:
    assert extract_code_blocks("\u00a0```python\nx\n```") == [
        CodeBlock(language=None, code="", info="", closed=False)
    ]


MEGABYTE = 1_000_000

LARGE_INPUTS = {
    "prose lines": "Some words here, no fence at all.\n" * (MEGABYTE // 34),
    "one line of backticks": "`" * MEGABYTE,
    "one line of tildes then text": "~" * MEGABYTE + "\nx",
    "fence lines only": "```\n" * (MEGABYTE // 4),
    "near-closing fences in a long block": "`````python\n" + "````\n" * (MEGABYTE // 5),
    "backtick run with a late backtick in its info": "`" * MEGABYTE + "a`",
    "spaces": " " * MEGABYTE,
    "crlf lines": "\r\n" * (MEGABYTE // 2),
    "one huge code line": "```python\n" + "x" * MEGABYTE + "\n```",
    "many small blocks": "```py\nx = 1\n```\ntext\n" * (MEGABYTE // 20),
}


@pytest.mark.parametrize("name", list(LARGE_INPUTS))
def test_megabyte_input_is_fast(name: str) -> None:
    text = LARGE_INPUTS[name]
    # CPU time of this process, so other work on a busy machine does not count.
    started = time.process_time()
    extract_code(text, all_blocks=True)
    elapsed = time.process_time() - started
    # Linear work on 1 MB takes well under a second (the worst shape, a quarter of a million
    # fence lines, about 0.6 s on a slow core); a quadratic pass would take hours.
    assert elapsed < 3.0, f"{name}: {elapsed:.2f}s of CPU"


def test_many_blocks_are_all_found() -> None:
    blocks = parse_code_blocks(LARGE_INPUTS["many small blocks"])
    assert len(blocks) == MEGABYTE // 20
    assert {b.code for b in blocks} == {"x = 1"}


# --- properties ---------------------------------------------------------------------------

# Pieces that stress the parser: fence characters, line ends, indentation, unicode.
_TRICKY = st.sampled_from(
    ["```", "~~~", "````", "`", "~", "\n", "\r\n", "\r", " ", "   ", "\t", "\x0c", "\u2028",
     "é", "🙂", "def f():", "    return 1", '"""', "```python", "~~~ py"]
)
CODE = st.lists(st.one_of(_TRICKY, st.text(max_size=6)), max_size=25).map("".join)
# Prose without fence characters, so it cannot open a block of its own.
PROSE = st.text(st.characters(blacklist_characters="`~", codec="utf-8"), max_size=40)
TAGS = st.sampled_from(
    ["", "python", " python", "py", " py", "python3", "Python", " PY3", "js", " javascript",
     "rust", "c++", "python {linenos=true}", "text"]
)
NEWLINE = st.sampled_from(["\n", "\r\n"])


@st.composite
def fence_styles(draw: st.DrawFn) -> dict:
    return {
        "char": draw(st.sampled_from("`~")),
        "length": draw(st.integers(3, 6)),
        "indent": draw(st.integers(0, 3)),
        "close_extra": draw(st.integers(0, 2)),
        "close_indent": draw(st.integers(0, 3)),
        "close_trailing": draw(st.sampled_from(["", " ", " \t"])),
        "tag": draw(TAGS),
    }


def _closes(line: str, style: dict) -> bool:
    """Written independently of the parser: would this line close a fence of this style?"""
    pattern = rf" {{0,3}}{re.escape(style['char'])}{{{style['length']},}}[ \t\r]*"
    return re.fullmatch(pattern, line) is not None


def _indented(code: str, indent: int) -> str:
    pad = " " * indent
    return pad + code.replace("\n", "\n" + pad)


def _wrap(code: str, style: dict, nl: str, *, closed: bool = True) -> str:
    """A fenced block holding code, in the given style, without surrounding line ends."""
    opening = " " * style["indent"] + style["char"] * style["length"] + style["tag"]
    block = opening + nl + _indented(code, style["indent"])
    if closed:
        closing = style["char"] * (style["length"] + style["close_extra"])
        block += nl + " " * style["close_indent"] + closing + style["close_trailing"]
    return block


def _fits(code: str, style: dict, nl: str) -> bool:
    """Code that a fence of this style can hold unambiguously."""
    content_lines = _indented(code, style["indent"]).split("\n")
    if any(_closes(line, style) for line in content_lines):
        return False
    # A trailing lone CR followed by an LF fence line end reads as a CRLF (documented).
    return not (nl == "\n" and code.endswith("\r"))


@settings(max_examples=400, deadline=None)
@given(code=CODE, style=fence_styles(), nl=NEWLINE, before=PROSE, after=st.text(max_size=40))
def test_round_trip_any_code_in_any_fence(
    code: str, style: dict, nl: str, before: str, after: str
) -> None:
    assume(_fits(code, style, nl))
    text = before + nl + _wrap(code, style, nl) + nl + after
    assert extract_code(text, language=canonical_language(style["tag"])) == code
    if not any(ch in after for ch in "`~"):
        # No other block anywhere: the block is also the fallback for any preference.
        assert extract_code(text) == code


@settings(max_examples=200, deadline=None)
@given(
    code=CODE, style=fence_styles(), decoy=CODE, nl=NEWLINE, before=PROSE, between=PROSE
)
def test_round_trip_preferred_block_after_a_block_in_another_language(
    code: str, style: dict, decoy: str, nl: str, before: str, between: str
) -> None:
    language = canonical_language(style["tag"])
    assume(language is not None and language != "go")
    assume(_fits(code, style, nl))
    decoy_style = {**style, "tag": "go", "char": "~", "length": 3, "close_extra": 0}
    assume(_fits(decoy, decoy_style, nl))
    text = before + nl + _wrap(decoy, decoy_style, nl) + nl + between + nl + _wrap(code, style, nl)
    assert extract_code(text, language=language) == code


@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(st.tuples(CODE, fence_styles()), min_size=1, max_size=5),
    nl=NEWLINE,
    prose=PROSE,
)
def test_round_trip_several_blocks_in_order(
    blocks: list[tuple[str, dict]], nl: str, prose: str
) -> None:
    assume(all(_fits(code, style, nl) for code, style in blocks))
    text = nl.join(prose + nl + _wrap(code, style, nl) for code, style in blocks)
    codes = [code for code, _ in blocks]
    assert [b.code for b in extract_code_blocks(text)] == codes
    assert extract_code(text, language=None, all_blocks=True) == "\n\n".join(codes)


@settings(max_examples=300, deadline=None)
@given(code=CODE, style=fence_styles(), nl=NEWLINE, before=PROSE)
def test_round_trip_unclosed_fence_is_everything_after_it(
    code: str, style: dict, nl: str, before: str
) -> None:
    assume(_fits(code, style, nl))
    text = before + nl + _wrap(code, style, nl, closed=False)
    expected = code.removesuffix("\n")
    if expected != code:
        expected = expected.removesuffix("\r")  # the final line end was a CRLF
    assert extract_code(text, language=None) == expected
