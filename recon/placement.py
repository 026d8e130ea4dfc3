"""Where a finding sits against the mapped step: on it, reached only under tests recon could not
decide, or elsewhere in the tree.

The kernel map (:mod:`recon.kernels.kmap`, decode and the prefill it maps) walks each layer's code
with the scenario's engine: a branch the engine decides is followed one way only, a call the graph
resolves is entered. Each walker records every function it entered and the undecided tests it took
as true on the way (:class:`recon.runtime.moe.PathWalker`); the map's hops, leaves, switches and
construction add the lines it read; each call site a walker met is recorded live (with the tests
taken) or dead (in a branch the engine decided does not run), so a site that is a call is placed
at its line, not by its function. A finding's site (its first evidence, file:line, and the
innermost function holding it) is then

* ``on-step``: a function (or line) the map entered with every test on the way decided by the
  engine (or under each outcome of a test it could not decide: it runs either way);
* ``undecided``: entered only under tests the engine could not decide, taken in either sense (named,
  with the ``file:line`` each is read at: ``tests``). A test taken as false is as undecided as one
  taken as true: the map shows both outcomes, and a finding on one of them depends on that test;
* ``elsewhere``: never entered for this device, model and flags.

No placement is given when there is no map (a tree recon cannot map): findings then stay unplaced
and every product treats them as before.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Optional

from .runtime.moe import merge_ways
from . import astwalk

ON_STEP, UNDECIDED, ELSEWHERE = "on-step", "undecided", "elsewhere"
PLACEMENTS = (ON_STEP, UNDECIDED, ELSEWHERE)
PREFILL_M = 8192  # the prefill mapped beside decode: the rules' (op-arch-support) default chunk


@dataclass
class StepSites:
    """What the map entered: function node -> the sets of undecided tests each way in took as true
    (an empty tuple: entered on the decided path); the same for lines it cites."""

    functions: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)
    moe_functions: set = field(default_factory=set)  # entered on the MoE layer's decided path
    moe_lines: set = field(default_factory=set)
    steps: tuple = ("decode",)
    deciders: set = field(default_factory=set)  # (path, line) the map read deciding a layer's path
    constructors: set = field(default_factory=set)  # Class.__init__ of the layers' chosen classes
    call_lines: dict = field(default_factory=dict)  # (path, line) of a call met live -> taken tests per way
    dead: set = field(default_factory=set)  # (path, line) of calls in branches decided not to run
    test_sites: dict = field(default_factory=dict)  # an undecided test's text -> "path:line" where the walk read it
    callees: dict = field(default_factory=dict)  # node -> the call from an on-step function that reaches it
    spans: dict = field(default_factory=dict)  # path -> sorted [(line, end_line, node)]
    constructed: list = field(default_factory=list)  # (path, line, attr, value) the map's construction set
    dead_branches: dict = field(default_factory=dict)  # path -> [(first, last, why)]: branches the construction decides off

    def _add(self, table: dict, key, taken) -> None:
        ways = table.setdefault(key, set())
        ways.add(tuple(sorted(taken)))


def _way(lf: dict) -> tuple:
    """A leaf's way in: () when it runs whatever recon could not decide, else every undecided test
    on it in the sense it is taken (its ``when``)."""
    if lf.get("decided", not lf.get("when")):
        return ()
    return tuple(sorted(set(lf.get("when") or ())))


def _negated(t: str) -> str:
    if t.startswith("not (") and t.endswith(")"):
        return t[5:-1]
    return t[4:] if t.startswith("not ") else t


def _layers(m: dict):
    for lay in m.get("layers", []):
        yield "decode", lay
    pre = (m.get("prefill") or {}).get("attention")
    if pre:
        yield "prefill", pre


def sites_from_map(m: dict) -> StepSites:
    s = StepSites()
    steps = []
    for step, lay in _layers(m):
        if step not in steps:
            steps.append(step)
        moe = lay.get("kind") == "moe" and step == "decode"
        calls = lay.get("calls") or {}
        for path, line, ways in calls.get("live", []):
            for t in ways or [[]]:
                s._add(s.call_lines, (path, line), t)
                if moe and not t:
                    s.moe_lines.add((path, line))
        s.dead |= {(p, ln) for p, ln in calls.get("dead", [])}
        for w in lay.get("walked", []):
            for t in w.get("when") or [[]]:
                s._add(s.functions, w["node"], t)
                if moe and not t:
                    s.moe_functions.add(w["node"])
        for t, at in (lay.get("test_sites") or {}).items():
            s.test_sites.setdefault(t, f"{at[0]}:{at[1]}")
        for lf in lay.get("leaves", []):
            for t in lf.get("tests") or ():
                if t.get("path"):
                    s.test_sites.setdefault(t["test"], f"{t['path']}:{t['line']}")
            # an op reached only under tests recon could not decide (in either sense) is undecided,
            # whichever outcome the map lists first
            taken = _way(lf)
            s._add(s.functions, lf["name"], taken)
            if lf.get("path"):
                s._add(s.lines, (lf["path"], lf.get("line")), taken)
            for h in lf.get("via", []):
                s._add(s.lines, (h["path"], h["line"]), taken)
                if h.get("node"):
                    s._add(s.functions, h["node"], taken)
                if moe and not taken:
                    s.moe_lines.add((h["path"], h["line"]))
                    if h.get("node"):
                        s.moe_functions.add(h["node"])
        # the lines that decided this layer's path (its switches, construction, gates, where its
        # class or dispatch was returned): read on the way to the step, so on it
        sites = list(lay.get("switches") or []) + list(lay.get("construction") or []) + list(lay.get("gates") or [])
        sites += list(lay.get("class_returned_at") or []) + ([lay["method_returned_at"]] if lay.get("method_returned_at") else [])
        sites += [lay["registry"]] if isinstance(lay.get("registry"), dict) else []
        for d in (lay.get("dispatchers") or {}).values():
            sites.append(d)
            for c in d.get("choices", []):
                if c.get("primary") and not c.get("assumptions"):  # a choice that needs no undecided test
                    sites += c.get("returned_at", [])
        for x in lay.get("construction") or []:
            if isinstance(x, dict) and x.get("attr") and x.get("path") and x.get("line"):
                s.constructed.append((x["path"], x["line"], x["attr"], x.get("value")))
        for x in sites:
            if isinstance(x, dict) and x.get("path") and x.get("line"):
                s._add(s.lines, (x["path"], x["line"]), ())
                s.deciders.add((x["path"], x["line"]))
                if moe:
                    s.moe_lines.add((x["path"], x["line"]))
        # the layer's class is built on the way to the step: its constructor runs
        for c in (lay.get("class"), lay.get("backend_class"), lay.get("method")):
            if isinstance(c, str) and c:
                s.constructors.add(c + ".__init__")
        if lay.get("entry"):
            s._add(s.functions, lay["entry"], ())
            if moe:
                s.moe_functions.add(lay["entry"])
    s.steps = tuple(steps)
    return s


def step_sites(ctx, prefill_m: int = PREFILL_M) -> Optional[StepSites]:
    """The scenario's step sites, from its kernel map (built once per context); None without a map."""
    key = ("step-sites", prefill_m)
    if key in ctx.cache:
        return ctx.cache[key]
    from .checks.oparch import scenario_map

    m = scenario_map(ctx, prefill_m)
    # a map that entered no code (a tree without the model's classes or ServerArgs) places nothing
    s = sites_from_map(m) if m and any(lay.get("walked") for _, lay in _layers(m)) else None
    if s is not None:
        s.spans = _spans(ctx.tree.graph)
        _add_deciding_functions(s, ctx.tree.graph)
        _add_dead_branches(s, ctx.tree)
        _add_callees(s, ctx.tree.graph)
    ctx.cache[key] = s
    return s


