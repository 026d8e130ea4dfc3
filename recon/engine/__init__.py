"""How recon reads SGLang's code, never importing it: one evaluator (:mod:`.evaluator`) with one
notion of "unknown" (:data:`.interp.UNKNOWN`), the world it evaluates in (:mod:`.world`: the tree's
classes and enums, the model's config.json, the server arguments, the environment), the gate model of
arch checks (:mod:`.gatemodel`, :mod:`.interp`), one AST cache per tree (:mod:`.asts`), SGLang's
registries and name tables (:mod:`.registries`, :mod:`.tables`), server-argument resolution
(:mod:`.serverargs`), which packages a release installs (:mod:`.packages`, :mod:`.opreqs`), shapes and
dtypes (:mod:`.shapes`, :mod:`.dtypes`), shared memory of a Triton launch (:mod:`.smem`) and the
step's own tensors (:mod:`.steptensors`). :class:`.engine.Engine` is the one World and Evaluator of a
scenario, with the server arguments resolved once.

A new evaluation feature goes here (with a one-feature fixture under ``tests/engine_cases/``).
What runs for a scenario is :mod:`recon.runtime`; nothing here imports it.
"""
