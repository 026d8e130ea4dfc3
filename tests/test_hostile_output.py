"""Hostile input, part C (issue 35, items 5, 10 and 11): values the evaluators build stay small,
bad revisions and model configs exit 2 with one line naming what is wrong, and text from the tree
is inert in every output (terminal, Markdown, DOT, Mermaid, GraphML, JSON). Every crafted input is
built here, never committed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import pytest

from recon import bounded, safetext
from recon.render.graph import to_dot, to_graphml, to_mermaid, subgraph
from recon.profiles import ProfileError, list_models, load_model
from tests.conftest import make_tree

REPO = Path(__file__).resolve().parent.parent
ESC = "\x1b"


def _recon(*args, cwd=None, env=None, timeout=300):
    """``python -m recon ...`` in a fresh process (its exit code and streams as a user sees them)."""
    return subprocess.run([sys.executable, "-m", "recon", *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


# --- item 5: bounded values ---------------------------------------------------------------------


@pytest.mark.parametrize("build", [
    lambda: bounded.str_(["a" * 65536] * 65536),  # 4.3 GB of text from 65,537 objects
    lambda: bounded.mul(["a" * 65536], 65536),
    lambda: bounded.mul([["a" * 60000] * 4], 2),
    lambda: bounded.add(["a" * 200_000], ["b" * 200_000]),
    lambda: bounded.build(tuple, [["x"] * 60_000] * 8),
    lambda: bounded.build_dict([("k", ["a" * 65536] * 8)]),
    lambda: bounded.join(",", ["a" * 65536] * 8),
    lambda: bounded.mod("%s", (["a" * 65536] * 8,)),
    lambda: bounded.copy(list)("a" * 60_000),  # sixty thousand one-character strings
    lambda: bounded.size({"0": 0, **{str(i): "y" * 60_000 for i in range(1, 10)}}),  # a dict's parts all count
])
def test_bounded_refuses_before_building(build):
    t = time.perf_counter()
    with pytest.raises(bounded.TooLarge):
        build()
    assert time.perf_counter() - t < 1.0


def test_bounded_keeps_ordinary_values():
    archs = bounded.build(tuple, ["sm_90", "sm_100", "sm_120"])
    assert bounded.str_(archs) == "('sm_90', 'sm_100', 'sm_120')"
    assert bounded.mul(("a",), 3) == ("a", "a", "a") and bounded.add([1], [2]) == [1, 2]
    nested = [[0] * 10] * 10
    assert bounded.size(nested) < 1000


_BOMBS = [
    'x = str(["a" * 65536] * 20000)',  # 1.3 GB before the bound: fails the memory test, not the machine
    'y = repr([["a" * 60000] * 60000] * 2)',
    'z = [["b" * 65536] * 65536, ["c"] * 65536]',
    't = tuple(["a" * 65536] * 65536)',
    'u = ("a" * 65536,) * 65536',
    'v = str({"k": ["a" * 65536] * 65536})',
    'w = "%s" % (["a" * 65536] * 65536,)',
    'q = [s for s in ["a" * 65536] * 200]',
    'p = sorted(set(str(["a" * 65536] * 65536)))',
]
_GATE = "import torch\n\n\ndef is_sm_bomb():\n    major = torch.cuda.get_device_capability()[0]\n{body}\n    return major == 9\n\n\nif is_sm_bomb():\n    X = 1\n"

_MEASURE = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a regression fails here, it does not take the machine
    from recon.profiles import load_device, load_model
    from recon.rules import load_rules
    from recon.scan import run_rules
    from recon.target import from_path
    from recon.tree import load
    from recon.engine.gatemodel import DEFAULT_DISCOVERY
    tree = load(from_path(sys.argv[1]))
    t = time.perf_counter()
    res = run_rules(tree, load_device("h200"), load_model(None), load_rules(), use_cache=False)
    gates = res.context.cache[("gates", DEFAULT_DISCOVERY)]
    # this process's own peak: ru_maxrss keeps, across exec, the peak of the process it was forked
    # from (a test worker holding 2 GB of parsed trees), VmHWM is the new address space's alone
    try:
        hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": time.perf_counter() - t, "rss_mb": hwm,
                      "gate": gates.get("sglang.srt.layers.bomb.is_sm_bomb", "missing"), "errors": res.errors}))
""")


