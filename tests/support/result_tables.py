"""The result tables the docs quote: finding them in the pages and checking the one-engine
formats against their result files (tests/unit/test_docs_figures.py checks every table)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]

_CELL = re.compile(r"^(\*\*)?(\d+\.\d+)(\*\*)?\s*\[(\d+\.\d+),\s*(\d+\.\d+)\]$")
_RESULT_REF = re.compile(r"benchmarks/results/((?:[\w.-]+/)*[\w.-]+)\.(?:md|json)\b")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s")


@functools.cache
def result(name: str) -> dict[str, Any]:
    """benchmarks/results/<name>.json (a name may hold a folder: `adaptive-run2/x`)."""
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


@dataclass
class Table:
    where: str  # page:line of the header row
    above: str  # the section's text from its heading to the table
    header: list[str]
    rows: list[tuple[int, list[str]]]


def split_row(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(page: Path) -> Iterator[Table]:
    lines = page.read_text(encoding="utf-8").splitlines()
    section, number = 0, 0
    name = page.relative_to(ROOT)
    while number < len(lines):
        if _HEADING.match(lines[number]):
            section = number
        if not lines[number].startswith("|"):
            number += 1
            continue
        start = number
        while number < len(lines) and lines[number].startswith("|"):
            number += 1
        rows = [(n + 1, split_row(lines[n])) for n in range(start + 2, number)]
        yield Table(f"{name}:{start + 1}", "\n".join(lines[section:start]),
                    split_row(lines[start]), rows)
        section = number  # a later table cites its own files


def label_of(cell: str) -> str:
    return cell.replace("*", "").replace("`", "").strip()


def same(quoted: str, value: float) -> bool:
    """`quoted` is `value` at the digits quoted: rounded from the value itself or, half up,
    from the 3-digit figure the result file's <name>.md shows (0.945 there may read 0.95)."""
    digits = len(quoted.partition(".")[2])
    shown = Decimal(f"{value:.3f}").quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return quoted in (f"{value:.{digits}f}", str(shown))


def by_batch_problems(table: Table, cited: list[str]) -> list[str]:
    """A one-engine paired run's table (`benchmarks/probes/zero_draft_paired.py`): a row per
    batch size, its n-th `ratio [low, high]` column from the n-th file cited above it."""
    problems = []
    for line, cells in table.rows:
        where = f"{table.where.split(':')[0]}:{line}"
        figures = [cell for cell in cells[1:] if _CELL.match(cell)]
        if len(figures) != len(cited):
            problems.append(f"{where}: {len(figures)} figures for {len(cited)} cited files")
            continue
        for name, cell in zip(cited, figures, strict=True):
            entry = result(name)["by_batch"].get(label_of(cells[0]))
            match = _CELL.match(cell)
            assert match is not None
            median, low, high = match.group(2, 4, 5)
            if entry is None or entry["interval"] is None:
                problems.append(f"{where}: batch {cells[0]} has no interval in {name}.json")
                continue
            if not (same(median, entry["median_ratio"]) and same(low, entry["interval"][0])
                    and same(high, entry["interval"][1])):
                problems.append(f"{where}: quotes {median} [{low}, {high}], {name}.json has "
                                f"{entry['median_ratio']} {entry['interval']}")
    return problems


SWITCHBACK_FIGURES = {"median": ("ratio", "low", "high"),
                      "throughput": ("throughput_ratio", "throughput_low", "throughput_high")}


def switchback_problems(table: Table, cited: list[str]) -> list[str]:
    """An in-engine switchback run's table (`benchmarks/probes/schedule_switchback.py`): a row
    per workload, arms ("k0, controller") and figure ("median" or "throughput"), a column per
    concurrency; each cell equals that cell of the one cited file that holds it."""
    head = [label_of(cell) for cell in table.header]
    columns = {i: int(m.group(1)) for i, h in enumerate(head)
               if (m := re.fullmatch(r"c=(\d+)", h))}
    problems = []
    for line, cells in table.rows:
        where = f"{table.where.split(':')[0]}:{line}"
        row = dict(zip(head, (label_of(c) for c in cells), strict=False))
        arms = [arm.strip() for arm in row["arms"].split("(")[0].split(",")]
        keys = SWITCHBACK_FIGURES[row["figure"]]
        for index, concurrency in columns.items():
            match = _CELL.match(cells[index]) if index < len(cells) else None
            if match is None:
                continue
            found = [cell["cell"] for name in cited for cell in result(name)["cells"]
                     if cell["workload"] == row["workload"] and cell["arms"] == arms
                     and cell["concurrency"] == concurrency and cell["cell"]]
            if len(found) != 1:
                problems.append(f"{where}: c={concurrency}: {len(found)} cells in {cited}")
                continue
            median, low, high = match.group(2, 4, 5)
            values = [found[0][key] for key in keys]
            if not all(same(q, v) for q, v in zip((median, low, high), values, strict=True)):
                problems.append(f"{where}: c={concurrency} quotes {median} [{low}, {high}], "
                                f"the file has {values}")
    return problems


REQUEST_CAPS_COLUMNS = {"off / k0": "off/k0", "mixed, off half / off": "mixed-off-half/off",
                        "mixed, on half / on": "mixed-on-half/on", "on / k0": "on/k0",
                        "k0 / k0 (A/A)": "k0/k0-again"}
"""docs/operations.md's per-request table: column header -> `request_caps.py`'s ratio key."""


