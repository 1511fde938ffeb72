"""The lane's reasons for sending a request to the proxy are one Rust enum: its counters and the
docs use its names and nothing else."""

from __future__ import annotations

import re

from litellm_fastpath import _native
from tests.test_decline_codes import ROOT, table_names


def test_docs_table_lists_exactly_the_reasons() -> None:
    documented = table_names(ROOT / "docs" / "compatibility.md", "Lane reasons")
    assert documented == set(_native.lane_reasons())


def test_reasons_are_unique_lane_names_apart_from_decline_codes() -> None:
    reasons = _native.lane_reasons()
    assert len(reasons) == len(set(reasons))
    assert all(re.fullmatch(r"lane_[a-z_]+", reason) for reason in reasons)
    assert not set(reasons) & set(_native.decline_codes())
