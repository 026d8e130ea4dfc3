"""A parsed module is shared by every loaded tree that holds the same file with the same content (a
copy, a checkout made from a release, an unchanged file of the next release), and by nothing else:
an edited file, or the same content at another path, is parsed on its own; once no tree holds a
parse, it is gone."""

import gc
import shutil

from recon.engine.asts import _PARSED, module_ast
from recon.target import from_path
from recon.tree import load
from tests.conftest import make_tree

FILES = {
    "sglang/srt/layers/a.py": "def f(x):\n    return x + 1\n",
    "sglang/srt/layers/b.py": "def f(x):\n    return x + 1\n",  # a's content at another path
    "sglang/srt/layers/c.py": "class C:\n    pass\n",
}


def test_copies_share_a_parse_and_an_edit_does_not(tmp_path):
    one = make_tree(tmp_path / "one", FILES)
    shutil.copytree(one, tmp_path / "two")
    (tmp_path / "two" / "sglang/srt/layers/c.py").write_text("class C:\n    x = 2\n", encoding="utf-8")
    t1, t2 = load(from_path(one)), load(from_path(tmp_path / "two"))
    a1, a2 = module_ast(t1, "sglang/srt/layers/a.py"), module_ast(t2, "sglang/srt/layers/a.py")
    assert a1 is a2  # same path, same bytes: one parse
    assert module_ast(t1, "sglang/srt/layers/b.py") is not a1  # same bytes, another module
    c1, c2 = module_ast(t1, "sglang/srt/layers/c.py"), module_ast(t2, "sglang/srt/layers/c.py")
    assert c1 is not c2 and len(c2.body[0].body) == 1 and c2.body[0].body[0].targets[0].id == "x"
    key = ("sglang/srt/layers/c.py", t2.index.files["sglang/srt/layers/c.py"].digest)
    assert _PARSED[key] is c2
    del t2, c2
    gc.collect()
    assert key not in _PARSED  # no tree holds it: not kept
    assert module_ast(t1, "sglang/srt/layers/a.py") is a1
