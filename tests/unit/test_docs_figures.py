"""Figures quoted in the docs equal the result files they cite.

benchmarks/paired/report.py writes each paired run as `benchmarks/results/<name>.json` (every
cell and pooled row) and `<name>.md`. Two checks keep the docs to them:

- Tables: every Markdown table in README.md, benchmarks/README.md and docs/*.md with a cell
  `ratio [low, high]` must cite its result files (a link or path into benchmarks/results/ in
  its section, above it). Each row is found in the cited file whose baseline is the row's
  `against` column (if any), whose workloads hold the row's first cell, or, for a "pooled" row,
  in its pooled rows ("A/A" rows in the A/A run); each cell must equal that file's median and
  interval at the digits quoted, "(N pairs)" its pooled pairs, and where a table marks cells in
  bold, bold must be exactly the cells that miss their target.
- Sentences: the figures and counts quoted in prose (`CLAIMS`, `support/doc_claims.py`) are
  computed from the files.

Pure: reads the files only.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.doc_claims import CLAIMS, Claim, band, moved_up
from support.result_tables import (
    _CELL,
    _RESULT_REF,
    PAGES,
    RESULTS,
    ROOT,
    Table,
    by_batch_problems,
    label_of,
    request_caps_problems,
    result,
    run_pairs_problems,
    same,
    switchback_problems,
    tables,
)


def figure_tables() -> list[Table]:
    return [table for page in PAGES for table in tables(page)
            if any(_CELL.match(cell) for _, cells in table.rows for cell in cells)]


def baseline(data: dict[str, Any]) -> str:
    return data["configurations"]["A"]["name"]


def source_of(label: str, against: str | None, cited: list[str]) -> str | list[str]:
    """The one cited result file that holds the row, or the candidates when not exactly one."""
    pooled = "pooled" in label
    # An "A/A" row comes from the A/A run; any other from the rest, unless it alone is cited.
    aa = "A/A" in label or all(result(name)["meta"]["kind"] == "aa" for name in cited)
    found = [name for name in cited
             if (against is None or baseline(result(name)) == against)
             and (result(name)["meta"]["kind"] == "aa") == aa
             and (pooled or label in result(name)["meta"]["workloads"])]
    return found[0] if len(found) == 1 else found


def entry_of(data: dict[str, Any], label: str, concurrency: int) -> dict[str, Any] | None:
    if "pooled" in label:
        rows = [p for p in data["pooled"] if p["concurrency"] == concurrency]
    else:
        rows = [c for c in data["cells"]
                if c["workload"] == label and c["concurrency"] == concurrency]
    return rows[0] if rows else None


def table_problems(table: Table) -> list[str]:
    cited = sorted(set(_RESULT_REF.findall(table.above)))
    if not cited:
        return [f"{table.where}: quotes `ratio [low, high]` figures but cites no result file "
                "(a link into benchmarks/results/ above it in its section)"]
    missing = [name for name in cited if not (RESULTS / f"{name}.json").exists()]
    if missing:
        return [f"{table.where}: cites {name}, which has no benchmarks/results/{name}.json"
                for name in missing]
    if all("by_batch" in result(name) for name in cited):
        return by_batch_problems(table, list(dict.fromkeys(_RESULT_REF.findall(table.above))))
    if all(result(name)["meta"].get("kind") == "switchback" for name in cited):
        return switchback_problems(table, cited)
    if all(result(name)["meta"].get("kind") == "request-caps" for name in cited):
        return request_caps_problems(table, cited)
    if all(result(name)["meta"].get("kind") == "run-pairs" for name in cited):
        return run_pairs_problems(table, cited)
    columns = {i: int(m.group(1)) for i, head in enumerate(table.header)
               if (m := re.fullmatch(r"c=(\d+)", label_of(head)))}
    against_column = next((i for i, head in enumerate(table.header)
                           if label_of(head) in ("against", "baseline")), None)
    bold_marks_misses = any("**" in cell for _, cells in table.rows for cell in cells)
    problems = []
    for line, cells in table.rows:
        where = f"{table.where.split(':')[0]}:{line}"
        label = label_of(cells[0])
        against = None if against_column is None else label_of(cells[against_column])
        name = source_of(label, against, cited)
        if not isinstance(name, str):
            problems.append(f"{where}: row {label!r} matches {len(name)} of the cited files "
                            f"{cited} ({name}), not one")
            continue
        data = result(name)
        pairs = re.search(r"\((\d+) pairs\)", label)
        for index, concurrency in columns.items():
            cell = cells[index] if index < len(cells) else ""
            if not cell:
                continue
            match = _CELL.match(cell)
            entry = entry_of(data, label, concurrency)
            if match is None or entry is None:
                problems.append(f"{where}: c={concurrency} {cell!r}: "
                                + ("not `ratio [low, high]`" if match is None
                                   else f"no such cell in {name}.json"))
                continue
            bold, median, low, high = (match.group(1) is not None, *match.group(2, 4, 5))
            low_value, high_value = entry["ratio_interval"]
            if not (same(median, entry["ratio_median"]) and same(low, low_value)
                    and same(high, high_value)):
                problems.append(f"{where}: c={concurrency} quotes {median} [{low}, {high}], "
                                f"{name}.json has {entry['ratio_median']:.3f} "
                                f"[{low_value:.3f}, {high_value:.3f}]")
            if pairs and entry.get("pairs") != int(pairs.group(1)):
                problems.append(f"{where}: c={concurrency} says {pairs.group(1)} pairs, "
                                f"{name}.json pooled {entry.get('pairs')}")
            if bold_marks_misses and entry.get("met") is not None and bold != (not entry["met"]):
                problems.append(f"{where}: c={concurrency} is {'' if bold else 'not '}bold but "
                                f"{name}.json says met={entry['met']}")
    return problems


@pytest.mark.parametrize("table", figure_tables(), ids=lambda t: t.where)
def test_quoted_table_equals_its_result_file(table: Table) -> None:
    assert table_problems(table) == []


def test_every_results_table_is_checked() -> None:
    """The tables the issue found drifting are among those checked."""
    where = {table.where.split(":")[0] for table in figure_tables()}
    assert {"README.md", "docs/adaptive.md", "docs/benchmarks.md"} <= where


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.page}:{c.pattern[:40]}")
def test_quoted_sentence_equals_the_result_files(claim: Claim) -> None:
    text = " ".join((ROOT / claim.page).read_text(encoding="utf-8").split())
    found = re.findall(claim.pattern, text)
    assert len(found) == 1, f"{claim.page}: the sentence {claim.pattern!r} is gone or repeated"
    quoted = found[0] if isinstance(found[0], tuple) else (found[0],)
    assert quoted == claim.expected()


# --- the checker finds what drifted -------------------------------------------------------------
def test_a_changed_figure_a_wrong_pair_count_and_a_wrong_bold_are_found() -> None:
    above = "### A run\n\n[`none-vs-adaptive.md`](../benchmarks/results/none-vs-adaptive.md)"
    header = ["workload", "against", "c=1", "c=4", "c=16", "c=32"]
    good = Table("x.md:3", above, header, [
        (5, ["open_ended", "none", "**1.004** [0.78, 1.06]", "**0.930** [0.86, 1.01]", "", ""]),
        (6, ["all three pooled (15 pairs)", "none", "0.968 [0.89, 1.02]", "", "", ""])])
    assert table_problems(good) == []
    bad = Table("x.md:3", above, header, [
        (5, ["open_ended", "none", "**1.005** [0.78, 1.06]", "0.930 [0.86, 1.01]", "", ""]),
        (6, ["all three pooled (10 pairs)", "none", "0.968 [0.89, 1.03]", "", "", ""]),
        (7, ["input_grounded", "none", "1.000 [0.90, 1.10]", "", "", ""])])
    assert [p.split(": ", 1)[1] for p in table_problems(bad)] == [
        "c=1 quotes 1.005 [0.78, 1.06], none-vs-adaptive.json has 1.004 [0.776, 1.064]",
        "c=4 is not bold but none-vs-adaptive.json says met=False",
        "c=1 quotes 0.968 [0.89, 1.03], none-vs-adaptive.json has 0.968 [0.891, 1.022]",
        "c=1 says 10 pairs, none-vs-adaptive.json pooled 15",
        "row 'input_grounded' matches 0 of the cited files ['none-vs-adaptive'] ([]), not one"]
    uncited = Table("x.md:3", "### A run\n", header, good.rows)
    assert "cites no result file" in table_problems(uncited)[0]


def test_band_and_counts() -> None:
    assert band([1.0485, 0.9858, 0.9920]) == "0.98-1.05"  # not 0.99-1.05: 0.986 is quoted
    assert band([0.996, 1.030, 1.054, 0.960]) == "0.96-1.06"
    assert moved_up("none-vs-adaptive", "none-vs-adaptive") == ("0", "12")
