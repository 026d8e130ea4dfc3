"""The index: bad files become diagnostics, the cache is reused, patched, rebuilt and shared safely."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from recon.indexer import build_index
from recon.target import from_path
from recon.tree import load
from tests.conftest import make_tree


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("RECON_CACHE_DIR", str(d))
    return d


def _tree(tmp_path, files):
    root = make_tree(tmp_path / "t", files)
    return from_path(root)


def test_bad_files_become_diagnostics(tmp_path, cache):
    target = _tree(
        tmp_path,
        {
            "sglang/srt/ok.py": "def f():\n    return 1\n",
            "sglang/srt/broken.py": "def f(:\n",
            "sglang/srt/configs/bad.json": "{not json",
            "sglang/srt/configs/good.json": '{"1": {"BLOCK_SIZE_M": 16}}',
        },
    )
    root = target.source.root
    (root / "sglang/srt/binary.py").write_bytes(b"\x00\x01\x02" * 100)
    (root / "sglang/srt/latin.py").write_bytes("# caf\xe9\ndef g():\n    return 1\n".encode("latin-1"))
    (root / "sglang/srt/declared.py").write_bytes("# -*- coding: latin-1 -*-\ndef h():\n    return 'caf\xe9'\n".encode("latin-1"))
    (root / "sglang/srt/huge.py").write_bytes(b"x = 1\n" * (1024 * 1024))
    index = build_index(target)
    diags = dict(index.diagnostics)
    assert diags["sglang/srt/broken.py"].startswith("does not parse")
    assert diags["sglang/srt/binary.py"] == "skipped: binary content"
    assert diags["sglang/srt/huge.py"].startswith("skipped: larger than")
    assert diags["sglang/srt/configs/bad.json"].startswith("invalid JSON")
    assert "sglang/srt/configs/good.json" not in diags
    # Python refuses to import Latin-1 without a coding line, though ast.parse takes it
    assert diags["sglang/srt/latin.py"] == "not UTF-8 (byte 0xe9 on line 1) and no coding line: Python cannot import it"
    assert "sglang/srt/declared.py" not in diags  # declared: read as declared
    assert [d.qualname for d in index.facts("sglang/srt/declared.py").defs] == ["h"]
    # and the graph still builds around them
    tree = load(target)
    assert "sglang.srt.ok.f" in tree.graph and "sglang.srt.latin.g" not in tree.graph and "sglang.srt.declared.h" in tree.graph


def test_warm_patch_and_rebuild(tmp_path, cache):
    target = _tree(
        tmp_path,
        {
            "sglang/srt/a.py": "def helper():\n    pass\n",
            "sglang/srt/b.py": "from sglang.srt.a import helper\ndef run():\n    helper()\n",
        },
    )
    first = load(target)
    assert first.timings["graph"] == "built" and first.index.stats["extracted"] >= 2
    warm = load(target)
    assert warm.timings["graph"] == "cached" and warm.index.stats["extracted"] == 0
    # a body edit keeps the interface: the graph is patched, the call moves a line down
    b = target.source.root / "sglang/srt/b.py"
    b.write_text("from sglang.srt.a import helper\ndef run():\n    x = 1\n    helper()\n")
    patched = load(target)
    assert patched.timings["graph"] == "patched" and patched.index.stats["extracted"] == 1
    edges = [e for _, v, e in patched.graph.out_edges("sglang.srt.b.run", data=True) if v == "sglang.srt.a.helper"]
    assert [e["line"] for e in edges] == [4]
    # a new definition changes the interface: rebuilt
    b.write_text(b.read_text() + "def more():\n    run()\n")
    rebuilt = load(target)
    assert rebuilt.timings["graph"] == "built"
    assert "sglang.srt.b.more" in rebuilt.graph


def test_a_cached_graph_is_read_on_first_use(tmp_path, cache):
    import copy

    from recon.cache import wait_for_writers

    target = _tree(tmp_path, {"sglang/srt/a.py": "def helper():\n    pass\n",
                              "sglang/srt/b.py": "from sglang.srt.a import helper\ndef run():\n    helper()\n"})
    cold = load(target)
    wait_for_writers()
    warm = load(target)
    assert warm.timings["graph"] == "cached" and "graph" not in vars(warm)  # not unpickled yet
    twin = copy.copy(warm)  # a copy (the tests' tree memo) shares the one load
    assert sorted(warm.graph.edges(keys=True)) == sorted(cold.graph.edges(keys=True))
    assert twin.graph is warm.graph
    assert warm.resolver is not None
    # the entry gone between the check and the first use: rebuilt from the facts, same graph
    again = load(target)
    for p in (cache / "graph").glob("*.graph.pkl"):
        p.unlink()
    assert sorted(again.graph.nodes) == sorted(cold.graph.nodes) and again.timings["graph"] == "built"


def test_a_copy_of_a_tree_finds_the_graph_built_for_its_content(tmp_path, cache):
    import os
    import shutil

    from recon.cache import wait_for_writers

    files = {"sglang/srt/a.py": "def helper():\n    pass\n",
             "sglang/srt/b.py": "from sglang.srt.a import helper\ndef run():\n    helper()\n"}
    first = load(_tree(tmp_path, files))
    assert first.timings["graph"] == "built"
    wait_for_writers()
    copy = tmp_path / "copy"
    shutil.copytree(first.target.source.root, copy)
    twin = load(from_path(copy))
    assert twin.timings["graph"] == "cached"  # first seen here, found by content
    assert sorted(twin.graph.edges(keys=True)) == sorted(first.graph.edges(keys=True))
    assert twin.resolver is not None
    wait_for_writers()
    # named for the copy too, with no second copy on disk: the copy's own entry is the same file
    entries = sorted((cache / "graph").glob("*.graph.pkl"), key=lambda p: p.name)
    assert len({os.stat(p).st_ino for p in entries}) == 1 and len(entries) == 3
    # an edit to the copy is patched from that entry, and the original is left as it was
    (copy / "sglang/srt/b.py").write_text("from sglang.srt.a import helper\ndef run():\n    x = 1\n    helper()\n")
    assert load(from_path(copy)).timings["graph"] == "patched"
    assert load(first.target).timings["graph"] == "cached"


def test_a_link_planted_at_a_content_entry_is_not_followed(tmp_path, cache):
    import shutil

    from recon.cache import wait_for_writers
    from recon.tree import _content_paths

    files = {"sglang/srt/a.py": "def helper():\n    pass\n"}
    first = load(_tree(tmp_path, files))
    wait_for_writers()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not recon's")
    gpath = _content_paths(first.key)[0]
    gpath.unlink()
    gpath.symlink_to(outside)
    copy = tmp_path / "copy"
    shutil.copytree(first.target.source.root, copy)
    twin = load(from_path(copy))
    assert twin.timings["graph"] == "built" and "sglang.srt.a.helper" in twin.graph
    wait_for_writers()
    assert outside.read_bytes() == b"not recon's"


def test_corrupt_cache_entries_are_rebuilt(tmp_path, cache):
    target = _tree(tmp_path, {"sglang/srt/a.py": "def helper():\n    pass\n"})
    load(target)
    for p in cache.rglob("*"):
        if p.is_file():
            p.write_bytes(b"garbage")
    tree = load(target)
    assert "sglang.srt.a.helper" in tree.graph
    assert tree.index.facts("sglang/srt/a.py").defs[0].qualname == "helper"


def test_two_processes_share_one_cache(tmp_path, cache):
    target = _tree(tmp_path, {f"sglang/srt/m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(80)})
    code = textwrap.dedent(
        f"""
        from recon.target import from_path
        from recon.tree import load
        t = load(from_path({str(target.source.root)!r}))
        print(t.graph.number_of_nodes())
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    counts = {o[0].strip() for o in outs}
    assert len(counts) == 1
    assert not list(cache.rglob("*.tmp"))  # no torn temp files left behind


