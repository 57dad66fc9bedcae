"""The measures of issue 42 ("a house a newcomer can live in") that a script can take from the
source, for before/after tables: functions over 80 lines, type names defined more than once,
``__getattr__`` forwarding in ``node/`` and commands written by hand (not declared).

Run: ``.venv/bin/python tests/bench/house_measures.py [TREE]`` (default: this checkout); a tree
at another commit: ``git worktree add /tmp/old REV`` and pass ``/tmp/old``.

A type name is a top-level class, or a top-level alias whose name is capitalised and whose value
is a type expression (``Name = Callable[...]``, ``A | B``); tests are not counted.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
from pathlib import Path

PACKAGES = ("coordinator", "p2p", "node", "sim", "engine", "procutil")


def _sources(root: Path) -> list[Path]:
    return [
        f for pkg in PACKAGES if (root / pkg).is_dir() for f in sorted((root / pkg).rglob("*.py"))
    ]


def long_functions(root: Path, over: int = 80) -> list[tuple[int, str]]:
    """``(lines, "path:name")`` of every function longer than ``over`` lines, longest first."""
    out = []
    for f in _sources(root):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > over:
                    out.append((lines, f"{f.relative_to(root)}:{node.name}"))
    return sorted(out, reverse=True)


def duplicate_type_names(root: Path) -> dict[str, list[str]]:
    """Type names defined in more than one place, with the files defining them."""
    defs: dict[str, list[str]] = collections.defaultdict(list)
    for f in _sources(root):
        for node in ast.parse(f.read_text()).body:
            name = None
            if isinstance(node, ast.ClassDef):
                name = node.name
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Subscript | ast.BinOp | ast.Attribute | ast.Name)
            ):
                target = node.targets[0].id
                if target[:1].isupper() and not target.isupper():
                    name = target
            if name is not None:
                defs[name].append(str(f.relative_to(root)))
    return {k: v for k, v in sorted(defs.items()) if len(v) > 1}


def getattr_forwarding(root: Path) -> list[str]:
    """``path:line`` of every ``__getattr__`` defined in ``node/``."""
    out = []
    for f in sorted((root / "node").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                out.append(f"{f.relative_to(root)}:{node.lineno}")
    return out


def hand_written_commands(root: Path) -> list[str]:
    """``path:line`` of every command not generated from a declaration: a typer
    ``@<app>.command(...)`` decorator in ``node/`` (the generator in ``node/commands/cli.py``
    calls ``.command(name)`` without decorating), and every RPC method a daemon module
    registers itself (``registry.add`` outside ``build_registry``'s loop over the
    declarations)."""
    out = []
    for f in sorted((root / "node").rglob("*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for dec in node.decorator_list:
                    call = dec.func if isinstance(dec, ast.Call) else dec
                    if isinstance(call, ast.Attribute) and call.attr == "command":
                        out.append(f"{f.relative_to(root)}:{node.lineno}")
            if (
                f.parts[-2] == "daemon"
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add", "method")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "registry"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                out.append(f"{f.relative_to(root)}:{node.lineno}")
    return out


def main() -> None:
    """Print the measures as one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("tree", nargs="?", default=str(Path(__file__).resolve().parents[2]))
    root = Path(ap.parse_args().tree)
    longest = long_functions(root)
    dups = duplicate_type_names(root)
    report = {
        "functions_over_80_lines": len(longest),
        "longest": [f"{n} {name}" for n, name in longest[:10]],
        "type_names_defined_more_than_once": len(dups),
        "duplicate_type_names": dups,
        "getattr_in_node": getattr_forwarding(root),
        "hand_written_commands": hand_written_commands(root),
        "daemon_lines": len((root / "node/daemon/daemon.py").read_text().splitlines()),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
