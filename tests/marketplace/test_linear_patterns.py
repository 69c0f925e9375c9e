"""Guard: every regular expression in marketplace/ stays linear on worst-case input.

The parser and the prompt builder run on the event loop, so one request whose text makes a
pattern backtrack freezes every other request of the worker (seen: "budget" + 1,994 spaces
+ "x" cost 0.38 s in each of two patterns, because ``\\s*:?\\s*`` can split a run of
spaces in n ways). Each test feeds worst-case shapes (long runs of what a pattern repeats,
after every word that starts it) and bounds the CPU time of this process, with a wide
margin: linear work on these sizes takes milliseconds; the quadratic patterns took
0.4-1.4 s at the input limit and would take minutes at the larger sizes.

``test_every_pattern_is_guarded`` fails when a module gains a pattern this file does not
exercise yet: add its shapes here.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import marketplace
from marketplace import untrusted
from marketplace.catalogue.models import DESCRIPTION_MAX
from marketplace.chat.schemas import CHAT_MESSAGE_MAX
from marketplace.places import geo
from marketplace.places.gazetteer import Gazetteer, normalise
from marketplace.search import query
from marketplace.users.models import EMAIL_MAX
from marketplace.users.schemas import UserCreate

# Every compiled pattern in the package, with the function that exercises it below.
GUARDED = {
    "marketplace.search.query._RANGE": "parse_query",
    "marketplace.search.query._SINGLE": "parse_query",
    "marketplace.search.query._PRICE_ONLY": "parse_price",
    "marketplace.search.query._DOT_THOUSANDS": "parse_query",
    "marketplace.search.query._ONE_COMMA_THOUSAND": "parse_query",
    "marketplace.search.query._SEPARATED": "parse_query",
    "marketplace.search.query._MEASURE_AFTER": "parse_query",
    "marketplace.search.query._DISTANCE": "parse_query",
    "marketplace.untrusted.TEMPLATE_TOKEN": "clean_text",
    "marketplace.places.geo._LOCATION": "parse_location",
    "marketplace.places.gazetteer._ASCII_WORD": "parse_query",
    "marketplace.places.gazetteer._TEXT_WORD": "parse_query",
    "marketplace.users.schemas._EMAIL": "email",
}

# Generous bounds on CPU seconds (this process only, so other work on the machine does not count).
# At the input limit the linear parser takes 2-15 ms a shape; the report's shape took 0.64 s.
AT_LIMIT_SECONDS = 0.25
SCALED_SECONDS = 5.0
SCALE = 20


def _patterns() -> set[str]:
    found = set()
    for module_info in pkgutil.walk_packages(marketplace.__path__, "marketplace."):
        if module_info.name.startswith("marketplace.migrations"):
            continue  # Alembic scripts run against a database when imported
        module = importlib.import_module(module_info.name)
        source = inspect.getsource(module)
        for name, value in vars(module).items():
            # Defined here, not imported from another module of the package.
            if isinstance(value, re.Pattern) and re.search(rf"^{name} = re\.compile\(", source, re.MULTILINE):
                found.add(f"{module_info.name}.{name}")
    return found


def test_every_pattern_is_guarded():
    assert _patterns() == set(GUARDED), "a regex was added or removed: guard it in this file"


def cpu_seconds(function, *args) -> float:
    """CPU seconds of one call; a call over AT_LIMIT_SECONDS is retried and its fastest run kept
    (other work on the machine can only add time, never remove it)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        function(*args)
        best = min(best, time.process_time() - started)
        if best <= AT_LIMIT_SECONDS:
            break
    return best


# --- the query parser -----------------------------------------------------------------------

LEADS = sorted({*query._UPPER, *query._LOWER, *query._AROUND, *query._NEUTRAL, *query._RANGE_LEADS,
                *query._FILLERS, *query._MULTIPLIERS, "rp", "rp.", "idr", "1", "1.000", "1,5", "s/d",
                "budget harga", "antara", "5 -", "5 dan", "jakarta", "di", "radius", "dalam radius", "within",
                "5 km", "5,5 km", "500 m", "5km dari"})