def test_no_evaluator_run_exceeds_1gb(tmp_path):
    """Every rule (gate interpreter, runtime and kernel evaluators, shapes) run on a gate built of
    value bombs: each bomb is unknown, the process stays far below 1 GB and finishes quickly."""
    body = "\n".join("    " + b for b in _BOMBS)
    root = make_tree(tmp_path / "tree", {"sglang/srt/layers/bomb.py": _GATE.format(body=body)})
    env = {**os.environ, "RECON_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    got = subprocess.run([sys.executable, "-c", _MEASURE, str(root)], env=env, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    m = json.loads(got.stdout.strip().splitlines()[-1])
    assert m["errors"] == []
    assert m["rss_mb"] < 1024, m
    assert m["s"] < 60, m
    assert m["gate"] is True  # the bombs are unknown values; the gate's own test is still decided


# --- item 10: exit 2, one line, the field named -------------------------------------------------

_HF = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "n_routed_experts": 256, "moe_intermediate_size": 2048,
       "num_experts_per_tok": 8, "num_hidden_layers": 61}


def _cfg(tmp_path, text: str, name="config.json") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BAD_CONFIGS = {
    "hidden_size_4000_digits": (json.dumps(_HF).replace("7168", "1" + "0" * 4000), "'hidden_size'"),
    "int_beyond_python_digits": (json.dumps(_HF).replace("7168", "1" + "0" * 5000), "more than 4300 digits"),
    "nested_100000_deep": ('{"architectures": ["X"], "hidden_size": 1, "a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "experts_10_30": (json.dumps({**_HF, "n_routed_experts": 10**30}), "'n_routed_experts'"),
    "top_k_bool": (json.dumps({**_HF, "num_experts_per_tok": True}), "'num_experts_per_tok' must be an integer, not True"),
    "hidden_negative": (json.dumps({**_HF, "hidden_size": -4}), "'hidden_size' must be a positive integer"),
    "layers_zero": (json.dumps({**_HF, "num_hidden_layers": 0}), "'num_hidden_layers' must be a positive integer"),
    "heads_huge": (json.dumps({**_HF, "num_attention_heads": 10**9}), "'num_attention_heads'"),
    "rank_text": (json.dumps({**_HF, "q_lora_rank": "abc", "kv_lora_rank": 512}), "'q_lora_rank' must be an integer"),
    "block_text": (json.dumps({**_HF, "quantization_config": {"quant_method": "fp8", "weight_block_size": ["a", 1]}}),
                   "'quantization_config.weight_block_size'"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_model_config_names_the_field(tmp_path, name):
    text, want = BAD_CONFIGS[name]
    with pytest.raises(ProfileError) as e:
        load_model(str(_cfg(tmp_path, text)))
    msg = str(e.value)
    assert want in msg and "\n" not in msg and len(msg) < 400, msg


def test_bad_profile_yaml_deep_and_sizes(tmp_path):
    with pytest.raises(ProfileError, match="nested too deeply"):
        load_model(str(_cfg(tmp_path, "a: " + "[" * 100_000 + "]" * 100_000 + "\n", "m.yaml")))
    prof = ("name: x\narchitectures: [X]\nnum_experts: 1000000000000\nhidden_size: 7168\nmoe_intermediate_size: 2048\n"
            "top_k: 8\nnum_layers: 61\nexpert_quant: bf16\n")
    with pytest.raises(ProfileError, match="'num_experts' is .* beyond any real model"):
        load_model(str(_cfg(tmp_path, prof, "p.yaml")))


def test_a_model_or_device_file_that_is_a_pipe_or_huge_is_refused_unread(tmp_path):
    """A named pipe given as --model (or a folder whose config.json is one) is refused, never waited
    on; a file past any real config.json is refused by its size, before it is read."""
    from recon.profiles import MAX_PROFILE_BYTES, load_device

    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    (tmp_path / "m").mkdir()
    os.mkfifo(tmp_path / "m" / "config.json")
    for load, arg in ((load_model, pipe), (load_model, tmp_path / "m"), (load_device, pipe)):
        with pytest.raises(ProfileError, match="not a regular file"):
            load(str(arg))
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_PROFILE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ProfileError, match=r"past the 16 MiB .* not read"):
        load_model(str(big))


def test_shipped_models_are_within_the_bounds():
    """The bounds refuse no real model: every shipped profile (real checkpoints' shapes) loads."""
    models = list_models()
    assert len(models) >= 3 and all(m.hidden_size <= 1 << 20 and m.num_experts <= 1 << 16 for m in models)


@pytest.fixture(scope="module")
def git_tree(tmp_path_factory):
    root = make_tree(tmp_path_factory.mktemp("g"), {"sglang/srt/a.py": "def f():\n    pass\n"})
    run = lambda *a: subprocess.run(["git", *a], cwd=root, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("add", ".")
    run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    return root


@pytest.mark.parametrize("rev", ["HEAD@{100}", "@{-1}", "HEAD:sglang", "--output=/tmp/x", "x" * 5000])
def test_bad_revision_exits_2_with_one_line(git_tree, tmp_path, rev):
    got = _recon("index", "--path", str(git_tree), "--rev", rev, env={"RECON_CACHE_DIR": str(tmp_path / "c")})
    assert got.returncode == 2, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown git revision") and len(lines[0]) < 300, got.stderr


def test_revisions_gitpython_cannot_parse_still_resolve(git_tree, tmp_path):
    got = _recon("index", "--path", str(git_tree), "--rev", "HEAD@{0}", env={"RECON_CACHE_DIR": str(tmp_path / "c")})
    assert got.returncode == 0, got.stderr


def test_bad_model_config_exits_2_on_the_cli(git_tree, tmp_path):
    cfg = _cfg(tmp_path, json.dumps({**_HF, "n_routed_experts": 10**30}))
    got = _recon("kernels", "--path", str(git_tree), "--model", str(cfg), env={"RECON_CACHE_DIR": str(tmp_path / "c")})
    assert got.returncode == 2, got.stderr
    errors = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "'n_routed_experts'" in errors[0] and "Traceback" not in got.stderr


# --- python -m recon in a hostile checkout --------------------------------------------------------


def test_python_m_recon_does_not_import_the_checkouts_modules(tmp_path):
    marker = tmp_path / "MARKER"
    for mod in ("yaml", "typer", "rich", "networkx"):
        (tmp_path / f"{mod}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nraise SystemExit(99)\n")
    got = _recon("version", cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    assert got.returncode == 0 and got.stdout.startswith("recon "), got.stderr
    assert not marker.exists()


# --- item 11: inert output ----------------------------------------------------------------------

HOSTILE = "x`` | [click](http://phish.example/a) ![i](http://img.example/p.png) <img src=x> \x1b[31mred\r\n[bold]b\u202e"


def test_markdown_code_span_and_text_are_inert():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    for text in (f"| a | b |\n|---|---|\n| {safetext.md_code(HOSTILE, cell=True)} | {safetext.md_text(HOSTILE)} |\n",
                 f"{safetext.md_code(HOSTILE)} and {safetext.md_text(HOSTILE)}\n"):
        tokens = [t for b in md.parse(text) for t in ([b] + list(b.children or []))]
        kinds = {t.type for t in tokens}
        assert not kinds & {"link_open", "image", "html_inline", "html_block"}, kinds
        assert ESC not in text and "\r" not in text and "\u202e" not in text
        assert not any("://" in t.content for t in tokens if t.type == "text")  # no autolink candidate left
        if text.startswith("|"):
            assert sum(t.type == "td_open" for t in tokens) == 2  # one row, two cells: `|` split nothing
    spans = [t for b in md.parse(safetext.md_code(HOSTILE)) for t in b.children or [] if t.type == "code_inline"]
    assert len(spans) == 1 and "[click](http://phish.example/a)" in spans[0].content


def _hostile_graph() -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    names = ['sglang.a"; evil [shape=box]; "', "sglang.b\n  n9 --> n0", f"sglang.c{ESC}[2J\x00\ufffe", "sglang.d]]<img src=x>"]
    for i, n in enumerate(names):
        G.add_node(n, kind="function", path=f"sglang/{i}\x07\x0b.py", line=i + 1)
    for u, v in zip(names, names[1:]):
        G.add_edge(u, v, key=0, kind="calls", line=3)
    return G


def test_graph_exports_keep_names_inside_their_quotes():
    G = _hostile_graph()
    graphml = to_graphml(G)
    root = ET.fromstring(graphml)  # a strict XML 1.0 parser: forbidden characters would raise
    assert len(root.findall(".//{http://graphml.graphdrawing.org/xmlns}node")) == 4
    dot = to_dot(G)
    body = dot.strip().splitlines()
    assert len(body) == 3 + 4 + 3 + 1  # header, one line per node and edge, closing brace
    import re

    quoted = r'"(?:[^"\\]|\\.)*"'
    node = re.compile(rf"^  {quoted} \[label={quoted} shape=\w+\];$")
    edge = re.compile(rf"^  {quoted} -> {quoted} \[label={quoted}(?: style=dashed)?\];$")
    assert all(node.match(x) or edge.match(x) for x in body[3:-1]), body
    mer = to_mermaid(G).strip().splitlines()
    assert len(mer) == 1 + 4 + 3
    # a label is one quoted string holding no quote and no HTML but recon's own line break
    assert all(re.fullmatch(r'  n\d+\[\[?"[^"]*"\]\]?', x) and "<" not in x.replace("<br/>", "")
               or re.fullmatch(r"  n\d+ -->\|calls\| n\d+", x) for x in mer[1:]), mer
    for text in (graphml, dot, "\n".join(mer), _json_export(G)):
        assert ESC not in text and "\x00" not in text and "\x07" not in text


def _json_export(G) -> str:
    from recon.render.graph import to_json

    text = to_json(G)
    json.loads(text)
    return text


def test_spec_mermaid_chain_is_inert():
    from recon.spec.moepath import mermaid_flow

    out = mermaid_flow([{"symbol": 'A"]\n  click n0 "http://evil"', "at": "a.py:1"}, {"symbol": "B<script>", "at": "b\x1b.py:2", "inferred": True}])
    lines = out.splitlines()
    assert len(lines) == 4 and "click" not in "".join(x for x in lines if not x.strip().startswith("n0[")) and ESC not in out
    assert "<script>" not in out


@pytest.fixture(scope="module")
def real_ctx(tree_0513):
    from recon import spec
    from recon.profiles import load_device

    return spec.spec_for(tree_0513, load_device("rtx-pro-6000"), load_model("DeepSeek-V4-Flash"))


def test_real_spec_with_planted_strings_renders_inert(real_ctx):
    """The 0.5.13.post1 spec, with code strings planted where the tree's text goes (a not-analyzed
    file name, a finding's message and snippet): no link, image or HTML forms, no table row gains
    a cell, no control character reaches the text; the spec as it is renders no link either."""
    import copy

    from markdown_it import MarkdownIt

    from recon.spec.render import render_markdown, to_json

    md = MarkdownIt("commonmark").enable("table")

    def tokens(text):
        return [t for b in md.parse(text) for t in ([b] + list(b.children or []))]

    plain = render_markdown(real_ctx)
    assert not {t.type for t in tokens(plain)} & {"link_open", "image", "html_inline"}
    ctx = copy.deepcopy(real_ctx)
    ctx["not_analyzed"] = [{"path": f"sglang/{HOSTILE}.py", "reason": f"not UTF-8 | {HOSTILE}"}]
    assert ctx["findings"], "the real tree has findings"
    f = ctx["findings"][0]
    f["message"] = f"`{HOSTILE}` is slow: {HOSTILE}"
    if f["evidence"]:
        f["evidence"][0]["snippet"] = "```\n" + HOSTILE
        f["evidence"][0]["note"] = HOSTILE
    text = render_markdown(ctx)
    toks = tokens(text)
    assert not {t.type for t in toks} & {"link_open", "image", "html_inline", "html_block"}
    assert ESC not in text and "\r" not in text and "\u202e" not in text
    assert not any("://" in t.content for t in toks if t.type == "text")
    section8 = text.split("\n## 8. ")[1]
    rows = [x for x in section8.splitlines() if x.startswith("| `") or x.startswith("| ``")]
    assert len(rows) == 1
    cells = [t for t in tokens(section8) if t.type == "td_open"]
    assert len(cells) == 2, section8
    js = to_json(ctx)
    assert ESC not in js and "\u202e" not in js and json.loads(js)["not_analyzed"][0]["path"].endswith(".py")


def test_real_graph_export_is_valid_xml_with_a_planted_node(tree_0513):
    H = subgraph(tree_0513.graph, "Mxfp4MarlinMoEMethod.apply", 2)
    assert H.number_of_nodes() > 3
    ET.fromstring(to_graphml(H))
    first = sorted(H.nodes)[0]
    H.add_node(f"sglang.planted{ESC}\x00\n", kind="function", path="sglang/p\x0c.py", line=1)
    H.add_edge(first, f"sglang.planted{ESC}\x00\n", key=0, kind="calls", line=1)
    ET.fromstring(to_graphml(H))
    assert len(to_dot(H).strip().splitlines()) == 3 + H.number_of_nodes() + H.number_of_edges() + 1


def test_terminal_query_output_is_inert(tmp_path):
    """``recon query`` on a tree whose file names hold ESC and Rich markup: the terminal gets escapes."""
    files = {"sglang/srt/base.py": "def helper():\n    pass\n",
             f"sglang/srt/ev{ESC}[2Jil.py": "from sglang.srt.base import helper\n\n\ndef run_a():\n    helper()\n",
             "sglang/srt/[bold red]x[/bold red].py": "from sglang.srt.base import helper\n\n\ndef run_b():\n    helper()\n"}
    root = make_tree(tmp_path / "t", files)
    got = _recon("query", "callers", "helper", "--path", str(root), env={"RECON_CACHE_DIR": str(tmp_path / "c")})
    assert got.returncode == 0, got.stderr
    assert ESC not in got.stdout + got.stderr
    assert "\\x1b[2J" in got.stdout and "[bold red]x[/bold red]" in got.stdout
    for cmd in (("scan", "--device", "h200"), ("index",), ("graph", "export", "--format", "dot"), ("graph", "export", "--format", "mermaid")):
        got = _recon(*cmd, "--path", str(root), env={"RECON_CACHE_DIR": str(tmp_path / "c")})
        assert got.returncode == 0 and ESC not in got.stdout + got.stderr, (cmd, got.stderr[-500:])


@pytest.mark.parametrize("args", [("scan", "--format", "xml"), ("kernels", "--no-such-option"), ("no-such-command",), ("scan", "--path")])
def test_usage_errors_are_one_line_exit_2(args):
    got = _recon(*args)
    assert got.returncode == 2 and got.stdout == ""
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--help" in lines[0], got.stderr
