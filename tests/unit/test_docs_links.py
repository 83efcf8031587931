"""Every relative link in README.md and docs/*.md points at something that exists.

A link's file part must name an existing file or folder inside the repository; its `#anchor`
must be a heading of the target Markdown file, slugged the way GitHub slugs headings. Pure:
reads the Markdown files only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

# docs/deploy.md is written in its own branch and may not have landed in this checkout yet:
# links to it are skipped only while the file is missing; once it exists they are checked (its
# anchors included) like any other.
PENDING_PAGES = {ROOT / "docs" / "deploy.md"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if match:
            if fenced is None:
                fenced = match.group(1)
            elif match.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped (hyphens and
    underscores kept), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path):
    """(line number, target) of every Markdown link and image outside code."""
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, target in links(page):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # an absolute URL: not this test's business
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if resolved in PENDING_PAGES and not resolved.exists():
            continue
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{where} points outside the repository")
        elif not resolved.exists():
            problems.append(f"{where}: {resolved.relative_to(ROOT)} does not exist")
        elif anchor:
            if resolved.suffix != ".md" or resolved.is_dir():
                problems.append(f"{where}: an anchor on a file that is not Markdown")
            elif anchor not in anchors(resolved):
                problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert page.exists()
    assert broken_links(page) == []


def test_docs_pages_exist() -> None:
    assert DOCS, "docs/*.md is empty"


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("The decision table", "the-decision-table"),
        ("`vllm-specdec explain`", "vllm-specdec-explain"),
        ("The launcher: `vllm-specdec-launch`", "the-launcher-vllm-specdec-launch"),
        ("Dashboard and alerts: `launch/monitoring/`", "dashboard-and-alerts-launchmonitoring"),
        ("vLLM 0.33: checked against its own code", "vllm-033-checked-against-its-own-code"),
        (
            "The adaptive proposer (`VLLM_SPECDEC_FALLBACK=adaptive`)",
            "the-adaptive-proposer-vllm_specdec_fallbackadaptive",
        ),
        ("Should `adaptive` become the default?", "should-adaptive-become-the-default"),
        ("See [the docs](docs/x.md) now", "see-the-docs-now"),
    ],
)
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_checker_finds_broken_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp_path = tmp_path.resolve()
    (tmp_path / "a.md").write_text("# Top\n\n## Next part\n\n## Next part\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#next-part) [dup](a.md#next-part-1) [self](#here) [web](https://x.y/z)\n"
        "# Here\n"
        "`[not a link](nowhere.md)`\n"
        "```\n[also not](nowhere.md)\n```\n"
        "[gone](missing.md) [no anchor](a.md#nope)\n",
        encoding="utf-8",
    )
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "missing.md does not exist" in problems[0]
    assert "no heading #nope" in problems[1]
