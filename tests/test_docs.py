"""The user docs hold together: every relative link and anchor in README.md, docs/ and the
benchmark notes points at something that exists, and the README stays a short user's README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 350
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benches" / "README.md",
    ROOT / "benches" / "results" / "HISTORY.md",
]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without code blocks and code spans (a link's text may be code; it stays a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(doc: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(doc.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (path.suffix != ".md" or anchor not in anchors(path)):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(doc: Path) -> None:
    assert broken_links(doc) == []


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_readme_keeps_the_two_commands() -> None:
    """CI (`.ci/run`) and users run exactly these."""
    text = (ROOT / "README.md").read_text()
    assert re.search(r"^make demo +# ", text, re.M)
    assert re.search(r"^make test +# ", text, re.M)


def test_docs_exist() -> None:
    names = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert {"architecture.md", "compatibility.md", "lane.md", "benchmarks.md"} <= names


def test_slugs_follow_github() -> None:
    assert slug("The fast lane (`fastpath_lane: true`)") == "the-fast-lane-fastpath_lane-true"
    assert slug("Deliberate differences from LiteLLM's Python path") == (
        "deliberate-differences-from-litellms-python-path"
    )
    assert slug("The fast lane: `/v1/messages`") == "the-fast-lane-v1messages"


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n[ok](#title) [gone](#nothing) [file](b.md)\n")
    assert broken_links(tmp_path / "a.md") == ["#nothing: no such heading", "b.md: no such file"]
