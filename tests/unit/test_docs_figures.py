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
- Sentences: the figures and counts quoted in prose (`CLAIMS`) are computed from the files.

Pure: reads the files only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from support.result_tables import (
    _CELL,
    _RESULT_REF,
    PAGES,
    RESULTS,
    ROOT,
    RUN_PAIRS_MARGIN,
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

from benchmarks.paired.targets import adaptive_target


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


# --- figures quoted in sentences ----------------------------------------------------------------
def pooled_medians(name: str) -> list[float]:
    return [p["ratio_median"] for p in result(name)["pooled"]]


def slashed(values: list[float]) -> str:
    return " / ".join(f"{value:.3f}" for value in values)


def band(values: list[float]) -> str:
    """The tightest 2-digit range that holds every value as the tables quote it (3 digits)."""
    shown = [round(value, 3) for value in values]
    return f"{math.floor(min(shown) * 100 + 1e-9) / 100:.2f}-" \
           f"{math.ceil(max(shown) * 100 - 1e-9) / 100:.2f}"


def moved_up(before: str, after: str) -> tuple[str, str]:
    """In how many of the cells both runs measured the later median is higher."""
    earlier = {(c["workload"], c["concurrency"]): c["ratio_median"]
               for c in result(before)["cells"]}
    later = {(c["workload"], c["concurrency"]): c["ratio_median"]
             for c in result(after)["cells"] if (c["workload"], c["concurrency"]) in earlier}
    return str(sum(later[key] > earlier[key] for key in later)), str(len(later))


def phrase(cells: list[dict[str, Any]]) -> str:
    """`input_grounded c=4, multi_turn c=4 and 16`: cells by workload, in the file's order."""
    by_workload: dict[str, list[str]] = {}
    for cell in cells:
        by_workload.setdefault(cell["workload"], []).append(str(cell["concurrency"]))
    return ", ".join(f"{workload} c={' and '.join(c)}" for workload, c in by_workload.items())


def null_met() -> tuple[str, ...]:
    cells = result("none-vs-null")["cells"]
    met = [c for c in cells if c["met"]]
    return str(len(met)), str(len(cells)), phrase(met), str(len(cells) - len(met))


def null_missed_medians() -> tuple[str]:
    """The misses whose median is below 0.99 too (every miss is one by its interval's low end)."""
    missed = [c for c in result("none-vs-null")["cells"] if not c["met"]]
    assert all(c["ratio_interval"][0] < 0.97 for c in missed)
    return (phrase([c for c in missed if c["ratio_median"] < 0.99]),)


def aa_misses_adaptive_target() -> tuple[str, str]:
    """`none` against `none` measured against `adaptive`'s targets against `none`."""
    cells = result("aa")["cells"]
    missed = [c for c in cells if not adaptive_target(
        "none", c["workload"], c["concurrency"], c["ratio_median"], c["ratio_interval"][0])["met"]]
    return str(len(missed)), str(len(cells))


def null_to_aa() -> str:
    """The tightest 2-digit bound on |null - A/A| pooled, at the 3 digits the tables show."""
    gaps = [abs(round(a, 3) - round(b, 3))
            for a, b in zip(pooled_medians("none-vs-null"), pooled_medians("aa"), strict=True)]
    return f"{math.ceil(max(gaps) * 100 - 1e-9) / 100:.2f}"


@dataclass(frozen=True)
class Claim:
    page: str
    pattern: str  # a regex over the page with its whitespace collapsed; groups = the figures
    expected: Callable[[], tuple[str, ...]]


def whatif_log_only_shortfall() -> tuple[str, ...]:
    rows = [r for r in result("whatif-check")["exactness"] if "workload" in r]
    worst = min(rows, key=lambda r: r["replay_log_only_error"]["accepted_tokens"])
    return (f"{-100 * worst['replay_log_only_error']['accepted_tokens']:.1f}%",
            f"{worst['method']}, {worst['workload']}",
            f"{worst['replay_log_only']['accepted_tokens']:,}",
            f"{worst['engine']['accepted_tokens']:,}")


def whatif_speeds() -> tuple[str, ...]:
    speed = {r["method"]: r["replay_tokens_per_s"] for r in result("whatif-check")["exactness"]
             if "replay_tokens_per_s" in r}
    return f"{speed['ngram'] / 1e6:.1f}", f"{speed['suffix'] / 1e6:.2f}"


def whatif_bounds_speeds() -> tuple[str, ...]:
    """Per drafter, the lowest and highest workload's median replay speed."""
    by: dict[str, list[float]] = {}
    for cell in result("whatif-bounds")["replay_speed"]:
        by.setdefault(cell["drafter"], []).append(cell["tokens_per_s"])
    out: list[str] = []
    for drafter, scale, digits in (("v1-ngram", 1e6, 2), ("mrv2-ngram-gpu", 1e6, 2),
                                   ("v1-suffix", 1e3, 0), ("v1-adaptive", 1e3, 0)):
        out += [f"{min(by[drafter]) / scale:.{digits}f}", f"{max(by[drafter]) / scale:.{digits}f}"]
    return tuple(out)


def whatif_bounds_case(name: str, case: str, *keys: str) -> tuple[str, ...]:
    """Figures of one worst-input case, as the docs write them."""
    found = result(name)[case]
    values = {"seconds": f"{found['seconds']:.1f}", "peak": f"{found['peak_rss_mib']:,}",
              "lines": f"{found.get('lines', 0):,}",
              "requests": f"{found['traffic']['requests']:,}",
              "read": f"{found['traffic']['requests_read']:,}",
              "replay": f"{found['replay_tokens_per_s'] / 1e6:.2f}"}
    return tuple(values[key] for key in keys)


def whatif_runs_met(costs: str) -> str:
    """Cells of the run comparison met like for like: steady at 1, lockstep at 4."""
    return str(sum(r["met"] for r in result("whatif-check")["runs"]
                   if r.get("costs") == costs
                   and r["model"] == ("steady" if r["concurrency"] == 1 else "lockstep")))


def whatif_met(costs: str) -> str:
    return str(sum(r["met"] for r in result("whatif-check")["prediction"]
                   if r["costs"] == costs))


def run_pairs_met(name: str) -> tuple[str, str]:
    """(met, cells): controller cells whose best fixed k's interval low is at least 0.98."""
    cells = [c for c in result(name)["cells"] if c["arms"][-1] == "controller"]
    met = sum(min(c["against_last"].values(), key=lambda e: e["ratio"])["low"]
              >= RUN_PAIRS_MARGIN for c in cells)
    return str(met), str(len(cells))


CLAIMS = [
    Claim("docs/schedule-controller.md", r"\*\*Met in (\d+) of (\d+) cells\*\* by the interval",
          lambda: run_pairs_met("controller-runs")),
    Claim("docs/schedule-controller.md", r"meets the target by its low end \((\d+) of (\d+)\)",
          lambda: run_pairs_met("controller-runs-carry")),
    Claim("docs/schedule-controller.md", r"Met in (\d+) of (\d+) cells there",
          lambda: run_pairs_met("controller-runs-fixed-pace")),
    Claim("README.md", r"interval low\) in (\d+) of (\d+) cells\. By the point",
          lambda: run_pairs_met("controller-runs")),
    Claim("docs/whatif.md", r"the prediction meets the target in (\d) of 8 cells",
          lambda: (whatif_runs_met("engine costs"),)),
    Claim("docs/whatif.md", r"With the CPU prior alone it meets (\d) of 8",
          lambda: (whatif_runs_met("cpu prior"),)),
    Claim("docs/whatif.md", r"fall short by what the engine accepted past max_tokens, up to "
          r"(\S+) here \((\w+, \w+): ([\d,]+) against ([\d,]+)\)", whatif_log_only_shortfall),
    Claim("docs/whatif.md", r"The replay runs at ([\d.]+) M tokens/s for ngram and ([\d.]+) M",
          whatif_speeds),
    Claim("README.md", r"the default against no speculation reads ([\d.]+) / ([\d.]+) / ([\d.]+) at"
          r"\s+c=1 / 16 / 32",
          lambda: tuple(f"{c['ratio_median']:.3f}" for c in sorted(
              result("none-vs-plugin-sharegpt-16")["cells"], key=lambda c: c["concurrency"]))),
    Claim("docs/whatif.md", r"v1-ngram ([\d.]+)-([\d.]+) M tokens/s, mrv2-ngram-gpu ([\d.]+)-"
          r"([\d.]+) M, v1-suffix (\d+)-(\d+) k,\s+v1-adaptive (\d+)-(\d+) k",
          whatif_bounds_speeds),
    Claim("docs/whatif.md", r"the V1 n-gram replay ran at ([\d.]+) M tokens/s",
          lambda: whatif_bounds_case("whatif-bounds", "file", "replay")),
    Claim("docs/whatif.md", r"skips nothing\) takes ([\d.]+) s and ([\d,]+) MiB of peak RSS; "
          r"the bound\s+on messages rendered per line keeps (\d+) of",
          lambda: whatif_bounds_case("whatif-bounds", "line", "seconds", "peak", "requests")),
    Claim("docs/whatif.md", r"\(([\d,]+) lines of 16 KiB, `MAX_TRAFFIC_BYTES`\)\s+takes ([\d.]+) s "
          r"and ([\d,]+) MiB of peak RSS\. The bound on tokens held \(256 Mi, 1 GiB as int32\)\s+"
          r"stops the tokenizing after ([\d,]+) requests, and the reading with it: ([\d,]+) lines",
          lambda: whatif_bounds_case("whatif-bounds", "file", "lines", "seconds", "peak",
                                     "requests", "read")),
    Claim("docs/whatif.md", r"the same file took ([\d.]+) s and ([\d,]+) MiB,\s+reading all "
          r"([\d,]+) lines",
          lambda: whatif_bounds_case("whatif-bounds-held", "file", "seconds", "peak", "read")),
    Claim("docs/whatif.md", r"Met in (\d) of 8 cells with the engine's costs",
          lambda: (whatif_met("engine costs"),)),
    Claim("docs/whatif.md", r"and (\d) of 8 with the CPU prior",
          lambda: (whatif_met("cpu prior"),)),
    Claim("README.md", r"Pooled it is within (\S+) of `none` at every concurrency",
          lambda: (band(pooled_medians("none-vs-plugin")),)),
    Claim("README.md", r"at every concurrency \(pooled ([\d. /]+?) at 1 / 4 / 16 / 32, "
          r"A/A ([\d. /]+?)\)",
          lambda: (slashed(pooled_medians("none-vs-null")), slashed(pooled_medians("aa")))),
    Claim("docs/benchmarks.md", r"the plugin's default is within (\S+) of `none`",
          lambda: (band(pooled_medians("none-vs-plugin")),)),
    Claim("docs/benchmarks.md", r"Met: (\d+) of (\d+) cells \(([^)]*)\)\. Missed: (\d+),",
          null_met),
    Claim("docs/benchmarks.md", r"every one by its interval's lower end \(([^)]*) also have a "
          r"median below 0\.99\)", null_missed_medians),
    Claim("docs/benchmarks.md", r"A/A run's own ratio at every concurrency \(([^)]*)\)",
          lambda: (", ".join(f"{a:.3f} vs {b:.3f}" for a, b in zip(
              pooled_medians("none-vs-null"), pooled_medians("aa"), strict=True)),)),
    Claim("docs/benchmarks.md", r"pooled, `null` is within ([\d.]+) of the A/A run's own ratio",
          lambda: (null_to_aa(),)),
    Claim("docs/adaptive.md", r"none against none gave (\S+) pooled",
          lambda: (band(pooled_medians("aa")),)),
    Claim("docs/adaptive.md", r"Against `kaito-static` it moved up in (\d+) of (\d+) cells",
          lambda: moved_up("adaptive-run2/kaito-static-vs-adaptive", "kaito-static-vs-adaptive")),
    Claim("docs/adaptive.md", r"pooled per concurrency, second run: ([\d. /]+); now ([\d. /]+)\)",
          lambda: (slashed(pooled_medians("adaptive-run2/kaito-static-vs-adaptive")),
                   slashed(pooled_medians("kaito-static-vs-adaptive")))),
    Claim("docs/adaptive.md", r"\(pooled ([\d. /]+) then, ([\d. /]+) now",
          lambda: (slashed(pooled_medians("adaptive-run2/none-vs-adaptive")),
                   slashed(pooled_medians("none-vs-adaptive")))),
    Claim("docs/adaptive.md", r"`none` against itself fails them in (\d+) of (\d+) cells",
          aa_misses_adaptive_target),
]


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
