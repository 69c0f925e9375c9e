"""Limits and the usage ledger on the request path: admit before the engine, count as it streams, settle at the end.

Every call that reaches an engine for inference passes here, in the one place each kind of
call goes through: the stream runner (``relay.run``: admit before the stream opens, count
each engine read, settle in its one ending), the non-streamed relay (``relay.unary``), and
the engine client as features and the code API see it (:class:`MeteredEngines`:
``gateway.api``'s ``post_json``, ``/generate`` and ``/chat``). A protocol never calls the
limiter itself.

- **Admit** (:meth:`Meter.admit`): the key's ``models`` list is checked (403 naming the
  model); a key with limits gets one check-and-reserve over its team, itself and its end user
  (``tenancy.limits``), its prompt bounded from the body (``tenancy.limits.estimate``) plus
  its output limit; a refusal is a ``LimitReached`` (429, ``Retry-After``) with the rate-limit
  headers of the route's family put on the response; Redis down under ``closed`` is a 503. A
  non-streamed request granted less than it asked has its output limit lowered to what was
  granted (it cannot be cut half-way); a stream is cut instead.
- **Count** (:class:`MeteredSink`): each engine read's events count one token each (vLLM
  writes one event per decode step) beyond the prompt bound, before the stream's tracker reads
  them (``MeteredSink.fit``); when a budget cannot cover the
  next read, the stream ends there with its protocol's error event (``BudgetSpent``), so no
  budget is overspent by a stream. A stream its reservation covers whole (granted in full, its
  output capped by the body for one choice) is counted but never asks for more: the engine
  cannot generate past the cap, and the events beyond the reservation are the stream's framing.
- **Settle** (:meth:`Metered.settle`), once, whatever happened: the engine's usage replaces the
  reservation (a request refused by the engine gives its tokens back; a stream cut or left
  without usage keeps what it consumed, at most its reservation when that covered it whole),
  the concurrency slot is freed, and the usage the
  client received goes to the ledger (prompt, completion, cached, reasoning tokens) under its
  key, team, end user (its label, ``relay.end_users``: for every key, ``API_KEYS`` ones too),
  model and route.

A key without limits and without a models list costs one object per request and no parsing.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.engines.routing import openai_hints
from gateway.failures import Failure, LimitReached, Unavailable
from gateway.http import queueing
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.http.queueing import QUEUED_PATHS, left_queue
from gateway.relay.end_users import EndUsers
from gateway.relay.refusals import reached_engine
from gateway.tenancy.errors import LimiterUnavailable
from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.limits.estimate import Estimate, estimate
from gateway.tenancy.limits.headers import anthropic_headers, openai_headers, refusal_headers
from gateway.tenancy.limits.model import RateLimited, Reservation
from gateway.tenancy.usage.counts import NO_TOKENS, TokenCounts, counts_of

if TYPE_CHECKING:
    from gateway.flow.control import FlowControl
    from gateway.tenancy.limits.limiter import Limiter
    from gateway.tenancy.usage.ledger import UsageLedger

# Engine paths that generate nothing: their tokens are the input only (no output reserved).
NO_OUTPUT_PATHS = frozenset({"/v1/embeddings", "/pooling", "/classify", "/v1/classify", "/score", "/v1/score",
                             "/rerank", "/v1/rerank", "/v2/rerank"})
# Engine paths that are inference: everything else (counting a prompt's tokens, listing models, the
# engine's admin routes) is neither limited nor in the ledger.
INFERENCE_PATHS = NO_OUTPUT_PATHS | {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                                     "/v1/audio/transcriptions", "/v1/audio/translations"}
EVENT_END = b"\n\n"
# OpenAI's `user` or Anthropic's `user_id` as a member name (a message's role "user" is followed by no colon).
_USER_FIELD = re.compile(rb'"user(?:_id)?"\s*:')


class BudgetSpent(LimitReached):
    """A stream reached what its budgets allow: it ends here with its protocol's error event."""


