"""One input per crash or hang the fuzzing found (or that reading the evaluators showed), each run
through every stage under the hang guard (``tests/fuzzkit.py``), with what recon must make of it.

Each of these crashed or hung before its fix: a hang shows here as the guard firing, never as a
timing assertion.
"""

from __future__ import annotations

import pytest

from recon.indexer import index_plain
from recon.tritonast import summarize
from tests import fuzzkit


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RECON_SYNC_WRITES", "1")


HUGE = "0x" + "f" * 5000  # legal Python; repr() of it raises (CPython's 4300-digit limit)

LAUNCHER = '''import torch
import triton
import triton.language as tl


{deco}@triton.jit
def k(a, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, N, BLOCK):
        acc += tl.sum(tl.load(a + i) * tl.load(a + i + 1), axis=0)


def launch(x, M):
    N = x.shape[0]
{body}
    k[grid](x, N, BLOCK=BLOCK, num_warps={warps})
    y = torch.empty((M, N), dtype=torch.float32)
    y = y * x.unsqueeze({unsq})
    return y
'''


def _launcher(body: str, warps: str = "4", unsq: str = "0", deco: str = "") -> str:
    return LAUNCHER.format(body="\n".join("    " + line for line in body.splitlines()), warps=warps, unsq=unsq, deco=deco)


def _gate(body: str) -> str:
    return "import torch\n\n\ndef is_sm_fuzz():\n    major = torch.cuda.get_device_capability()[0]\n" + "\n".join(
        "    " + line for line in body.splitlines()
    ) + "\n\n\nif is_sm_fuzz():\n    X = 1\n"


