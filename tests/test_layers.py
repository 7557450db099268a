"""The layers of docs/broker.md ("Layers"), read from the source: no module imports a package of its own
layer or of a layer above it, and no modules import each other in a loop, except through imports made for
the type checker alone (under ``if TYPE_CHECKING:``). An import inside a function counts: it runs too."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Bottom up. A package may import the packages of the rows below its own, and none of its row.
LAYERS: list[tuple[str, ...]] = [
    ("common",),
    ("store", "filter", "remoting"),
    ("schedule", "acl", "ha", "controller"),
    ("namesrv", "broker", "client"),
    ("proxy", "console", "spark"),
    ("admin_cli",),
    ("mqadmin", "cluster"),
    ("cli",),
]
RANK = {pkg: i for i, row in enumerate(LAYERS) for pkg in row}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the module (or package) imported, dotted
    line: int
    for_type_checker: bool


def modules(root: Path, package: str = "tidalmq") -> dict[str, Path]:
    """The modules of ``package`` under ``root`` (not src's other top-level packages: pyspark_tidalmq is
    PySpark's entry point for data source discovery, which imports tidalmq.spark from outside)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for stmt in node.body:
                ids.update(id(n) for n in ast.walk(stmt))
    return ids


@functools.cache
def imports(root: Path, package: str = "tidalmq") -> tuple[Import, ...]:
    """Every import of a module of ``package`` by another, resolved to the module it loads."""
    mods = modules(root, package)
    found = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_only = _type_checking_nodes(tree)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                # ``from pkg import mod`` loads pkg.mod; ``from pkg import name`` loads pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] == package:
                    found.append(Import(name, target, getattr(node, "lineno", 0), id(node) in typing_only))
    return tuple(found)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward(found: tuple[Import, ...], rank: dict[str, int]) -> list[str]:
    out = []
    for imp in found:
        src, dst = layer_of(imp.source), layer_of(imp.target)
        if src == dst or imp.target == "tidalmq":  # the package's face: its version, for every layer
            continue
        if src not in rank or dst not in rank:
            out.append(f"{imp.source}:{imp.line} imports {imp.target}: a package with no layer ({src} or {dst})")
        elif rank[dst] >= rank[src]:
            out.append(f"{imp.source}:{imp.line} imports {imp.target}: {src} may not import {dst}")
    return out


def cycles(found: tuple[Import, ...]) -> list[list[str]]:
    """The loops of the import graph (its strongly connected components of more than one module)."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if not imp.for_type_checker:
            graph.setdefault(imp.source, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        # Tarjan's algorithm, iterative: the package is deeper than the recursion limit likes
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def test_every_package_of_tidalmq_has_a_layer() -> None:
    packages = {layer_of(m) for m in modules(SRC) if m != "tidalmq"}
    assert packages == set(RANK), f"layers to add to docs/broker.md and here: {sorted(packages - set(RANK))}"


def test_no_import_runs_up_the_layers() -> None:
    assert upward(imports(SRC), RANK) == []


def test_no_import_cycle_beyond_the_type_checker() -> None:
    assert cycles(imports(SRC)) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_find_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    _write(tmp_path, {
        "tidalmq/__init__.py": "",
        "tidalmq/common/__init__.py": "",
        "tidalmq/common/a.py": "def f():\n    from tidalmq.store import b\n",  # up, and a loop at run time
        "tidalmq/store/__init__.py": "",
        "tidalmq/store/b.py": "from tidalmq.common.a import f\nfrom . import c\n",
        "tidalmq/store/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tidalmq.store.b import x\n",
    })
    found = imports(tmp_path)
    assert upward(found, {"common": 0, "store": 1}) == [
        "tidalmq.common.a:2 imports tidalmq.store.b: common may not import store"]
    assert cycles(found) == [["tidalmq.common.a", "tidalmq.store.b"]]  # b <-> c is for the type checker only
    assert Import("tidalmq.store.b", "tidalmq.store.c", 2, False) in found