class Meter:
    """The limiter and the ledger as the request path uses them (one per process, on ``Relay``)."""

    def __init__(self, limiter: Limiter, ledger: UsageLedger, *,
                 resolve_model: Callable[[str], str | None] | None = None, end_users: EndUsers | None = None) -> None:
        self.limiter = limiter
        self.ledger = ledger
        self.end_users = end_users or EndUsers()  # labels end users for their limits (the key-id secret)
        self.resolve_model = resolve_model  # an alias in a key's models list -> the served name
        self.queued_paths: frozenset[str] = frozenset()  # their max_concurrency is flow control's (it waits there)

    async def admit(self, request: RequestContext, path: str, body: bytes | None, *,
                    payload: dict | None = None, stream: bool = False, queues: bool = False,
                    routed_model: str | None = None) -> Metered | None:
        """Admit ``request``'s call of ``path``; the ``Metered`` it holds (also ``request.get(Metered)``).

        ``payload``: the body already parsed (a feature's dict); it is changed in place when
        its output limit is lowered. Raises a ``Failure`` for a refusal (nothing reserved).
        None for a path that is no inference. ``queues``: the call then waits in flow control,
        which holds its ``max_concurrency`` (for ``queued_paths``). ``routed_model``: the model the
        call is sent to (its route's), what a key's ``models`` list is checked against when the body
        names none (the engine's default model then) or is no JSON (an audio upload's form).
        """
        if path not in INFERENCE_PATHS:
            return None
        principal = request.principal
        limits = getattr(principal, "limits", None)
        team = getattr(principal, "team", None)
        models = getattr(principal, "models", None)
        limited = limits is not None and not (limits.empty and (team is None or team.limits.empty))
        est: Estimate | None = None
        if limited or models is not None:
            if payload is None:  # (the protocol's parse of this very body when it kept one)
                payload = request.parsed(body) or _parsed(body)
            est = estimate(payload, body_bytes=len(body or b""), generates=path not in NO_OUTPUT_PATHS)
            if models is not None:
                self._check_model(est.model if est.model is not None else routed_model, models)
        metered = Metered(self, request, path, est)
        end_user = None
        if limited and limits.end_user is not None:
            # Each end user within the key's limits (relay.end_users: a token's user, else the body's `user`).
            end_user = metered.end_user = self.end_users.label(principal, payload, path)
        else:
            metered.end_user = self._ledger_user(request, principal, payload, body, path)
        if limited:
            demand = demand_for(key_id=principal.key_id, limits=limits, team=team, end_user=end_user,
                                prompt_tokens=est.prompt_tokens, max_tokens=est.max_tokens,
                                concurrency=not (queues and path in self.queued_paths))
            try:
                reservation = await self.limiter.admit(demand)
            except RateLimited as refusal:
                raise _refused(request, refusal) from None
            except LimiterUnavailable as exc:
                raise Unavailable(f"{exc}; retry shortly", code="limits_unavailable", retry_after=1) from None
            reservation.used = est.prompt_tokens if est.produces_output else 0
            metered.reservation = reservation
            _rate_headers(request, reservation)
            if not stream and reservation.granted < demand.tokens and est.produces_output:
                metered.lowered = max(1, reservation.granted - est.prompt_tokens)
            metered.covered = stream and reservation.granted >= demand.tokens and _output_capped(est, payload)
        request.put(metered)
        return metered

    def _ledger_user(self, request: RequestContext, principal: Any, payload: dict | None, body: bytes | None,
                     path: str) -> str | None:
        """The end user's label for the ledger, for a key whose limits did not need it (None: names none).

        Any key, an ``API_KEYS`` one too: the ledger records who the usage was for under the same
        label as the limits (never the id). The body is parsed for it only when it has the field.
        """
        if getattr(principal, "is_end_user", False):
            return self.end_users.label_of(principal.subject) if principal.subject else None
        if payload is None:
            payload = request.parsed(body)
            if payload is None:
                if not body or _USER_FIELD.search(body) is None:
                    return None
                payload = _parsed(body)
        return self.end_users.label(principal, payload, path, bounded=False)

    def _check_model(self, model: str | None, models: tuple[str, ...]) -> None:
        if model is None:
            return
        if model in models:
            return
        if self.resolve_model is not None:
            for name in models:
                try:
                    if self.resolve_model(name) == model:
                        return
                except Failure:
                    continue
        raise GatewayError(403, f"this API key may not use the model '{model}'; it may use: {', '.join(models)}",
                           param="model", code="model_not_allowed")

    def may_see(self, principal: Any, model: object) -> bool:
        """Whether ``principal``'s key may use ``model`` (``/v1/models`` lists only those)."""
        models = getattr(principal, "models", None)
        if models is None or not isinstance(model, str):
            return models is None
        try:
            self._check_model(model, models)
        except GatewayError:
            return False
        return True