def test_never_imports_the_code_it_reads(tmp_path, cache):
    sentinel = tmp_path / "imported"
    target = _tree(
        tmp_path,
        {
            "sglang/__init__.py": f"open({str(sentinel)!r}, 'w').write('x')\nraise SystemExit(3)\n",
            "sglang/srt/evil.py": f"import os\nos.system('touch {sentinel}')\n",
        },
    )
    tree = load(target)
    assert "sglang.srt.evil" in tree.graph
    assert not sentinel.exists()
    assert "sglang" not in sys.modules or not str(getattr(sys.modules["sglang"], "__file__", "")).startswith(str(tmp_path))


def test_cpp_op_registrations(tmp_path, cache):
    target = _tree(
        tmp_path,
        {
            "sglang/srt/a.py": "x = 1\n",
            "sglang/csrc/ops.cu": 'TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {\n  m.def("fp4_group_mm(Tensor a) -> Tensor");\n}\n',
        },
    )
    tree = load(target)
    assert tree.graph.nodes["torch.ops.sgl_kernel.fp4_group_mm"]["line"] == 2


def test_released_facts_are_read_again_equal(tmp_path, cache):
    """Index.release_facts drops the records made so far (what a process keeping a tree it is not
    using gives back): the next read makes a new record from the store, equal to the one dropped;
    a file extracted in this run and one whose store entry went missing meanwhile read the same."""
    from recon.cache import wait_for_writers
    from recon.indexer import _facts_path

    target = _tree(tmp_path, {"sglang/srt/a.py": "def f():\n    return g()\n\ndef g():\n    return 1\n",
                              "sglang/srt/b.py": "class C:\n    def run(self):\n        return 2\n"})
    index = build_index(target)
    a, b = index.facts("sglang/srt/a.py"), index.facts("sglang/srt/b.py")
    assert index.facts("sglang/srt/a.py") is a  # kept while not released
    index.release_facts()
    assert not index._loaded
    wait_for_writers()
    _facts_path(b.digest).unlink()  # b's store entry gone: b is extracted again, a read from the store
    a2, b2 = index.facts("sglang/srt/a.py"), index.facts("sglang/srt/b.py")
    wait_for_writers()
    assert _facts_path(b.digest).exists()  # and stored again
    assert a2 is not a and a2 == a and [d.qualname for d in a2.defs] == ["f", "g"]
    assert b2 is not b and b2 == b