def _spans(G) -> dict:
    out: dict = {}
    for n, d in G.nodes(data=True):
        if d.get("kind") in ("function", "triton_kernel") and d.get("path") and d.get("line"):
            out.setdefault(d["path"], []).append((d["line"], d.get("end_line") or d["line"], n))
    for v in out.values():
        v.sort()
    return out


def _add_deciding_functions(s: StepSites, G) -> None:
    """The functions that ran to decide the step (where its class or method was returned, its
    switches set) and the constructors of its chosen classes (the ``__init__`` each resolves to).
    They run, but the map read only the lines it cites in them (on the step), not their branches:
    any other line of theirs is undecided, the branch named as the test (an ``if`` inside one may
    hold for another backend only: measured on 0.5.16, calling them on the step was wrong)."""
    def add(fn):
        if fn and () not in s.functions.get(fn, ()):
            s._add(s.functions, fn, (f"the branch of `{G.nodes[fn].get('qualname', fn) if fn in G else fn}` holding this line runs",))
    for path, line in sorted(s.deciders):
        add(enclosing(s, path, line))
    for init in sorted(s.constructors):
        cls = init.rsplit(".", 1)[0]
        for c in [cls] + [v for _, v, d in G.out_edges(cls, data=True) if d.get("kind") == "inherits"] if cls in G else []:
            if f"{c}.__init__" in G:
                add(f"{c}.__init__")
                break


