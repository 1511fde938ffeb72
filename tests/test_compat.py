"""The LiteLLM version guard: `install()` patches only a tested LiteLLM release, and LiteLLM's
private names are used only through `litellm_fastpath.compat`."""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import logging
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import litellm
import pytest

import litellm_fastpath
from litellm_fastpath import compat, integration

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "python" / "litellm_fastpath"
PATCHED = ("acompletion", "completion", "atranscription", "transcription")


def litellm_functions() -> dict[str, object]:
    return {name: getattr(litellm, name) for name in PATCHED}


@pytest.fixture
def uninstalled() -> Iterator[dict[str, object]]:
    """The fast path off for one test (yielding LiteLLM's own functions), on again afterwards
    as conftest has it for the session."""
    litellm_fastpath.uninstall()
    try:
        yield litellm_functions()
    finally:
        litellm_fastpath.uninstall()
        litellm_fastpath.install()
    assert litellm_fastpath.is_installed()


def test_tested_release_installs(uninstalled: dict[str, object]) -> None:
    assert compat.is_tested_version(importlib.metadata.version("litellm"))
    assert compat.unusable_reason() is None
    litellm_fastpath.install()
    assert litellm_fastpath.is_installed()
    assert litellm.acompletion is integration.acompletion
    assert litellm.transcription is integration.transcription


def test_untested_release_warns_once_and_patches_nothing(
    uninstalled: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compat, "litellm_version", lambda: "1.107.0")
        mp.setattr(compat, "_warned", False)
        with (
            caplog.at_level(logging.WARNING, logger="litellm_fastpath"),
            pytest.warns(litellm_fastpath.UntestedLiteLLMWarning) as warned,
        ):
            litellm_fastpath.install()
            litellm_fastpath.install()
        assert not litellm_fastpath.is_installed()
    untested = [w for w in warned if w.category is compat.UntestedLiteLLMWarning]
    assert len(untested) == 1
    message = str(untested[0].message)
    assert "LiteLLM 1.107.0 is not a tested release (>=1.106.12,<1.107)" in message
    assert "every call runs on LiteLLM's Python path" in message
    # Points at the caller of install(), not at our own code.
    assert untested[0].filename == __file__
    assert [r.getMessage() for r in caplog.records if r.name == "litellm_fastpath"] == [message]
    assert litellm_functions() == uninstalled


def test_missing_litellm_name_patches_nothing(uninstalled: dict[str, object]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(compat._PRIVATE, "renamed_helper", ("litellm.utils", "renamed_helper"))
        mp.setattr(compat, "_warned", False)
        with pytest.warns(compat.UntestedLiteLLMWarning, match="lacks a name"):
            litellm_fastpath.install()
        assert not litellm_fastpath.is_installed()
    assert litellm_functions() == uninstalled


@pytest.mark.parametrize(
    ("version", "tested"),
    [
        ("1.106.12", True),
        ("1.106.13", True),
        ("1.106.12.post1", True),
        ("1.106.99+local.1", True),
        ("1.106.11", False),
        ("1.107.0", False),
        ("2.0.0", False),
        ("1.106.13rc1", False),
        ("1.106.13.dev2", False),
        ("1.106", False),
        ("", False),
    ],
)
def test_tested_versions(version: str, tested: bool) -> None:
    assert compat.is_tested_version(version) is tested


def test_pyproject_pins_the_tested_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f"litellm{compat.TESTED_LITELLM}" in project["dependencies"]


def _modules_outside_compat() -> list[Path]:
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "compat.py")
    assert modules, PACKAGE
    return modules


def test_only_compat_touches_litellm_internals() -> None:
    found = []
    for path in _modules_outside_compat():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            private = (
                (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("litellm."))
                or (
                    isinstance(node, ast.ImportFrom)
                    and node.module == "litellm"
                    and any(alias.name.startswith("_") for alias in node.names)
                )
                or (
                    isinstance(node, ast.Import)
                    and any(alias.name.startswith("litellm.") for alias in node.names)
                )
                or (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "litellm"
                    and node.attr.startswith("_")
                )
            )
            if private:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    assert not found, "LiteLLM internals outside compat.py:\n" + "\n".join(found)


def test_compat_names_used_elsewhere_exist() -> None:
    used = set()
    for path in _modules_outside_compat():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "compat"
            ):
                used.add(node.attr)
    assert used
    assert sorted(name for name in used if not hasattr(compat, name)) == []


def test_importing_compat_does_not_import_litellm() -> None:
    code = (
        "import sys, litellm_fastpath.compat, litellm_fastpath.routing\n"
        "assert 'litellm' not in sys.modules, sorted(m for m in sys.modules if 'litellm.' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_sdk_install_registers_no_litellm_callbacks() -> None:
    """Importing the proxy's module registers its hooks as LiteLLM callbacks, after which every
    SDK call (on either path) runs LiteLLM's logging and cost: `install()` must not do that."""
    code = (
        "import sys, litellm, litellm_fastpath\n"
        "litellm_fastpath.install()\n"
        "assert litellm_fastpath.is_installed()\n"
        "assert 'litellm.proxy.proxy_server' not in sys.modules\n"
        "assert litellm.callbacks == [] and litellm._async_success_callback == [], "
        "litellm.callbacks\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_proxy_names_are_checked_where_the_proxy_runs() -> None:
    """A name from the proxy's module that LiteLLM lacks turns the fast path off in the proxy,
    and is not looked up (so not imported) in an SDK process."""
    code = (
        "import sys, warnings, litellm_fastpath\n"
        "from litellm_fastpath import compat\n"
        "compat._PRIVATE['gone'] = ('litellm.proxy.proxy_server', 'gone')\n"
        "if sys.argv[1] == 'proxy':\n"
        "    import litellm.proxy.proxy_server\n"
        "with warnings.catch_warnings(record=True):\n"
        "    warnings.simplefilter('always')\n"
        "    litellm_fastpath.install()\n"
        "print(litellm_fastpath.is_installed())\n"
    )
    for where, installed in (("sdk", "True"), ("proxy", "False")):
        out = subprocess.run(
            [sys.executable, "-c", code, where], check=True, timeout=120, capture_output=True
        )
        assert out.stdout.decode().split()[-1] == installed, where


def test_the_logging_queue_length_is_litellm_s_own() -> None:
    """The lane waits on LiteLLM's logging worker's queue (`replay.LOGGING_QUEUE_BOUND`): its
    length is that queue's, read through the private-name table (0 before it exists)."""
    worker = compat.GLOBAL_LOGGING_WORKER
    kept = worker._queue
    try:
        worker._queue = None
        assert compat.logging_queue_length() == 0
        worker._queue = asyncio.Queue()
        worker._queue.put_nowait({"coroutine": None, "context": None})
        assert compat.logging_queue_length() == 1
    finally:
        worker._queue = kept


def test_the_logging_tasks_running_are_litellm_s_own() -> None:
    """The drain at shutdown also waits for the logging tasks LiteLLM's worker started (its
    shutdown cancels them): their count is that worker's."""

    async def count_while_one_runs() -> tuple[int, int]:
        worker = compat.GLOBAL_LOGGING_WORKER
        before = compat.logging_running()
        task = asyncio.ensure_future(asyncio.sleep(1))
        worker._running_tasks.add(task)
        try:
            return before, compat.logging_running()
        finally:
            worker._running_tasks.discard(task)
            task.cancel()

    before, running = asyncio.run(count_while_one_runs())
    assert running == before + 1
