"""The lane's reasons for sending a request to the proxy are one Rust enum: its counters and the
docs use its names and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from litellm_fastpath import _native

ROOT = Path(__file__).resolve().parents[1]


def documented_lane_reasons() -> set[str]:
    text = (ROOT / "docs" / "compatibility.md").read_text()
    section = text.split("## Lane reasons", 1)[1].split("\n## ", 1)[0]
    reasons: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            reasons.update(re.findall(r"`([a-z_]+)`", first_cell))
    return reasons


def test_docs_table_lists_exactly_the_reasons() -> None:
    assert documented_lane_reasons() == set(_native.lane_reasons())


def test_reasons_are_unique_lane_names_apart_from_decline_codes() -> None:
    reasons = _native.lane_reasons()
    assert len(reasons) == len(set(reasons))
    assert all(re.fullmatch(r"lane_[a-z_]+", reason) for reason in reasons)
    assert not set(reasons) & set(_native.decline_codes())