class Metered:
    """What one admitted request holds: its reservation (if limited), and how to settle it once."""

    # It keeps the principal, not the request: the request holds it (``put``), and a reference back
    # would make every request a cycle that outlives it until a full collection.
    __slots__ = ("meter", "principal", "key_id", "path", "estimate", "reservation", "lowered", "covered", "settled",
                 "route", "end_user")

    def __init__(self, meter: Meter, request: RequestContext, path: str, est: Estimate | None) -> None:
        self.meter = meter
        self.principal = request.principal
        self.key_id = request.key_id
        self.path = path
        self.estimate = est
        self.reservation: Reservation | None = None
        self.lowered: int | None = None  # a non-streamed request's output limit, lowered to its grant
        # A stream its reservation covers whole (``_output_capped``): its events past the reservation are its
        # framing (the role's, the finish's, the usage's, ``[DONE]``), not tokens to ask the budgets for.
        self.covered = False
        self.settled = False
        self.end_user: str | None = None  # the end user's label (relay.end_users), for the ledger
        route = request.route
        self.route = route.path if route is not None else (request.scope or {}).get("path", path)

    def body(self, body: bytes | None) -> bytes | None:
        """``body`` with its output limit lowered to the grant (the same bytes when it was not lowered)."""
        if self.lowered is None or body is None:
            return body
        payload = _parsed(body)
        if payload is None:
            return body
        self.lowered_payload(payload)
        return orjson.dumps(payload)

    def lowered_payload(self, payload: dict) -> None:
        if self.lowered is not None:
            payload[self.estimate.output_field or "max_tokens"] = self.lowered

    async def consume(self, tokens: int) -> bool:
        """``tokens`` more were generated; False when the budgets cannot cover them (cut the stream)."""
        reservation = self.reservation
        if reservation is None:
            return True
        if await self.meter.limiter.consume(reservation, tokens):
            return True
        reservation.used -= tokens  # not delivered: not counted
        return False

    async def settle(self, usage: object = None, *, model: object = None, answered: bool = True,
                     estimated: object = None, ran: bool = True) -> None:
        """The request ended: ``usage`` as the engine reported it (None: unknown), once.

        ``estimated``: what the ledger records when the engine reported none (a stream cut or
        left half-way: its content events). ``answered`` False: the engine refused or was never
        reached (tokens given back, concurrency slot freed, no ledger row). ``ran`` False (with
        ``answered`` False): no engine received it (the gateway's queue refused it, its client
        left while it waited, no engine could be connected to): its request is given back too.
        """
        if self.settled:
            return
        self.settled = True
        counts = counts_of(usage) if usage is not None else NO_TOKENS
        reservation = self.reservation
        if reservation is not None:
            if not answered:
                used = 0
            elif usage is not None and counts.total:
                used = max(counts.total, 0)
            elif self.covered:  # its events past the reservation were its framing: the engine stopped within it
                used = min(reservation.used, reservation.granted)
            else:
                used = None  # what the stream consumed (the prompt bound and the events)
            self.meter.limiter.settle(reservation, used, ran=answered or ran)  # (sent: its reply not awaited)
        if answered:
            self._record(counts if usage is not None else counts_of(estimated), model)

    def _record(self, counts: TokenCounts, model: object) -> None:
        principal = self.principal
        if model is None and self.estimate is not None:
            model = self.estimate.model
        self.meter.ledger.record(
            key_id=self.key_id, team_id=getattr(principal, "team_id", None), end_user=self.end_user,
            model=model if isinstance(model, str) else "-", route=self.route, prompt_tokens=counts.prompt,
            completion_tokens=counts.completion, cached_tokens=counts.cached, reasoning_tokens=counts.reasoning)


