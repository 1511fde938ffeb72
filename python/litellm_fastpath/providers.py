"""The providers the fast path serves, one table entry each (`PROVIDERS`): every question the
Python layer asks of a provider is answered here, and nothing else names one.

Rust has the same table (`src/providers/registry.rs`). A new chat provider is its Rust folder and
registry entry, its entry here, and its canned answers for the tests.

LiteLLM-free at import (routing reads this table, and must not load LiteLLM); its functions
import it when they run.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from litellm_fastpath import compat, errors
from litellm_fastpath.declines import Decline

# A deployment's settings: (upstream model id, `_native.Deployment` keyword arguments), resolved
# with LiteLLM's precedence, or why the fast path cannot serve the deployment.
Resolved = tuple[str, dict[str, Any]] | Decline
# A route's settings for LiteLLM's model name (without the provider) and the call's kwargs.
Settings = Callable[[str, Mapping[str, Any]], Resolved]


@dataclass(frozen=True, slots=True)
class Served:
    """A route the provider serves: its deployments' settings, and how LiteLLM's handler for
    the route reports faults."""

    settings: Settings
    errors: errors.ProviderErrors


@dataclass(frozen=True, slots=True)
class Chat(Served):
    """`litellm.acompletion` (and `completion`) to this provider."""

    # `stream=True` is served.
    streams: bool
    # Whether LiteLLM sends a `json_schema` response format to this model in the form Rust
    # builds for the provider (None: sent as given, whatever the model).
    json_schema: Callable[[str], bool] | None = None
    # A streamed answer's usage (the provider's, and the answer) as LiteLLM's stream parser
    # converts it (None: as the provider sent it).
    stream_usage: Callable[[dict[str, Any], dict[str, Any]], Any] | None = None


@dataclass(frozen=True, slots=True)
class Embeddings(Served):
    """`litellm.aembedding` (and `embedding`): which models and inputs is decided in Rust."""

    # LiteLLM's `EmbeddingResponse` of Rust's parsed answer (the answer, the provider's headers,
    # the model, the input), and the provider headers LiteLLM passes on with it.
    response: Callable[[dict[str, Any], Mapping[str, str], str, Any], tuple[Any, dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Messages(Served):
    """`/v1/messages` (`litellm.anthropic_messages`) to this provider."""

    # LiteLLM merges a caller's `anthropic-beta` with its own and finalizes the headers; without
    # it a caller's beta declines (LiteLLM maps those per model).
    merges_betas: bool = False
    # The request's `model` and `stream` are body fields (LiteLLM's logging records them).
    body_names_model: bool = False
    # The lane serves these answers only once LiteLLM's cost of plain ones (no prompt cache) is
    # checked to be the lane's (LiteLLM prices them by rules of its own).
    plain_costs_checked: bool = False


@dataclass(frozen=True, slots=True)
class Transcription(Served):
    """`litellm.atranscription` (and `transcription`)."""

    # Audio formats the provider takes (LiteLLM's names, from the file's extension), and
    # LiteLLM's words refusing a file of another (before any I/O, as a 400).
    audio_formats: frozenset[str]
    unsupported_audio: str


@dataclass(frozen=True, slots=True)
class Provider:
    """What the fast path serves of one provider, and how LiteLLM's handlers treat it."""

    # LiteLLM's name: the model prefix, `custom_llm_provider`, the Rust registry's name.
    name: str
    chat: Chat
    # LiteLLM's handlers log the URL they post to as `api_base` (else the configured base).
    logs_url: bool
    # The other routes it serves (None: LiteLLM's path serves them).
    embeddings: Embeddings | None = None
    messages: Messages | None = None
    transcription: Transcription | None = None
    # LiteLLM prices an answer's cached prompt tokens (`prompt_tokens_details.cached_tokens`) at
    # the model's cache-read price; the lane may price them once checked against LiteLLM's cost.
    cached_prompt_price: bool = False
    # The same for the prompt cache's reads and writes in `/v1/messages` answers.
    prompt_cache_prices: bool = False


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


# -- OpenAI ----------------------------------------------------------------------------------

# LiteLLM rewrites max_tokens and system messages for these OpenAI families.
_OPENAI_REWRITTEN_MODELS = ("o1", "o3", "o4", "gpt-5")


def _openai_endpoint_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    """API key and base of an OpenAI-compatible deployment, with LiteLLM's precedence."""
    api_key = kwargs.get("api_key") or _env("OPENAI_API_KEY")
    if not api_key:
        return Decline("credentials", "no OpenAI API key")
    api_base = (
        kwargs.get("api_base")
        or kwargs.get("base_url")
        or _env("OPENAI_BASE_URL", "OPENAI_API_BASE")
    )
    return model, {"api_key": api_key, "api_base": api_base}


