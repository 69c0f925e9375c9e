"""The README's configuration table documents every setting the gateway and its installed features read, and nothing else."""

from __future__ import annotations

import re

from gateway.features import settings_classes
from tests.support.docs import read_doc

README = read_doc("README.md")


def configuration_table() -> dict[str, str]:
    section = README.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]*) \|", section, re.M))


def declared_fields() -> dict:
    """Every setting the gateway and its installed features read, by field name."""
    return {name: field for cls in settings_classes() for name, field in cls.model_fields.items()}


def test_every_setting_is_documented_and_every_documented_variable_is_a_setting():
    documented = configuration_table()
    settings = {name.upper() for name in declared_fields()}
    assert sorted(settings - documented.keys()) == []
    assert sorted(documented.keys() - settings) == []


def test_documented_defaults_are_the_real_ones_for_plain_values():
    documented = configuration_table()
    for name, text in documented.items():
        value = declared_fields()[name.lower()].default  # the declared default, whatever the environment says
        shown = text.strip().strip("`")
        if isinstance(value, bool):
            assert shown == str(value).lower(), name
        elif isinstance(value, (int, float)) and shown.replace(".", "", 1).isdigit():
            assert float(shown) == float(value), name
