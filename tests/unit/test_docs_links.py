"""Every relative link in README.md and docs/*.md points at something that exists, and so does
every repository path the docs, docstrings, comments and scripts name.

A link's file part must name an existing file or folder inside the repository; its `#anchor`
must be a heading of the target Markdown file, slugged the way GitHub slugs headings. A path is
a back-quoted or bare string that starts at a top-level folder of the repository
(`tests/engine/test_serve.py`), a back-quoted one that starts at a folder of the package or of
tests/ (`engine/registry.py`, `proposer/state.request_end`: a module and a name in it), or a test
file's bare name (`test_serve.py`, anywhere under tests/). Pure: reads the files only.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
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


# --- repository paths named in text -------------------------------------------------------------
TOP_DIRS = ("tests", "docs", "benchmarks", "scripts", "launch", "vllm_specdec_plugin",
            "requirements", ".ci")
# Folders a back-quoted path may start at (`engine/registry.py`: vllm_specdec_plugin/engine/...).
BASES = ("", "vllm_specdec_plugin", "tests", "tests/unit", "benchmarks", "launch")
EXTENSIONS = {"py", "md", "sh", "txt", "toml", "yaml", "yml", "json", "png", "cfg"}
NOT_SCANNED = {"__pycache__", "crds"}  # bytecode; vendored CRD schemas (their README is read)
_BARE_REPO_PATH = re.compile(
    rf"(?<![\w./~$@-])(?:{'|'.join(re.escape(d) for d in TOP_DIRS)})/[\w./{{}},*?:<>+-]*")
_BARE_TEST_FILE = re.compile(r"(?<![\w./~$@-])test_\w+\.py\b")
_SPAN_PATH = re.compile(r"^[\w.-]+(?:/[\w.{},*?<>+-]*)+(?:::[\w\[\].:-]+)?$")


def expand_braces(path: str) -> list[str]:
    """`Dockerfile.{cpu,gpu}` -> both names; a `{name}` placeholder -> a glob."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    options = match.group(1).split(",") if "," in match.group(1) else ["*"]
    return [out for option in options
            for out in expand_braces(path[:match.start()] + option + path[match.end():])]


def resolve(path: str, here: Path) -> Path | None:
    """The file or folder `path` names, from the repository root, the folder of the text that
    names it, or one of BASES; a glob resolves to its first match."""
    for base in (here.relative_to(ROOT).as_posix(), *BASES):
        full = f"{base}/{path}" if base not in ("", ".") else path
        if re.search(r"[*?\[]", full):
            found = next(iter(sorted(ROOT.glob(full.rstrip("/")))), None)
            if found is not None:
                return found
        elif (ROOT / full).exists():
            return ROOT / full
    return None


def defines(source: Path, name: str) -> bool:
    """`source` defines `name` (a def, a class or an assignment at the start of a line); a name
    cut short with `...` is a prefix of one."""
    word = re.escape(name[:-3]) + r"\w*" if name.endswith("...") else re.escape(name)
    return re.search(rf"^\s*(?:(?:async\s+)?(?:def|class)\s+{word}\b|{word}\s*[:=])",
                     source.read_text(encoding="utf-8"), re.M) is not None


def path_problem(text: str, here: Path) -> str | None:
    """Why the path `text` (maybe `path:line`, `path::test`, `module.name`, a glob) is broken."""
    path, _, node = text.rstrip(",;:)'\"").partition("::")
    path = path.rstrip(".")  # a sentence's full stop; a node may end in `...` (cut short)
    node = node if node.endswith("...") else node.rstrip(".")
    path = re.sub(r":\d+(?:-\d+)?$", "", path).partition("#")[0]
    if not path or "..." in path or "$" in path:
        return None  # elided or built from a variable
    for option in expand_braces(re.sub(r"<[^>]*>", "*", path)):
        names = [part for part in re.sub(r"\[.*?\]", "", node).split("::") if part]
        module, dot, name = option.rpartition(".")
        if (dot and name.isidentifier() and name not in EXTENSIONS
                and resolve(option, here) is None and resolve(module + ".py", here)):
            option, names = module + ".py", [name]  # `proposer/state.request_end`
        found = resolve(option, here)
        if found is None:
            return f"`{text}`: {option} does not exist"
        missing = [n for n in names if found.suffix == ".py" and not defines(found, n)]
        if missing:
            return f"`{text}`: {found.relative_to(ROOT)} defines no {missing[0]}"
    return None


