"""Decline reasons are one Rust enum: the Python layer, the counters and the docs
(docs/compatibility.md) use its names and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from litellm_fastpath import _native, routing

ROOT = Path(__file__).resolve().parents[1]


def table_names(path: Path, heading: str) -> set[str]:
    """The names in backticks in the first column of the table under `heading` (any level),
    up to the next heading of the same or a higher level."""
    text = path.read_text()
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
    assert match, f"no heading {heading!r} in {path.name}"
    level = len(match.group(1))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    section = rest[: end.start()] if end else rest
    codes: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            codes.update(re.findall(r"`([a-z_]+)`", first_cell))
    return codes


def test_docs_table_lists_exactly_the_codes() -> None:
    documented = table_names(ROOT / "docs" / "compatibility.md", "Decline reasons")
    assert documented == set(_native.decline_codes())


def test_python_layer_uses_only_known_codes() -> None:
    known = set(_native.decline_codes())
    used: set[str] = set()
    for path in (ROOT / "python" / "litellm_fastpath").rglob("*.py"):
        used.update(re.findall(r'Decline\(\s*"([a-z_]+)"', path.read_text()))
    used.update(routing._OWN_DECLINE_CODES)
    assert used, "no decline codes found: the pattern is stale"
    assert used <= known, used - known


def test_codes_are_unique_snake_case_names() -> None:
    codes = _native.decline_codes()
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z][a-z_]*", code) for code in codes)


def test_lane_reasons_table_lists_lane_reasons() -> None:
    """The lane's reasons for sending a request to the proxy, in the same table form, so a test
    can check them against their enum the way the decline codes are checked."""
    names = table_names(ROOT / "docs" / "compatibility.md", "Lane reasons")
    assert names, "no lane reasons table"
    assert all(re.fullmatch(r"lane_[a-z_]+", name) for name in names), names
