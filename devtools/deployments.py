"""LiteLLM deployments whose upstream is a mock (`devtools.mock_provider` or
`devtools.upstream`), and how to tell which path served an SDK call."""

from __future__ import annotations

from typing import Any

PROVIDERS = ("openai", "anthropic", "bedrock")
BEDROCK_MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
# Embedding deployments of each kind the fast path serves (LiteLLM model names).
EMBEDDING_MODELS = {
    "openai": "openai/text-embedding-3-small",
    "openai-compatible": "openai/my-embed",
    "titan-v1": "bedrock/amazon.titan-embed-text-v1",
    "titan-v2": "bedrock/amazon.titan-embed-text-v2:0",
    "cohere": "bedrock/cohere.embed-english-v3",
    "cohere-v4": "bedrock/us.cohere.embed-v4:0",
}


def deployment_kwargs(provider: str, url: str) -> dict[str, Any]:
    """LiteLLM `litellm_params` of one deployment of `provider` whose upstream is `url`."""
    if provider == "openai":
        return {"model": "openai/gpt-4o-mini", "api_key": "sk-upstream", "api_base": url}
    if provider == "anthropic":
        return {"model": "anthropic/claude-sonnet-4-5", "api_key": "sk-ant", "api_base": url}
    if provider == "bedrock":
        return {
            "model": f"bedrock/converse/{BEDROCK_MODEL_ID}",
            "aws_access_key_id": "AKIDTEST",
            "aws_secret_access_key": "secret-test-key",
            "aws_region_name": "us-east-1",
            "aws_bedrock_runtime_endpoint": url,
        }
    raise ValueError(provider)


def bedrock_invoke_kwargs(url: str, model: str = BEDROCK_MODEL_ID) -> dict[str, Any]:
    """LiteLLM `litellm_params` of Claude on Bedrock Invoke (`/v1/messages`' Bedrock route)."""
    return {
        "model": f"bedrock/{model}",
        "api_base": url,
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "secret",
        "aws_region_name": "us-east-1",
    }


def embedding_deployment_kwargs(kind: str, url: str) -> dict[str, Any]:
    """LiteLLM `litellm_params` of one embedding deployment (`EMBEDDING_MODELS`) at `url`."""
    model = EMBEDDING_MODELS[kind]
    if model.startswith("openai/"):
        return {"model": model, "api_key": "sk-upstream", "api_base": f"{url}/v1"}
    return {**deployment_kwargs("bedrock", url), "model": model}


def twin_models(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """`plain-<name>` and `rust-<name>`: one deployment, without and with `rust: true`."""
    return [
        {"model_name": f"plain-{name}", "litellm_params": dict(params)},
        {"model_name": f"rust-{name}", "litellm_params": {**params, "rust": True}},
    ]


def served_by_rust(response: Any) -> bool:
    """Whether the fast path answered an SDK call: both of its headers on the response."""
    headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers") or {}
    return headers.get("x-litellm-rust") == "true" and "x-litellm-fastpath" in headers
