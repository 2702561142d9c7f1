"""The import graph of hetflow's source, built with ``ast``, has no cycle.

A cycle between modules works only as long as each side reaches for the
other's names after both have finished importing; it breaks on the first
import that moves to module level, and it hides which side a name belongs
to.  So the graph counts every import a module can execute: at module
level, inside functions and in ``try`` blocks (an import in a function is
an edge the first time the function runs).  Only ``if TYPE_CHECKING:``
bodies are left out: they never run.

Packages are modelled as Python executes them.  A node is a module; a
package is the node of its ``__init__``.  ``from P import x`` is an edge
to the module ``P.x`` where there is one (``from . import native`` names
the module ``native``, even though the package is initialised on the
way), and an edge to ``P`` itself only when ``x`` is a name that
``P/__init__.py`` defines.  Importing ``P.x`` never adds an edge to the
parents ``P``: Python initialises a package before any of its modules
and no module can avoid that, so such an edge would make every
``__init__`` that re-exports its own modules a false cycle.

:func:`import_graph` is the builder; ``engine/`` and ``executors/`` are
checked with it. The layers between the engine's rooms are import-linter's
contracts (``tests/test_import_contracts.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
#: the source folders and the import packages setup.py maps them onto
ENGINE, EXECUTORS = REPO / "engine", REPO / "executors"


def module_files(folder: Path, package: str) -> dict[str, Path]:
    """Every module under ``folder`` by its dotted name, ``package`` being the folder's own."""
    found = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if any(p.startswith(".") or p == "__pycache__" for p in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((package, *parts))] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node in ``tree``, at any depth, except under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name ``from <node.module>`` refers to, relative levels resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # in a package's __init__ one dot is the package itself; in a module, its package
    keep = len(base) - node.level + (1 if is_package else 0)
    if keep <= 0:
        raise ValueError(f"{module}: relative import beyond the top-level package")
    return ".".join(base[:keep] + ([node.module] if node.module else []))


def import_graph(folder: Path, package: str, prefix: str = "hetflow") -> nx.DiGraph:
    """The import graph of the modules under ``folder`` (importable as ``package``).

    Nodes are dotted module names; an edge ``a -> b`` says that running
    ``a`` may import ``b``, with the ``line`` of the first such import.
    Targets are kept when they start with ``prefix``, also outside
    ``folder`` (so a rule about other packages can be checked on the same
    graph); a target that is not one of the modules found is kept as named.
    """
    files = module_files(folder, package)
    graph = nx.DiGraph()
    graph.add_nodes_from(files)

    def add(src: str, dst: str, line: int) -> None:
        if dst != src and (dst == prefix or dst.startswith(prefix + ".")) and not graph.has_edge(src, dst):
            graph.add_edge(src, dst, line=line)

    for module, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(module, alias.name, node.lineno)
                continue
            base = _resolve(module, is_package, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # `from P import x`: the module P.x when there is one, else a name P defines
                add(module, sub if sub in files else base, node.lineno)
    return graph


def cycles(graph: nx.DiGraph, within: str | None = None) -> list[list[str]]:
    """The elementary cycles of ``graph`` (restricted to modules under ``within``), shortest first."""
    if within is not None:
        graph = graph.subgraph(n for n in graph if n == within or n.startswith(within + "."))
    # each cycle starts at its smallest name, so that a cycle prints the same way every run
    found = [c[c.index(min(c)):] + c[:c.index(min(c))] for c in nx.simple_cycles(graph)]
    return sorted(found, key=lambda c: (len(c), c))


def describe(graph: nx.DiGraph, cycle: list[str]) -> str:
    """A cycle as its edges with the line of each import: what to break, and where."""
    hops = zip(cycle, cycle[1:] + cycle[:1])
    return " -> ".join(f"{a} (line {graph.edges[a, b]['line']})" for a, b in hops) + f" -> {cycle[0]}"


def test_executors_have_no_import_cycle():
    graph = import_graph(EXECUTORS, "hetflow.executors")
    assert graph.number_of_edges() > 50          # the builder found the package's imports at all
    found = cycles(graph, "hetflow.executors")
    assert not found, "import cycles in executors/:\n" + "\n".join(describe(graph, c) for c in found[:20])


def test_the_engine_has_no_import_cycle():
    graph = import_graph(ENGINE, "hetflow.engine")
    assert graph.number_of_edges() > 200
    found = cycles(graph, "hetflow.engine")
    assert not found, "import cycles in engine/:\n" + "\n".join(describe(graph, c) for c in found[:20])


def test_executors_never_import_the_engine():
    graph = import_graph(EXECUTORS, "hetflow.executors")
    reaching = sorted((a, b) for a, b in graph.edges if b == "hetflow.engine" or b.startswith("hetflow.engine."))
    assert not reaching, reaching


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    # a <-> b only through an import inside a function, the way the emulator's cycles hid
    _write(tmp_path / "pkg", {
        "__init__.py": "from . import a, b\n",
        "a.py": "from .b import helper\n",
        "b.py": "def helper():\n    from . import a\n    return a\n",
    })
    graph = import_graph(tmp_path / "pkg", "hetflow.pkg")
    found = cycles(graph, "hetflow.pkg")
    assert found == [["hetflow.pkg.a", "hetflow.pkg.b"]]
    assert describe(graph, found[0]) == "hetflow.pkg.a (line 1) -> hetflow.pkg.b (line 2) -> hetflow.pkg.a"


def test_reexports_and_type_checking_imports_are_not_cycles(tmp_path):
    # the package re-exports its modules, which import each other through the package and by absolute
    # name; a TYPE_CHECKING import runs never: none of it is a cycle
    _write(tmp_path / "pkg", {
        "__init__.py": "from .a import f\nfrom .b import g\nfrom . import sub\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import g\n"
                "def f():\n    return 1\n",
        "b.py": "from hetflow.pkg import a\nfrom hetflow.pkg.sub import leaf\ndef g():\n    return a.f()\n",
        "sub/__init__.py": "from .leaf import h\n",
        "sub/leaf.py": "from .. import a\ndef h():\n    return 2\n",
    })
    graph = import_graph(tmp_path / "pkg", "hetflow.pkg")
    assert cycles(graph, "hetflow.pkg") == []
    assert set(graph.successors("hetflow.pkg.b")) == {"hetflow.pkg.a", "hetflow.pkg.sub.leaf"}
    assert set(graph.successors("hetflow.pkg.sub.leaf")) == {"hetflow.pkg.a"}


def test_a_name_a_package_defines_is_an_edge_to_its_init(tmp_path):
    # `from . import helper` where helper is a function of __init__: the module depends on the package's
    # code, and the package importing the module closes a real cycle
    _write(tmp_path / "pkg", {
        "__init__.py": "def helper():\n    return 1\n\ndef run():\n    from . import a\n    return a.go()\n",
        "a.py": "def go():\n    from . import helper\n    return helper()\n",
    })
    graph = import_graph(tmp_path / "pkg", "hetflow.pkg")
    assert cycles(graph, "hetflow.pkg") == [["hetflow.pkg", "hetflow.pkg.a"]]


@pytest.mark.parametrize("source, error", [("from ... import x\n", "beyond the top-level package")])
def test_a_relative_import_past_the_top_is_an_error(tmp_path, source, error):
    _write(tmp_path / "pkg", {"__init__.py": "", "a.py": source})
    with pytest.raises(ValueError, match=error):
        import_graph(tmp_path / "pkg", "pkg")
