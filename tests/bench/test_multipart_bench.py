"""bench/multipart.py runs and reports both sides (small bodies; the figures live in docs/benchmarks.md)."""

from __future__ import annotations

from bench.multipart import regex_before, report, run, upload


def test_a_quick_run_measures_both_sides_of_every_case():
    results = run(1, quick=True)
    assert set(results) == {"upload, 10 KB", "report's body, 3.7 KB"}
    assert all(set(sides) == {"before", "after"} for sides in results.values())
    assert report(results).count("\n") == len(results) + 1


def test_the_regex_of_before_finds_the_model_of_an_upload():
    body, content_type = upload(100)
    start, end = regex_before(body, content_type.split("boundary=", 1)[1].encode())
    assert body[start:end] == b"stack-2.9"
