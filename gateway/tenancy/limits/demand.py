"""A request's demand: which scopes it counts against, and how many tokens it may use.

The prompt is counted by the caller when it has the engine's count, else bounded from its
length (``prompt_bound``): a byte-level BPE token (Qwen's) spans at least one byte of UTF-8
text, so the byte length bounds the tokens of the text, and a chat template adds a few
tokens per message. A bound over-reserves; the engine's usage settles the difference.
"""

from __future__ import annotations

from gateway.tenancy.limits.model import Demand, Scope
from gateway.tenancy.model import Limits, ScopeLimits, TeamLimits

TEMPLATE_TOKENS_PER_MESSAGE = 8
TEMPLATE_TOKENS_BASE = 16


def prompt_bound(text_bytes: int, messages: int = 1) -> int:
    """At most how many tokens a prompt of ``text_bytes`` UTF-8 bytes in ``messages`` messages takes."""
    return text_bytes + TEMPLATE_TOKENS_BASE + TEMPLATE_TOKENS_PER_MESSAGE * messages


def demand_for(*, key_id: str, limits: Limits, team: TeamLimits | None = None, end_user: str | None = None,
               prompt_tokens: int, max_tokens: int, concurrency: bool = True) -> Demand:
    """The demand of a request by key ``key_id`` (in ``team``), for ``end_user`` if an app acts for one.

    ``concurrency`` False: the key's and team's ``max_concurrency`` are not the limiter's to count
    (flow control holds them for a request that queues: it waits there instead of a 429 here).
    """
    shape = _shapes.get((key_id, end_user, concurrency))
    if shape is None or shape[0] is not limits or shape[1] is not team:
        shape = _shape(key_id, limits, team, end_user, concurrency)
    return Demand(shape[2], shape[3], prompt_tokens + max(max_tokens, 0), prompt_tokens + 1, shape[4], shape[5])


_SHAPES_MAX = 10_000
# (key id, end user, concurrency) -> (the key's Limits and TeamLimits they were built from, the scopes, the
# tag, limited, leases). A resolved key keeps its objects while it is cached, so a request finds its key's
# scopes built: the same tuple every time, which the Redis limiter finds packed by identity (redis_limits).
_Shape = tuple[Limits, TeamLimits | None, tuple[Scope, ...], str, bool, bool]
_shapes: dict[tuple[str, str | None, bool], _Shape] = {}


def _shape(key_id: str, limits: Limits, team: TeamLimits | None, end_user: str | None,
           concurrency: bool) -> _Shape:
    scopes: list[Scope] = []
    team_limits = _own(team.limits, concurrency) if team is not None else None
    if team_limits is not None and not team_limits.empty:
        scopes.append(Scope(f"team:{team.id}", team_limits))
    key_limits = _own(limits, concurrency)
    if not key_limits.empty:
        scopes.append(Scope(f"key:{key_id}", key_limits))
    if end_user is not None and limits.end_user is not None and not limits.end_user.empty:
        scopes.append(Scope(f"user:{key_id}:{end_user}", limits.end_user))
    built = tuple(scopes)
    shape = (limits, team, built, team.id if team is not None else key_id,
             any(not scope.limits.empty for scope in built),
             any(scope.limits.max_concurrency is not None for scope in built))
    if len(_shapes) >= _SHAPES_MAX:
        _shapes.clear()
    _shapes[(key_id, end_user, concurrency)] = shape  # (holding the objects: compared by identity above)
    return shape


_OWN_MAX = 10_000
# (id of a key's Limits, with its max_concurrency) -> (it, its own part)
_own_limits: dict[tuple[int, bool], tuple[Limits, ScopeLimits]] = {}


def _own(limits: Limits, concurrency: bool = True) -> ScopeLimits:
    """A key's or team's limits without the ``end_user`` part (which applies to each end user), and
    without ``max_concurrency`` unless ``concurrency``.

    Kept per ``Limits`` object (a resolved key keeps its own while it is cached): one object per
    key, not one per request, because the Redis limiter looks each demand's scopes up by hash
    and a new pydantic object hashes and compares an order of magnitude slower than the same one.
    """
    if limits.end_user is None and (concurrency or limits.max_concurrency is None):
        return limits
    kept = _own_limits.get((id(limits), concurrency))
    if kept is not None and kept[0] is limits:
        return kept[1]
    # Built without validation (the fields were validated as the key's).
    own = ScopeLimits.model_construct(rpm=limits.rpm, tpm=limits.tpm,
                                      max_concurrency=limits.max_concurrency if concurrency else None,
                                      budget_tokens=limits.budget_tokens, budget_period=limits.budget_period)
    if len(_own_limits) >= _OWN_MAX:
        _own_limits.clear()
    _own_limits[(id(limits), concurrency)] = (limits, own)  # (holding ``limits`` keeps its id from being reused)
    return own
