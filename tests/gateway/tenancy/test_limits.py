"""What every limiter does, in process and on Redis alike: windows, tokens, concurrency, budgets, scopes."""

from __future__ import annotations

import pytest

from gateway.tenancy.limits.demand import demand_for, prompt_bound
from gateway.tenancy.limits.limiter import EXTEND_CHUNK, Limiter
from gateway.tenancy.limits.model import RateLimited
from gateway.tenancy.model import Limits, ScopeLimits, TeamLimits


def demand(limits: Limits, *, key: str = "key_a", team: TeamLimits | None = None, user: str | None = None,
           prompt: int = 10, max_tokens: int = 20):
    return demand_for(key_id=key, limits=limits, team=team, end_user=user, prompt_tokens=prompt,
                      max_tokens=max_tokens)


async def admitted(limiter: Limiter, wanted, times: int) -> int:
    count = 0
    for _ in range(times):
        try:
            await limiter.admit(wanted)
        except RateLimited:
            continue
        count += 1
    return count


async def test_rpm_admits_exactly_the_limit_then_refuses_with_a_retry_time(limiter):
    wanted = demand(Limits(rpm=7))
    assert await admitted(limiter, wanted, 20) == 7
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(wanted)
    assert refused.value.reason == "rpm" and refused.value.scope == "key:key_a"
    assert 0 < refused.value.retry_after <= 61
    assert refused.value.rate.requests_limit == 7 and refused.value.rate.requests_remaining == 0


async def test_a_grant_reports_the_remaining_requests_and_tokens(limiter):
    first = await limiter.admit(demand(Limits(rpm=5, tpm=1000), prompt=100, max_tokens=200))
    assert first.granted == 300
    assert (first.rate.requests_limit, first.rate.requests_remaining) == (5, 4)
    assert (first.rate.tokens_limit, first.rate.tokens_remaining) == (1000, 700)


async def test_tpm_must_fit_the_whole_demand(limiter):
    limits = Limits(tpm=100)
    assert (await limiter.admit(demand(limits, prompt=30, max_tokens=30))).granted == 60
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(limits, prompt=30, max_tokens=30))  # 60 + 60 > 100
    assert refused.value.reason == "tpm"
    assert (await limiter.admit(demand(limits, prompt=10, max_tokens=30))).granted == 40  # exactly 100


async def test_a_demand_larger_than_the_tpm_limit_runs_alone_capped_at_it(limiter):
    reservation = await limiter.admit(demand(Limits(tpm=100), prompt=10, max_tokens=500))
    assert reservation.granted == 100


async def test_a_prompt_larger_than_the_tpm_limit_is_refused_for_good(limiter):
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(Limits(tpm=100), prompt=150, max_tokens=10))
    assert refused.value.reason == "tpm_too_large" and refused.value.retry_after is None


async def test_settling_gives_back_what_was_reserved_and_not_used(limiter):
    limits = Limits(tpm=100)
    reservation = await limiter.admit(demand(limits, prompt=10, max_tokens=80))
    with pytest.raises(RateLimited):
        await limiter.admit(demand(limits, prompt=10, max_tokens=30))
    limiter.settle(reservation, 20)  # the engine said: 20 tokens in all
    assert (await limiter.admit(demand(limits, prompt=10, max_tokens=70))).granted == 80  # 20 + 80 = 100


async def test_a_failed_request_releases_its_tokens_but_still_counts_as_a_request(limiter):
    limits = Limits(rpm=2, tpm=50)
    reservation = await limiter.admit(demand(limits, prompt=10, max_tokens=40))
    limiter.settle(reservation, 0)
    assert (await limiter.admit(demand(limits, prompt=10, max_tokens=40))).granted == 50
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(limits, prompt=1, max_tokens=1))
    assert refused.value.reason == "rpm"


async def test_a_request_that_never_ran_gives_back_its_request_its_tokens_and_its_slot(limiter):
    """Settled with ``ran=False`` (the gateway's queue refused it, its client left while it waited, no
    engine could be reached): nothing of it stays counted, in every scope."""
    limits = Limits(rpm=1, tpm=50, max_concurrency=1)
    team = TeamLimits(id="team_t", limits=Limits(rpm=1))
    reservation = await limiter.admit(demand(limits, team=team, prompt=10, max_tokens=40))
    with pytest.raises(RateLimited):
        await limiter.admit(demand(limits, team=team, prompt=1, max_tokens=1))
    limiter.settle(reservation, 0, ran=False)
    again = await limiter.admit(demand(limits, team=team, prompt=10, max_tokens=40))
    assert again.granted == 50
    assert (again.rate.requests_remaining, again.rate.tokens_remaining) == (0, 0)  # only this one counted


async def test_concurrency_is_held_until_settled(limiter):
    limits = Limits(max_concurrency=2)
    first = await limiter.admit(demand(limits))
    await limiter.admit(demand(limits))
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(limits))
    assert refused.value.reason == "max_concurrency"
    limiter.settle(first, 5)
    await limiter.admit(demand(limits))