def keyed_rows(table: Table, cells_of: dict[tuple[str, int], dict[str, Any]],
               cited: list[str], problems: list[str]
               ) -> Iterator[tuple[str, list[str], dict[str, Any]]]:
    """A table keyed by its first two columns (workload, c): (where, cells, the file's cell) per
    row; a row the files lack is a problem, not yielded."""
    for line, cells in table.rows:
        where = f"{table.where.split(':')[0]}:{line}"
        key = (label_of(cells[0]), int(label_of(cells[1])))
        cell = cells_of.get(key)
        if cell is None:
            problems.append(f"{where}: no cell {key} in {cited}")
            continue
        yield where, cells, cell


def figure_problems(where: str, head: str, match: re.Match[str],
                    figures: tuple[float, float, float]) -> list[str]:
    """A quoted `ratio [low, high]` cell against the file's three figures."""
    quoted = match.group(2, 4, 5)
    if all(same(q, v) for q, v in zip(quoted, figures, strict=True)):
        return []
    return [f"{where}: {head} quotes {quoted[0]} [{quoted[1]}, {quoted[2]}], file has "
            f"{figures[0]:.3f} [{figures[1]:.3f}, {figures[2]:.3f}]"]


def request_caps_problems(table: Table, cited: list[str]) -> list[str]:
    """`benchmarks/probes/request_caps.py`'s table: a row per (workload, c), each ratio cell
    the file's median TPOT ratio and interval, "tokens identical" its `same_tokens`."""
    cells_of = {(cell["workload"], cell["concurrency"]): cell
                for name in cited for cell in result(name).get("mixed", [])}
    heads = [label_of(head) for head in table.header]
    problems: list[str] = []
    for where, cells, cell in keyed_rows(table, cells_of, cited, problems):
        for head, quoted in zip(heads, cells, strict=True):
            ratio = REQUEST_CAPS_COLUMNS.get(head)
            if head == "tokens identical" and (quoted == "yes") != cell["same_tokens"]:
                problems.append(f"{where}: tokens identical {quoted!r}, file says "
                                f"{cell['same_tokens']}")
            if ratio is None:
                continue
            entry, match = cell["tpot_ratios"].get(ratio), _CELL.match(quoted)
            if entry is None or match is None:
                if quoted != "-" or entry is not None:
                    problems.append(f"{where}: {head} {quoted!r} against {entry}")
                continue
            problems += figure_problems(where, head, match,
                                        (entry["median"], entry["low"], entry["high"]))
    return problems


RUN_PAIRS_MARGIN = 0.98


def is_controller_cell(cell: dict[str, Any]) -> bool:
    """A run_pairs cell of fixed arms against the controller (its last arm); an A/A cell holds
    one arm twice, the controller's too (`--aa W:C:controller`)."""
    return cell["arms"][-1] == "controller" and len(set(cell["arms"])) > 1
"""The controller's target against the best fixed k in a run (issue 37): the interval's low end."""


def explored(cell: dict[str, Any]) -> str:
    """A run_pairs cell's `explore_share` as the docs quote it: "1-1: 9%, 2-3: 12%"."""
    return ", ".join(f"{key}: {100 * share:.0f}%"
                     for key, share in (cell.get("explore_share") or {}).items())


def run_pairs_problems(table: Table, cited: list[str]) -> list[str]:
    """`benchmarks/probes/run_pairs.py`'s controller table: a row per (workload, c), a column
    "k<N> / controller" per fixed arm (the file's `against_last[kN]`; "k<N> / controller,
    priced": its `priced.against_last[kN]`), "best fixed k" the arm with the lowest ratio,
    "explored" (where quoted) the share of each bucket's steps the controller explored; bold
    exactly the best arm's cell (timed or priced, each by its own) whose low end misses 0.98."""
    cells_of = {(cell["workload"], cell["concurrency"]): cell
                for name in cited for cell in result(name)["cells"]
                if is_controller_cell(cell)}
    heads = [label_of(head) for head in table.header]
    problems: list[str] = []
    for where, cells, cell in keyed_rows(table, cells_of, cited, problems):
        against = cell["against_last"]
        best = min(against, key=lambda arm: against[arm]["ratio"])
        for head, quoted in zip(heads, cells, strict=True):
            if head == "best fixed k" and label_of(quoted) != best:
                problems.append(f"{where}: best fixed k {quoted!r}, the file's is {best}")
            if head == "explored" and quoted != explored(cell):
                problems.append(f"{where}: explored {quoted!r}, the file's is {explored(cell)!r}")
            arm = re.fullmatch(r"(k\d+) / controller(, priced)?", head)
            if arm is None:
                continue
            # a priced column: the file's `priced` figures, bold by its own best arm
            source = (cell.get("priced") or {}).get("against_last", {}) if arm.group(2) \
                else against
            entry, match = source.get(arm.group(1)), _CELL.match(quoted)
            if entry is None or match is None:
                problems.append(f"{where}: {head} {quoted!r} against {entry}")
                continue
            problems += figure_problems(where, head, match,
                                        (entry["ratio"], entry["low"], entry["high"]))
            best_here = min(source, key=lambda k: source[k]["ratio"])
            miss = arm.group(1) == best_here and entry["low"] < RUN_PAIRS_MARGIN
            if (match.group(1) is not None) != miss:
                problems.append(f"{where}: {head} is {'' if match.group(1) else 'not '}bold, "
                                f"but {'' if miss else 'not '}a miss")
    return problems
