"""`python -m litellm_fastpath explain config.yaml`: which path each model's routes take under a
proxy config (the lane, Rust or LiteLLM's Python), and every reason one does not take a faster
one, before the config is deployed.

The config is read as the proxy reads it (`os.environ/NAME` references are looked up by name
and never printed), the router built from it as the proxy builds it, and each answer comes from
the decisions the running proxy makes: the fast path's routing and Rust admission
(`routing`, `integration`, `messages`) for a plain request of each route, the lane's
proxy-wide settings check and its group table (`lane.groups`). What depends on the request
itself (its params, its key, a cooldown) is the running proxy's to decide; docs/operations.md
lists those reasons.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ACCELERATOR = "litellm_fastpath.proxy.accelerator"
LANE, RUST, PYTHON = "lane", "rust", "python"
_ENV_PREFIX = "os.environ/"
_HI = [{"role": "user", "content": "hi"}]


@dataclass
class RoutePath:
    """One route of one model: the path a plain request takes, and why not a faster one."""

    route: str
    path: str
    reasons: list[str] = field(default_factory=list)


@dataclass
class ModelPaths:
    model_name: str
    provider: str
    rust: bool
    routes: list[RoutePath]

    @property
    def fast_path_unreachable(self) -> bool:
        """Marked `rust: true`, yet no route can take the fast path."""
        return self.rust and all(r.path == PYTHON for r in self.routes)


@dataclass
class Explained:
    accelerator: bool
    lane: bool
    lane_off: list[str]
    models: list[ModelPaths]

    def failing(self) -> list[str]:
        return [m.model_name for m in self.models if m.fast_path_unreachable]


def _resolved(value: Any) -> Any:
    """`os.environ/NAME` references resolved by name, as the proxy resolves them; an unset one
    stays the reference (the decisions here only ask whether a value is set)."""
    if isinstance(value, str) and value.startswith(_ENV_PREFIX):
        return os.environ.get(value[len(_ENV_PREFIX) :], value)
    if isinstance(value, Mapping):
        return {k: _resolved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    return value


def load(path: str) -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped,unused-ignore]  # LiteLLM's dependency

    with open(path) as file:
        config = yaml.safe_load(file) or {}
    if not isinstance(config, Mapping):
        raise ValueError(f"{path}: not a mapping")
    return dict(config)


def _router(config: Mapping[str, Any]) -> Any:
    """The router the proxy builds from the config (its model list and router settings; the
    fallbacks under `litellm_settings`, as the proxy hands them to the router)."""
    import litellm

    settings = config.get("litellm_settings") or {}
    kwargs = dict(_resolved(config.get("router_settings") or {}))
    for name in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
        if settings.get(name) and name not in kwargs:
            kwargs[name] = settings[name]
    model_list = _resolved(config.get("model_list") or [])
    return litellm.Router(model_list=model_list, **kwargs)


def _callbacks(settings: Mapping[str, Any], config_path: str) -> list[Any]:
    """The callbacks the proxy would install: LiteLLM's named integrations as names, a custom
    callback (`module.instance`) loaded as the proxy loads it."""
    configured = settings.get("callbacks") or []
    if isinstance(configured, str):
        configured = [configured]
    loaded: list[Any] = []
    for name in configured:
        if name == ACCELERATOR or not isinstance(name, str) or "." not in name:
            loaded.append(name)
            continue
        from litellm_fastpath import compat

        loaded.append(compat.load_callback(name, config_path))
    return loaded


def explain(config_path: str) -> Explained:
    from litellm_fastpath import install
    from litellm_fastpath.lane import groups
    from litellm_fastpath.lane.takeover import SETTING

    install()
    config = load(config_path)
    settings = dict(config.get("litellm_settings") or {})
    general = dict(_resolved(config.get("general_settings") or {}))
    callbacks = settings.get("callbacks") or []
    accelerator = ACCELERATOR in (callbacks if isinstance(callbacks, list) else [callbacks])
    router = _router(config)

    lane_off: list[str] = []
    if not accelerator:
        lane_off.append(f"{ACCELERATOR} is not among litellm_settings.callbacks")
    if settings.get(SETTING) is not True:
        lane_off.append(f"litellm_settings.{SETTING} is not true")
    lane_off += groups.off_reasons(
        router,
        frozenset(settings) - {SETTING},
        general,
        general.get("master_key"),
        _callbacks(settings, config_path),
        # The proxy checks the license itself; a config with one is judged as premium.
        premium=bool(os.environ.get("LITELLM_LICENSE") or general.get("litellm_license")),
    )
    lane_groups = groups.group_reasons(router) if not lane_off else {}
    models = [
        _model_paths(deployment, accelerator, lane_off, lane_groups)
        for deployment in router.model_list
    ]
    return Explained(accelerator, not lane_off, lane_off, models)


def _model_paths(
    deployment: Mapping[str, Any],
    accelerator: bool,
    lane_off: list[str],
    lane_groups: Mapping[str, Mapping[str, list[str]]],
) -> ModelPaths:
    import litellm

    params = dict(deployment.get("litellm_params") or {})
    name = deployment["model_name"]
    try:
        _model, provider, _key, _base = litellm.get_llm_provider(params["model"])
    except Exception:
        provider = "unknown"
    rust = params.get("rust") is True
    routes = []
    for route, decide in _routes(params, deployment).items():
        if not rust:
            routes.append(RoutePath(route, PYTHON, ["rust: true is not set"]))
            continue
        if not accelerator:
            routes.append(RoutePath(route, PYTHON, [f"{ACCELERATOR} is not a callback"]))
            continue
        try:
            declined = decide()
        except Exception as err:  # a malformed deployment: the proxy's path reports it
            declined = f"the fast path cannot read the deployment ({type(err).__name__})"
        if declined is not None:
            routes.append(RoutePath(route, PYTHON, [declined]))
        elif route in _LANE_ROUTES:
            not_lane = list(lane_off) or lane_groups.get(name, {}).get(route, [])
            path = RUST if not_lane else LANE
            routes.append(RoutePath(route, path, ["lane: " + r for r in not_lane]))
        else:
            routes.append(RoutePath(route, RUST, [f"lane: the lane does not serve {route}"]))
    return ModelPaths(name, provider, rust, routes)


_LANE_ROUTES = ("chat", "chat stream", "messages")


def _routes(params: Mapping[str, Any], deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The routes a model of this mode serves, each with the fast path's decision on a plain
    request of it: None (Rust takes it) or the decline reason."""
    mode = (deployment.get("model_info") or {}).get("mode") or _mode(params.get("model"))
    call = {k: v for k, v in params.items() if k != "rust"}
    if mode == "embedding":
        return {"embeddings": lambda: _decide_embedding(call)}
    if mode == "audio_transcription":
        return {"transcription": lambda: _decide_transcription(call)}
    return {
        "chat": lambda: _decide_chat({**call, "messages": _HI}),
        "chat stream": lambda: _decide_chat({**call, "messages": _HI, "stream": True}),
        "messages": lambda: _decide_messages({**call, "messages": _HI, "max_tokens": 64}),
    }


