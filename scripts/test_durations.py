"""Where the suite's time goes: per test file, its tests, seconds and vLLM processes started.

    SPECDEC_COUNT_PROCESSES=/tmp/procs.jsonl bash scripts/test.sh --junitxml=/tmp/junit.xml
    python scripts/test_durations.py /tmp/junit.xml /tmp/procs.jsonl [--top 25]

Reads pytest's JUnit XML (each test's seconds, module-scoped fixture set-up included in the
file's first test) and the process counts `tests/support/process_count.py` wrote, and prints
a Markdown table (docs/testing.md): the files by seconds, then the tier totals. With two
pytest workers the seconds add up to more than the wall clock: they are each test's own.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from collections.abc import Sequence


def file_of(classname: str) -> str:
    """`tests.engine.test_observability.TestOptedIn` -> `tests/engine/test_observability.py`."""
    parts = [part for part in classname.split(".") if not part[:1].isupper()]
    return "/".join(parts) + ".py"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit")
    parser.add_argument("processes", nargs="?")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    tests: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(args.junit).iter("testcase"):
        name = file_of(case.get("classname", ""))
        tests[name] += 1
        seconds[name] += float(case.get("time", 0.0))
    processes: dict[str, int] = defaultdict(int)
    if args.processes:
        with open(args.processes, encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                processes[row["file"]] += row["processes"]
    print("| file | tests | seconds | vLLM processes |")
    print("|---|---|---|---|")
    ranked = sorted(seconds, key=lambda name: -seconds[name])
    for name in ranked[:args.top]:
        print(f"| `{name}` | {tests[name]} | {seconds[name]:.0f} | {processes.get(name, 0)} |")
    rest = ranked[args.top:]
    if rest:
        print(f"| {len(rest)} other files | {sum(tests[n] for n in rest)} | "
              f"{sum(seconds[n] for n in rest):.0f} | {sum(processes.get(n, 0) for n in rest)} |")
    tiers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
    for name in seconds:
        tier = tiers[name.split("/")[1] if name.count("/") > 1 else "tests"]
        tier[0] += tests[name]
        tier[1] += seconds[name]
        tier[2] += processes.get(name, 0)
    print()
    print("| tier | tests | seconds | vLLM processes |")
    print("|---|---|---|---|")
    for tier, (count, total, started) in sorted(tiers.items(), key=lambda kv: -kv[1][1]):
        print(f"| {tier} | {count:.0f} | {total:.0f} | {started:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
