"""`vllm-specdec whatif`'s figures in the docs equal its result files: docs/whatif.md's tables
are whatif_check's, row for row, and docs/operations.md's real run is the kept output."""

from __future__ import annotations

from support.result_tables import RESULTS, ROOT, result


def whatif_rows(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("|---")]


def whatif_table_problems(page: str, generated: str) -> list[str]:
    """Rows of the page's tables citing whatif-check.json that the result file does not give."""
    known = set(whatif_rows(generated))
    return [f"{page}: row not in benchmarks/results/whatif-check.json: {row}"
            for row in whatif_rows(page_text(page)) if row not in known]


def page_text(page: str) -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.find("## Exactness, measured")
    return text[start:text.find("## The GPU prior")] if start >= 0 else ""


def test_whatif_tables_equal_their_result_file() -> None:
    from benchmarks.probes.whatif_check import markdown

    generated = markdown(result("whatif-check"))
    rows = whatif_rows(page_text("docs/whatif.md"))
    assert len(rows) >= 10, "docs/whatif.md quotes the exactness and prediction tables"
    assert whatif_table_problems("docs/whatif.md", generated) == []
    changed = generated.replace("| ngram | input_grounded | 56 |",
                                "| ngram | input_grounded | 57 |")
    assert whatif_table_problems("docs/whatif.md", changed), "a changed row is found"


def test_whatif_run_in_operations_is_the_kept_output() -> None:
    """docs/operations.md's real `whatif` run is benchmarks/results/whatif/whatif-multi_turn.txt
    (the command's output, kept with the command that made it)."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    start = text.index("A real run:")
    block = text[text.index("```console\n", start) + len("```console\n"):]
    block = block[:block.index("```")]
    kept = (RESULTS / "whatif" / "whatif-multi_turn.txt").read_text(encoding="utf-8")
    assert block == kept
