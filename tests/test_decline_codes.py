"""Decline reasons are one Rust enum: the Python layer, the counters and the README use its
names and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from litellm_fastpath import _native, routing

ROOT = Path(__file__).resolve().parents[1]


def readme_decline_codes() -> set[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Decline reasons", 1)[1].split("\n### ", 1)[0]
    codes: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            codes.update(re.findall(r"`([a-z_]+)`", first_cell))
    return codes


def test_readme_table_lists_exactly_the_codes() -> None:
    assert readme_decline_codes() == set(_native.decline_codes())


def test_python_layer_uses_only_known_codes() -> None:
    known = set(_native.decline_codes())
    used: set[str] = set()
    for path in (ROOT / "python" / "litellm_fastpath").glob("*.py"):
        used.update(re.findall(r'Decline\(\s*"([a-z_]+)"', path.read_text()))
    used.update(routing._OWN_DECLINE_CODES)
    assert used, "no decline codes found: the pattern is stale"
    assert used <= known, used - known


def test_codes_are_unique_snake_case_names() -> None:
    codes = _native.decline_codes()
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z][a-z_]*", code) for code in codes)