async def test_a_budget_grants_what_is_left_down_to_the_prompt(limiter):
    limits = Limits(budget_tokens=100, budget_period="total")
    assert (await limiter.admit(demand(limits, prompt=10, max_tokens=50))).granted == 60
    partial = await limiter.admit(demand(limits, prompt=10, max_tokens=50))
    assert partial.granted == 40 and partial.rate.budget_remaining == 0
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(limits, prompt=1, max_tokens=5))
    assert refused.value.reason == "budget" and refused.value.retry_after is None  # a total budget never resets


async def test_a_daily_budget_says_when_it_resets(limiter):
    limits = Limits(budget_tokens=20, budget_period="day")
    await limiter.admit(demand(limits, prompt=10, max_tokens=10))
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(limits, prompt=1, max_tokens=1))
    assert 0 < refused.value.retry_after <= 86400


async def test_a_stream_consumes_past_its_reservation_only_as_far_as_the_budget_goes(limiter):
    limits = Limits(budget_tokens=1000, budget_period="month")
    stream = await limiter.admit(demand(limits, prompt=10, max_tokens=90))
    assert stream.granted == 100
    assert await limiter.consume(stream, 100)              # within the reservation: no call
    assert await limiter.consume(stream, 50)               # beyond it: extended from the budget
    assert stream.granted >= 150 and stream.granted == 100 + EXTEND_CHUNK
    other = await limiter.admit(demand(limits, key="key_a", prompt=10, max_tokens=2000))
    assert other.granted == 1000 - stream.granted          # the rest of the budget
    assert not await limiter.consume(stream, stream.granted - stream.used + 1)  # spent: cut here
    limiter.settle(stream)
    limiter.settle(other, 0)
    # What stays charged: what the stream consumed (the other request settled with none).
    rest = await limiter.admit(demand(limits, prompt=10, max_tokens=5000))
    assert stream.used == 229 and rest.granted == 1000 - 229


async def test_a_key_within_its_team_is_held_by_both(limiter):
    team = TeamLimits("team_t", Limits(rpm=3))
    assert await admitted(limiter, demand(Limits(rpm=2), key="key_a", team=team), 5) == 2
    assert await admitted(limiter, demand(Limits(rpm=5), key="key_b", team=team), 5) == 1  # the team's third
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(Limits(), key="key_c", team=team))
    assert refused.value.scope == "team:team_t"


async def test_a_refusal_by_one_scope_counts_in_none(limiter):
    team = TeamLimits("team_t", Limits(tpm=100))
    with pytest.raises(RateLimited):
        await limiter.admit(demand(Limits(rpm=1), team=team, prompt=200, max_tokens=10))  # the team refuses
    await limiter.admit(demand(Limits(rpm=1), team=team, prompt=10, max_tokens=10))  # the key's one request is left


async def test_each_end_user_has_their_own_share_of_the_app_keys_limits(limiter):
    limits = Limits(rpm=10, end_user=ScopeLimits(rpm=2))
    assert await admitted(limiter, demand(limits, user="alice"), 5) == 2
    assert await admitted(limiter, demand(limits, user="bob"), 5) == 2
    assert await admitted(limiter, demand(limits), 10) == 6  # the app's own requests share the key's 10


async def test_a_key_without_limits_costs_no_call():
    class Refuses:
        async def admit(self, demand):
            raise AssertionError("asked Redis for a key without limits")

    limiter = Limiter(local=None, redis=Refuses())  # type: ignore[arg-type]
    reservation = await limiter.admit(demand(Limits()))
    assert reservation.backend == "none" and reservation.granted == 30
    assert await limiter.consume(reservation, 1000)
    limiter.settle(reservation)


def test_a_prompt_is_bounded_by_its_bytes_plus_the_template():
    assert prompt_bound(100, messages=2) == 100 + 16 + 16


async def test_a_keys_changed_limits_apply_to_its_next_request(limiter):
    # A key's scopes (and on Redis their packed keys and limits) are built once per key and kept while
    # its Limits and team are the same objects: a PATCH resolves to new ones, used at once.
    assert await admitted(limiter, demand(Limits(rpm=2)), 5) == 2
    assert await admitted(limiter, demand(Limits(rpm=4)), 5) == 2  # the window holds 2 already
    ten, team = Limits(rpm=10), TeamLimits("team_t", Limits(rpm=1))
    await limiter.admit(demand(ten))
    await limiter.admit(demand(ten, team=team))  # the same limits, now in a team: the team counts it
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand(Limits(rpm=10), key="key_b", team=team))
    assert refused.value.scope == "team:team_t"


def test_a_keys_scopes_are_built_once_while_its_limits_stay():
    limits, team = Limits(rpm=5, end_user=ScopeLimits(rpm=1)), TeamLimits("team_t", Limits(tpm=100))
    first = demand(limits, team=team, user="alice", prompt=5)
    again = demand(limits, team=team, user="alice", prompt=50)
    assert again.scopes is first.scopes and (again.tokens, again.min_tokens) == (70, 51)
    assert [scope.name for scope in first.scopes] == ["team:team_t", "key:key_a", "user:key_a:alice"]
    assert demand(limits, team=team, user="bob").scopes[2].name == "user:key_a:bob"
    changed = demand(Limits(rpm=5), team=team, user="alice")
    assert changed.scopes is not first.scopes and [scope.name for scope in changed.scopes] == ["team:team_t",
                                                                                               "key:key_a"]
    assert not demand(Limits()).limited and first.limited