class MeteredSink:
    """A run's sink that counts each engine read against the request's reservation before anything reads it.

    The runner's loop (``relay.pump``) asks :meth:`fit` for the events of each engine read the
    budgets cover before the dialect's tracker reads them, so a stream cut there is cut for the
    tracker too (its ending, usage and final object are those of what the client received: a
    Responses stream whose budget ran out in its last read used to be stored ``completed`` with its
    whole text while its client got part of it and ``response.failed``); the write of a read cut
    short then ends the stream (``BudgetSpent``). A ``write`` without ``fit`` counts the block itself.
    """

    __slots__ = ("_sink", "_metered", "counts_events", "_fitted", "_spent")

    def __init__(self, sink: Any, metered: Metered) -> None:
        self._sink = sink
        self._metered = metered
        self.counts_events = sink.counts_events
        self._fitted = False  # the events of the next write were counted by ``fit``
        self._spent = False   # the budgets ran out: the next write is the stream's last

    @property
    def first_event(self) -> bytes | None:
        return self._sink.first_event

    # The rest of a run's sink (``relay.run.RunSink``) passed on by name, not by ``__getattr__``: a class with
    # ``__getattr__`` makes every attribute read of its instances take the slow path, ``self``'s in ``fit`` and
    # ``write`` too, which run for every engine read of a limited stream.
    def attach(self, channel: Any) -> list[tuple[bytes, bytes]]:
        return self._sink.attach(channel)

    def detach(self) -> None:
        self._sink.detach()

    def finish(self, ending: Any) -> Awaitable[int]:
        return self._sink.finish(ending)

    def refused(self, error: Failure) -> Awaitable[None]:
        return self._sink.refused(error)

    def delivered(self) -> Awaitable[list[bytes] | None]:
        return self._sink.delivered()

    def fit(self, block: bytes) -> bytes | Awaitable[bytes]:
        """The events of ``block`` (one engine read) the budgets cover, counted: ``block`` itself when the
        reservation covers it (no coroutine of ours: this runs for every engine read of a limited stream);
        beyond it, the limiter is asked (awaitable). Raises ``BudgetSpent`` when none is covered."""
        metered = self._metered
        reservation = metered.reservation
        events = block.count(EVENT_END)
        self._fitted = True
        if reservation.used + events <= reservation.granted or metered.covered:
            reservation.used += events
            return block
        return self._fit_beyond(block, events)

    async def _fit_beyond(self, block: bytes, events: int) -> bytes:
        metered = self._metered
        if await metered.consume(events):
            return block
        fits = max(0, min(events, metered.reservation.left))  # the events of this read the budget still covers
        if not fits:
            self._fitted = False
            raise _spent()
        metered.reservation.used += fits
        cut = 0
        for _ in range(fits):
            cut = block.index(EVENT_END, cut) + len(EVENT_END)
        self._spent = True
        return block[:cut]

    def write(self, block: bytes) -> Awaitable[None]:
        """Awaited like a sink's ``write``: the sink's own ``write`` returned when the block was counted
        (by :meth:`fit`, or here within the reservation); beyond it, the limiter is asked."""
        if self._fitted:
            self._fitted = False
            if self._spent:
                return self._write_last(block)
            return self._sink.write(block) if block else _NOTHING  # (the tracker may keep a read back)
        metered = self._metered
        reservation = metered.reservation
        events = block.count(EVENT_END)
        if reservation.used + events <= reservation.granted or metered.covered:
            reservation.used += events
            return self._sink.write(block)
        return self._write_beyond(block, events)

    async def _write_last(self, block: bytes) -> None:
        if block:
            await self._sink.write(block)
        raise _spent()

    async def _write_beyond(self, block: bytes, events: int) -> None:
        metered = self._metered
        if await metered.consume(events):
            await self._sink.write(block)
            return
        fits = max(0, min(events, metered.reservation.left))  # the events of this read the budget still covers
        if fits:
            metered.reservation.used += fits
            cut = 0
            for _ in range(fits):
                cut = block.index(EVENT_END, cut) + len(EVENT_END)
            await self._sink.write(block[:cut])
        raise _spent()


