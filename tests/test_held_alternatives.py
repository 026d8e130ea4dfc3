"""An attribute whose object the engine cannot decide: each class its writes construct is one
outcome of the MoE walk, under the tests that lead to that write, and its method runs on that
object (sglang 0.5.23's ``MoeRunner``: ``if runner_backend.is_triton(): self.runner_core =
TritonRunnerCore(config) elif ...``, with the backend read from a flag recon does not resolve)."""

from __future__ import annotations

from recon.checks import CheckContext
from recon.profiles import load_device, load_model
from recon.runtime import build
from tests.test_rules_cuda_graph import _moe_tree

METHODS = """
from fastlib.moe import grouped_a, grouped_b, pick_backend

class CoreA:
    def __init__(self, config):
        self.config = config

    def run(self, x):
        return grouped_a(x, self.config)

class CoreB:
    def __init__(self, config):
        self.config = config

    def run(self, x):
        return grouped_b(x, self.config)

class Runner:
    def __init__(self, backend, config):
        self.core = None
        if backend == "a":
            self.core = CoreA(config)
        elif backend == "b":
            self.core = CoreB(config)

    def run(self, x):
        return self.core.run(x)

class Mxfp4MoEMethod:
    def __init__(self):
        self.runner = Runner(pick_backend(), 4)

    def apply(self, layer, x):
        return self.runner.run(x)
"""


def _leaves(synthetic, methods):
    tree = _moe_tree(synthetic, methods)
    view = build(CheckContext(tree, load_device("h200"), load_model("dsv4")), {})
    return {lf["name"]: lf for lf in view.moe["leaves"]}


def test_each_core_is_an_outcome_under_its_own_test(synthetic):
    leaves = _leaves(synthetic, METHODS)
    a, b = leaves["fastlib.moe.grouped_a"], leaves["fastlib.moe.grouped_b"]
    # each op under the test that picks its core, not both under the same (empty) conditions
    assert a["when"] == ["backend == 'a'"]
    assert b["when"] == ["not (backend == 'a')", "backend == 'b'"]
    # neither is on the path taken when every undecided test is false: no core is assumed
    assert not a["primary"] and not b["primary"]
    # the hop names the write that builds the core
    assert "self.core = CoreA(...) in Runner.__init__" in [h["what"] for h in a["via"]]


def test_a_decided_backend_keeps_one_core(synthetic):
    """Where the engine decides the test, the other write is not an outcome at all."""
    leaves = _leaves(synthetic, METHODS.replace("Runner(pick_backend(), 4)", 'Runner("b", 4)'))
    assert "fastlib.moe.grouped_b" in leaves and "fastlib.moe.grouped_a" not in leaves
    assert leaves["fastlib.moe.grouped_b"]["primary"]