# Every lead with the runs most patterns repeat; every run after a few leads of each kind.
MAIN_FILLS = (" ", " :", "1", "1 ")
OTHER_FILLS = ("\t", "1.", "1,", "-", " -", ".-", "k ", "juta ", " km", "1 km ", "km dari ")
FEW_LEADS = ("budget", "di bawah", "mulai dari", "sekitar", "harga", "antara", "rp", "juta", "5 -", "1", "radius",
             "5 km")


def query_shapes(size: int) -> dict[str, str]:
    shapes = {}
    for lead, fill in [*itertools.product(LEADS, MAIN_FILLS), *itertools.product(FEW_LEADS, OTHER_FILLS)]:
        shapes[f"{lead!r} then {fill!r} repeated, then x"] = lead + fill * ((size - len(lead)) // len(fill)) + "x"
    for lead in LEADS:
        shapes[f"({lead!r} + space) repeated"] = (lead + " ") * (size // (len(lead) + 1))
    return shapes


GAZETTEER = Gazetteer.load()


def parse(text: str) -> None:
    query.parse_query(text, gazetteer=GAZETTEER)


def test_the_quadratic_shape_from_the_report_is_linear():
    assert cpu_seconds(parse, "budget" + " " * 1994 + "x") < AT_LIMIT_SECONDS
    assert cpu_seconds(parse, "budget harga" + " " * 1988 + "x") < AT_LIMIT_SECONDS


def test_query_shapes_at_the_input_limit():
    slow = {name: round(seconds, 3) for name, text in query_shapes(query.MAX_QUERY_CHARS).items()
            if (seconds := cpu_seconds(parse, text)) > AT_LIMIT_SECONDS}
    assert slow == {}


SCALED_QUERY_SHAPES = {
    "budget, spaces": "budget" + " " * 40_000 + "x",
    "budget harga, spaces": "budget harga" + " " * 40_000 + "x",
    "antara, spaces": "antara" + " " * 40_000 + "5",
    "budget, colons": "budget :" * 5_000,
    "digits and spaces": "1 " * 20_000,
    "digits and dashes": "1-" * 20_000,
    "bound words and digits": "maks 1 " * 6_000,
    "amount, spaces, no separator": "1" + " " * 40_000 + "x",
    "rp, spaces": "rp" + " " * 40_000 + "x",
    "ranges": "5 - 10 juta " * 3_500,
    "dotted groups": "1.000." * 7_000,
    "radius, spaces": "radius" + " " * 40_000 + "5",
    "distances without a lead": "5 km " * 8_000,
    "number, spaces, km": "5" + " " * 40_000 + "km",
}


@pytest.mark.parametrize("name", list(SCALED_QUERY_SHAPES))
def test_query_shapes_twenty_times_the_limit(name, monkeypatch):
    monkeypatch.setattr(query, "MAX_QUERY_CHARS", SCALE * 2000 + 10_000)
    assert cpu_seconds(parse, SCALED_QUERY_SHAPES[name]) < SCALED_SECONDS


@pytest.mark.parametrize("fill", [" ", "1", "1.", "1,", " 5"])
def test_parse_price_on_long_input(fill):
    text = "rp" + fill * (query.MAX_QUERY_CHARS // len(fill) - 2) + "x"
    assert cpu_seconds(query.parse_price, text) < AT_LIMIT_SECONDS


# --- prompt cleaning -----------------------------------------------------------------------------


def prompt_shapes(size: int) -> dict[str, str]:
    half = size // 4
    return {
        "nested <|...|>": "<|" * half + "|>" * half,
        "nested <think>": "<th" * (size // 14) + "<think>" + "ink>" * (size // 14),
        "opening brackets": "<" * size,
        "closing brackets": ">" * size,
        "bracket pairs": "<>" * (size // 2),
        "bracket then spaces": "<" + " " * size + ">",
        "slash then spaces": "</" + " " * size + "think",
        "bars": "<" + "|" * size + ">",
        "unclosed token starts": "<|" * (size // 2),
        "tokens between spaces": " <think> " * (size // 9),
    }


@pytest.mark.parametrize("keep_newlines", [False, True])
def test_prompt_shapes_at_the_description_limit(keep_newlines):
    for limit in (DESCRIPTION_MAX, CHAT_MESSAGE_MAX):
        slow = {name: round(seconds, 3) for name, text in prompt_shapes(limit).items()
                if (seconds := cpu_seconds(lambda t: untrusted.clean_text(t, keep_newlines=keep_newlines), text))
                > AT_LIMIT_SECONDS}
        assert slow == {}


def test_prompt_shapes_twenty_times_the_limit():
    for name, text in prompt_shapes(SCALE * DESCRIPTION_MAX).items():
        assert cpu_seconds(untrusted.clean_text, text) < SCALED_SECONDS, name


def strip_to_a_fixed_point(text: str) -> str:
    """The definition: remove every token, again and again, until none is left."""
    while True:
        cleaned = untrusted.TEMPLATE_TOKEN.sub("", text)
        if cleaned == text:
            return text
        text = cleaned


TOKEN_PIECES = st.sampled_from(["<", ">", "|", "<|", "|>", "/", " ", "  ", "\n", "think", "tool_call",
                                "im_start", "THINK", "a", "x" * 70])


@settings(max_examples=600, deadline=None)
@given(st.lists(TOKEN_PIECES, max_size=30))
def test_one_pass_strip_equals_the_fixed_point_definition(pieces):
    text = "".join(pieces)
    assert untrusted.strip_template_tokens(text) == strip_to_a_fixed_point(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(TOKEN_PIECES, max_size=30))
def test_cleaned_text_holds_no_token_whatever_the_nesting(pieces):
    for keep_newlines in (False, True):
        cleaned = untrusted.clean_text("".join(pieces), keep_newlines=keep_newlines)
        assert untrusted.TEMPLATE_TOKEN.search(cleaned) is None


def test_collapsing_spaces_cannot_assemble_a_token():
    # 70 spaces keep "<| ... |>" from being a token; collapsing them afterwards must not make one.
    text = "<|" + " <think> " * 40 + "|>"
    assert untrusted.TEMPLATE_TOKEN.search(untrusted.clean_text(text)) is None


# --- locations, emails, gazetteer words -----------------------------------------------------------------

MEGABYTE = 1_000_000


@pytest.mark.parametrize("text", ["1" * MEGABYTE + "x", "1," + "1" * MEGABYTE + " " * 1000 + "x",
                                  " " * MEGABYTE + "x", "1." * (MEGABYTE // 2), "1 ,  " * (MEGABYTE // 5)])
def test_location_text_of_a_megabyte(text):
    def parse_location(value: str) -> None:
        with pytest.raises(ValueError):
            geo.parse_location(value)

    assert cpu_seconds(parse_location, text) < SCALED_SECONDS


@pytest.mark.parametrize("local", ["a@" + "." * (EMAIL_MAX - 3) + "@", "a@" + "b." * ((EMAIL_MAX - 3) // 2) + "@",
                                   "a" * (EMAIL_MAX - 1) + "@"])
def test_email_shapes_at_the_length_limit(local):
    def validate(value: str) -> None:
        with pytest.raises(ValidationError):
            UserCreate(name="A", email=value)

    assert cpu_seconds(validate, local) < AT_LIMIT_SECONDS


@pytest.mark.parametrize("text", ["a" * 200_000, "a_" * 100_000, "é" * 200_000, "a " * 100_000])
def test_gazetteer_words_at_a_hundred_times_the_limit(text):
    def find(value: str) -> None:
        GAZETTEER.find_in_text(value)
        normalise(value)

    assert cpu_seconds(find, text) < SCALED_SECONDS
