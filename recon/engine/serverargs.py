"""Server arguments: SGLang's own fields, defaults and choices, the user's flags, and the code that
rewrites them for a device and a model.

- **Schema**: the fields of the ``ServerArgs`` dataclass (and, in releases that assemble it from
  namespaces, the classes of the ``fields`` package beside it), each with its default and its
  choices (``choices=NAME`` of an ``add_argument`` call or of an ``Arg(...)`` annotation, or a
  ``Literal[...]`` type), and the option strings ``add_argument`` gives it.
- **Flags**: ``--server-args "--moe-runner-backend marlin --tp-size 2"`` parsed in SGLang's syntax and
  checked against the schema: an unknown flag or a value outside the choices is bad input.
- **Resolution**: every write of a tracked field in the ServerArgs module and the argument-hook
  package (``self.moe_runner_backend = ...``, ``overrides["moe_runner_backend"] = ...``), with the
  branch tests around it and, for functions registered for some architectures only
  (``@_register_for("DeepseekV4ForCausalLM")``), that condition; evaluated in order for the
  device, the model and the flags. A test that cannot be decided (an optional package, a checkpoint
  probe) forks the resolution: the primary outcome assumes it false, the others are kept with the
  assumption that leads to them.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import ReconError
from .interp import UNKNOWN
from .values import MISSING, HFConfig, ModelPath, ServerArgsObj
from .writes import writes_in_module
from .. import astwalk

# The fields a dispatch decision reads; forks are kept for these only.
# (The attention backends are left to the whole-step kernel map: their precedence between per-model
# declarations and generic overrides in newer releases is not modelled here.)
TRACKED = ("device", "moe_runner_backend", "quantization", "moe_a2a_backend", "fp8_gemm_runner_backend", "dtype", "ep_size",
           "speculative_algorithm", "disable_cuda_graph", "enable_dp_attention", "flashinfer_mxfp4_moe_precision", "kv_cache_dtype",
           "attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size")
MAX_FORKS = 8
_ARCH = re.compile(r"^[A-Z][A-Za-z0-9]*For[A-Z][A-Za-z]+$")


class ServerArgsError(ReconError):
    pass


@dataclass
class FieldInfo:
    name: str
    default: Any
    choices: Optional[list]
    path: str
    line: int
    options: list = field(default_factory=list)  # "--moe-runner-backend", aliases
    group: str = ""  # the class declaring it (``ServerArgs``, or a namespace group such as ``ExecMoe``)
    scalar: Optional[type] = None  # int/float/bool/str named by the annotation (``Optional[int]``, ``int | None``)
    # the config namespace a marker in its annotation projects it into (``NS("exec.moe")`` on a
    # ServerArgs field, SGLang 0.5.19): read back as ``get_exec().moe.<name>``
    namespace: str = ""


@dataclass
class Schema:
    fields: dict  # name -> FieldInfo
    module: str  # the module defining ServerArgs
    path: str
    class_qual: str
    allow_abbrev: bool = True  # argparse's default; False where the tree's server parser says so

    def flag_map(self) -> dict:
        out = {}
        for f in self.fields.values():
            out["--" + f.name.replace("_", "-")] = f.name
            for o in f.options:
                out[o] = f.name
        return out


def _const_list(world, module: str, node, fn=None, depth: int = 0) -> Optional[list]:
    """The values a ``choices=`` expression holds: a literal or module-level constant (list, tuple,
    set), ``set(X)`` / ``sorted(X)`` / ``A + B`` / ``A | B`` of those, or a local of the enclosing
    function ``fn`` built from them, with every value its ``.add`` / ``.append`` / ``.update`` /
    ``.extend`` calls put in (also those under a test: the parser accepts them on some runs)."""
    if node is None or depth > 8:
        return None
    v = world.const(node, module)
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=str)
    if isinstance(node, (ast.Name, ast.Attribute)) and (fn is None or not isinstance(node, ast.Name) or not _assigned_in(fn, node.id)):
        # a module-level name bound to an expression (``set(BUILT_IN_SAMPLING_BACKENDS)``)
        expr, mod = world.const_node(node, module)
        if expr is not None:
            return _const_list(world, mod, expr, None, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1 \
            and node.func.id in ("set", "frozenset", "list", "tuple", "sorted"):
        return _const_list(world, module, node.args[0], fn, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
        a, b = _const_list(world, module, node.left, fn, depth + 1), _const_list(world, module, node.right, fn, depth + 1)
        return None if a is None or b is None else a + [x for x in b if x not in a]
    if isinstance(node, ast.Name) and fn is not None:
        base = None
        for st in astwalk.walk(fn):
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                    and st.targets[0].id == node.id:
                got = _const_list(world, module, st.value, None, depth + 1)
                if got is None:
                    return None  # a value recon cannot read: no choices rather than wrong ones
                base = (base or []) + [x for x in got if x not in (base or [])]
        if base is None:
            return None
        for c in astwalk.walk(fn):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) \
                    and c.func.value.id == node.id and c.args:
                if c.func.attr in ("add", "append"):
                    more = [world.const(c.args[0], module)]
                elif c.func.attr in ("update", "extend"):
                    more = _const_list(world, module, c.args[0], None, depth + 1)
                else:
                    continue
                if more is None or any(m is UNKNOWN for m in more):
                    return None
                base += [m for m in more if m not in base]
        return base
    return None


def _assigned_in(fn, name: str) -> bool:
    return any(isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets)
               for st in astwalk.walk(fn))


def load_schema(world) -> Optional[Schema]:
    """ServerArgs' fields, defaults and choices, read from the tree (None if the tree has none)."""
    from .asts import tree_memo
    memo = tree_memo(world.tree)
    if "schema" not in memo:
        memo["schema"] = _load_schema(world)
    return memo["schema"]


