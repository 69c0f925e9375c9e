"""docs/codegen.md shows the Stack 2.9 examples that the integration tier runs against the real engine.

tests/gateway/protocols/codegen/test_documented_examples.py executes each snippet as written;
this check keeps the page's copies identical to those, so a reader's copy-paste is a tested one.
"""

from __future__ import annotations

import pytest

from tests.gateway.protocols.codegen import test_documented_examples as documented
from tests.support.docs import read_doc

PAGE = read_doc("codegen.md")
SNIPPETS = {name: value for name, value in vars(documented).items()
            if name.isupper() and isinstance(value, str) and name != "DOCS_URL"}


def test_every_documented_example_is_checked():
    assert len(SNIPPETS) >= 13  # curl x8, Python x4, JavaScript x1


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_the_page_shows_the_tested_snippet_verbatim(name):
    assert SNIPPETS[name].strip("\n") in PAGE, f"docs/codegen.md's copy of {name} differs from the tested one"