def _openai_chat_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    resolved = _openai_endpoint_settings(model, kwargs)
    if not isinstance(resolved, Decline) and model.startswith(_OPENAI_REWRITTEN_MODELS):
        # LiteLLM rewrites params and system messages for these families' chat calls.
        return Decline("model_specific", f"OpenAI model family of {model!r}")
    return resolved


def _openai_embedding_response(
    body: dict[str, Any], provider_headers: Mapping[str, str], model: str, input: Any
) -> tuple[Any, dict[str, str]]:
    """LiteLLM's OpenAI handler: the SDK's dump of the answer, converted by LiteLLM."""
    import litellm

    response = compat.convert_to_model_response_object(
        response_object=body,
        model_response_object=litellm.EmbeddingResponse(),
        response_type="embedding",
        _response_headers=dict(provider_headers),
    )
    return response, compat.process_response_headers(dict(provider_headers))


# -- Anthropic -------------------------------------------------------------------------------


@functools.cache
def _anthropic_default_max_tokens(model: str) -> int | None:
    """LiteLLM sends the model map's output limit when the caller sets no max_tokens."""
    value = compat.AnthropicConfig.get_max_tokens_for_model(model)
    return int(value) if isinstance(value, (int, float)) else None


def _anthropic_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    api_key = kwargs.get("api_key") or _env("ANTHROPIC_API_KEY")
    if not api_key:
        return Decline("credentials", "no Anthropic API key")
    api_base = kwargs.get("api_base") or _env("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL")
    return model, {"api_key": api_key, "api_base": api_base}


def _anthropic_chat_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    resolved = _anthropic_settings(model, kwargs)
    if not isinstance(resolved, Decline):
        resolved[1]["default_max_tokens"] = _anthropic_default_max_tokens(model)
    return resolved


def _anthropic_json_schema(model: str) -> bool:
    """Rust builds Anthropic's `output_format`, which LiteLLM sends to models with native
    structured output."""
    import litellm

    return bool(
        litellm.utils.supports_native_structured_output(
            model=model, custom_llm_provider="anthropic"
        )
    )


def _anthropic_stream_usage(usage: dict[str, Any], answer: dict[str, Any]) -> Any:
    reasoning = answer["choices"][0]["delta"].get("reasoning_content") or None
    return compat.AnthropicConfig().calculate_usage(usage_object=usage, reasoning_content=reasoning)


# -- Bedrock ---------------------------------------------------------------------------------

# LiteLLM's last resort when neither the call nor the environment names a region.
_BEDROCK_DEFAULT_REGION = "us-west-2"


@functools.cache
def _is_bedrock_converse(model: str) -> bool:
    """Whether LiteLLM sends `bedrock/<model>` to Converse (rather than Invoke)."""
    return bool(compat.BedrockModelInfo.get_bedrock_route(model) == "converse")


def _aws_settings(kwargs: Mapping[str, Any]) -> dict[str, Any] | Decline:
    """Bedrock credentials and region, with LiteLLM's precedence."""
    # A Bedrock API key wins over AWS credentials (LiteLLM's `bedrock_bearer_token`).
    api_key = kwargs.get("api_key")
    bearer_token = (api_key if api_key is not None else _env("AWS_BEARER_TOKEN_BEDROCK")) or None
    access_key = kwargs.get("aws_access_key_id") or _env("AWS_ACCESS_KEY_ID")
    secret_key = kwargs.get("aws_secret_access_key") or _env("AWS_SECRET_ACCESS_KEY")
    if bearer_token is None and not (access_key and secret_key):
        # Instance profiles, SSO, web identity: botocore's chain stays in Python.
        return Decline("credentials", "no static AWS credentials")
    return {
        "api_key": bearer_token,
        "aws_access_key_id": access_key,
        "aws_secret_access_key": secret_key,
        "aws_session_token": kwargs.get("aws_session_token") or _env("AWS_SESSION_TOKEN"),
        "aws_region": kwargs.get("aws_region_name")
        or _env("AWS_REGION_NAME", "AWS_REGION")
        or _BEDROCK_DEFAULT_REGION,
    }


def _bedrock_converse_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    if model.startswith("converse/"):
        model = model.removeprefix("converse/")
    elif not _is_bedrock_converse(model):
        return Decline("bedrock_route", "not a Converse model")
    if "/" in model:
        # Region segments, ARNs and inference profiles: LiteLLM re-derives region and id.
        return Decline("bedrock_route", "model id with a path segment")
    settings = _aws_settings(kwargs)
    if isinstance(settings, Decline):
        return settings
    settings["aws_endpoint"] = (
        kwargs.get("aws_bedrock_runtime_endpoint")
        or _env("AWS_BEDROCK_RUNTIME_ENDPOINT")
        or kwargs.get("api_base")
    )
    return model, settings