def _load_schema(world) -> Optional[Schema]:
    G = world.tree.graph
    cls = sorted(n for n, d in G.nodes(data=True) if d.get("kind") == "class" and d.get("name") == "ServerArgs"
                 and d.get("path", "").endswith("srt/server_args.py"))
    if not cls:
        return None
    cq = cls[0]
    cd = G.nodes[cq]
    mod = cq.rsplit(".", 1)[0]
    sources = [(cd["path"], mod, "ServerArgs")]
    pkg = mod.rsplit(".", 1)[0] + ".arg_groups.fields"
    for n, d in sorted(G.nodes(data=True)):
        if d.get("kind") == "module" and (n == pkg or n.startswith(pkg + ".")):
            sources.append((d["path"], n, None))
    fields: dict[str, FieldInfo] = {}
    for path, module, only in sources:
        tree = world.module_ast(path)
        if tree is None:
            continue
        for c in tree.body:
            if not isinstance(c, ast.ClassDef) or (only and c.name != only):
                continue
            for st in c.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and not st.target.id.startswith("_"):
                    name = st.target.id
                    default = world.const(st.value, module) if st.value is not None else MISSING
                    choices = _choices_of(world, st.annotation, module)
                    info = fields.setdefault(name, FieldInfo(name, default, choices, path, st.lineno, group=c.name,
                                                             scalar=_annotated_scalar(st.annotation)))
                    info.options = sorted(set(info.options) | set(_declared_flags(st.annotation)))
                    info.namespace = info.namespace or _declared_namespace(world, module, st.annotation)
    # add_argument("--x", "--alias", choices=..., dest=...) in the ServerArgs module
    tree = world.module_ast(cd["path"])
    # each add_argument call with the function it is in (its choices may be a local of it)
    calls = []
    for f in astwalk.walk(tree) if tree is not None else ():
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls += [(n, f) for n in astwalk.walk(f)]
    calls += [(n, None) for n in astwalk.walk(tree)] if tree is not None else []  # module level too
    for n, fn in calls:
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"):
            continue
        opts = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
        if not opts:
            continue
        kw = {k.arg: k.value for k in n.keywords if k.arg}
        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else opts[0][2:].replace("-", "_")
        fi = fields.get(dest)
        if fi is None:
            continue
        fi.options = sorted(set(fi.options) | set(opts))
        if fi.choices is None and "choices" in kw:
            fi.choices = _const_list(world, mod, kw["choices"], fn)
    # argparse accepts unique prefixes unless the server's parser is built with allow_abbrev=False
    abbrev = not any(isinstance(n, ast.Call) and _unparsed(n.func).endswith("ArgumentParser")
                     and any(k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False for k in n.keywords)
                     for n in (astwalk.walk(tree) if tree is not None else ()))
    return Schema(fields, mod, cd["path"], cq, abbrev)


_NS_PATH = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+$")


def _declared_namespace(world, module: str, ann) -> str:
    """The namespace path an ``Annotated`` field's metadata names: an in-tree marker built from one
    dotted string and nothing else (``NS("exec.moe")``), as the config projection reads it."""
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Tuple)):
        return ""
    for meta in ann.slice.elts[1:]:
        if not (isinstance(meta, ast.Call) and len(meta.args) == 1 and not meta.keywords
                and isinstance(meta.args[0], ast.Constant) and isinstance(meta.args[0].value, str)
                and _NS_PATH.match(meta.args[0].value)):
            continue
        callee = _unparsed(meta.func)
        try:
            q = world.R.resolve(module, "", callee)
        except Exception:
            q = None
        if q and world.G.nodes.get(q, {}).get("kind") in ("class", "function"):
            return meta.args[0].value
    return ""


