"""The runtime view's World with what a whole step reads besides the MoE layer: enum members made
by ``auto()`` (``ForwardMode.DECODE``), numbered as Python numbers them."""

from __future__ import annotations

import ast

from ..runtime.interp import UNKNOWN
from ..runtime.world import World


class StepWorld(World):
    _construction_only = False

    def constructed_attr(self, inst, attr: str, ev):
        """``inst.attr`` as construction leaves it: the writes of ``__init__`` (and from outside
        code), not those of the object's other methods."""
        probe = type(inst)(inst.cls, {k: v for k, v in inst.attrs.items() if k == "__args__"})
        self._construction_only = True
        try:
            return self.instance_attr(probe, attr, ev, 0)
        finally:
            self._construction_only = False

    def instance_attr(self, inst, attr: str, ev, depth: int):
        if "__only__" in inst.attrs:
            # an object that stands for one the server builds with state recon does not model (the
            # model runner): it answers the attributes it was given, the others are unknown
            return inst.attrs.get(attr, UNKNOWN)
        return super().instance_attr(inst, attr, ev, depth)

    def _members(self, cls: str) -> dict:
        out = super()._members(cls)
        node = self._class_ast(cls)
        n = 0
        for st in node.body if node is not None else ():
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                v = st.value
                if isinstance(v, ast.Call) and ast.unparse(v.func).rsplit(".", 1)[-1] == "auto" and not v.args:
                    n += 1
                    out.setdefault(st.targets[0].id, n)
                elif isinstance(out.get(st.targets[0].id), int):
                    n = out[st.targets[0].id]
        return out

    def class_writes(self, cls: str, attr: str) -> list:
        """The runtime view's writes, less the writes from other files to a receiver nothing ties
        to the class (``layer.quant_config = ...`` in a method of another quant method): an outside
        write counts when its receiver is tested ``isinstance(receiver, Class)`` around it or was
        made by ``Class(...)`` in the same function."""
        key = ("step", cls, attr, self._construction_only)
        if key in self._class_writes:
            return self._class_writes[key]
        short = self.G.nodes.get(cls, {}).get("name") or ""
        own = {self.G.nodes.get(c, {}).get("path") for c in self.mro(cls)}
        out = []
        for w in super().class_writes(cls, attr):
            if self._construction_only and w.receiver == "self" and not w.scope.endswith(".__init__"):
                continue
            if w.receiver == "self" or w.path in own:
                out.append(w)
                continue
            tied = any(isinstance(t, ast.Call) and ast.unparse(t.func) == "isinstance" and len(t.args) == 2
                       and ast.unparse(t.args[0]) == w.receiver and short in ast.unparse(t.args[1]) for g, want in w.guards if want
                       for t in ast.walk(g))
            tied = tied or any(name == w.receiver and isinstance(expr, ast.Call) and ast.unparse(expr.func).rsplit(".", 1)[-1] == short
                               for name, expr, *_ in w.locals)
            if tied:
                out.append(w)
        self._class_writes[key] = out
        return out


class Reads(dict):
    """``World.notes`` that also remembers which names were read since :meth:`mark`."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.since: set = set()

    def __setitem__(self, key, value):
        self.since.add(key)
        super().__setitem__(key, value)

    def mark(self) -> set:
        got, self.since = self.since, set()
        return got