CASES = {
    # fuzzing: a huge int literal made facts, the Triton summary, the autotune configs and the gate
    # predicates' text raise ValueError (repr's digit limit)
    "huge_int_everywhere": ("sglang/srt/layers/h.py", _gate(f"return major == {HUGE}") + (
        f"\nimport triton\n\n\n@triton.autotune(configs=[triton.Config({{'BLOCK': {HUGE}}}, num_warps=4)], key=['N'])\n"
        f"@triton.jit\ndef kk(a, N, BLOCK):\n    x = {HUGE}\n    if N == {HUGE}:\n        f(y={HUGE})\n"
    )),
    # fuzzing: `-"a"` parses (it fails only when run); the literal renderer negated it
    "negated_string_literal": ("sglang/srt/layers/n.py", 'def g():\n    f(x=-"a", y=(-None,))\n    return x in (-"a",)\n'),
    # fuzzing: num_warps=None in the launch and in the autotune config crashed the occupancy check
    "warps_none": ("sglang/srt/layers/w.py", _launcher(
        "BLOCK = 64\ngrid = (M,)", warps="None",
        deco="@triton.autotune(configs=[triton.Config({'BLOCK': 64}, num_warps=None)], key=['N'])\n")),
    # reading: the grid evaluator computed `a ** b` as written: 10 ** 10 ** 10 never returns
    "power_bomb_in_grid": ("sglang/srt/layers/p.py", _launcher("BLOCK = 10 ** 10 ** 10\ngrid = (triton.cdiv(N, BLOCK), BLOCK)")),
    # reading: squaring in a chain of local names (each one doubles the digits); this one held
    # before the fixes too (the evaluator's depth limit stops the chain): kept as a guard of it
    "squaring_chain_in_grid": ("sglang/srt/layers/s.py", _launcher(
        "B0 = 99999999\n" + "\n".join(f"B{i + 1} = B{i} * B{i}" for i in range(40)) + "\nBLOCK = B40\ngrid = (BLOCK,)")),
    # reading: a name whose binding names the previous one several times: exponential lookups
    "fanout_names_in_grid": ("sglang/srt/layers/f.py", _launcher(
        "A0 = M\n" + "\n".join(f"A{i + 1} = " + " + ".join([f"A{i}"] * 8) for i in range(8)) + "\nBLOCK = 64\ngrid = (A8 // A8,)")),
    # reading: module constants that name each other: unbounded recursion
    "module_constant_cycle": ("sglang/srt/layers/c.py", "_A = _B\n_B = _A\n" + _launcher("BLOCK = 64\ngrid = (_A,)")),
    # reading: inf and nan reach int() in the shape evaluators
    "infinite_sizes": ("sglang/srt/layers/i.py", _launcher("BLOCK = 64\nM2 = 1e308 * 10\ngrid = (triton.next_power_of_2(M2), int(M2))", unsq="1.5")),
    # reading: a gate that builds a string by doubling it, and by replacing "" with itself
    "string_bombs_in_gate": ("sglang/srt/layers/g.py", _gate(
        "s = 'ab'\n" + "s = s + s\n" * 40 + "t = 'xy' * 100\nt = t.replace('', t)\nt = t.replace('', t)\nu = '%0999999999d' % 1\n"
        "return len(s) > 0 and len(t) > 0 and major == 9")),
    # reading: gates that call each other under unknown tests: both ways at every level
    "exponential_gate_calls": ("sglang/srt/layers/e.py", "import os\nimport torch\n\n\ndef is_g0(x=0):\n"
        "    return torch.cuda.get_device_capability()[0] == 9\n\n\n" + "".join(
            f"def is_g{i + 1}(x=0):\n    if os.environ.get('A{i}'):\n        return " + " and ".join([f"is_g{i}(x)"] * 6)
            + "\n    else:\n        return " + " or ".join([f"is_g{i}(x + 1)"] * 6) + "\n\n\n" for i in range(8)) + "if is_g0() and is_g8():\n    Y = 1\n"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_crash_no_hang(name):
    relpath, src = CASES[name]
    fuzzkit.run_all(relpath, src.encode())


def test_huge_int_keeps_the_facts():
    relpath, src = CASES["huge_int_everywhere"]
    facts = index_plain(relpath, src.encode(), "")
    assert facts[5] is None
    assert [d[1] for d in facts[6]] == ["is_sm_fuzz", "kk"]
    assert any(c[3].startswith("0xfff") for c in facts[10])  # the comparison, rendered in hex
    s = summarize(src)
    assert s["error"] is None and s["kernels"]["kk"]["configs"] is None  # not a config anyone tunes


def test_negated_literals():
    facts = index_plain("sglang/n.py", b'f(x=-"a", y=-2, z=(-1.5, 3))\n', "")
    assert facts[5] is None
    assert facts[8][0][4] == (("x", "?"), ("y", "-2"), ("z", "(-1.5, 3)"))


def test_bombs_evaluate_to_unknown_not_to_a_value():
    """The bounded evaluators give up on the bombs: the gate stays unknown, no grid is judged."""
    from recon.profiles import load_device, load_model
    from recon.rules import load_rules
    from recon.scan import run_rules
    from recon.target import from_path
    from recon.tree import load
    from tests.conftest import make_tree
    import tempfile
    from pathlib import Path

    root = make_tree(Path(tempfile.mkdtemp()), {p: s for p, s in (CASES["string_bombs_in_gate"], CASES["power_bomb_in_grid"])})
    tree = load(from_path(root))
    res = run_rules(tree, load_device("h200"), load_model(None), load_rules(), use_cache=False)
    assert res.errors == []
    from recon.engine.gatemodel import DEFAULT_DISCOVERY

    gates = res.context.cache[("gates", DEFAULT_DISCOVERY)]  # arch-gate's settings are the defaults
    assert gates["sglang.srt.layers.g.is_sm_fuzz"] is None
    assert not [f for f in res.findings if f.rule_id == "low-occupancy-launch" and "p.py" in f.evidence[0].path]


def test_deep_json_and_many_cpp_registrations():
    assert index_plain("c.json", b"[" * 100_000, "")[5] == "invalid JSON: too deeply nested"
    text = b'TORCH_LIBRARY(ns, m) {\n' + b'  m.def("op");\n' * 200_000 + b"}\n"
    ops = fuzzkit.run_facts("csrc/ops.cu", text)[18]
    assert len(ops) == 200_000 and ops[0] == ("ns.op", 2) and ops[-1] == ("ns.op", 200_001)
