"""LiteLLM's prices, as the lane may apply them: per token, when LiteLLM's cost of an answer is
exactly linear in its token counts, checked against LiteLLM's own cost (its total, and the split
the proxy's headers show) on sample usages; None where the lane leaves the cost to the proxy.
"""

from __future__ import annotations

import json
from typing import Any

import litellm

from litellm_fastpath import _native, compat
from litellm_fastpath.providers import PROVIDERS


def lane_pricing(provider: str, model: str) -> _native.LanePricing | None:
    """LiteLLM's per-token prices, when its cost is exactly linear in the token counts: input,
    output, and where the provider table says LiteLLM prices them, cached prompt tokens and the
    prompt cache's reads and writes for `/v1/messages` (None: answers with those go through the
    proxy). None when the proxy works out the cost of every answer."""
    try:
        info = litellm.get_model_info(model=model, custom_llm_provider=provider)
        prices = (float(info["input_cost_per_token"]), float(info["output_cost_per_token"]))
        reasoning = info.get("output_cost_per_reasoning_token")
        cache_read = info.get("cache_read_input_token_cost")
    except Exception:  # unknown model or price: the proxy serves it
        return None
    if reasoning is not None and float(reasoning) != prices[1]:
        return None  # the lane prices reasoning tokens as output (LiteLLM's default)
    # Up to a million prompt tokens: tiered prices (`*_above_200k_tokens`) show up here.
    for prompt, completion in ((11, 7), (1000, 1), (1, 1000), (120_000, 30_000), (1_000_000, 1)):
        expected = litellm.cost_per_token(
            model=model,
            custom_llm_provider=provider,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
        if expected != (prompt * prices[0], completion * prices[1]):
            return None
    entry = PROVIDERS[provider]
    return _native.LanePricing(
        input=prices[0],
        output=prices[1],
        cache_read=(
            _cache_read_price(provider, model, prices, cache_read)
            if entry.cached_prompt_price
            else None
        ),
        anthropic_cache=(
            _prompt_cache_prices(provider, model, prices) if entry.prompt_cache_prices else None
        ),
    )


def _cache_read_price(
    provider: str, model: str, prices: tuple[float, float], rate: Any
) -> float | None:
    """The price per cached prompt token, when LiteLLM's cost of an answer with cached tokens is
    exactly the lane's (`Usage::cost`): the rest of the prompt at the input price, plus the
    cached tokens at theirs."""
    if rate is None:
        return None
    rate = float(rate)
    for prompt, cached, completion in ((1919, 1024, 10), (2048, 2048, 1), (150_000, 99_968, 77)):
        usage = litellm.Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details={"cached_tokens": cached, "audio_tokens": 0},
        )
        try:
            expected = litellm.cost_per_token(
                model=model, custom_llm_provider=provider, usage_object=usage
            )
        except Exception:
            return None
        ours = (float(prompt - cached) * prices[0] + float(cached) * rate, completion * prices[1])
        if expected != ours:
            return None
    return rate


# Anthropic usages the lane's cost of cache reads and writes is checked on: reads, writes of
# either lifetime or both, and prompts near the top of the untiered range.
_CACHE_USAGES = (
    (1200, 35, 300, 200, 0),
    (3, 1000, 0, 500, 200),
    (17, 4, 4321, 0, 777),
    (120_000, 512, 59_000, 300, 20_000),
    (1, 1, 1, 1, 1),
)


def _prompt_cache_prices(
    provider: str, model: str, prices: tuple[float, float]
) -> _native.LaneCachePrices | None:
    """Anthropic's prices per cache read, 5-minute and 1-hour write, when LiteLLM's cost of an
    answer with them (its total and the proxy's header split) is exactly the lane's, as Rust
    works it out (`MessagesUsage::cost`); None: such answers go through the proxy."""
    names = (
        "cache_read_input_token_cost",
        "cache_creation_input_token_cost",
        "cache_creation_input_token_cost_above_1hr",
    )
    try:
        info = litellm.get_model_info(model=model, custom_llm_provider=provider)
        rates = _native.LaneCachePrices(
            read=float(info[names[0]]),
            write_5m=float(info[names[1]]),
            write_1h=float(info[names[2]]),
        )
        pricing = _native.LanePricing(input=prices[0], output=prices[1], anthropic_cache=rates)
        for text, output, read, write_5m, write_1h in _CACHE_USAGES:
            usage = {
                "input_tokens": text,
                "cache_creation_input_tokens": write_5m + write_1h,
                "cache_read_input_tokens": read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": write_5m,
                    "ephemeral_1h_input_tokens": write_1h,
                },
                "output_tokens": output,
                "service_tier": "standard",
            }
            if not _same_cost(provider, model, usage, pricing):
                return None
    except Exception:  # a price LiteLLM does not have, or cannot work out: the proxy's
        return None
    return rates


# Token counts (input, output) the lane's cost of plain `/v1/messages` answers is checked on.
_PLAIN_USAGES = ((12, 7), (1000, 1), (1, 1000), (120_000, 30_000), (3, 0))


def plain_messages_priced(provider: str, model: str, pricing: _native.LanePricing) -> bool:
    """Whether LiteLLM's cost of a `/v1/messages` answer (its total and the proxy's header
    split) is exactly the lane's for answers without the prompt cache (answers with it go
    through the proxy)."""
    for text, output in _PLAIN_USAGES:
        usage = {"input_tokens": text, "output_tokens": output}
        try:
            plain = _native.LanePricing(input=pricing.input, output=pricing.output)
            if not _same_cost(provider, model, usage, plain):
                return False
        except Exception:  # a price LiteLLM does not have, or cannot work out: the proxy's
            return False
    return True


def _same_cost(
    provider: str, model: str, usage: dict[str, Any], pricing: _native.LanePricing
) -> bool:
    """Whether the lane's cost of a `/v1/messages` answer with this usage, at these prices, is
    LiteLLM's (its total, and the split the proxy's headers show)."""
    ours = _native.lane_messages_cost(json.dumps(usage), pricing)
    return ours is not None and _split(ours) == _litellm_messages_cost(provider, model, usage)


def _split(cost: _native.LaneCost) -> tuple[float, ...]:
    """The lane's cost as the proxy's headers split it: total, input, output, cache read and
    cache creation."""
    return (cost.total, cost.input, cost.output, cost.cache_read, cost.cache_creation)


def _litellm_messages_cost(provider: str, model: str, usage: dict[str, Any]) -> tuple[float, ...]:
    """LiteLLM's cost of an Anthropic answer with this usage, as its logging works it out (the
    answer as a `ModelResponse`, then its cost), split as the proxy's headers split it."""
    import httpx

    answer = {
        "id": "msg_check",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    response = litellm.AnthropicConfig().transform_parsed_response(
        completion_response=answer,
        raw_response=httpx.Response(200, headers={}),
        model_response=litellm.ModelResponse(),
    )
    total = litellm.completion_cost(
        completion_response=response, model=model, custom_llm_provider=provider
    )
    prompt, output = litellm.cost_per_token(
        model=model, custom_llm_provider=provider, usage_object=response.usage
    )
    parts = compat.get_token_type_cost_breakdown(
        model=model, custom_llm_provider=provider, usage=response.usage
    )
    read, creation = parts.cache_read_cost or 0.0, parts.cache_creation_cost or 0.0
    return (total, prompt - read - creation, output, read, creation)