def _bedrock_invoke_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    """Settings of LiteLLM's embedding and Invoke handlers, which put `api_base` first, unlike
    its Converse handler. (Which embedding models and ids are served is decided in Rust.)"""
    settings = _aws_settings(kwargs)
    if isinstance(settings, Decline):
        return settings
    settings["aws_endpoint"] = (
        kwargs.get("api_base")
        or kwargs.get("aws_bedrock_runtime_endpoint")
        or _env("AWS_BEDROCK_RUNTIME_ENDPOINT")
    )
    return model, settings


def _bedrock_messages_settings(model: str, kwargs: Mapping[str, Any]) -> Resolved:
    model = model.removeprefix("invoke/")
    if "claude" not in model or "/" in model:
        # Converse, Mantle, Claude Platform, ARNs: other LiteLLM routes.
        return Decline("bedrock_route", "not a Bedrock Invoke Claude model")
    return _bedrock_invoke_settings(model, kwargs)


def _bedrock_json_schema(model: str) -> bool:
    """Rust builds LiteLLM's forced `json_tool_call`, which LiteLLM sends to models without
    native structured output that accept a forced tool choice."""
    import litellm

    native = litellm.utils.supports_native_structured_output(
        model=model, custom_llm_provider="bedrock"
    )
    forced = litellm.utils.supports_tool_choice(model=model, custom_llm_provider="bedrock")
    return bool(not native and forced)


def _bedrock_stream_usage(usage: dict[str, Any], answer: dict[str, Any]) -> Any:
    return compat.AmazonConverseConfig().transform_usage(usage)


def _bedrock_embedding_response(
    body: dict[str, Any], provider_headers: Mapping[str, str], model: str, input: Any
) -> tuple[Any, dict[str, str]]:
    import litellm

    data = body["data"]
    if model.startswith("amazon.titan"):
        # LiteLLM's Titan transforms build `Embedding` objects; Cohere's keeps dicts.
        data = [compat.Embedding(**item) for item in data]
    usage = body["usage"]
    if usage is None:
        # No billed units in the answer: LiteLLM counts the input's tokens itself.
        texts = [input] if isinstance(input, str) else list(input)
        tokens = sum(len(compat.get_encoding().encode(text)) for text in texts)
        usage = {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}
    response = litellm.EmbeddingResponse(
        model=body["model"], data=data, usage=litellm.Usage(**usage)
    )
    # LiteLLM's Bedrock embedding handler passes no provider headers on.
    return response, {}


# -- the table -------------------------------------------------------------------------------

PROVIDERS: dict[str, Provider] = {
    provider.name: provider
    for provider in (
        Provider(
            name="openai",
            chat=Chat(settings=_openai_chat_settings, errors=errors.OpenAIErrors(), streams=True),
            logs_url=False,
            embeddings=Embeddings(
                settings=_openai_endpoint_settings,
                errors=errors.OpenAIEmbeddingErrors(),
                response=_openai_embedding_response,
            ),
            cached_prompt_price=True,
        ),
        Provider(
            name="anthropic",
            chat=Chat(
                settings=_anthropic_chat_settings,
                errors=errors.AnthropicErrors(),
                streams=True,
                json_schema=_anthropic_json_schema,
                stream_usage=_anthropic_stream_usage,
            ),
            logs_url=True,
            messages=Messages(
                settings=_anthropic_settings,
                errors=errors.AnthropicErrors(),
                merges_betas=True,
                body_names_model=True,
            ),
            prompt_cache_prices=True,
        ),
        Provider(
            name="bedrock",
            chat=Chat(
                settings=_bedrock_converse_settings,
                errors=errors.BedrockErrors(),
                streams=True,
                json_schema=_bedrock_json_schema,
                stream_usage=_bedrock_stream_usage,
            ),
            logs_url=True,
            embeddings=Embeddings(
                settings=_bedrock_invoke_settings,
                errors=errors.BedrockEmbeddingErrors(),
                response=_bedrock_embedding_response,
            ),
            messages=Messages(
                settings=_bedrock_messages_settings,
                errors=errors.BedrockMessagesErrors(),
                plain_costs_checked=True,
            ),
            # LiteLLM transcribes with Converse.
            transcription=Transcription(
                settings=_bedrock_converse_settings,
                errors=errors.BedrockTranscriptionErrors(),
                audio_formats=frozenset({"wav", "mp3", "flac", "ogg"}),
                unsupported_audio="Unsupported Bedrock audio format for file {filename!r}",
            ),
        ),
    )
}