def _self_attr_test(test: ast.AST):
    """(attr, holds when it is truthy) of ``if self.X`` / ``if not self.X``; else None."""
    neg = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, neg = test.operand, True
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
        return test.attr, not neg
    return None


def _add_dead_branches(s: StepSites, tree) -> None:
    """The branches of a constructor the map evaluated that its construction decides off: in the
    function that set ``self.use_flashinfer = False``, the body of ``if self.use_flashinfer:`` does
    not run (nor the ``else`` of a test that holds). Lines there are elsewhere, with the reason."""
    from .engine.asts import module_ast

    by_fn: dict = {}
    for path, line, attr, value in s.constructed:
        fn = enclosing(s, path, line)
        if fn and value in ("True", "False"):
            by_fn.setdefault((path, fn), {})[attr] = (value == "True", f"{path}:{line}")
    for (path, fn), known in by_fn.items():
        mod = module_ast(tree, path)
        span = next(((a, b) for a, b, n in s.spans.get(path, []) if n == fn), None)
        if mod is None or span is None:
            continue
        for node in astwalk.walk(mod):
            if not isinstance(node, ast.If) or not (span[0] <= node.lineno <= span[1]):
                continue
            got = _self_attr_test(node.test)
            if not got or got[0] not in known:
                continue
            attr, when_true = got
            value, at = known[attr]
            holds = value == when_true
            branch = node.orelse if holds else node.body
            if branch:
                why = f"`self.{attr}` is {value} [{at}]"
                s.dead_branches.setdefault(path, []).append((branch[0].lineno, branch[-1].end_lineno, why))


def dead_branch(s: StepSites, path: str, line: int) -> Optional[str]:
    """Why ``path:line`` sits in a branch the step's construction decides off, or None."""
    for a, b, why in s.dead_branches.get(path, ()):
        if a <= line <= b:
            return why
    return None


def _add_callees(s: StepSites, G) -> None:
    """The graph's reach one call beyond the decided path: a function an on-step function calls
    that the map did not enter (a gate its tests evaluate, a call it could not bind, a call in a
    branch it did not follow) is undecided, the call named as the test: the map does not say
    whether that call runs."""
    on = [n for n, ways in s.functions.items() if () in ways and n in G]
    for n in sorted(on):
        short = G.nodes[n].get("qualname", n)
        for _, v, d in G.out_edges(n, data=True):
            if d.get("kind") not in ("calls", "launches") or v in s.functions:
                continue
            at = (d.get("path"), d.get("line"))
            if at in s.dead and at not in s.call_lines and at not in s.lines:
                continue  # the call sits in a branch the engine decided does not run
            if G.nodes.get(v, {}).get("kind") not in ("function", "triton_kernel"):
                continue
            s.callees.setdefault(v, f"the call at {d.get('path')}:{d.get('line')} in `{short}` runs")