class _Nothing:
    """An awaitable that is done at once (a write of nothing)."""

    def __await__(self):
        return iter(())


_NOTHING = _Nothing()


def _spent() -> BudgetSpent:
    return BudgetSpent("the token budget of this API key ran out during the generation", code="insufficient_quota")


class MeteredEngines:
    """The engine client as the code API and features use it: ``post_json`` admitted, queued, settled here.

    A generating call (``queueing.QUEUED_PATHS``) waits its turn in flow control like the relays'
    (its band, its tenant's share, a free engine slot) and is sent to the grant's engine with its
    band's priority; without this, ``/generate``, ``/chat`` and a feature's engine calls went
    straight to the engines past every queued request, whatever their key's band.
    """

    def __init__(self, engines: Any, meter: Meter | None, flow: FlowControl | None = None) -> None:
        self._engines = engines
        self._meter = meter
        self._flow = flow

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engines, name)

    async def post_json(self, path: str, payload: dict, *, request: RequestContext | None = None,
                        **kwargs: Any) -> dict:
        meter = self._meter
        queues = self._flow is not None and request is not None and path in QUEUED_PATHS
        if meter is None or request is None or path not in INFERENCE_PATHS:
            return await self._send(path, payload, request, queues, kwargs)
        route = kwargs.get("route")
        metered = await meter.admit(request, path, None, payload=payload, queues=queues,
                                    routed_model=route.model if route is not None else None)
        if metered is None:
            return await self._send(path, payload, request, queues, kwargs)
        if metered.lowered is not None:
            payload = dict(payload)
            metered.lowered_payload(payload)
        try:
            answer = await self._send(path, payload, request, queues, kwargs)
        except BaseException as exc:
            await metered.settle(answered=False, ran=reached_engine(exc))
            raise
        await metered.settle(answer.get("usage") if isinstance(answer, dict) else None,
                             model=answer.get("model") if isinstance(answer, dict) else payload.get("model"))
        return answer

    async def _send(self, path: str, payload: dict, request: RequestContext | None, queues: bool,
                    kwargs: dict[str, Any]) -> dict:
        if not queues:
            return await self._engines.post_json(path, payload, request=request, **kwargs)
        route = kwargs.pop("route", None)
        if route is None:  # (what the engine client would read from the body: the demand needs it first)
            model = payload.get("model")
            route = openai_hints(payload, model=model if isinstance(model, str) else None,
                                 with_prefix=self._engines.router.uses_prefix)
        started = time.perf_counter()
        body = orjson.dumps(payload)
        sent = await queueing.acquire(self._flow, request, path, body, route)
        request.engine_wait += time.perf_counter() - started  # (the wait is engine time, as on the relays)
        if sent is not body:  # (it named a band in "priority": the gateway's word, not vLLM's)
            payload = orjson.loads(sent)
        answer = None
        try:
            answer = await self._engines.post_json(path, payload, request=request, route=route, **kwargs)
            return answer
        finally:
            queueing.release(request, answer.get("usage") if isinstance(answer, dict) else None)


