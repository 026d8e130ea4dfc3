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


# The floors of the house, bottom up: a module imports only from its own floor or below. Every module
# of recon has a floor here (a new top-level module or package fails until it is placed).
FLOORS = {
    # files, trees, the index and graph, profiles, findings as data: nothing about what runs
    0: {"errors", "safepath", "safetext", "links", "bounded", "columns", "progress", "cachekey", "cache", "cacheadmin",
        "wheelcache", "sources", "target", "facts", "pyfacts", "indexer", "graph", "tree", "tritonast", "profiles",
        "resources", "findings", "notanalyzed", "tunedconfigs", "shipped", "names", "yamltext", "astwalk"},
    # how recon reads SGLang's code; the derived-data key; roofline math; graph queries
    1: {"engine", "derived", "roofline", "query"},
    # what runs for one scenario: the runtime view, the MoE chain, the per-layer kernel map
    2: {"runtime", "kernels", "refkernel"},
    # the rules and their checks, which read what runs; the scenario that puts them together
    3: {"checks", "rules", "placement", "scan", "scenario"},
    # products and their output formats
    4: {"spec", "apply", "render"},
    # the command line
    5: {"cli", "__main__"},
}


def _floor(module: str):
    part = module.split(".")[1:2]
    name = part[0] if part else "__init__"
    return next((f for f, names in FLOORS.items() if name in names), None)


def test_every_module_has_a_floor():
    assert [m for m in import_graph(False) if m != "recon" and _floor(m) is None] == []


def test_no_import_runs_up_a_floor():
    up = [f"{a} ({_floor(a)}) -> {b} ({_floor(b)})" for a, b in import_graph(False).edges() if _floor(b) > _floor(a)]
    assert up == []


def test_the_floors_are_read():
    # the check itself can fail: runtime imports the engine, never the other way round
    G = import_graph(False)
    assert G.has_edge("recon.runtime.moe", "recon.engine.values") and _floor("recon.runtime.moe") > _floor("recon.engine.values")


def _private_imports(package: str) -> list[str]:
    """``module: from X import _name`` for every private name one module of the package imports from
    another (a name with a leading underscore is the defining module's own business)."""
    root = PACKAGES[package]
    out = []
    for p in root.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").split(".")[0] == package):
                out += [f"{_name(p, root)}: from {'.' * n.level}{n.module or ''} import {a.name}"
                        for a in n.names if a.name.startswith("_") and not a.name.startswith("__")]
    return out


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_private_name_is_imported_across_modules(package):
    assert _private_imports(package) == []


def test_the_private_import_check_can_fail(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("def _hidden():\n    return 1\n")
    (tmp_path / "b.py").write_text("from .a import _hidden, shown\n")
    monkeypatch.setitem(PACKAGES, "recon", tmp_path)
    assert _private_imports("recon") == [f"{tmp_path.name}.b: from .a import _hidden"]


def test_the_warm_path_does_not_import_the_graph_library():
    """A warm command whose products are cached reads no graph: importing the commands, every check
    (the registry imports them all), the scenario, the spec and the renderers must not import
    networkx (about a tenth of a second of a warm run). The same probe shows the check can fail."""
    import subprocess
    import sys

    probe = ("import sys; import recon.cli, recon.scenario, recon.spec, recon.render.sarif; "
             "from recon.checks import registry; registry(); {extra}"
             "print('networkx' in sys.modules)")
    root = str(Path(recon.__file__).resolve().parent.parent)

    def imported(extra: str = "") -> str:
        return subprocess.run([sys.executable, "-c", probe.format(extra=extra)], capture_output=True, text=True,
                              cwd=root, check=True).stdout.strip()

    assert imported() == "False"
    assert imported("import recon.graph; ") == "True"
