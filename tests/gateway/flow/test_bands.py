"""Priority bands: the configured order, which band a request runs in, and vLLM's priority for it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import Settings
from gateway.flow.bands import (
    Bands,
    InvalidBand,
    engine_priority,
    engine_priority_header,
    requested_band,
    resolve_band,
)
from gateway.flow.control import bands_from_settings
from tests.gateway.flow.fakes import BANDS, BATCH, INTERACTIVE, STANDARD


def test_bands_are_ordered_highest_first_and_the_default_band_is_vllms_zero():
    assert [band.name for band in BANDS.all] == ["interactive", "standard", "batch"]
    assert [band.rank for band in BANDS.all] == [0, 1, 2]
    assert [band.engine_priority for band in BANDS.all] == [-1, 0, 1]  # vLLM: lower goes first
    assert BANDS.default is STANDARD and BANDS.highest is INTERACTIVE and BANDS.lowest is BATCH


def test_the_engine_gets_a_priority_only_when_it_runs_the_priority_scheduler():
    assert engine_priority(INTERACTIVE, "priority") == -1
    assert engine_priority(BATCH, "priority") == 1
    assert engine_priority(BATCH, "fcfs") is None
    assert engine_priority_header(INTERACTIVE, "priority") == ("x-vllm-priority", "-1")
    assert engine_priority_header(INTERACTIVE, "fcfs") is None


def test_bands_come_from_the_settings():
    bands = bands_from_settings(Settings(flow_bands="Realtime, bulk", flow_default_band="bulk"))
    assert bands.names == ("realtime", "bulk")
    assert [band.engine_priority for band in bands.all] == [-1, 0]


@pytest.mark.parametrize(("values", "reason"), [
    ({"flow_bands": ""}, "FLOW_BANDS must name at least one band"),
    ({"flow_bands": "fast,fast"}, "FLOW_BANDS names a band twice"),
    ({"flow_bands": "fast lane,slow"}, "a band name is 1-32 lower-case letters"),
    ({"flow_default_band": "gold"}, "FLOW_DEFAULT_BAND must be one of FLOW_BANDS (interactive, standard, batch)"),
])
def test_wrong_band_settings_are_refused_by_name(values: dict, reason: str):
    with pytest.raises(ValidationError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        Settings(**values)
    with pytest.raises(ValueError):
        Bands(values.get("flow_bands", "interactive,standard,batch").split(","), values.get("flow_default_band",
                                                                                           "standard"))


@pytest.mark.parametrize(("header", "body", "band"), [
    (None, None, None),
    (None, {}, None),
    ("batch", None, BATCH),
    ("  Interactive ", None, INTERACTIVE),
    ("batch", {"priority": "interactive"}, BATCH),      # the header wins
    (None, {"priority": "batch"}, BATCH),
    (None, {"priority": 5}, None),                      # vLLM's own integer field asks for no band
    (None, {"service_tier": "flex"}, BATCH),            # OpenAI's tiers: flex is the lowest band
    (None, {"service_tier": "priority"}, INTERACTIVE),  # ... priority the highest
    (None, {"service_tier": "auto"}, None),
    (None, {"service_tier": "default"}, None),
    (None, {"priority": "standard", "service_tier": "flex"}, STANDARD),
])
def test_a_request_asks_for_a_band_by_header_or_body(header, body, band):
    assert requested_band(BANDS, header, body) is band


@pytest.mark.parametrize(("header", "body", "field"), [
    ("urgent", None, "x-priority"),
    ("", None, "x-priority"),
    (None, {"priority": "urgent"}, "priority"),
])
def test_an_unknown_band_is_an_error_that_names_the_field(header, body, field):
    with pytest.raises(InvalidBand) as problem:
        requested_band(BANDS, header, body)
    assert problem.value.field == field
    assert str(problem.value).startswith(f"{field} must be one of interactive, standard, batch")


@pytest.mark.parametrize(("allowed", "requested", "runs_in"), [
    (STANDARD, None, STANDARD),          # asks for nothing: its key's band
    (STANDARD, BATCH, BATCH),            # a lower band: granted
    (STANDARD, STANDARD, STANDARD),
    (STANDARD, INTERACTIVE, STANDARD),   # a higher band: never above its key's
    (BATCH, INTERACTIVE, BATCH),
    (INTERACTIVE, BATCH, BATCH),
    (None, None, STANDARD),              # a key without a band: the default band
    (None, INTERACTIVE, STANDARD),
    (None, BATCH, BATCH),
])
def test_a_request_runs_in_the_band_it_asks_for_never_above_its_keys(allowed, requested, runs_in):
    assert resolve_band(BANDS, allowed, requested) is runs_in