def _mode(model: Any) -> str:
    import litellm

    try:
        return str(litellm.get_model_info(model).get("mode") or "chat")
    except Exception:
        return "chat"


def _why(decision: Any) -> str | None:
    from litellm_fastpath import _native
    from litellm_fastpath.declines import Decline

    if isinstance(decision, (Decline, _native.Declined)):
        return f"{decision.code}: {decision.detail}" if decision.detail else decision.code
    return None


def _decide_chat(kwargs: dict[str, Any]) -> str | None:
    from litellm_fastpath import integration

    route = integration.chat_decision(kwargs)
    return _why(route) or _why(integration._prepare_chat(kwargs, route))  # type: ignore[arg-type]


def _decide_embedding(kwargs: dict[str, Any]) -> str | None:
    from litellm_fastpath import integration

    route = integration.embedding_decision({**kwargs, "input": ["hi"]})
    return _why(route) or _why(integration._prepare_embedding(route))  # type: ignore[arg-type]


def _decide_transcription(kwargs: dict[str, Any]) -> str | None:
    from litellm_fastpath import integration

    audio = ("a.wav", b"RIFF0000WAVE", "audio/wav")
    return _why(integration.transcription_decision({**kwargs, "file": audio}))


def _decide_messages(kwargs: dict[str, Any]) -> str | None:
    from litellm_fastpath import messages

    route = messages.route_messages(kwargs)
    if _why(route):
        return _why(route)
    prepared = messages._prepare(route)  # type: ignore[arg-type]
    return _why(prepared)


def render(explained: Explained) -> str:
    lines = []
    proxy_wide = {"lane: " + reason for reason in explained.lane_off}
    if explained.lane:
        lines.append("lane: on")
    else:
        lines.append("lane: off")
        lines += [f"  - {reason}" for reason in explained.lane_off]
    for model in explained.models:
        if not model.rust:
            lines.append(f"{model.model_name} ({model.provider}, rust: not set): python")
            continue
        lines.append(f"{model.model_name} ({model.provider}, rust: true)")
        for route in model.routes:
            lines.append(f"  {route.route}: {route.path}")
            # The lane's proxy-wide reasons are said once, above (`--json` lists them per route).
            lines += [f"    - {r}" for r in route.reasons if r not in proxy_wide]
    failing = explained.failing()
    if failing:
        lines.append(f"rust: true but never on the fast path: {', '.join(failing)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="litellm-fastpath",
        description="Which path each model of a LiteLLM proxy config takes, and why.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("explain", help="explain a proxy config")
    command.add_argument("config", help="the proxy's config.yaml")
    command.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    explained = explain(args.config)
    if args.json:
        document = asdict(explained)
        document["failing"] = explained.failing()
        print(json.dumps(document, indent=2))
    else:
        print(render(explained))
    return 1 if explained.failing() else 0


if __name__ == "__main__":
    sys.exit(main())
