"""The jobs objects' ids: what can be an id at all (anything else is a plain 404, never a query)."""

from __future__ import annotations

import pytest

from gateway.jobs import ids


@pytest.mark.parametrize("make", [ids.file_id, ids.endpoint_id, ids.event_id, ids.delivery_id,
                                  lambda: ids.batch_id("openai"), lambda: ids.batch_id("anthropic")])
def test_every_id_the_gateway_makes_is_valid(make):
    assert ids.is_valid(make())


@pytest.mark.parametrize("value", ["batch_abc\n", "file-abc\n", "", "a" * 65, "file abc", "file-ab\x00",
                                   "msgbatch_é", "../file-abc"])
def test_anything_else_is_not_an_id(value):
    assert not ids.is_valid(value)


def test_the_longest_id_is_64_characters():
    assert ids.is_valid("a" * 64)
