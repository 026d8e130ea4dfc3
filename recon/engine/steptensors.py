"""The step's own tensors: what the mapped step hands a layer, and the one fact recon knows of them.

A step recon maps (a decode step of a batch of at least one request, a prefill of at least one
token) hands each layer's entry tensors that hold that step's tokens: the hidden states, the input
ids, the positions, q/k/v. None of them is empty: each has at least one row, and its other
dimensions are model sizes, also at least one. That is the scenario's premise (said in the map's
assumptions when it decides a test); SGLang's own size tests on those tensors (``x.shape[0] ==
0``, ``x.numel() == 0``, ``num_tokens == 0``: the idle batch of a data-parallel rank that got no
request) are then decided, instead of being left open on every op behind them.

The evaluator carries such a tensor as a :class:`StepTensor` and its sizes as :class:`AtLeast`
(an integer known only by a lower bound). What keeps the element count (``view``, ``reshape``,
``contiguous``, ``to``, a dtype cast) keeps the fact; anything else (a slice, an index, a gather)
gives an unknown. A comparison the bound does not settle raises, so the whole test it is in stays
unknown (the evaluator's three-valued rule), never a guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from .interp import UNKNOWN

PREMISE = ("the mapped step has at least one token on this rank (a decode batch of at least one "
           "request): the tensors a layer's entry receives are not empty")

# methods that return the same tensor's data under another shape, dtype or layout: as many elements
_SAME_NUMEL = frozenset({"view", "reshape", "contiguous", "to", "float", "half", "bfloat16", "clone", "detach",
                         "flatten", "view_as", "reshape_as", "cuda", "requires_grad_", "squeeze", "unsqueeze"})
_SIZE_AT_LEAST = frozenset({"numel", "nelement"})


class Undecided(Exception):
    """A question about a step tensor's size that its lower bound does not answer."""


@dataclass(frozen=True)
class AtLeast:
    """An integer known only to be at least ``lo`` (a size of a step tensor)."""

    lo: int

    def _settle(self, other, below):
        """``below`` when ``other`` is under the bound, else undecided."""
        if isinstance(other, AtLeast):
            raise Undecided(f">={self.lo} vs >={other.lo}")
        if isinstance(other, bool) or not isinstance(other, (int, float)):
            raise Undecided(f">={self.lo} vs {other!r}")
        if other < self.lo:
            return below
        raise Undecided(f">={self.lo} vs {other!r}")

    def __eq__(self, other):
        if other is None or isinstance(other, str):
            return False  # a size is an int: never None, never a string
        return self._settle(other, False)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __gt__(self, other):  # x > k: true when k is under the bound
        return self._settle(other, True)

    def __ge__(self, other):  # x >= k: true when k is at most the bound
        return self._settle(other - 1 if isinstance(other, (int, float)) and not isinstance(other, bool) else other, True)

    def __lt__(self, other):  # x < k: false when k is at most the bound
        return self._settle(other - 1 if isinstance(other, (int, float)) and not isinstance(other, bool) else other, False)

    def __le__(self, other):  # x <= k: false when k is under the bound
        return self._settle(other, False)

    def __bool__(self) -> bool:
        if self.lo >= 1:
            return True
        raise Undecided("a size that may be 0")

    def __add__(self, other):
        if isinstance(other, AtLeast):
            return AtLeast(self.lo + other.lo)
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            return AtLeast(self.lo + other)
        raise Undecided("a sum the bound does not keep")

    __radd__ = __add__

    def __mul__(self, other):
        if isinstance(other, AtLeast):
            return AtLeast(self.lo * other.lo)
        if isinstance(other, int) and not isinstance(other, bool) and other >= 1:
            return AtLeast(self.lo * other)
        raise Undecided("a product the bound does not keep")

    __rmul__ = __mul__

    def __index__(self):
        raise Undecided("a size used as an index")

    def __hash__(self) -> int:
        return hash(("AtLeast", self.lo))

    def __repr__(self) -> str:
        return f"<int >= {self.lo}>"


@dataclass(frozen=True)
class TensorShape:
    """``x.shape`` / ``x.size()`` of a step tensor: every dimension at least 1, the rank unknown."""

    of: str

    def __getitem__(self, i):
        if isinstance(i, int) and not isinstance(i, bool):
            return AtLeast(1)
        raise Undecided("a slice of a shape")

    def __repr__(self) -> str:
        return f"<shape of {self.of}>"


@dataclass(frozen=True)
class StepTensor:
    """A tensor holding the mapped step's tokens (not empty): ``of`` names where it came in."""

    of: str

    def attr(self, name: str):
        if name == "shape":
            return TensorShape(self.of)
        if name == "mT" or name == "T":
            return self
        return UNKNOWN  # dtype, device, ...: not what the premise says

    def call(self, name: str, args: list):
        if name in _SIZE_AT_LEAST and not args:
            return AtLeast(1)
        if name == "size":
            return TensorShape(self.of) if not args else AtLeast(1) if isinstance(args[0], int) and not isinstance(args[0], bool) else UNKNOWN
        if name in _SAME_NUMEL:
            return self  # the same elements, another view of them: still not empty
        return UNKNOWN

    def __len__(self):
        raise Undecided("len of a step tensor")  # ``len()`` must be an int: left unknown

    def __repr__(self) -> str:
        return f"<step tensor {self.of}>"