def _unparsed(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover
        return ""


def _declared_flags(annotation) -> list:
    """Flags a field's annotation declares for it (``Arg(cli_name="--tp-size", aliases=["--tensor-parallel-size"])``)."""
    out = []
    for n in astwalk.walk(annotation) if annotation is not None else ():
        if isinstance(n, ast.Call):
            for k in n.keywords:
                if k.arg == "cli_name" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                    out.append(k.value.value)
                elif k.arg == "aliases" and isinstance(k.value, (ast.List, ast.Tuple)):
                    out += [e.value for e in k.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return [o for o in out if o.startswith("--")]


def _choices_of(world, ann, module) -> Optional[list]:
    """``A[str, Arg(choices=NAME)]`` or ``Literal["a", "b"]`` in a field's annotation."""
    for n in astwalk.walk(ann):
        if isinstance(n, ast.Call):
            for k in n.keywords:
                if k.arg == "choices":
                    v = _const_list(world, module, k.value)
                    if v is not None:
                        return v
        if isinstance(n, ast.Subscript) and isinstance(n.value, (ast.Name, ast.Attribute)) and ast.unparse(n.value).endswith("Literal"):
            elts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            vals = [e.value for e in elts if isinstance(e, ast.Constant)]
            if vals:
                return vals
    return None


_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


def _annotated_scalar(ann) -> Optional[type]:
    """The one scalar type an annotation names besides None (``Optional[int]`` -> int); None when
    it names none or several (``Union[int, str]``)."""
    names = {n.id for n in astwalk.walk(ann) if isinstance(n, ast.Name) and n.id in _SCALARS}
    return _SCALARS[names.pop()] if len(names) == 1 else None


def _coerce(raw: str, info: FieldInfo):
    d = info.default
    if d is None or d is MISSING:  # no default to type the value by: the annotation's type
        if info.scalar in (int, float, bool):
            d = info.scalar(0)
    if isinstance(d, bool):
        return raw.lower() not in ("0", "false", "no")
    if isinstance(d, int) and not isinstance(d, bool):
        try:
            return int(raw)
        except ValueError:
            raise ServerArgsError(f"--server-args: {info.options[0] if info.options else info.name} takes an integer, not {raw!r}")
    if isinstance(d, float):
        try:
            return float(raw)
        except ValueError:
            raise ServerArgsError(f"--server-args: {info.name} takes a number, not {raw!r}")
    return raw


# Counts of devices or processes: SGLang divides shapes and ranks by them, so a value below 1 has
# no meaning and recon's per-rank shapes would come out negative or as division by zero.
_COUNTS = frozenset({"tp_size", "pp_size", "dp_size", "ep_size", "moe_dp_size", "attn_cp_size", "nnodes"})
_COUNT_MAX = 1 << 16  # past any cluster a server argument could describe
_INT_MAX = 1 << 53  # past any value SGLang could use (and where a float stops holding an int exactly)


def _check_range(flag: str, raw: str, val, info: FieldInfo) -> None:
    if not isinstance(val, int) or isinstance(val, bool):
        return
    if info.name in _COUNTS and not 1 <= val <= _COUNT_MAX:
        raise ServerArgsError(f"--server-args: {flag} counts devices or processes: it takes 1 to {_COUNT_MAX}, not {raw!r}")
    if abs(val) > _INT_MAX:
        raise ServerArgsError(f"--server-args: {flag} {raw!r} is past any value SGLang could use")


def parse_flags(text: Optional[str], schema: Optional[Schema]) -> dict:
    """``"--moe-runner-backend marlin --tp-size 2"`` -> ``{"moe_runner_backend": "marlin", "tp_size": 2}``."""
    if not text or not text.strip():
        return {}
    if schema is None:
        raise ServerArgsError("--server-args: this tree has no ServerArgs class to check the flags against")
    try:
        toks = shlex.split(text)
    except ValueError as e:
        raise ServerArgsError(f"--server-args: {e}")
    fmap = schema.flag_map()
    out: dict = {}
    i = 0
    while i < len(toks):
        tok = toks[i]
        if not tok.startswith("--"):
            raise ServerArgsError(f"--server-args: expected a flag, got {tok!r}")
        name, _, inline = tok.partition("=")
        if name not in fmap and schema.allow_abbrev:
            # argparse takes a unique prefix of a flag (`--tp` for `--tp-size`)
            hits = sorted(f for f in fmap if f.startswith(name))
            if len({fmap[f] for f in hits}) > 1:
                raise ServerArgsError(f"--server-args: {name} is ambiguous in SGLang's parser (it could be {', '.join(hits[:4])})")
            if hits:
                name = hits[0]
        if name not in fmap:
            close = sorted(f for f in fmap if f.startswith(name[:6]))[:3]
            raise ServerArgsError(f"--server-args: SGLang has no flag {name}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        info = schema.fields[fmap[name]]
        if inline:
            raw, i = inline, i + 1
        elif isinstance(info.default, bool) and (i + 1 >= len(toks) or toks[i + 1].startswith("--")):
            raw, i = "true", i + 1
        elif i + 1 < len(toks):
            raw, i = toks[i + 1], i + 2
        else:
            raise ServerArgsError(f"--server-args: {name} needs a value")
        val = _coerce(raw, info)
        _check_range(name, raw, val, info)
        if info.choices and val not in info.choices:
            raise ServerArgsError(f"--server-args: {name} {raw!r} is not one of SGLang's choices ({', '.join(map(str, info.choices))})")
        out[info.name] = val
    return out


# --- resolution --------------------------------------------------------------------------------


@dataclass
class Decision:
    field: str
    value: Any
    source: str  # "default" | "--flag" | "path:line"
    path: Optional[str] = None
    line: Optional[int] = None
    test: str = ""  # the branch test(s) that let the write happen


@dataclass
class State:
    schema: Schema
    values: dict = field(default_factory=dict)  # field -> value (user flags and writes)
    decisions: dict = field(default_factory=dict)  # field -> Decision of the last write
    assumptions: tuple = ()

    def get(self, name: str):
        if name in self.values:
            return self.values[name]
        f = self.schema.fields.get(name)
        return UNKNOWN if f is None or f.default is MISSING else f.default

    def copy(self) -> "State":
        return State(self.schema, dict(self.values), dict(self.decisions), self.assumptions)

    def key(self) -> tuple:
        private = tuple((k, repr(v)) for k, v in sorted(self.values.items()) if _private(k))
        return tuple((k, repr(self.get(k))) for k in TRACKED) + private


def _private(name: str) -> bool:
    """A private attribute of the server arguments (no field, no flag) that hooks set and read."""
    return name.startswith("_") and not name.startswith("__")


def _arch_guard(decorators, archs, classes=frozenset(), ev=None, module: str = "") -> Optional[bool]:
    """True/False when a decorator registers the function under model architectures
    (``@_register_for("EmbeddingGemma2Model")``: its string arguments name model classes of the
    tree, or have an architecture's shape), or under a predicate on the architecture
    (``@register_model_override_predicate(lambda arch: "Step3p5ForCausalLM" in arch)``, evaluated
    for each of the model's architectures)."""
    for d in decorators:
        if isinstance(d, ast.Call):
            names = [a.value for a in d.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if names and any(n in classes or _ARCH.match(n) for n in names):
                return any(a in names for a in archs)
            lam = next((a for a in d.args if isinstance(a, ast.Lambda) and len(a.args.args) == 1), None)
            if lam is not None and ev is not None and archs:
                got = [ev.eval(lam.body, {lam.args.args[0].arg: a}, module, "") for a in archs]
                if all(isinstance(g, bool) for g in got):
                    return any(got)
    return None


def _class_names(world) -> frozenset:
    from .asts import tree_memo
    memo = tree_memo(world.tree)
    if "class_names" not in memo:
        memo["class_names"] = frozenset(d.get("name") for _, d in world.G.nodes(data=True) if d.get("kind") == "class")
    return memo["class_names"]


def hook_modules(world, schema: Schema) -> list[tuple[str, str]]:
    """(path, module) of the ServerArgs module and the argument-hook package beside it."""
    G = world.tree.graph
    out = [(schema.path, schema.module)]
    pkg = schema.module.rsplit(".", 1)[0] + ".arg_groups"
    for n, d in sorted(G.nodes(data=True)):
        if d.get("kind") == "module" and n.startswith(pkg + ".") and not n.startswith(pkg + ".fields"):
            out.append((d["path"], n))
    return out


def resolve(world, schema: Schema, flags: dict, evaluator) -> list[State]:
    """The resolved server arguments: the primary outcome first, then the forks (at most MAX_FORKS).

    Hooks run in an order this reading does not model, and a hook may read a field that another
    fills in later (``device`` is None until a hook asks the platform). So the writes whose tests
    or values read such a placeholder are evaluated once more, after the first pass, with its
    resolved value."""
    writes = _writes(world, schema)
    base = State(schema, dict(flags))
    if "model_path" in schema.fields and "model_path" not in flags:
        base.values["model_path"] = ModelPath(getattr(world.model, "name", "") or "")
    for k, v in flags.items():
        base.decisions[k] = Decision(k, v, "--" + k.replace("_", "-"))
    # A private attribute a hook sets for later hooks (``_quantization_explicitly_unset``: "record
    # the opt-out so later auto-detection does not re-enable it") is set before they read it; the
    # hook order is not modelled, so those writes run first too (and again in their place).
    privates = [w for w in writes if _private(w.key)]
    states = _apply(world, privates + writes, [base], evaluator) if privates else _apply(world, writes, [base], evaluator)
    seeds = {k for k, v in states[0].values.items() if k not in flags and k in states[0].decisions
             and (f := schema.fields.get(k)) is not None and f.default is None and v is not None}
    if not seeds:
        return states
    again = [w for w in writes if _reads(w, seeds)]
    return _apply(world, again, states, evaluator) if again else states


def _called(world, w, state, evaluator, strict: bool = False) -> bool:
    """False when every in-tree call of the write's function sits under a test that fails here
    (a model-specific hook called only under ``elif model_arch in [...]``; a pass handed to a runner,
    ``run_post_process_pass(args, fn)``, counts as called where it is handed); True otherwise, also
    when nothing in the tree calls it (a hook run from a registry)."""
    if not w.scope:
        return True
    qual = f"{w.module}.{w.scope}"
    # strict (a refusal): each call's tests are taken the primary way, an undecided one as false (a
    # call under `if <undecided>:` does not run; one after `if <undecided>: return` does)
    cache = world.__dict__.setdefault("_called_strict" if strict else "_called", {})
    if qual in cache:
        return cache[qual]
    cache[qual] = True  # recursion guard
    from .handoffs import guarded_calls
    from .writes import Write
    G = world.G
    sites = [(u, d.get("line")) for u, _, d in G.in_edges(qual, data=True) if d.get("kind") == "calls"]
    sites += world.reference_sites(qual)
    if not sites:
        return True
    runs = False
    for caller, line in sites:
        fn = evaluator.model.function_ast(caller)
        if fn is None:
            runs = True
            break
        mod, scope = evaluator.model.module_scope(caller)
        path = world.path_of(caller)
        from .writes import local_writes
        for call, guards in guarded_calls(fn):
            if not (call.lineno <= (line or 0) <= getattr(call, "end_lineno", call.lineno)):
                continue
            probe = Write(path, mod, scope, call.lineno, "", "", call, tuple(guards), fn, (), local_writes(fn))
            env = world.write_env(probe, ServerArgsObj(state), evaluator)
            if all((evaluator.eval(t, env, mod, scope) is not UNKNOWN and bool(evaluator.eval(t, env, mod, scope)) == want)
                   or (evaluator.eval(t, env, mod, scope) is UNKNOWN and (not strict or not want)) for t, want in guards):
                runs = True
                # the arguments this call passes (`self._set_default_dsa_kv_cache_dtype(major, ...)`)
                callee = evaluator.model.function_ast(qual)
                if callee is not None and len(sites) == 1:
                    names = [a.arg for a in callee.args.posonlyargs + callee.args.args]
                    names = names[1:] if names and names[0] in ("self", "cls") else names
                    bound = {}
                    for p_, a in zip(names, call.args):
                        v = evaluator.eval(a, env, mod, scope)
                        if v is not UNKNOWN and not isinstance(v, ServerArgsObj):
                            bound[p_] = v
                    world.__dict__.setdefault("_callsite_args", {})[qual] = bound
                break
        else:
            continue
        break
    cache[qual] = runs
    return runs


# Where SGLang's resolution starts: ServerArgs' construction and (arg_groups releases) the launcher's
# resolve step. A raise counts only in a function these reach through in-tree calls.
_ENTRIES = ("__post_init__", "resolve_once", "check_server_args")


def refusals(world, schema: Schema, state: State, evaluator) -> list[dict]:
    """The ``raise``/``assert`` sites of the resolution (ServerArgs and its hook package) that fire
    on the resolved arguments: every test on the way to one decided and holding, in a function the
    resolution calls (:func:`_reached`) where each call's own tests hold. SGLang refuses to start
    with such arguments (``TRTLLM MHA backend is only supported on Blackwell GPUs (SM100)`` on an
    SM120 device where its own default picked trtllm_mha). An undecided test never refuses:
    the primary outcome is that the resolution goes through. [{path, line, message}]."""
    from .asts import tree_memo
    from .writes import writes_in_module
    memo = tree_memo(world.tree)
    if "hook_raises" not in memo:
        sites = []
        for path, module in hook_modules(world, schema):
            tree = world.module_ast(path)
            if tree is not None:
                # `raise` only: an assert is mostly a postcondition on what its own function just
                # wrote (`assert self.kv_cache_dtype in [...]` after setting it), which a reading
                # of the resolved state cannot place in sequence
                sites += [w for w in writes_in_module(tree, path, module, None, raises=True)
                          if w.scope and isinstance(_stmt_at(tree, w.line), ast.Raise)]
        memo["hook_raises"] = sites
    archs = list(world.model.architectures)
    classes = _class_names(world)
    out = []
    for w in memo["hook_raises"]:
        # a compatibility check of ServerArgs on a dispatch field the resolution decided: other
        # raises (input formats, a read-only view's __setattr__, scheduler options this view does
        # not resolve) read values recon does not hold and are left to the user's run
        if not w.scope.startswith("ServerArgs.") or not _reads(w, set(TRACKED)):
            continue
        if _arch_guard(w.decorators, archs, classes, evaluator, w.module) is False:
            continue
        path = _reached(world, schema, f"{w.module}.{w.scope}")
        if path is None or not _chain_runs(world, path, state, evaluator):
            continue
        env = world.write_env(w, ServerArgsObj(state), evaluator,
                              world.__dict__.get("_callsite_args", {}).get(f"{w.module}.{w.scope}"))
        tests = [(evaluator.eval(t, env, w.module, w.scope), want) for t, want in w.guards]
        if all(v is not UNKNOWN and bool(v) == want for v, want in tests):
            out.append({"path": w.path, "line": w.line, "message": _message(w.value, env, evaluator, w)})
    return out


def _stmt_at(tree: ast.Module, line: int):
    """The first ``raise`` or ``assert`` (in ``ast.walk`` order) starting on ``line``: one walk of
    the module, kept on it, instead of one per write asked about."""
    at = getattr(tree, "_recon_raise_assert_at", None)
    if at is None:
        at = {}
        for n in astwalk.walk(tree):
            if isinstance(n, (ast.Raise, ast.Assert)):
                at.setdefault(n.lineno, n)
        tree._recon_raise_assert_at = at
    return at.get(line)


def _reached(world, schema: Schema, qual: str, depth: int = 6) -> Optional[list]:
    """The chain of in-tree calls from the resolution's entry (:data:`_ENTRIES` of ServerArgs) to
    ``qual`` ([qual, its caller, ..., the entry]), or None; a function of the hook package nothing
    in the tree calls is a hook run by a registry (as for writes). A helper only other code calls
    (``ServerArgs.url``) is not reached."""
    G = world.G
    hooks_pkg = schema.module.rsplit(".", 1)[0] + ".arg_groups."
    parent = {qual: None}
    frontier = [qual]

    def chain(q):
        out = []
        while q is not None:
            out.append(q)
            q = parent[q]
        return out

    for _ in range(depth):
        nxt = []
        for q in frontier:
            if q.rsplit(".", 1)[-1] in _ENTRIES and ".ServerArgs." in f".{q}":
                return chain(q)
            callers = [u for u, _, d in G.in_edges(q, data=True) if d.get("kind") == "calls"] if q in G else []
            callers += [u for u, _ in world.reference_sites(q)]
            if not callers and q.startswith(hooks_pkg):
                return chain(q)
            for u in callers:
                if u not in parent:
                    parent[u] = q
                    nxt.append(u)
        frontier = nxt
    return None


def _chain_runs(world, chain: list, state: State, evaluator) -> bool:
    """Every function on the chain is called with its call's tests holding (the strict rule of
    :func:`_called`): a check inside ``_handle_mamba_radix_cache`` counts only where that hook
    itself runs for this model."""
    from types import SimpleNamespace
    for q in chain[:-1]:
        node = world.G.nodes.get(q, {})
        mod = next((m for m in _module_prefixes(q) if world.G.nodes.get(m, {}).get("kind") == "module"), None)
        if mod is None or not node:
            return False
        probe = SimpleNamespace(module=mod, scope=q[len(mod) + 1:], path=node.get("path", ""))
        if not _called(world, probe, state, evaluator, strict=True):
            return False
    return True


def _module_prefixes(qual: str) -> list:
    parts = qual.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def _message(node, env, evaluator, w) -> str:
    """The exception's message where it is a string the evaluator can give, else its source."""
    arg = node.args[0] if isinstance(node, ast.Call) and node.args else node
    got = evaluator.eval(arg, env, w.module, w.scope)
    text = got if isinstance(got, str) else ast.unparse(node)
    return text[:240]


def _reads(w, fields: set) -> bool:
    nodes = [t for t, _ in w.guards] + [w.value]
    return any(isinstance(n, ast.Attribute) and n.attr in fields for x in nodes for n in astwalk.walk(x))


def later_writers(world, schema: Schema, field: str) -> list:
    """(path, line, scope) of stores to ``<server args>.field`` outside ServerArgs and its hook
    package (0.5.3's ModelRunner picks the attention backend itself): such a field is decided after
    the arguments are resolved, by code this view does not evaluate."""
    from .asts import tree_memo
    memo = tree_memo(world.tree)
    if "later_writers" not in memo:
        hooks = {p for p, _ in hook_modules(world, schema)}
        home = schema.module.rsplit(".", 1)[0] + "."  # another package's own ServerArgs is not this one
        found: dict = {}
        for path, module, target, line, scope in world.attr_stores():
            if path in hooks or not module.startswith(home):
                continue
            recv, _, attr = target.rpartition(".")
            if attr in schema.fields and recv and recv != "self" and "[" not in recv \
                    and re.search(r"(args|cfg|server|record)", recv, re.I):
                found.setdefault(attr, []).append((path, line, scope))
                memo.setdefault("later_writer_modules", {})[path] = module
        memo["later_writers"] = found
    return memo["later_writers"].get(field, [])


def open_later_writers(world, schema: Schema, field: str, state: State, evaluator) -> list:
    """The later writers of ``field`` (:func:`later_writers`) that can change its resolved value on
    this path. Left out: a store of the constant the field already holds (a speculative draft
    worker resetting ``decode_attention_backend = None``), and a store in a function whose every
    in-tree call sits under a test that fails here (``set_default_server_args`` of the NPU backend,
    called under ``if self.device == "npu"``). A store that cannot be tied to its write stays."""
    from .asts import tree_memo
    found = later_writers(world, schema, field)  # fills the memo of their modules
    modules = tree_memo(world.tree).get("later_writer_modules", {})
    out = []
    for path, line, scope in found:
        w = _write_at(world, path, modules.get(path, ""), line, field)
        if w is not None:
            have = state.get(field)
            if isinstance(w.value, ast.Constant) and have is not UNKNOWN and type(w.value.value) is type(have) \
                    and w.value.value == have:
                continue
            if not _called(world, w, state, evaluator):
                continue
        out.append((path, line, scope))
    return out


def _write_at(world, path: str, module: str, line: int, field: str):
    tree = world.module_ast(path) if module else None
    if tree is None:
        return None
    return next((w for w in writes_in_module(tree, path, module, {field}) if w.line == line), None)


def _writes(world, schema: Schema) -> list:
    from .asts import tree_memo
    memo = tree_memo(world.tree)
    if "hook_writes" in memo:
        return memo["hook_writes"]
    writes = []
    for path, module in hook_modules(world, schema):
        tree = world.module_ast(path)
        if tree is None:
            continue
        for w in writes_in_module(tree, path, module, None, dict_literals=True):
            if (w.key in TRACKED or (_private(w.key) and w.receiver != "<dict>" and w.key not in schema.fields)) \
                    and _writes_the_arguments(w):
                writes.append(w)
    # private attributes count only where a tracked write's tests or value read them
    read = {n.attr for w in writes if not _private(w.key)
            for x in [t for t, _ in w.guards] + [w.value] + [e for _, e, *_r in w.locals]
            for n in astwalk.walk(x) if isinstance(n, ast.Attribute) and _private(n.attr)}
    writes = [w for w in writes if not _private(w.key) or w.key in read]
    memo["hook_writes"] = writes
    return writes


def _writes_the_arguments(w) -> bool:
    """Whether a write in the hook package lands in the server arguments: on ``self`` (ServerArgs'
    own methods), on the argument a hook is handed first (``def hook(server_args, ...)``,
    ``from_cli_args(cls, args)``), in a dict literal a hook returns, or in a local dict the hook
    hands on (returned by a module-level hook, or splatted into a declaring call:
    ``declare_resolution(args, why, **d)``)."""
    r = w.receiver
    if r == "<dict>" or r == "self" or r.startswith("self."):
        return True
    fn = w.fn
    if fn is None or not re.fullmatch(r"[A-Za-z_]\w*", r):
        return False
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    if params and r == params[0]:
        return True
    for n in astwalk.walk(fn):
        # a module-level hook returns its overrides; a method returning a dict (ServerArgs'
        # resolved_dict, a dump for clients) is no resolution step
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id == r and "." not in w.scope:
            return True
        if isinstance(n, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == r for k in n.keywords):
            return True
    return False


def _apply(world, writes: list, states: list, evaluator) -> list[State]:
    archs = list(world.model.architectures)
    classes = _class_names(world)
    explored: set = set()
    for w in writes:
        if w.receiver == "<dict>" and w.fn is not None and isinstance(w.value, ast.Name):
            # a function returning its overrides as a dict built from locals: explore the whole
            # body once (branch by branch) and take what its primary return says
            if id(w.fn) in explored:
                continue
            explored.add(id(w.fn))
            if _arch_guard(w.decorators, archs, classes, evaluator, w.module) is False:
                continue
            nxt = []
            for st in states:
                env = world.write_env(w, ServerArgsObj(st), evaluator)
                outs = evaluator.explore(w.fn.body, env, w.module, w.scope, w.path)
                outs = sorted((o for o in outs if isinstance(o.value, dict)), key=lambda o: sum(1 for a in o.assumptions if a[1]))
                nst = st.copy()
                if outs:
                    for k, v in outs[0].value.items():
                        if k in TRACKED and v is not UNKNOWN:
                            nst.values[k] = v
                            nst.decisions[k] = Decision(k, v, f"{w.path}:{outs[0].line}", w.path, outs[0].line, "returned by " + w.scope)
                nxt.append(nst)
            states = nxt
            continue
        g = _arch_guard(w.decorators, archs, classes, evaluator, w.module)
        if g is False or not _called(world, w, states[0], evaluator):
            continue
        nxt = []
        for st in states:
            env = world.write_env(w, ServerArgsObj(st), evaluator,
                                  world.__dict__.get("_callsite_args", {}).get(f"{w.module}.{w.scope}"))
            # a test that cannot be decided is taken as false in the primary outcome; where that
            # keeps the write from happening, a fork takes each undecided test the way the write
            # needs it, and carries those assumptions
            tests = [(evaluator.eval(t, env, w.module, w.scope), t, want) for t, want in w.guards]
            unknown = [(t, want) for v, t, want in tests if v is UNKNOWN]
            primary = all((bool(v) if v is not UNKNOWN else False) == want for v, _, want in tests)
            alt = all(bool(v) == want for v, _, want in tests if v is not UNKNOWN)  # the undecided ones go its way
            outcomes = [(primary, ())]
            if unknown and alt and not primary:
                outcomes.append((True, tuple((ast.unparse(t)[:160], want, w.path, w.line) for t, want in unknown)))
            for fires, assumed in outcomes:
                for value, more in (_values(w, env, evaluator) if fires else [(UNKNOWN, ())]):
                    nst = st.copy()
                    nst.assumptions = st.assumptions + assumed + more
                    if value is not UNKNOWN:  # a value read from outside the resolution (CLI parsing) is not modelled
                        cond = " and ".join(("" if want else "not ") + f"({ast.unparse(t)})" for _, t, want in tests)
                        nst.values[w.key] = value
                        nst.decisions[w.key] = Decision(w.key, value, f"{w.path}:{w.line}", w.path, w.line, cond)
                    nxt.append(nst)
        # one state per distinct tracked outcome, the primary (fewest "true" assumptions) first
        seen, states = set(), []
        for st in sorted(nxt, key=lambda s: sum(1 for a in s.assumptions if a[1])):
            if st.key() not in seen:
                seen.add(st.key())
                states.append(st)
        states = states[:MAX_FORKS]
    return states


def _values(w, env, evaluator) -> list:
    """What a write stores: one value, or for ``a if test else b`` with an undecided test, ``b``
    (the primary rule) and ``a`` with the test assumed true."""
    value = evaluator.eval(w.value, env, w.module, w.scope)
    if value is UNKNOWN and isinstance(w.value, ast.IfExp) and evaluator.eval(w.value.test, env, w.module, w.scope) is UNKNOWN:
        test = (ast.unparse(w.value.test)[:160], True, w.path, w.line)
        return [(evaluator.eval(w.value.orelse, env, w.module, w.scope), ()),
                (evaluator.eval(w.value.body, env, w.module, w.scope), (test,))]
    return [(value, ())]


__all__ = ["Schema", "State", "Decision", "load_schema", "parse_flags", "resolve", "refusals", "ServerArgsError", "HFConfig"]
