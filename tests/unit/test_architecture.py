"""The import graph: no cycles between the project's modules (function-level imports included),
and no module reaching into another module's private names.

import-linter checks the layer and purity contracts (``pyproject.toml``); a cycle inside a layer
is what it cannot see, and an import hidden inside a function is still an import.
"""

from __future__ import annotations

from pathlib import Path

import grimp

PACKAGES = ("coordinator", "p2p", "node", "sim", "engine")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(m)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.z")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y", "a.z"]]


def _private_reaches(root: Path) -> list[str]:
    """``module._name`` uses and ``from module import _name`` across the project's modules."""
    import ast

    found: list[str] = []
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text())
            modules: dict[str, str] = {}
            for n in ast.walk(tree):
                if isinstance(n, ast.Import):
                    for a in n.names:
                        modules[a.asname or a.name.split(".")[0]] = a.name
                elif isinstance(n, ast.ImportFrom) and n.module:
                    for a in n.names:
                        if _private(a.name) and n.module.split(".")[0] in PACKAGES:
                            found.append(f"{f.relative_to(root)}:{n.lineno} imports {a.name}")
                        modules.setdefault(a.asname or a.name, f"{n.module}.{a.name}")
            for n in ast.walk(tree):
                if (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and _private(n.attr)
                    and modules.get(n.value.id, "").split(".")[0] in PACKAGES
                ):
                    found.append(f"{f.relative_to(root)}:{n.lineno} uses {n.value.id}.{n.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """A private name is private to its module: another module calling it is a seam to close
    (make it public and documented, or move the caller)."""
    root = Path(__file__).resolve().parents[2]
    assert _private_reaches(root) == []


def test_the_private_reach_finder_finds_one(tmp_path: Path) -> None:
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "a.py").write_text(
        "from coordinator.metadata import flatbuffers_serde as fbs\n"
        "from coordinator.x import _hidden\n"
        "fbs._encode_table(1)\n"
    )
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
    assert _private_reaches(tmp_path) == [
        "node/a.py:2 imports _hidden",
        "node/a.py:3 uses fbs._encode_table",
    ]


# The modules at the top of node/ (docs/architecture.md, "The rooms of node/"): the two
# composition roots' entry points (cli, compose), the Python API, the home, its lock and its
# configuration, and the engine clients. A use case belongs in node/app behind ports, an adapter
# in node/adapters: a new module here is a room without a floor.
ROOT = Path(__file__).resolve().parents[2]
TOP_OF_NODE = {
    "__init__",
    "api",
    "cli",
    "compose",
    "config",
    "engine_client",
    "engine_router",
    "home",
    "home_lock",
    "lifeline",
}


def test_nothing_loose_at_the_top_of_node() -> None:
    found = {p.stem for p in (ROOT / "node").glob("*.py")}
    assert found == TOP_OF_NODE, (
        f"new at the top of node/: {sorted(found - TOP_OF_NODE)} (a use case goes in node/app, "
        f"an adapter in node/adapters); gone: {sorted(TOP_OF_NODE - found)}"
    )


def _hand_written_commands(root: Path) -> list[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "house_measures", ROOT / "tests" / "bench" / "house_measures.py"
    )
    assert spec is not None and spec.loader is not None
    measures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measures)
    found: list[str] = measures.hand_written_commands(root)
    return found


def test_every_command_is_declared() -> None:
    # A typer command written by hand, or an RPC method a daemon module registers itself,
    # escapes the declarations (node/commands): their JSON, rpc.discover and the parity test.
    assert _hand_written_commands(ROOT) == []


def test_the_hand_written_command_finder_finds_them(tmp_path: Path) -> None:
    (tmp_path / "node" / "daemon").mkdir(parents=True)
    (tmp_path / "node" / "cli.py").write_text("@app.command()\ndef init() -> None: ...\n")
    (tmp_path / "node" / "daemon" / "rpc.py").write_text('registry.add("x.y", handler)\n')
    assert _hand_written_commands(tmp_path) == ["node/cli.py:2", "node/daemon/rpc.py:1"]