def enclosing(s: StepSites, path: str, line: int) -> Optional[str]:
    """The innermost function (or Triton kernel) of ``path`` whose lines hold ``line``: of those
    that hold it, the one that starts last (a nested def starts inside its parent)."""
    spans = s.spans.get(path) or []
    i = bisect.bisect_right(spans, (line, float("inf"), "~"))
    best = None
    for start, end, node in reversed(spans[:i]):
        if start <= line <= end:
            best = node
            break
    return best


def place(s: StepSites, path: Optional[str], line: Optional[int]) -> dict:
    """{placement, function, tests} of one site."""
    if not path or not line:
        return {"placement": ELSEWHERE, "function": None, "tests": []}
    fn = enclosing(s, path, line)
    # a call site the walkers met decides at the line (its own branch), before its function does
    here = s.call_lines.get((path, line))
    if here is None and (path, line) in s.dead and (path, line) not in s.lines:
        return {"placement": ELSEWHERE, "function": fn, "tests": []}
    off = dead_branch(s, path, line) if here is None and (path, line) not in s.lines else None
    if off:
        return {"placement": ELSEWHERE, "function": fn, "tests": [], "branch_off": off}
    ways = set(s.lines.get((path, line), set())) | set(here if here is not None else (s.functions.get(fn, set()) if fn else set()))
    # reached under a test and under its negation: runs whichever way it goes
    ways = merge_ways(ways)
    if () in ways:
        return {"placement": ON_STEP, "function": fn, "tests": []}
    if ways:
        fewest = min(ways, key=lambda t: (len(t), t))
        return {"placement": UNDECIDED, "function": fn, "tests": [with_site(s, t) for t in fewest]}
    if fn in s.callees:
        return {"placement": UNDECIDED, "function": fn, "tests": [s.callees[fn]]}
    return {"placement": ELSEWHERE, "function": fn, "tests": []}


def with_site(s: StepSites, t: str) -> str:
    """An undecided test as a finding names it: the test and where it is read (``file:line``)."""
    at = s.test_sites.get(t) or s.test_sites.get(_negated(t))
    return f"{t} [{at}]" if at else t


def on_moe_path(s: StepSites, path: Optional[str], line: Optional[int]) -> bool:
    """Whether the site is in a function (or on a line) of the MoE layer's decided path."""
    if not path or not line:
        return False
    if (path, line) in s.moe_lines:
        return True
    fn = enclosing(s, path, line)
    return bool(fn and fn in s.moe_functions)


# rules whose messages state facts of the device and the code only (a gate's value, the branch it
# takes), never a model size: placed elsewhere, they keep their own message, which stays true
DEVICE_FACTS = {"arch-gate"}


