"""The engine of one scenario: one World and one Evaluator for a (tree, device, model, server
flags, environment), with the server arguments resolved once.

Every product that evaluates SGLang's code for a scenario walks with this engine: the runtime
view's MoE chain, and each layer kind of the kernel map (attention, dense GEMMs, communication,
norms, ...). There is no second evaluator to disagree with it: what one layer learns about
start-up globals or a lazily resolved dispatch, the MoE walk knows too.
"""

from __future__ import annotations

from typing import Optional

from .evaluator import Evaluator
from .gatemodel import gate_model
from .interp import Dev
from .serverargs import Schema, State, load_schema, resolve
from .world import World


class Engine:
    def __init__(self, ctx, flags: Optional[dict] = None, env: Optional[dict] = None):
        self.flags, self.env = dict(flags or {}), dict(env or {})
        self.world = World(ctx.tree, ctx.model, self.env)
        gm = gate_model(ctx)
        self.world.shared_asts = gm._module_ast  # one parse per file, shared with the gate model
        self.world.schema = load_schema(self.world)
        self.ev = Evaluator(self.world, Dev.of(ctx.device), gm)
        if self.world.schema is None:
            self.states = [State(Schema({}, "", "", ""), dict(self.flags))]
        else:
            # the primary resolution first, then the forks an undecidable test opens
            self.states = resolve(self.world, self.world.schema, self.flags, self.ev)
        self.world.state = self.states[0]

    @property
    def state(self):
        return self.states[0]


def engine_for(ctx) -> Engine:
    """The context's engine, built on first use (for its own server flags and environment)."""
    if getattr(ctx, "engine", None) is None:
        ctx.engine = Engine(ctx, getattr(ctx, "server_flags", None), getattr(ctx, "env", None))
    return ctx.engine
