"""The built wheel, installed in a fresh venv, serves `rust: true` models in the real proxy.

`make wheel-test` runs this file from outside the repo with the wheel installed (no editable
build, no `python/` on the path); the main suite does not collect it (`norecursedirs`). The
repo's root is on the path (`pythonpath` in pyproject.toml) for `devtools` and `tests`, which
the wheel does not ship; `litellm_fastpath` can only come from the wheel.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

import litellm_fastpath
from devtools.deployments import PROVIDERS, deployment_kwargs
from devtools.processes import ProxyProcess
from devtools.upstream import RecordingUpstream

pytestmark = pytest.mark.proxy


def test_package_comes_from_the_installed_wheel() -> None:
    package = Path(litellm_fastpath.__file__).resolve().parent
    assert package.parent == Path(sysconfig.get_paths()["platlib"]).resolve()
    assert (package / "py.typed").is_file()
    assert (package / "_native.pyi").is_file()


def test_proxy_serves_rust_models_from_the_wheel(upstream: RecordingUpstream) -> None:
    model_list = [
        {
            "model_name": f"rust-{provider}",
            "litellm_params": {**deployment_kwargs(provider, upstream.url), "rust": True},
        }
        for provider in PROVIDERS
    ]
    settings = {"callbacks": ["litellm_fastpath.proxy.accelerator"]}
    with ProxyProcess(model_list, settings) as proxy:
        for provider in PROVIDERS:
            upstream.clear()
            resp = proxy.post(
                "/chat/completions",
                json={"model": f"rust-{provider}", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert resp.status_code == 200, resp.text
            assert resp.headers.get("x-litellm-rust") == "true", provider
            assert resp.headers.get("x-litellm-fastpath") == litellm_fastpath.__version__
            assert resp.json()["choices"][0]["message"]["content"]
            assert len(upstream.requests) == 1, provider
        assert "UntestedLiteLLMWarning" not in proxy.log_text()