def place_findings(ctx, findings, rules_by_id: dict) -> bool:
    """Give every finding its placement (``data["placement"]``, and ``placement_tests`` where
    undecided); an elsewhere one gets a message that binds none of the model's sizes. A finding
    whose check placed it already keeps its own. False when there is no map to place against."""
    s = step_sites(ctx)
    if s is None:
        return False
    for f in findings:
        p = f.primary
        if "placement" not in f.data:
            got = place(s, p.path if p else None, p.line if p else None)
            f.data["placement"] = got["placement"]
            if got["tests"]:
                f.data["placement_tests"] = got["tests"]
            fn, off = got["function"], got.get("branch_off")
        else:
            fn = enclosing(s, p.path, p.line) if p else None
            off = dead_branch(s, p.path, p.line) if p and f.data["placement"] == ELSEWHERE else None
        f.data["on_moe_path"] = on_moe_path(s, p.path if p else None, p.line if p else None)
        if off:  # what its evidence says this device does holds only were that branch to run
            f.evidence = [f.evidence[0]] + [dataclasses.replace(e, note=f"{e.note} (only were the branch at line {p.line} to run)")
                                            for e in f.evidence[1:]]
            f.evidence[0] = dataclasses.replace(f.evidence[0], note=f"{f.evidence[0].note} (in a branch that does not run here: {off})")
        if f.data["placement"] == ELSEWHERE and f.rule_id in DEVICE_FACTS:
            if "(elsewhere)" not in f.message:
                G = ctx.tree.graph
                where = G.nodes[fn].get("qualname", fn) if fn and fn in G else (f"{p.path}:{p.line}" if p else "this tree")
                f.message += (f"; line {p.line} is in a branch of `{where}` that does not run here: {off} (elsewhere)" if off else
                              f"; the mapped step does not enter `{where}` for this device, model and flags (elsewhere)")
        elif f.data["placement"] == ELSEWHERE and not f.data.get("placement_said"):
            rule = rules_by_id.get(f.rule_id)
            f.message = elsewhere_message(rule.title if rule else f.rule_id, ctx.tree.graph, fn, p, off)
            f.evidence = [dataclasses.replace(e, note=unbound_note(e.note)) for e in f.evidence]
    return True


def elsewhere_message(title: str, G, fn: Optional[str], p, off: Optional[str] = None) -> str:
    """What a finding off the step says: the rule and the place, none of the model's sizes (they
    were bound for a step this code is not on). A site in a branch the construction decides off is
    said to be so: its function does run."""
    where = G.nodes[fn].get("qualname", fn) if fn and fn in G else (f"{p.path}:{p.line}" if p else "this tree")
    if off:
        return (f"{title.rstrip('.')}: at line {p.line} of `{where}`, in a branch that does not run for this device, model "
                f"and flags ({off}; elsewhere in the tree; the model's sizes are not applied here)")
    return (f"{title.rstrip('.')}: in `{where}`, which the mapped step does not enter for this device, model and "
            f"flags (elsewhere in the tree; the model's sizes are not applied here)")


_BINDS = re.compile(r"^binds (\S+) = .+ at batch \d+ \((\w+)\)$")


def unbound_note(note: str) -> str:
    """An evidence note of a finding off the step, without the value a model size or the batch gave
    it (``binds H = 64 at batch 1 (num_attention_heads)`` -> ``H is read from the model's
    num_attention_heads (not applied here)``); a constant of the code keeps its value."""
    m = _BINDS.match(note or "")
    if not m or m.group(2) == "code":
        return note
    name, src = m.groups()
    return f"{name} is read from the decode batch (not applied here)" if src == "M" else \
        f"{name} is read from the model's {src} (not applied here)"


def undecided_note(tests: list) -> str:
    return "undecided: depends on " + " and ".join(f"`{t}`" for t in tests) + " (recon could not decide; the map shows each outcome)"


GROUP_TITLES = {ON_STEP: "On the mapped step", UNDECIDED: "Reached only under a test recon could not decide",
                ELSEWHERE: "Elsewhere in the tree (not on the mapped step; no model sizes applied)"}


def groups(findings) -> list:
    """[(title, findings)] in the order a reader wants them: on the step, undecided, elsewhere;
    findings without a placement (no map) in one untitled group."""
    unplaced = [f for f in findings if f.data.get("placement") not in PLACEMENTS]
    out = [(None, unplaced)] if unplaced else []
    for p in PLACEMENTS:
        got = [f for f in findings if f.data.get("placement") == p]
        if got:
            out.append((GROUP_TITLES[p], got))
    return out


def on_step(findings) -> list:
    """The findings a spec's root causes and plan may use: those on the mapped step, and those
    never placed (no map to place them against: as before placement existed)."""
    return [f for f in findings if f.data.get("placement") in (None, ON_STEP)]


def placement_counts(findings) -> dict:
    out = {p: 0 for p in PLACEMENTS}
    for f in findings:
        p = f.data.get("placement")
        if p in out:
            out[p] += 1
    return out

