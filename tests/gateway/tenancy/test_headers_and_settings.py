"""Refusals as OpenAI's and Anthropic's headers; the start-up warning when limits hold per replica only."""

from __future__ import annotations

import datetime as dt

from gateway.config import Settings
from gateway.tenancy.limits.headers import _duration_bytes, anthropic_headers, duration, openai_headers, refusal_headers
from gateway.tenancy.limits.model import RateInfo, RateLimited
from gateway.tenancy.service import per_replica_warnings

RATE = RateInfo(requests_limit=60, requests_remaining=0, requests_reset=1.5, tokens_limit=1000,
                tokens_remaining=250, tokens_reset=75.0, budget_limit=5000, budget_remaining=10, budget_reset=3600.0)


def test_openai_durations_read_as_api_openai_com_writes_them():
    assert [duration(value) for value in (0.02, 1.5, 6.0, 75.0, 3723.0)] == ["20ms", "1.5s", "6s", "1m15s",
                                                                              "1h2m3s"]


def test_the_headers_bytes_durations_are_the_durations_encoded():
    # openai_headers writes its resets as bytes (duration's text is those bytes decoded): the forms at
    # every boundary (under a second, a minute, an hour; rounding up to the next unit), as OpenAI writes them.
    boundaries = {0.0: b"0ms", -0.5: b"0ms", 0.0004: b"0ms", 0.02: b"20ms", 0.9994: b"999ms", 0.9996: b"1000ms",
                  1.0: b"1s", 1.5: b"1.5s", 37.1234: b"37.123s", 59.9996: b"60s", 60.0: b"1m0s", 60.0001: b"1m1s",
                  3599.2: b"1h0m0s", 3723.0: b"1h2m3s", 86400.0: b"24h0m0s"}
    assert {value: _duration_bytes(value) for value in boundaries} == boundaries
    values = [0.0, -0.5, 0.0004, 0.0005, 0.02, 0.4996, 0.9994, 0.9996, 1.0, 1.0004, 1.5, 6.0, 37.1234, 59.9994,
              59.9996, 60.0, 60.0001, 75.0, 3599.2, 3600.0, 3723.0, 86399.5, 86400.0, 2678400.0]
    values += [n / 7 for n in range(0, 700_000, 997)]
    assert [_duration_bytes(value) for value in values] == [duration(value).encode() for value in values]


def test_a_refusal_carries_retry_after_and_openais_headers():
    refusal = RateLimited("rpm", "key:key_a", 1.2, RATE)
    assert dict(refusal_headers(refusal)) == {
        b"retry-after": b"2",
        b"x-ratelimit-limit-requests": b"60", b"x-ratelimit-remaining-requests": b"0",
        b"x-ratelimit-reset-requests": b"1.5s",
        b"x-ratelimit-limit-tokens": b"1000", b"x-ratelimit-remaining-tokens": b"250",
        b"x-ratelimit-reset-tokens": b"1m15s",
        b"x-gateway-budget-limit": b"5000", b"x-gateway-budget-remaining": b"10", b"x-gateway-budget-reset": b"1h0m0s"}
    assert str(refusal) == "this API key is at its limit of requests per minute"


def test_anthropics_headers_give_reset_times():
    now = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    headers = dict(anthropic_headers(RATE, now=now))
    # 1.5 s from 12:00:00: the limit is back at 12:00:01.5, so the whole second is 12:00:02 (it said
    # 12:00:01, when a retry is still refused), as retry-after rounds 1.5 s up to 2.
    assert headers[b"anthropic-ratelimit-requests-reset"] == b"2030-01-01T12:00:02Z"
    assert headers[b"anthropic-ratelimit-tokens-remaining"] == b"250"
    assert headers[b"anthropic-ratelimit-tokens-reset"] == b"2030-01-01T12:01:15Z"  # (a whole second stays)
    later = dict(anthropic_headers(RATE, now=now + dt.timedelta(microseconds=700_000)))
    assert later[b"anthropic-ratelimit-requests-reset"] == b"2030-01-01T12:00:03Z"  # 12:00:02.2
    assert later[b"anthropic-ratelimit-tokens-reset"] == b"2030-01-01T12:01:16Z"  # 12:01:15.7


def test_a_spent_total_budget_has_no_retry_after():
    refusal = RateLimited("budget", "team:team_t", None, RateInfo(budget_limit=10, budget_remaining=0))
    headers = dict(refusal_headers(refusal))
    assert b"retry-after" not in headers and headers[b"x-gateway-budget-remaining"] == b"0"
    assert b"x-gateway-budget-reset" not in headers
    assert openai_headers(RateInfo()) == []


def test_the_gateway_warns_when_limits_would_hold_per_replica_only():
    sqlite = "sqlite+aiosqlite:///./data/x.db"
    assert per_replica_warnings(Settings(database_url=sqlite)) == []
    [workers] = per_replica_warnings(Settings(database_url=sqlite, workers=4))
    assert "WORKERS=4" in workers and "REDIS_URL" in workers
    [postgres] = per_replica_warnings(Settings(database_url="postgresql+asyncpg://u@h/db"))
    assert "PostgreSQL" in postgres
    assert per_replica_warnings(Settings(database_url="postgresql+asyncpg://u@h/db", workers=2,
                                         redis_url="redis://127.0.0.1:6379")) == []
