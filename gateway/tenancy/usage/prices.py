"""The optional price table (``USAGE_PRICES``): USD per 1M tokens, per model.

``{"Qwen/Qwen3-8B": {"input": 0.20, "cached_input": 0.05, "output": 0.60}}``. Cached prompt
tokens cost ``cached_input`` (default: ``input``), the rest of the prompt ``input``, the
completion ``output``; reasoning tokens are part of the completion (as OpenAI and vLLM count
them) and cost ``output``. A model not in the table costs 0.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

PER = 1_000_000


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(0.0, ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(0.0, ge=0)


PriceTable = dict[str, Price]
_TABLE = TypeAdapter(PriceTable)


def parse_prices(text: str) -> PriceTable:
    """The table from its JSON (``""``: none); a ValueError names the model and field at fault."""
    return _TABLE.validate_json(text) if text.strip() else {}


def cost(prices: PriceTable, model: str, *, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
    price = prices.get(model)
    if price is None:
        return 0.0
    cached_price = price.input if price.cached_input is None else price.cached_input
    cached = min(cached_tokens, prompt_tokens)
    return ((prompt_tokens - cached) * price.input + cached * cached_price + completion_tokens * price.output) / PER
