"""No import cycle among the plugin's modules, counting imports inside functions too (a lazy
import only hides a cycle until someone moves it to the top of the file)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "vllm_specdec_plugin"


def module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the plugin modules it imports anywhere in its file."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    head = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*head, base] if base else head)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    graph[name].add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names)
        graph[name] = {target for target in graph[name] if target in modules} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_plugin_has_no_import_cycle() -> None:
    assert cycles(module_graph()) == []


def test_the_check_finds_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    """The two cycles issue 38 found had one lazy import each: the check must see such."""
    package = tmp_path / "vllm_specdec_plugin"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "engine" / "registry.py").write_text("from . import hook\n")
    (package / "engine" / "hook.py").write_text(
        "def f():\n    from vllm_specdec_plugin.engine import registry\n")
    assert cycles(module_graph(package)) == [["vllm_specdec_plugin.engine.hook",
                                              "vllm_specdec_plugin.engine.registry"]]