def annotation_of(ann):
    """A parameter's annotation as an expression: a string annotation (``"torch.Tensor"``) parsed,
    None where there is none or the string does not parse."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            return ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return None
    return ann


def _is_tensor_annotation(ann) -> bool:
    """``torch.Tensor`` (or ``"torch.Tensor"``), not Optional nor a Union: a parameter that is a tensor."""
    ann = annotation_of(ann)
    return isinstance(ann, ast.Attribute) and ann.attr == "Tensor" and isinstance(ann.value, ast.Name) \
        and ann.value.id == "torch" or isinstance(ann, ast.Name) and ann.id == "Tensor"


class EntryArgs:
    """An entry's ``*args`` (``CustomOp.forward(self, *args, **kwargs)``): the step's arguments as the
    layer's caller passes them, handed on whole to the method that does the work."""

    def __repr__(self) -> str:
        return "<the entry's arguments>"


def entry_tensors(fn, label: str, varargs: bool = False) -> dict:
    """The parameters of a layer's entry that receive the step's tensors: annotated ``torch.Tensor``
    (not Optional) and without a default (a default says the caller may leave it out). With
    ``varargs``, the entry's own ``*args`` as :class:`EntryArgs`, so a call handing them on whole
    binds the callee's tensors the same way."""
    if fn is None:
        return {}
    pos = fn.args.posonlyargs + fn.args.args
    first_default = len(pos) - len(fn.args.defaults)
    out = {fn.args.vararg.arg: EntryArgs()} if varargs and fn.args.vararg is not None else {}
    for i, a in enumerate(pos):
        if i < first_default and _is_tensor_annotation(a.annotation):
            out[a.arg] = StepTensor(f"{label}({a.arg})")
    for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
        if d is None and _is_tensor_annotation(a.annotation):
            out[a.arg] = StepTensor(f"{label}({a.arg})")
    return out


def rebound(fn, names) -> dict:
    """Those of ``names`` the body assigns again (``x = x[:n]``), each with the first line from which
    it may no longer hold what it was handed (a store in a loop counts from the loop's first line:
    the next turn reads it)."""
    out: dict = {}

    def visit(node, loop_line):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            here = loop_line if loop_line is not None else (ch.lineno if isinstance(ch, (ast.For, ast.While, ast.AsyncFor)) else None)
            if isinstance(ch, ast.Name) and isinstance(ch.ctx, ast.Store) and ch.id in names:
                ln = loop_line if loop_line is not None else ch.lineno
                out[ch.id] = min(out.get(ch.id, ln), ln)
            visit(ch, here)

    visit(fn, None)
    return out


def truth(v):
    """A size as a test's value: a bool where the bound decides it, else unknown."""
    if isinstance(v, AtLeast):
        try:
            return bool(v)
        except Undecided:
            return UNKNOWN
    return v


PREMISE_NOTE = f"premise: {PREMISE}; SGLang's size tests on them (x.shape[0] == 0, x.numel() == 0) are decided by it"


def premise_note() -> str:
    """The one line the map and the view print when the premise decided a test (one text, so the
    view's and the map's notes are the same line)."""
    return PREMISE_NOTE


def bundle_args(world, fn, mod: str, scope: str) -> dict:
    """The parameters of the MoE layer's quant-method entry that receive the step's tokens in a
    bundle: annotated with an in-tree class (``StandardDispatchOutput``) whose declared fields include
    ``torch.Tensor`` ones, each such field a step tensor. Only where the server arguments resolve the
    all-to-all backend to ``none``: the standard dispatcher hands the layer its own tokens (an
    expert-parallel all-to-all may hand a rank none)."""
    from .values import Instance

    if fn is None or world.state is None or world.state.get("moe_a2a_backend") != "none":
        return {}
    out = {}
    for a in fn.args.posonlyargs + fn.args.args:
        ann = annotation_of(a.annotation)
        if not isinstance(ann, (ast.Name, ast.Attribute)):
            continue
        cls = world.R.resolve(mod, scope, ast.unparse(ann))
        node = world._class_ast(cls) if cls and world.G.nodes.get(cls, {}).get("kind") == "class" else None
        if node is None:
            continue
        fields = {st.target.id: StepTensor(f"{a.arg}.{st.target.id}") for st in node.body
                  if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is None
                  and _is_tensor_annotation(st.annotation)}
        if fields:
            out[a.arg] = Instance(cls, {**fields, "__only__": True})
    return out
