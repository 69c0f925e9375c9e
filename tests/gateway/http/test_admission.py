"""Admission counters: a global and a per-key cap on requests in flight."""

from __future__ import annotations

from gateway.http.admission import Admission


def test_admission_counts_and_releases():
    admission = Admission(max_inflight=3, max_inflight_per_key=2)
    assert admission.try_enter("a") is None and admission.try_enter("a") is None
    assert "this API key" in admission.try_enter("a")
    assert admission.try_enter("b") is None
    assert "the gateway" in admission.try_enter("c")
    admission.leave("a")
    assert admission.try_enter("c") is None
    for key in ("a", "b", "c"):
        admission.leave(key)
    assert admission.inflight == 0
    assert admission.try_enter("a") is None and admission.try_enter("a") is None  # a's whole cap is free again
