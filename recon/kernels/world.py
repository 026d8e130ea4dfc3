"""The runtime view's World with what a whole step reads besides the MoE layer: enum members made
by ``auto()`` (``ForwardMode.DECODE``), numbered as Python numbers them."""

from __future__ import annotations

import ast

from ..runtime.world import World


class StepWorld(World):
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
