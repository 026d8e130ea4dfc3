"""The optimization spec: one context object built from the tree, the findings, the device and the model.

:func:`build_context` assembles plain data (dicts, lists, numbers, strings) — the JSON output is that
object, and the Markdown output renders it with the Jinja2 templates in ``templates/``, so the two
never disagree. Everything is sorted and nothing depends on the clock, so the same input gives the
same bytes and two specs diff cleanly.

The spec reads facts the checks already found (``Finding.data``); it never re-parses the tree. The
one exception is the quant method's ``create_weights``: that single file is parsed with stdlib
``ast`` to read the weight shapes and dtypes as SGLang creates them, evaluated at the model's sizes.
Findings are cached per (tree content, device, model, rules, checks code), so a warm spec is fast.

The package, one job per module: :mod:`.context` assembles the object (:func:`build_context`,
:func:`spec_for`, :func:`spec_of` for a scenario's context), :mod:`.moepath` the MoE path and its root causes, :mod:`.weights` the weight table,
:mod:`.tables` the gate, format and config tables, :mod:`.plan` the plan and reference numbers,
:mod:`.render` the JSON and Markdown output.
"""

from __future__ import annotations

from .context import SECTIONS, build_context, scan, spec_for, spec_of
from .plan import FLASHINFER_ANCHOR, REFERENCE_RESULTS, SLOT_ANCHOR
from .render import TEMPLATES_DIR, render, render_markdown, to_json
from .weights import weights_as_created

__all__ = ["SECTIONS", "build_context", "scan", "spec_for", "spec_of", "FLASHINFER_ANCHOR", "REFERENCE_RESULTS", "SLOT_ANCHOR",
           "TEMPLATES_DIR", "render", "render_markdown", "to_json", "weights_as_created"]