def metered(core: Any) -> MeteredEngines:
    """``core``'s engine client as the code API uses it: limited, queued and recorded."""
    return MeteredEngines(core.engines, core.relay.meter, core.relay.flow)


# --- the calls the runner and the relays make -------------------------------------------------------
async def admit_call(request: RequestContext, meter: Meter | None, path: str, body: bytes | None, *,
                     stream: bool, routed_model: str | None = None) -> bytes | None:
    """Admit a relayed call (raises a refusal); the body to send (its output limit maybe lowered).
    ``routed_model``: the model its route sends it to (``Meter.admit``)."""
    admitted = request.get(Metered)
    if meter is None or (admitted is not None and not admitted.settled):  # (admitted by the protocol itself)
        return body
    metered = await meter.admit(request, path, body, stream=stream, queues=True,  # (the relays acquire next)
                                routed_model=routed_model)
    return metered.body(body) if metered is not None else body


def metered_sink(sink: Any, request: RequestContext) -> Any:
    """``sink``, counting the stream against the request's reservation when it has one."""
    metered = request.get(Metered)
    if metered is None or metered.reservation is None or metered.reservation.backend == "none":
        return sink
    return MeteredSink(sink, metered)


async def settle_call(request: RequestContext, usage: object = None, *, model: object = None,
                      answered: bool = True, estimated: object = None, failure: BaseException | None = None) -> None:
    """Settle the request's call (nothing when it was never admitted, or settled already).

    ``answered`` False: ``failure`` (when known) and whether it left the queue without a grant
    say whether an engine received it (``relay.refusals.reached_engine``).
    """
    metered = request.get(Metered)
    if metered is not None:
        ran = answered or (reached_engine(failure) and not left_queue(request))
        await metered.settle(usage, model=model, answered=answered, estimated=estimated, ran=ran)


def visible_cards(meter: Meter | None, principal: Any, cards: list[dict]) -> list[dict]:
    """The model cards of ``/v1/models`` that ``principal``'s key may use (all, for a key without a list)."""
    if meter is None or getattr(principal, "models", None) is None:
        return cards
    return [card for card in cards if meter.may_see(principal, card.get("id"))]


def _parsed(body: bytes | None) -> dict | None:
    if not body:
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def _output_capped(est: Estimate, payload: dict | None) -> bool:
    """Whether the engine cannot generate more than ``est`` reserved: the body caps the output (vLLM stops at
    ``max_tokens``: reasoning, tool calls and ``ignore_eos`` included) for one choice (OpenAI's ``n``; the
    other protocols make one). The prompt's share is a bound already (``tenancy.limits.estimate``)."""
    if est.output_field is None or payload is None:
        return False
    choices = payload.get("n")
    return choices is None or choices == 1


def _anthropic(request: RequestContext) -> bool:
    try:
        return request.error_shape.name == "anthropic"
    except (AttributeError, TypeError, KeyError):
        return False


def _rate_headers(request: RequestContext, reservation: Reservation) -> None:
    headers = anthropic_headers(reservation.rate) if _anthropic(request) else openai_headers(reservation.rate)
    if headers:  # (already encoded: added in one step, not one tuple per header)
        request.response_headers = (*request.response_headers, *headers)


def _refused(request: RequestContext, refusal: RateLimited) -> LimitReached:
    for name, value in refusal_headers(refusal, anthropic=_anthropic(request)):
        if name != b"retry-after":  # (the failure's retry_after says it)
            request.add_response_header(name.decode(), value.decode())
    retry = math.ceil(refusal.retry_after) if refusal.retry_after is not None else None
    code = "insufficient_quota" if refusal.reason == "budget" else "rate_limit_exceeded"
    return LimitReached(str(refusal), code=code, retry_after=max(1, retry) if retry is not None else None)