def named_paths(text: str, subdirs: set[str]) -> Iterator[tuple[int, str]]:
    """(offset, path) of every repository path named in `text` (bare test files under tests/)."""
    for span in _CODE_SPAN.finditer(text):
        for token in re.split(r"[\s=\"'()]+", span.group()[1:-1].strip("`")):
            if _SPAN_PATH.match(token) and token.split("/", 1)[0] in subdirs:
                yield span.start(), token
    for match in _BARE_REPO_PATH.finditer(text):
        yield match.start(), match.group()
    for match in _BARE_TEST_FILE.finditer(text):
        yield match.start(), "tests/**/" + match.group()


def python_text(source: Path) -> list[tuple[int, str]]:
    """(first line, text) of each comment and string literal (docstrings included)."""
    kinds = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    tokens = tokenize.generate_tokens(io.StringIO(source.read_text(encoding="utf-8")).readline)
    return [(token.start[0], token.string) for token in tokens if token.type in kinds]


def sources() -> list[Path]:
    """Every file whose text may name a repository path."""
    whole = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *DOCS,
             ROOT / "tests" / "deploy" / "crds" / "README.md", ROOT / "pyproject.toml",
             ROOT / ".gitignore", ROOT / ".dockerignore", *sorted(ROOT.glob("scripts/*.sh")),
             *sorted(ROOT.glob(".ci/*")), *sorted(ROOT.glob("requirements/*.txt")),
             *sorted(p for p in ROOT.glob("launch/**/*") if p.is_file() and p.suffix != ".png")]
    python = [source for base in ("vllm_specdec_plugin", "benchmarks", "tests", "scripts")
              for source in sorted((ROOT / base).rglob("*.py"))
              if NOT_SCANNED.isdisjoint(source.parts)
              and source != Path(__file__).resolve()]  # this file's own examples are not paths
    return whole + python


def pieces_of(source: Path) -> list[tuple[int, str]]:
    """(first line, text): a Python file's comments and strings, any other file whole."""
    return python_text(source) if source.suffix == ".py" else [
        (1, source.read_text(encoding="utf-8"))]


def broken_paths(pieces: list[tuple[int, str]], here: Path, where: str) -> list[str]:
    subdirs = set(TOP_DIRS) | {
        p.name for base in BASES[1:] for p in (ROOT / base).iterdir()
        if p.is_dir() and p.name not in NOT_SCANNED}
    problems = []
    for first_line, text in pieces:
        for offset, path in named_paths(text, subdirs):
            problem = path_problem(path, here)
            if problem:
                problems.append(f"{where}:{first_line + text.count(chr(10), 0, offset)}: {problem}")
    return sorted(set(problems))


@pytest.mark.parametrize("source", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_named_repository_paths_exist(source: Path) -> None:
    assert broken_paths(pieces_of(source), source.parent, str(source.relative_to(ROOT))) == []


def test_checker_finds_broken_paths() -> None:
    text = ("`tests/compat/test_rbln.py` `launch/Dockerfile.{cpu,gpu,rbln}` "
            "`tests/unit/test_docs_links.py:40` `engine/registry.py` `proposer/state.request_end` "
            "`tests/unit/test_docs_links.py::test_github_slug[x]` `benchmarks/results/*.json` "
            "`benchmarks/results/<name>.md` `vllm_specdec_plugin.engine.registry` `vllm/v1/x.py` "
            "(tests/engine/test_serve.py), test_one_decision.py and docs/testing.md.\n"
            "`tests/test_rbln.py` `launch/Dockerfile.{cpu,tpu}` `proposer/rows.no_such_name`\n"
            "tests/test_vllm033.py; test_vllm_patches.py "
            "`tests/unit/test_docs_links.py::test_nothing_here` tests/unit/test_docs_links.py::"
            "test_checker_finds_broken_pa... tests/unit/test_docs_links.py::test_checker_x...\n")
    problems = broken_paths([(7, text)], ROOT, "x.md")
    assert problems == [
        "x.md:8: `launch/Dockerfile.{cpu,tpu}`: launch/Dockerfile.tpu does not exist",
        "x.md:8: `proposer/rows.no_such_name`: "
        "vllm_specdec_plugin/proposer/rows.py defines no no_such_name",
        "x.md:8: `tests/test_rbln.py`: tests/test_rbln.py does not exist",
        "x.md:9: `tests/**/test_vllm_patches.py`: tests/**/test_vllm_patches.py does not exist",
        "x.md:9: `tests/test_vllm033.py`: tests/test_vllm033.py does not exist",
        "x.md:9: `tests/unit/test_docs_links.py::test_checker_x...`: "
        "tests/unit/test_docs_links.py defines no test_checker_x...",
        "x.md:9: `tests/unit/test_docs_links.py::test_nothing_here`: "
        "tests/unit/test_docs_links.py defines no test_nothing_here",
    ]
