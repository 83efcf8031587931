"""Does the suite still catch breakage? Break three things on purpose, one at a time, and list
the tests that fail (docs/testing.md, "Breaking it on purpose").

    python scripts/mutants.py [--tree DIR] [--out FILE] [-- PYTEST ARGS]

Each mutant is a text replacement in one source file of a copy of `--tree` (default: this
checkout's committed HEAD, `git archive`), so the checkout itself is never touched. The copy's
tests run with the copy first on `sys.path` (`PYTHONPATH`), in this checkout's `.venv`; the
default pytest arguments are the fast tier's (`-m "not engine or contract"`, two workers). The
unbroken copy runs first: a mutant's failures are those that pass there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    what: str


MUTANTS = (
    Mutant("decision-rule", "vllm_specdec_plugin/core/rules.py",
           "if method is not None and method not in caps.async_methods:",
           "if False:",
           "a decision rule: async scheduling is no longer turned off for a method the platform "
           "runs only synchronously (core/rules.async_incompatibility)"),
    Mutant("scheduler-guard", "vllm_specdec_plugin/engine/changes/core_sched_scheduler.py",
           "    elif spec is not None and isinstance(lookup, list) and len(lookup) > 1 "
           "and ranges is not None \\\n"
           "            and [list(map(int, r)) for r in ranges] == spec[\"schedule\"]:",
           "    elif spec is not None and isinstance(lookup, list) and len(lookup) > 1:",
           "a scheduler change's guard: the controller takes over any per-batch schedule, a "
           "user's own included (engine/changes/core_sched_scheduler.runtime_of)"),
    Mutant("parser-bound", "vllm_specdec_plugin/core/limits.py",
           "MAX_ANNOTATIONS_BYTES = 256 * KIB",
           "MAX_ANNOTATIONS_BYTES = 1 << 40",
           "a parser bound: the annotations file is read whatever its size "
           "(core/limits.MAX_ANNOTATIONS_BYTES)"),
)
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def copy_tree(source: Path, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(source), "archive", "HEAD"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def run_tests(tree: Path, pytest_args: list[str]) -> tuple[set[str], float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-q",
                           "-p", "no:cacheprovider", "-rfE", *pytest_args],
                          cwd=tree, env=env, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    return set(FAILED.findall(proc.stdout)), time.monotonic() - start, tail[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    pytest_args = args.pytest_args or ["-m", "not engine or contract", "-n", "2",
                                       "--dist", "loadfile"]
    report: dict = {"tree": str(args.tree), "pytest": pytest_args, "mutants": []}
    with tempfile.TemporaryDirectory(prefix="specdec-mutants-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        copy_tree(args.tree, tree)
        for venv in (".venv", ".venv-rbln", ".venv-vllm033"):  # the contract tests' venvs
            if (ROOT / venv).is_dir():
                (tree / venv).symlink_to(ROOT / venv)
        base, seconds, tail = run_tests(tree, pytest_args)
        report["unbroken"] = {"failed": sorted(base), "seconds": round(seconds), "tail": tail}
        print(f"unbroken: {len(base)} failing, {seconds:.0f} s ({tail})", flush=True)
        for mutant in MUTANTS:
            target = tree / mutant.path
            text = target.read_text()
            if text.count(mutant.old) != 1:
                print(f"{mutant.name}: the text to break is not in {mutant.path}", flush=True)
                report["mutants"].append({"name": mutant.name, "applied": False})
                continue
            target.write_text(text.replace(mutant.old, mutant.new))
            try:
                failed, seconds, tail = run_tests(tree, pytest_args)
            finally:
                target.write_text(text)
            caught = sorted(failed - base)
            report["mutants"].append({"name": mutant.name, "what": mutant.what,
                                      "applied": True, "caught_by": caught,
                                      "seconds": round(seconds), "tail": tail})
            print(f"{mutant.name}: {len(caught)} tests fail ({seconds:.0f} s)", flush=True)
            for test in caught:
                print(f"  {test}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(m.get("caught_by") for m in report["mutants"]) else 1


if __name__ == "__main__":
    sys.exit(main())
