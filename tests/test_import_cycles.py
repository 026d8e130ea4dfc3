"""The import graphs of recon and of reference_impl (networkx over each module's imports, read
with ast): no cycle, neither among the imports that run when a module is loaded nor through the
imports made inside functions. Imports under ``if TYPE_CHECKING:`` never run and are left out."""

import ast
from pathlib import Path

import networkx as nx

import pytest

import recon

ROOT = Path(recon.__file__).resolve().parent
PACKAGES = {"recon": ROOT, "reference_impl": ROOT.parent / "reference_impl"}


def _name(p: Path, root: Path) -> str:
    parts = [root.name, *p.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_statements(tree: ast.Module, module_level_only: bool):
    """The statements whose imports run: the module body (or every node), less TYPE_CHECKING blocks."""
    todo = list(tree.body)
    while todo:
        st = todo.pop()
        if isinstance(st, ast.If) and "TYPE_CHECKING" in ast.unparse(st.test):
            todo.extend(st.orelse)
            continue
        yield st
        if not module_level_only:
            todo.extend(ast.iter_child_nodes(st))


def import_graph(module_level_only: bool, package: str = "recon") -> nx.DiGraph:
    root = PACKAGES[package]
    mods = {_name(p, root): p for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    G = nx.DiGraph()
    G.add_nodes_from(mods)
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        tree = ast.parse(p.read_text())
        for st in _runtime_statements(tree, module_level_only):
            if isinstance(st, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - (st.level - 1)] if st.level else []
                target = ".".join(base + ([st.module] if st.module else [])) if st.level else (st.module or "")
                for c in [target] + [f"{target}.{a.name}" for a in st.names]:
                    # a module's own parent packages load before it whatever it imports: no edge
                    if c in mods and c != m and not m.startswith(c + "."):
                        G.add_edge(m, c)
            elif isinstance(st, ast.Import):
                G.add_edges_from((m, a.name) for a in st.names if a.name in mods and a.name != m)
    return G


def test_the_graph_is_read():
    G = import_graph(True)
    assert G.has_edge("recon.engine.engine", "recon.engine.evaluator")
    assert G.has_edge("recon.kernels.step", "recon.runtime.moe")
    assert import_graph(True, "reference_impl").has_edge("reference_impl.moe", "reference_impl.configs")
    # an import inside a function is an edge of the full graph only
    assert not import_graph(True).has_edge("recon.engine.evaluator", "recon.engine.registries")
    assert import_graph(False).has_edge("recon.engine.evaluator", "recon.engine.registries")


@pytest.mark.parametrize("package", sorted(PACKAGES))
@pytest.mark.parametrize("module_level_only", [True, False], ids=["at-load", "inside-functions"])
def test_no_import_cycle(package, module_level_only):
    cycles = list(nx.simple_cycles(import_graph(module_level_only, package)))
    assert cycles == [], cycles
