"""A scenario: one SGLang tree, one device, one model, the server flags and the environment; what
every product (the runtime view, the kernel map, the spec, queries) answers for.

The scenario's engine (one World, one evaluator, the server arguments resolved once) and its
runtime view are built once and lazily; the products read them from here rather than building
their own. :func:`open_scenario` checks the inputs (device and model profiles, ``--server-args``
against the tree's own ServerArgs, ``--env`` pairs) and returns the scenario with the warnings a
person should see; it prints nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union


@dataclass
class Scenario:
    tree: Any  # recon.tree.Tree
    device: Any  # recon.profiles.DeviceProfile
    model: Any  # recon.profiles.ModelProfile
    flags: dict = field(default_factory=dict)  # --server-args, parsed against the tree's ServerArgs
    env: dict = field(default_factory=dict)  # --env NAME=VALUE
    cache: dict = field(default_factory=dict)  # shared by the checks of one run

    def __post_init__(self):
        from .checks import CheckContext

        # the check context every layer receives is this scenario's: same engine, same view
        self.ctx = CheckContext(self.tree, self.device, self.model, cache=self.cache, server_flags=self.flags, env=self.env)

    @property
    def engine(self):
        from .engine.engine import engine_for

        return engine_for(self.ctx)

    @property
    def view(self):
        """The runtime view (from the derived-data cache when it is there)."""
        from .runtime import runtime_view

        return runtime_view(self.ctx)

    def kernel_map(self, prefill_m: Optional[int] = None, context: Optional[int] = None) -> dict:
        return kernel_map_of(self.ctx, prefill_m, context)


def kernel_map_of(ctx, prefill_m: Optional[int] = None, context: Optional[int] = None) -> dict:
    """The kernel map of the scenario with its step budget: the map says what runs
    (:func:`recon.kernels.kmap.map_for`); the work the path rules find beside its launches (per-call
    conversions, eager epilogues, tuned configs: :mod:`recon.checks.pathcosts`, cached like the map)
    adds budget rows. The checks read the map, so the budget is put together here, above both."""
    from .checks.pathcosts import path_costs
    from .kernels.budget import step_budget
    from .kernels.kmap import DEFAULT_CONTEXT, map_for
    from .runtime.cached import load_or_build, scenario_key

    m = map_for(ctx, prefill_m, context or DEFAULT_CONTEXT)
    m["path_costs"] = load_or_build("pathcosts", scenario_key(ctx, None), lambda: path_costs(ctx, m["layers"]))
    m["budget"] = step_budget(m, ctx.model, ctx.device, prefill_m)
    return m


def open_scenario(tree: Union[Any, Callable[[], Any]], device: Optional[str] = None, model: Optional[str] = None,
                  server_args: Optional[str] = None, env: Optional[list] = None) -> tuple[Scenario, list[str]]:
    """The scenario for a tree and the command line's device, model, ``--server-args`` and ``--env``;
    ``tree`` may be a function that loads it, called once the profiles are known to be good (a bad
    device name fails before a cold index). Raises ReconError (with its exit code) on bad input."""
    from .profiles import load_device, load_model
    from .runtime import parse_env, parse_server_args, undeclared_envs

    dev = load_device(device)
    mdl = load_model(model)
    if callable(tree):
        tree = tree()
    envs = parse_env(env)
    flags = parse_server_args(tree, server_args)
    warnings = [f"SGLang declares no environment variable {name} (it may be read elsewhere)" for name in undeclared_envs(tree, envs)] if envs else []
    return Scenario(tree, dev, mdl, flags, envs), warnings
