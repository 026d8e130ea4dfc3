"""What the evaluator knows besides the device: the tree's classes, enums and environment
declarations, the model's config.json, the server arguments in their resolution state, and the
user's ``--env`` settings. Every answer it cannot give is ``UNKNOWN``; every default it uses for
something a person could set (an environment variable) is recorded in ``notes``."""

from __future__ import annotations

import ast
import re
from typing import Optional

from .asts import classes_named, defs_by_line, module_ast, module_global_writes, single_assignments, tree_memo
from .interp import UNKNOWN, in_place
from .values import MISSING, ClassRef, EnumVal, HFConfig, Instance, ServerArgsObj
from .writes import writes_in_module
from .. import astwalk

_ENV_CTOR = re.compile(r"^Env[A-Z]?\w*$")
_TRUE = ("1", "true", "yes", "on")
# the standard library's memoizing decorators
_STDLIB_MEMOS = frozenset({"functools.lru_cache", "functools.cache"})


class World:
    def __init__(self, tree, model, env: Optional[dict] = None):
        self.tree = tree
        self.G = tree.graph
        self.R = tree.resolver
        self.model = model
        self.hf = HFConfig(dict(getattr(model, "hf_config", None) or {"architectures": list(model.architectures)}))
        self.env = dict(env or {})
        self.state = None  # recon.engine.serverargs.State, set once resolved
        self.schema = None
        self.notes: Reads = Reads()  # what was assumed: env defaults, checkpoint facts
        # values the primary rule chose where a test's other way gives another value (a caller
        # that must not present a guess as decided compares this count before and after)
        self.guesses = 0
        self._envs: Optional[dict] = None
        self._class_writes: dict = {}
        self._mro: dict = {}
        self._slots: dict = {}
        self.shared_asts = None  # the gate model's parse cache, when there is one
        memo = tree_memo(tree)
        self._writes_by_path: dict = memo.setdefault("writes_by_path", {})
        self._facts_scan = memo.setdefault("facts_scan", {})
        self._importers: Optional[dict] = self._facts_scan.get("importers")
        self._assigned = self._facts_scan.get("assigned", {})
        self.decorated = self._facts_scan.get("decorated", [])
        self._slot_index: dict = {}
        self._slots_busy: set = set()  # slots whose writer is being evaluated (a recursion guard)
        self._defs_by_line: dict = {}

    # --- files ---------------------------------------------------------------------------------
    def module_ast(self, path: str, keep: bool = True):
        """The parsed file (``asts.module_ast``); ``keep=False`` for a scan whose result is kept
        without the syntax tree (the file is not kept parsed for it)."""
        if not keep:
            try:
                return module_ast(self.tree, path, keep=False)
            except OSError:
                return None
        if self.shared_asts is not None:
            return self.shared_asts(path)
        try:
            return module_ast(self.tree, path)
        except OSError:
            return None

    def function_ast(self, qual: str):
        """The def of an in-tree function, found by its file and line (one walk per file)."""
        d = self.G.nodes.get(qual, {})
        path, line = d.get("path"), d.get("line")
        if not path:
            return None
        by_line = self._defs_by_line.get(path)
        if by_line is None:
            tree = self.module_ast(path)
            by_line = self._defs_by_line[path] = defs_by_line(tree) if tree is not None else {}
        return by_line.get(line)

    def path_of(self, qual: str) -> Optional[str]:
        return self.G.nodes.get(qual, {}).get("path")

    def imported_as(self, mod: str, scope: str, dotted: str) -> Optional[str]:
        """The full dotted name an import in ``scope`` (or around it) binds ``dotted``'s head to."""
        path = self.G.nodes.get(mod, {}).get("path")
        facts = self.tree.index.facts(path) if path else None
        if facts is None or not dotted:
            return None
        head, _, rest = dotted.partition(".")
        best = None
        for imp in facts.imports:
            if imp.local == head and (imp.scope == "" or scope == imp.scope or scope.startswith(imp.scope + ".")):
                if best is None or len(imp.scope) > len(best.scope):
                    best = imp
        if best is None:
            return None
        base = f"{best.module}.{best.name}" if best.name else best.module
        return f"{base}.{rest}" if rest else base

    def literal(self, node):
        # a name, an attribute or a call other than ``set()`` is never a literal: answered without
        # the raise and unwind inside ``literal_eval`` (most of this function's cost)
        if isinstance(node, (ast.Name, ast.Attribute)) or (
                isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "set")):
            return UNKNOWN
        try:
            return ast.literal_eval(node)
        except Exception:
            return UNKNOWN

    def const(self, node, module: str):
        """A constant expression, following module-level names (``choices=MOE_RUNNER_BACKEND_CHOICES``)."""
        v = self.literal(node)
        if v is not UNKNOWN or node is None:
            return v
        if isinstance(node, (ast.Name, ast.Attribute)):
            dotted = ast.unparse(node)
            q = (self.R.resolve(module, "", dotted) if module else None) or f"{module}.{dotted}"
            # A module-level name is no graph node: follow the imports that bind it instead
            # (``from ...arg_groups.choices import MOE_RUNNER_BACKEND_CHOICES``), a few hops deep.
            for _hop in range(4):
                mod, _, name = q.rpartition(".")
                got = self._module_constant(mod, name)
                if got is not UNKNOWN:
                    return got
                nxt = self.imported_as(mod, "", name) if mod else None
                if not nxt or nxt == q:
                    break
                q = nxt
        return UNKNOWN

    def const_node(self, node, module: str):
        """The expression a module-level name is bound to, and the module it is in (following the
        imports that bind it, as :meth:`const`); (None, None) when there is none."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return None, None
        dotted = ast.unparse(node)
        q = (self.R.resolve(module, "", dotted) if module else None) or f"{module}.{dotted}"
        for _hop in range(4):
            mod, _, name = q.rpartition(".")
            path = self.G.nodes.get(mod, {}).get("path")
            tree = self.module_ast(path) if path else None
            for st in tree.body if tree is not None else ():
                if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
                    targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                        return st.value, mod
            nxt = self.imported_as(mod, "", name) if mod else None
            if not nxt or nxt == q:
                break
            q = nxt
        return None, None

    def _module_constant(self, mod: str, name: str):
        path = self.G.nodes.get(mod, {}).get("path")
        tree = self.module_ast(path) if path else None
        for st in tree.body if tree is not None else ():
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets) and st.value is not None:
                    return self.literal(st.value)
        return UNKNOWN

    # --- server arguments ----------------------------------------------------------------------
    def is_field(self, name: str) -> bool:
        return self.schema is not None and name in self.schema.fields

    def server_args_method(self, name: str, selfval, args: list, kwargs: dict, ev, depth: int):
        """``server_args.m(...)``: the ServerArgs method evaluated from its own code with ``self``
        the resolved arguments; one that builds the ModelConfig gives the model's config instance."""
        if self.schema is None or not self.schema.class_qual:
            return NotImplemented
        qual = self.method(self.schema.class_qual, name)
        fn = ev.model.function_ast(qual) if qual else None
        if fn is None:
            return NotImplemented
        if any(isinstance(n, (ast.Name, ast.Attribute)) and (n.id if isinstance(n, ast.Name) else n.attr) == self.model_config_name()
               for n in astwalk.walk(fn)):
            return self.model_config()
        got = ev.call_method(qual, selfval, args, kwargs, depth + 1)
        if got is UNKNOWN and self._loads_hf_config(qual, ev, 2):
            return self.hf  # it reads the checkpoint's config.json (transformers' from_pretrained)
        if got is UNKNOWN and not any(a is UNKNOWN for a in list(args) + list(kwargs.values())):
            got = self.primary_call(qual, selfval, args, kwargs, ev)
        return NotImplemented if got is UNKNOWN else got

    def server_args_model_config_attr(self, name: str):
        """The model's config instance where ``name`` is an attribute ServerArgs' own methods set to
        the ModelConfig they build (``self.model_config = ModelConfig.from_server_args(self)`` in
        ``get_model_config``, called before the hooks that read ``self.model_config``); else None."""
        memo = self.__dict__.setdefault("_sa_mc_attrs", {})
        if name not in memo:
            cls = self._class_ast(self.schema.class_qual) if self.schema is not None and self.schema.class_qual else None
            memo[name] = cls is not None and name in _self_attrs_set_from(cls, self.model_config_name())
        return self.model_config() if memo[name] else None

    def namespaces_returned(self, qual: str) -> tuple:
        """The string constants an in-tree function without parameters returns through
        (``return _CONTEXT.config_bag("exec")``): the names of the namespaces it hands out."""
        memo = self.__dict__.setdefault("_namespaces", {})
        if qual not in memo:
            fn = self.function_ast(qual)
            out: list = []
            if fn is not None and not (fn.args.args or fn.args.posonlyargs):
                for r in astwalk.walk(fn):
                    if isinstance(r, ast.Return) and isinstance(r.value, ast.Call):
                        out += [a.value for a in r.value.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            memo[qual] = tuple(out)
        return memo[qual]

    def _loads_hf_config(self, qual: str, ev, depth: int) -> bool:
        """Whether the function returns what transformers' ``*Config.from_pretrained`` loads,
        directly or through the in-tree helpers it calls (``get_config(self.model_path, ...)``)."""
        fn = ev.model.function_ast(qual)
        if fn is None:
            return False
        for n in astwalk.walk(fn):
            if isinstance(n, ast.Attribute) and n.attr == "from_pretrained" and isinstance(n.value, ast.Name) \
                    and n.value.id.endswith("Config"):
                return True
        return depth > 0 and any(self._loads_hf_config(v, ev, depth - 1) for _, v, d in self.G.out_edges(qual, data=True)
                                 if d.get("kind") == "calls" and self.G.nodes.get(v, {}).get("kind") == "function")

    def model_config_name(self) -> str:
        mc = self.model_config()
        return self.G.nodes.get(mc.cls, {}).get("name", "ModelConfig") if mc is not None else "ModelConfig"

    def model_config(self) -> Optional[Instance]:
        """The ModelConfig the server builds for this checkpoint (its attributes from its own code)."""
        if "_mc" not in self.__dict__:
            cls = sorted(n for n, d in self.G.nodes(data=True) if d.get("kind") == "class" and d.get("name") == "ModelConfig"
                         and d.get("path", "").endswith("configs/model_config.py"))
            self._mc = Instance(cls[0], {"hf_config": self.hf, "hf_text_config": self.hf}) if cls else None
        if self._mc is not None and "quantization" not in self._mc.attrs:
            # ModelConfig.quantization is the quant method the server settled on: --quantization,
            # else the checkpoint's (SGLang's _verify_quantization compares the two)
            q = self.state.get("quantization") if self.state is not None else None
            qc = self.hf.attr("quantization_config")
            self._mc.attrs["quantization"] = q if isinstance(q, str) else (qc.get("quant_method") if isinstance(qc, dict) else None)
        return self._mc

    # --- environment variables -----------------------------------------------------------------
    def declared_envs(self) -> dict:
        """NAME -> (default, path, line) for ``NAME = EnvBool(True)`` style declarations."""
        if self._envs is None:
            self._envs = {}
            for path in sorted(p for p in self.tree.index.files if p.endswith("environ.py") and "/srt/" in p):
                tree = self.module_ast(path)
                for c in tree.body if tree is not None else ():
                    if not isinstance(c, ast.ClassDef):
                        continue
                    for st in c.body:
                        if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                                and isinstance(st.value, ast.Call) and _ENV_CTOR.match(ast.unparse(st.value.func).rsplit(".", 1)[-1])):
                            d = self.literal(st.value.args[0]) if st.value.args else None
                            for k in st.value.keywords:
                                if k.arg == "default":
                                    d = self.literal(k.value)
                            kind = ast.unparse(st.value.func).rsplit(".", 1)[-1]
                            self._envs[st.targets[0].id] = (d, path, st.lineno, kind)
        return self._envs

    def env_field(self, name: str, accessor: str):
        decl = self.declared_envs().get(name)
        if decl is None:
            return NotImplemented
        default, path, line, kind = decl
        if accessor == "is_set":
            return name in self.env
        if name in self.env:
            raw = self.env[name]
            self.notes[name] = f"{name}={raw} (--env)"
            if "Bool" in kind:
                return raw.lower() in _TRUE
            if "Int" in kind:
                try:
                    return int(raw)
                except ValueError:
                    return UNKNOWN
            return raw
        self.notes[name] = f"{name} unset: its declared default {default!r} ({path}:{line})"
        return default

    def env_raw(self, name: str, default, where: str):
        if name in self.env:
            self.notes[name] = f"{name}={self.env[name]} (--env)"
            return self.env[name]
        if default is UNKNOWN:
            self.notes[name] = f"{name} unset: the default of {where} is an expression not known statically"
        else:
            self.notes[name] = f"{name} unset: the default {default!r} of {where}"
        return default

    # --- classes -------------------------------------------------------------------------------
    def mro(self, cls: str) -> list[str]:
        if cls not in self._mro:
            try:
                self._mro[cls] = list(self.R.mro(cls))
            except Exception:
                self._mro[cls] = [cls]
        return self._mro[cls]

    def _module_of(self, qual: str) -> str:
        d = self.G.nodes.get(qual, {})
        q = d.get("qualname")
        return qual[: -len(q) - 1] if q and qual.endswith("." + q) else qual.rsplit(".", 1)[0]

    def method(self, cls: str, name: str) -> Optional[str]:
        for c in self.mro(cls):
            q = f"{c}.{name}"
            if self.G.nodes.get(q, {}).get("kind") == "function":
                return q
        return None

    def memoized(self, qual: str, model=None) -> Optional[dict]:
        """How a function keeps its results between calls, when it does: a decorator that is
        ``functools.lru_cache``/``functools.cache`` (through whatever import binds it), or an in-tree
        decorator whose wrapper stores the decorated function's result in a container that outlives
        the call and returns from it (``if key not in memo: memo[key] = fn(*args); return memo[key]``),
        or that hands the function to one of those. Then its body runs once per key (at warm-up, a
        build), not at each call of a step. ``{"how", "decorator", "path", "line"}`` (the decorator
        line), or None. ``model`` resolves names (the gate model's ``resolve``; the graph's without)."""
        memo = self.__dict__.setdefault("_memoized", {})
        if qual in memo:
            return memo[qual]
        memo[qual] = None  # recursion guard
        fn = self.function_ast(qual) if self.G.nodes.get(qual, {}).get("kind") == "function" else None
        if fn is None:
            return None
        mod = self._module_of(qual)
        scope = self.G.nodes.get(qual, {}).get("qualname", "")
        scope = scope.rsplit(".", 1)[0] if "." in scope else ""
        for d in fn.decorator_list:
            how = self._memoizing_decorator(d, mod, scope, model, 0)
            if how:
                memo[qual] = {"how": how, "decorator": ast.unparse(d)[:80], "path": self.path_of(qual), "line": d.lineno}
                return memo[qual]
        return None

    def _memoizing_decorator(self, d, mod: str, scope: str, model, depth: int) -> Optional[str]:
        """What makes decorator expression ``d`` (in ``mod``/``scope``) memoize, or None."""
        core = d.func if isinstance(d, ast.Call) else d
        if not isinstance(core, (ast.Name, ast.Attribute)) or depth > 2:
            return None
        dotted = ast.unparse(core)
        outside = self.imported_as(mod, scope, dotted) or (dotted if dotted.startswith("functools.") else None)
        if outside in _STDLIB_MEMOS:
            return outside
        try:
            q = model.resolve(mod, scope, dotted) if model is not None else self.R.resolve(mod, scope, dotted)
        except Exception:
            q = None
        if not q or self.G.nodes.get(q, {}).get("kind") != "function":
            return None
        dfn = self.function_ast(q)
        if dfn is None:
            return None
        dmod = self._module_of(q)
        dscope = self.G.nodes.get(q, {}).get("qualname", "")
        if isinstance(d, ast.Call):
            # a decorator factory (``@memo(maxsize=8)``): the decorator is the def it returns
            inner = {n.name: n for n in dfn.body if isinstance(n, ast.FunctionDef)}
            rets = [r.value for r in astwalk.walk(dfn) if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)]
            dfn = next((inner[r.id] for r in rets if r.id in inner), None)
            if dfn is None:
                return None
            dscope = f"{dscope}.{dfn.name}"
        return self._memoizing_def(dfn, dmod, dscope, model, depth, q)

    def _memoizing_def(self, dfn, mod: str, scope: str, model, depth: int, q: str) -> Optional[str]:
        params = [a.arg for a in dfn.args.posonlyargs + dfn.args.args]
        if not params:
            return None
        wrapped = params[0]
        # the decorator hands the function to a memoizing one: return functools.lru_cache(...)(fn)
        for r in astwalk.walk(dfn):
            if isinstance(r, ast.Return) and isinstance(r.value, ast.Call) and any(
                    isinstance(a, ast.Name) and a.id == wrapped for a in r.value.args):
                how = self._memoizing_decorator(r.value.func, mod, scope, model, depth + 1)
                if how:
                    return f"{q} (hands it to {how})"
        # the wrapper it returns keeps the result in a container made outside the wrapper
        inner = {n.name: n for n in dfn.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        returned = set()
        for r in astwalk.walk(dfn):
            if isinstance(r, ast.Return) and r.value is not None:
                for n in astwalk.walk(r.value):
                    if isinstance(n, ast.Name) and n.id in inner:
                        returned.add(n.id)
        for name in returned:
            w = inner[name]
            made_inside = {t.id for n in astwalk.walk(w) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            stored, loaded = set(), set()
            for n in astwalk.walk(w):
                # memo[key] = fn(...)  /  memo.setdefault(key, fn(...))
                if isinstance(n, ast.Assign) and _calls_name(n.value, wrapped):
                    stored |= {t.value.id for t in n.targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)}
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "setdefault" \
                        and isinstance(n.func.value, ast.Name) and any(_calls_name(a, wrapped) for a in n.args[1:]):
                    stored.add(n.func.value.id)
                    loaded.add(n.func.value.id)
                if isinstance(n, ast.Return) and n.value is not None:
                    for x in astwalk.walk(n.value):
                        if isinstance(x, ast.Subscript) and isinstance(x.value, ast.Name):
                            loaded.add(x.value.id)
            kept = (stored & loaded) - made_inside
            if kept:
                return f"{q} (keeps results in {sorted(kept)[0]})"
        return None

    def _class_ast(self, cls: str):
        d = self.G.nodes.get(cls, {})
        tree = self.module_ast(d["path"]) if d.get("path") else None
        for n in classes_named(tree, d.get("name")) if tree is not None else ():
            if abs(n.lineno - d.get("line", 0)) <= len(n.decorator_list) + 1:
                return n
        return None

    def is_enum(self, cls: str) -> bool:
        for c in self.mro(cls):
            node = self._class_ast(c)
            if node is not None and any(ast.unparse(b).rsplit(".", 1)[-1] in ("Enum", "IntEnum", "StrEnum") for b in node.bases):
                return True
        return False

    def _members_core(self, cls: str) -> dict:
        node = self._class_ast(cls)
        out = {}
        last = 0  # enum.auto(): the previous integer member plus one (a StrEnum's is the lower-cased name)
        str_enum = node is not None and any(ast.unparse(b).rsplit(".", 1)[-1] == "StrEnum" for b in node.bases)
        for st in node.body if node is not None else ():
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                v = self.literal(st.value)
                if v is UNKNOWN and isinstance(st.value, ast.Call) and not st.value.args \
                        and ast.unparse(st.value.func).rsplit(".", 1)[-1] == "auto":
                    v = st.targets[0].id.lower() if str_enum else last + 1
                if isinstance(v, int) and not isinstance(v, bool):
                    last = v
                if v is not UNKNOWN:
                    out[st.targets[0].id] = v
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                v = self.literal(st.value)  # a dataclass field's default: `use_mxfp8: bool = False`
                if v is not UNKNOWN:
                    out[st.target.id] = v
        return out

    def class_constant(self, cls: str, name: str):
        for c in self.mro(cls):
            members = self._members(c)
            if name in members:
                return EnumVal(cls, name, members[name]) if self.is_enum(cls) else members[name]
        return NotImplemented

    def enum_member(self, cls: str, value):
        if isinstance(value, EnumVal):
            return EnumVal(cls, value.name, value.value)
        for name, v in self._members(cls).items():
            if v == value:
                return EnumVal(cls, name, v)
        return UNKNOWN

    # --- instance attributes -------------------------------------------------------------------
    def bind_init(self, inst: Instance, call: ast.Call, ev, env, mod, scope, depth) -> None:
        """Record the constructor's arguments by ``__init__``'s parameter names."""
        init = self.method(inst.cls, "__init__")
        fn = ev.model.function_ast(init) if init else None
        if fn is None:
            if init or not any("dataclass" in ast.unparse(d) for c in self.mro(inst.cls)
                               for d in getattr(self._class_ast(c), "decorator_list", ())):
                return
            # no __init__ in the tree (a dataclass): the constructor's arguments are its fields, in
            # the order the class bodies declare them (bases first)
            names = [st.target.id for c in reversed(self.mro(inst.cls)) for st in getattr(self._class_ast(c), "body", ())
                     if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)]
        else:
            names = [a.arg for a in fn.args.posonlyargs + fn.args.args][1:]
        args = {}
        for p, a in zip(names, call.args):
            args[p] = ev._eval_raw(a, env, mod, scope, depth)
        for k in call.keywords:
            if k.arg:
                args[k.arg] = ev._eval_raw(k.value, env, mod, scope, depth)
        inst.attrs["__args__"] = args

    def writes_of(self, path: str, module: str, attr: str) -> list:
        """Every guarded attribute write of ``attr`` in a file (the file is walked once)."""
        by = self._writes_by_path.get(path)
        if by is None:
            by = {}
            tree = self.module_ast(path, keep=False)  # the writes keep their own nodes
            for w in writes_in_module(tree, path, module, None, changes=True) if tree is not None else ():
                by.setdefault(w.key, []).append(w)
            self._writes_by_path[path] = by
        return by.get(attr, [])

    def _scan_facts(self) -> None:
        """One pass over every file's facts: who imports which name, which attributes each file
        assigns, the functions registered by a decorator, where each short string constant occurs
        and every store to ``<name>.<attr>`` (facts are costly to hydrate, so they are read once)."""
        idx: dict = {}
        assigned: dict = {}
        decorated: list = []
        strings: dict = {}
        attr_stores: list = []
        for f in self.tree.index.py_facts():
            if not f.module or "/test" in f.path:
                continue
            for i in f.imports:
                if i.name:
                    idx.setdefault(i.name, set()).add((f.path, f.module))
            assigned[f.path] = {a.target.rsplit(".", 1)[-1] for a in f.assigns if "." in a.target}
            attr_stores += [(f.path, f.module, a.target, a.line, a.scope) for a in f.assigns if "." in a.target]
            for _, v in f.strings:
                strings.setdefault(v, set()).add((f.path, f.module))
            for d in f.defs:
                if d.kind == "function" and any("register" in x.lower() for x in d.decorators):
                    decorated.append((f.path, f.module, d.qualname, d.line))
        self._importers = {k: sorted(v) for k, v in idx.items()}
        self._assigned = assigned
        self.decorated = decorated
        self._facts_scan.update(importers=self._importers, assigned=assigned, decorated=decorated,
                                strings=strings, attr_stores=attr_stores)

    def files_with_string(self, value: str) -> list:
        """(path, module) of the files holding the string constant ``value``."""
        if "strings" not in self._facts_scan:
            self._scan_facts()
        return sorted(self._facts_scan["strings"].get(value, ()))

    def attr_stores(self) -> list:
        """(path, module, target, line, scope) of every store to an attribute (``server_args.x = ...``)."""
        if "attr_stores" not in self._facts_scan:
            self._scan_facts()
        return self._facts_scan["attr_stores"]

    def reference_sites(self, qual: str) -> list:
        """(caller qual, line) where the function is passed to a call as an argument
        (``run_post_process_pass(server_args, _some_pass)``): the callee runs it there, so such a
        site counts as a call site, with the tests around it."""
        memo = tree_memo(self.tree).setdefault("reference_sites", {})  # device-independent
        if qual in memo:
            return memo[qual]
        node = self.G.nodes.get(qual, {})
        short, path = node.get("name"), node.get("path")
        if not short or not path:
            return []
        out = memo[qual] = []
        places = [(path, qual.rsplit(".", 1)[0] if "." in qual else "")] + self.importers(short)
        seen = set()
        for p, module in places:
            if p in seen:
                continue
            seen.add(p)
            tree = self.module_ast(p)
            if tree is None:
                continue
            module = module or self.tree.index.files[p].module
            out += _argument_refs(tree, module, short)
        return out

    def importers(self, short: str, attr: Optional[str] = None) -> list:
        """(path, module) of the files that import a name ``short`` (and assign ``.attr``)."""
        if self._importers is None:
            self._scan_facts()
        out = self._importers.get(short, [])
        return [x for x in out if attr is None or attr in self._assigned.get(x[0], ())]

    def _class_writes_core(self, cls: str, attr: str) -> list:
        """Writes of ``self.attr`` in the class and its bases (``__init__`` first), then writes of
        ``<x>.attr`` in the modules that import the class (the loader setting a config's flag)."""
        key = (cls, attr)
        if key in self._class_writes:
            return self._class_writes[key]
        out = []
        for c in self.mro(cls):
            d = self.G.nodes.get(c, {})
            if not d.get("path"):
                continue
            cq = d.get("qualname", "")
            ws = [w for w in self.writes_of(d["path"], self._module_of(c), attr) if w.receiver == "self" and w.scope.startswith(cq + ".")]
            ws.sort(key=lambda w: (not w.scope.endswith(".__init__"), w.line))
            out += ws
        short = self.G.nodes.get(cls, {}).get("name")
        init_ws = [w for w in out if w.scope.endswith(".__init__")]
        later = [w for w in out if not w.scope.endswith(".__init__")]
        external = []
        for path, module in self.importers(short, attr) if short else ():
            external += [w for w in self.writes_of(path, module, attr)
                         if re.fullmatch(r"[A-Za-z_]\w*", w.receiver) and w.receiver != "self"]
        self._class_writes[key] = init_ws + external + later
        return self._class_writes[key]

    def _instance_attr_core(self, inst: Instance, attr: str, ev, depth: int):
        """An attribute of an in-tree object: the last write to it that holds, in the order the
        object lives (``__init__``, then writes from outside, then its other methods; those override
        an earlier value only where their tests are decided)."""
        if "__layer_of__" in inst.attrs:
            return self.layer_attr(inst, attr, ev, depth)
        if attr in inst.attrs:
            return inst.attrs[attr]
        if depth > ev.depth_limit:
            return UNKNOWN
        inst.attrs[attr] = UNKNOWN  # recursion guard
        args = inst.attrs.get("__args__", {})
        # a field the constructor was given, on a class without an __init__ of its own (a
        # dataclass): the value it starts with; later writes replace it where they are decided
        value = args[attr] if attr in args and not self.method(inst.cls, "__init__") else MISSING
        for w in self.class_writes(inst.cls, attr):
            # A write's own tests and value read the attribute as the earlier writes left it
            # (``if self.v_head_dim is None: self.v_head_dim = self.head_dim``), not as unknown.
            inst.attrs[attr] = UNKNOWN if value is MISSING else value
            extra = {}
            if w.scope.endswith(".__init__"):
                # parameters named like a server argument take its value when the caller did
                # not say (ModelConfig.from_server_args passes quantization=server_args.quantization)
                if w.fn is not None and self.state is not None:
                    for a in w.fn.args.args + w.fn.args.kwonlyargs:
                        if self.is_field(a.arg) and a.arg not in inst.attrs.get("__args__", {}):
                            extra[a.arg] = self.state.get(a.arg)
                extra.update(inst.attrs.get("__args__", {}))
            if w.receiver != "self":
                extra[w.receiver] = inst
            env = self.write_env(w, inst, ev, extra)
            # the primary rule: a test that cannot be decided is taken as false; a write in a later
            # method (a mode switch such as enter_torch_compile) replaces what construction chose
            # only when every test on its way is decided
            tests = [ev.eval(t, env, w.module, w.scope, depth + 1) for t, _ in w.guards]
            if w.mutates:
                # a change in place: applied to the value so far where its tests hold; where one is
                # undecided the value is unknown (the primary rule does not drop a change)
                if any(bool(t) != want for t, (_, want) in zip(tests, w.guards) if t is not UNKNOWN):
                    continue
                if value is MISSING:
                    # a class attribute changed in place (``packed_modules_mapping = {}`` in the body)
                    const = self.class_constant(inst.cls, attr)
                    value = MISSING if const is NotImplemented else const
                if any(t is UNKNOWN for t in tests) or value is MISSING:
                    value = UNKNOWN
                    continue
                args = [ev.eval(a, env, w.module, w.scope, depth + 1) for a in w.value.args]
                value = in_place(value, w.mutates, args, bool(w.value.keywords) or any(isinstance(a, ast.Starred) for a in w.value.args))
                continue
            if any((False if t is UNKNOWN else bool(t)) != want for t, (_, want) in zip(tests, w.guards)):
                continue
            if value is not MISSING and not w.scope.endswith(".__init__") and any(t is UNKNOWN for t in tests):
                continue
            if w.receiver == "self" and not w.scope.endswith(".__init__") and _stores_a_parameter(w):
                # a setter (``def update_packed_modules_mapping(self, mapping): self.x = mapping``):
                # it writes only where it is called; called nowhere this checkpoint's model runs,
                # the value stays; called there, it is what that call passes (unknown here)
                sites = self.setter_sites(w)
                if sites:
                    value = self._set_by_caller(w, inst, sites, ev, depth) if len(sites) == 1 else UNKNOWN
                continue
            value = ev._eval_raw(w.value, env, w.module, w.scope, depth + 1)
            if value is UNKNOWN:
                value = self._own_method_primary(inst, w, ev)
        if value is MISSING:
            value = self.class_constant(inst.cls, attr)
            value = MISSING if value is NotImplemented else value
        inst.attrs[attr] = value
        return value

    def entry_class(self) -> Optional[str]:
        """The class SGLang's registry serves for the checkpoint's first architecture: a class of
        that name under ``models/`` whose module names it in its ``EntryClass``."""
        for arch in self.model.architectures if self.model is not None else ():
            for q in sorted(n for n, d in self.G.nodes(data=True) if d.get("kind") == "class" and d.get("name") == arch
                            and "/srt/models/" in d.get("path", "")):
                tree = self.module_ast(self.G.nodes[q]["path"])
                for st in tree.body if tree is not None else ():
                    if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in st.targets) \
                            and arch in {n.id for n in astwalk.walk(st.value) if isinstance(n, ast.Name)}:
                        return q
        return None

    def method_call_sites(self, name: str) -> list:
        """(path, module, scope, line) of every call ``<x>.name(...)`` in the tree (from the facts)."""
        memo = tree_memo(self.tree).setdefault("method_call_sites", None)
        if memo is None:
            memo = {}
            for f in self.tree.index.py_facts():
                if not f.module or "/test" in f.path:
                    continue
                for c in f.calls:
                    if "." in c.func:
                        memo.setdefault(c.func.rsplit(".", 1)[-1], []).append((f.path, f.module, c.scope, c.line))
            tree_memo(self.tree)["method_call_sites"] = memo
        return memo.get(name, [])

    def setter_sites(self, w) -> list:
        """The calls of the method a write sits in that may run for this checkpoint: a call outside
        the model files (its model class None), or one in a model class the entry class is or
        derives from (that class). A call in another model's class runs only for that model."""
        method = w.scope.rsplit(".", 1)[-1]
        top = self.entry_class()
        mine = {(self.G.nodes.get(c, {}).get("path", ""), self.G.nodes.get(c, {}).get("qualname", "")): c
                for c in (self.mro(top) if top else [])}
        out = []
        for path, module, scope, line in self.method_call_sites(method):
            if "/srt/models/" not in path or top is None:
                out.append((path, module, scope, line, None))
                continue
            cls = mine.get((path, scope.split(".")[0]))
            if cls is not None:
                out.append((path, module, scope, line, cls))
        return out

    def _set_by_caller(self, w, inst: Instance, sites: list, ev, depth: int):
        """The value a setter writes, from its one call that runs: in the entry model's constructor
        (``quant_config.update_packed_modules_mapping(self.packed_modules_mapping)``), the argument
        evaluated on the model object, every test around the call holding with the receiver
        being ``inst``; unknown otherwise."""
        path, module, scope, line, cls = sites[0]
        if cls is None or not scope.endswith(".__init__") or w.fn is None:
            return UNKNOWN
        fn = self.function_ast(f"{module}.{scope}")
        params = [a.arg for a in w.fn.args.posonlyargs + w.fn.args.args][1:]
        found = _call_with_guards(fn.body, w.scope.rsplit(".", 1)[-1], line, ()) if fn is not None else None
        if found is None:
            return UNKNOWN
        call, guards = found
        if not isinstance(call.func.value, ast.Name) or len(call.args) != len(params) or call.keywords:
            return UNKNOWN
        model = Instance(cls)
        model.attrs["__args__"] = {"config": self.hf}  # the loader builds it with the checkpoint's config
        env = {"self": model, call.func.value.id: inst}
        for test, want in guards:
            t = ev.eval(test, env, module, scope, depth + 1)
            if t is UNKNOWN or bool(t) != want:
                return UNKNOWN
        target = ast.unparse(w.value)
        if target not in params:
            return UNKNOWN
        return ev._eval_raw(call.args[params.index(target)], env, module, scope, depth + 1)

    def _own_method_primary(self, inst: Instance, w, ev):
        """``self.x = self.pick()`` whose value the plain evaluation cannot decide: the outcome of
        ``pick`` with every undecided test false (the primary rule), noted as an assumption."""
        call = w.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self" and not call.args):
            return UNKNOWN
        qual = self.method(inst.cls, call.func.attr)
        return self.primary_call(qual, inst, [], {}, ev) if qual else UNKNOWN

    def primary_call(self, qual: str, selfval, args: list, kwargs: dict, ev):
        """What an in-tree method returns when every test it cannot decide is false (the primary
        rule), those tests noted as assumptions; UNKNOWN where even that leaves it open."""
        key = (qual, id(selfval), repr(args), repr(sorted(kwargs.items())))
        memo = self.__dict__.setdefault("_primary_calls", {})
        if key in memo:
            got, guessed = memo[key]
            self.guesses += guessed
            return got
        memo[key] = (UNKNOWN, 0)  # recursion guard
        before = self.guesses
        got = self._primary_call(qual, selfval, args, kwargs, ev)
        memo[key] = (got, self.guesses - before)
        return got

    def _primary_call(self, qual: str, selfval, args: list, kwargs: dict, ev):
        fn = ev.model.function_ast(qual)
        if fn is None:
            return UNKNOWN
        names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        env: dict = {}
        for p, d in zip(names[len(names) - len(fn.args.defaults):], fn.args.defaults):
            env[p] = self.literal(d)
        if selfval is not None:
            if not names:
                return UNKNOWN
            env[names[0]] = selfval
            names = names[1:]
        elif names and names[0] in ("self", "cls"):
            return UNKNOWN
        env.update(zip(names, args))
        env.update(kwargs)
        mod, scope = ev.model.module_scope(qual)
        every = ev.explore(fn.body, env, mod, scope, self.path_of(qual))
        outs = [o for o in every if not o.raises]
        outs = [o for o in outs if not any(a[1] for a in o.assumptions) and o.value is not UNKNOWN]
        if not outs:
            return UNKNOWN
        o = outs[0]
        for a in o.assumptions:
            text = f"{a[0]} taken as false in {qual.rsplit('.', 2)[-2]}.{fn.name} ({a[2]}:{a[3]})"
            self.notes[f"{qual}:{a[3]}"] = text
            if not _flip_changes(o, a, every):
                self.notes.idle.add(text)
            else:
                self.guesses += 1  # its other way gives another value: the value is the primary rule's
        return o.value

    def layer_own_attr(self, layer, attr: str, ev, depth: int):
        """An attribute of the layer a quant method is asked for, from the layer class's own code
        (``self.use_triton_kernels = get_moe_runner_backend().is_triton_kernels()`` in its
        ``__init__``); unknown where that code leaves it open or never writes it."""
        key = ("_layer_own", layer.cls)
        if key not in self._slots:
            self._slots[key] = Instance(layer.cls)
        v = self.instance_attr(self._slots[key], attr, ev, max(depth + 1, ev.depth_limit - 2))  # shallow: its own writes, not their callees' callees
        return UNKNOWN if v is MISSING else v

    def layer_of(self, method: Instance) -> Instance:
        """The layer a quant method works on, as an object whose attributes are the writes the
        method's class makes to ``layer.<attr>`` (``layer._dsv4_mxfp4_backend = "marlin"``)."""
        key = ("_layer", id(method))
        if key not in self._slots:
            self._slots[key] = Instance(method.cls, {"__layer_of__": method})
        return self._slots[key]

    def layer_attr(self, layer: Instance, attr: str, ev, depth: int):
        method = layer.attrs["__layer_of__"]
        if attr in layer.attrs:
            return layer.attrs[attr]
        layer.attrs[attr] = UNKNOWN
        value, seen_write = UNKNOWN, False
        for c in self.mro(method.cls):
            d = self.G.nodes.get(c, {})
            if not d.get("path"):
                continue
            cq = d.get("qualname", "")
            for w in self.writes_of(d["path"], self._module_of(c), attr):
                if w.receiver != "layer" or not w.scope.startswith(cq + "."):
                    continue
                seen_write = True
                env = self.write_env(w, method, ev)
                env["layer"] = layer
                # the primary rule: a test that cannot be decided is taken as false
                tests = [ev.eval(t, env, w.module, w.scope, depth + 1) for t, _ in w.guards]
                if any((False if t is UNKNOWN else bool(t)) != want for t, (_, want) in zip(tests, w.guards)):
                    continue
                v = ev._eval_raw(w.value, env, w.module, w.scope, depth + 1)
                if v is not UNKNOWN:
                    value = v
            if value is not UNKNOWN:
                break
        if not seen_write:
            value = MISSING
        layer.attrs[attr] = value
        return value

    def write_env(self, w, selfval, ev, extra: Optional[dict] = None) -> dict:
        """Locals a write's tests and value read: parameters bound to what they stand for, and the
        function's simple assignments before the write, evaluated on demand."""
        env: dict = {}
        fn = w.fn
        if fn is not None:
            names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
            for i, p in enumerate(names):
                if i == 0 and p in ("self", "cls"):
                    env[p] = selfval
                elif "hf_config" in p or p == "config" and isinstance(selfval, ServerArgsObj):
                    env[p] = self.hf
                elif p == "model_config":
                    env[p] = self.model_config()
                elif isinstance(selfval, ServerArgsObj) and i == (1 if names[0] in ("self", "cls") else 0):
                    env[p] = selfval  # a hook's first parameter is the arguments it resolves
            fn_defaults = fn.args.defaults
            pos = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            for p, d in zip(pos[len(pos) - len(fn_defaults):], fn_defaults):
                if p not in env:
                    v = self.literal(d)
                    if v is not UNKNOWN:
                        env[p] = v
        env.update({k: v for k, v in (extra or {}).items()})
        wanted = {n for g, _ in w.guards for n in astwalk.names_in(g)}
        wanted |= astwalk.names_in(w.value)
        self._fill_locals(w, env, wanted, ev, set())
        return env

    def _fill_locals(self, w, env, wanted, ev, seen) -> None:
        from .writes import MISSING_LOCAL, local_value
        for name in sorted(wanted - set(env) - seen):
            seen.add(name)
            v = local_value(w.locals, name, w.line, env, ev, w.module, w.scope,
                            lambda names: self._fill_locals(w, env, set(names), ev, seen))
            if v is MISSING_LOCAL:
                continue
            last = next((e for n, e, ln, _ in reversed(w.locals) if n == name and ln < w.line), None)
            if v is UNKNOWN and isinstance(last, ast.Call) and "model_config" in ast.unparse(last.func):
                v = self.model_config()
            env[name] = v

    # --- slots written from a server argument --------------------------------------------------
    def _index_slots(self, mod: str) -> list:
        """(target text, (field, value)) for each assignment of a module global or an attribute
        chain in the module whose value reads a server-argument field."""
        path = self.G.nodes.get(mod, {}).get("path")
        tree = self.module_ast(path) if path else None
        out = []
        module_level = module_global_writes(tree) if tree is not None else frozenset()
        for n in single_assignments(tree) if tree is not None else ():
            if isinstance(n.targets[0], ast.Name) and id(n) not in module_level:
                continue  # a function's local (``k_cache = view(k_cache, self.page_size)``): no slot of the module
            fields = [a.attr for a in astwalk.walk(n.value) if isinstance(a, ast.Attribute) and self.is_field(a.attr)]
            if fields:
                out.append((ast.unparse(n.targets[0]), (fields[0], n.value)))
        return out

    def slot(self, mod: str, dotted: str, ev, depth: int):
        """A module global or attribute chain the code fills from a server argument
        (``MOE_RUNNER_BACKEND = MoeRunnerBackend(server_args.moe_runner_backend)``,
        ``moe.runner_backend = resolve_moe_runner_backend(x.moe_runner_backend)``): its value in
        the resolved state, made as the write makes it. NotImplemented when it is no such slot."""
        if not dotted or self.state is None:
            return NotImplemented
        tail = ".".join(dotted.split(".")[-2:])
        index = self._slot_index.get(mod)
        if index is None:
            index = self._slot_index[mod] = self._index_slots(mod)
        key = (mod, tail)
        if key not in self._slots:
            self._slots[key] = None
            for t, got in index:
                if t == tail or t.endswith("." + tail) or t == dotted:
                    self._slots[key] = got
                    break
        got = self._slots[key]
        if got is None:
            return NotImplemented
        fname, expr = got
        v = self.state.get(fname)
        if isinstance(expr, ast.Call) and depth <= ev.depth_limit:
            if key in self._slots_busy:
                return NotImplemented  # read again while its own writer is evaluated (``x = f(x.field)``)
            self._slots_busy.add(key)
            try:
                target = ev._eval_raw(expr.func, {}, mod, "", depth + 1)
                if isinstance(target, ClassRef):
                    return self.enum_member(target.qual, v) if self.is_enum(target.qual) else Instance(target.qual)
                ref = ev._eval(expr.func, {}, mod, "", depth + 1)
                if getattr(ref, "qual", None):
                    return ev.call_function(ref.qual, [v], {}, depth + 1)
            finally:
                self._slots_busy.discard(key)
        return v

    # --- what a whole step reads besides the MoE layer ---------------------------------------------
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
            # model runner): it answers the attributes it was given, and those its constructor
            # derives from them alone; the others are unknown
            if attr in inst.attrs:
                return inst.attrs[attr]
            return self._derived_attr(inst, attr, ev)
        return self._instance_attr_core(inst, attr, ev, depth)

    def _derived_attr(self, inst, attr: str, ev):
        """``self.attr = <expr>`` written once in the class's ``__init__``, outside any test, whose
        expression reads only ``self`` and module-level names (``self.use_mla_backend =
        self.model_config.attention_arch == AttentionArch.MLA``): its value on ``inst``."""
        key = (inst.cls, attr)
        busy = self.__dict__.setdefault("_deriving", set())
        if key in busy:
            return UNKNOWN
        writes = [w for w in self._class_writes_core(inst.cls, attr) if w.receiver == "self"]
        if len(writes) != 1 or writes[0].guards or not writes[0].scope.endswith("__init__") or writes[0].fn is None:
            return UNKNOWN
        w = writes[0]
        a = w.fn.args
        local = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {n for n, *_ in w.locals}
        local |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        if any(isinstance(n, ast.Name) and n.id in local and n.id != "self" for n in astwalk.walk(w.value)):
            return UNKNOWN  # it reads a parameter or a local of the constructor
        busy.add(key)
        try:
            return ev.eval(w.value, {"self": inst}, w.module, w.scope)
        except Exception:  # an expression the evaluator cannot take: unknown, as before
            return UNKNOWN
        finally:
            busy.discard(key)

    def _members(self, cls: str) -> dict:
        out = self._members_core(cls)
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
        for w in self._class_writes_core(cls, attr):
            if self._construction_only and w.receiver == "self" and not w.scope.endswith(".__init__"):
                continue
            if w.receiver == "self" or w.path in own:
                out.append(w)
                continue
            tied = any(isinstance(t, ast.Call) and ast.unparse(t.func) == "isinstance" and len(t.args) == 2
                       and ast.unparse(t.args[0]) == w.receiver and short in ast.unparse(t.args[1]) for g, want in w.guards if want
                       for t in astwalk.walk(g))
            tied = tied or any(name == w.receiver and isinstance(expr, ast.Call) and ast.unparse(expr.func).rsplit(".", 1)[-1] == short
                               for name, expr, *_ in w.locals)
            if tied:
                out.append(w)
        self._class_writes[key] = out
        return out

def _calls_name(node, name: str) -> bool:
    """``node`` is a call of the name ``name`` (``fn(*args, **kwargs)``)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _call_with_guards(stmts, method: str, line: int, guards: tuple):
    """(the call ``<x>.method(...)`` made as a statement at ``line``, the ``if`` tests around it)."""
    for st in stmts:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
                and st.value.func.attr == method and st.lineno <= line <= (st.end_lineno or st.lineno):
            return st.value, guards
        if isinstance(st, ast.If):
            got = _call_with_guards(st.body, method, line, guards + ((st.test, True),)) \
                or _call_with_guards(st.orelse, method, line, guards + ((st.test, False),))
            if got:
                return got
    return None


def _stores_a_parameter(w) -> bool:
    """A write of one of its function's parameters as it was passed (``self.x = mapping``, a
    setter); a value that only uses a parameter (``self.runner = MoeRunner(backend, config)``) is
    evaluated where it is written, its other parts known."""
    if w.fn is None or not isinstance(w.value, ast.Name):
        return False
    params = {a.arg for a in w.fn.args.posonlyargs + w.fn.args.args + w.fn.args.kwonlyargs} - {"self", "cls"}
    return w.value.id in params


def _self_attrs_set_from(cls: ast.AST, want: str) -> frozenset:
    """The attributes ``self.<attr> = ...`` sets, somewhere in ``cls``, to a value that reads the
    name ``want``; one walk of the class per name, kept on its node (the ServerArgs class, thousands
    of lines, was walked again for every attribute asked)."""
    memo = cls.__dict__.setdefault("_recon_self_attrs_from", {})
    if want not in memo:
        found = set()
        for n in astwalk.walk(cls):
            if isinstance(n, ast.Assign) and any(isinstance(x, ast.Name) and x.id == want for x in astwalk.walk(n.value)):
                found |= {t.attr for t in n.targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
        memo[want] = frozenset(found)
    return memo[want]


def _argument_refs(tree, module: str, name: str) -> list:
    """(enclosing function qual, line) of each call inside a function that passes ``name`` as an argument."""
    return [(f"{module}.{q}", line) for q, line in _argument_index(tree).get(name, ())]


def _argument_index(tree) -> dict:
    """name -> (function qual in the module, line) of each call inside a function that passes that
    name as an argument, in the order of one walk; made once per parsed module and kept on it (a
    walk of every function of the module per name asked was the largest walk of a scenario)."""
    index = getattr(tree, "_recon_argument_refs", None)
    if index is not None:
        return index
    index = {}

    def walk(body, scope):
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{scope}.{st.name}" if scope else st.name
                for n in astwalk.walk(st):
                    if isinstance(n, ast.Call):
                        passed = {v.id for v in (*n.args, *(k.value for k in n.keywords)) if isinstance(v, ast.Name)}
                        for nm in sorted(passed):
                            index.setdefault(nm, []).append((q, n.lineno))
                walk(st.body, q)
            elif isinstance(st, ast.ClassDef):
                walk(st.body, f"{scope}.{st.name}" if scope else st.name)

    walk(tree.body, "")
    tree._recon_argument_refs = index
    return index


def _flip_changes(primary, a, every) -> bool:
    """Whether taking the test ``a`` (test, truth, path, line) the other way changes what the
    function gives: some way through its body that takes it the other way ends in another value,
    an unknown one, or a raise. A test whose other branch ends in the same value changes nothing."""
    other = [o for o in every if any(b[2:4] == a[2:4] and b[1] != a[1] for b in o.assumptions)]
    if not other:
        return True  # the other branch was not explored: not known to change nothing
    for o in other:
        if o.raises or o.value is UNKNOWN:
            return True
        try:
            if o.value != primary.value:
                return True
        except Exception:  # noqa: BLE001 - values without a comparison: taken as different
            return True
    return False


class Reads(dict):
    """``World.notes`` that also remembers which names were read since :meth:`mark`, and which notes
    change no outcome when their test is taken the other way (``idle``: counted, not shown, in text)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.since: set = set()
        self.idle: set = set()  # note texts whose flip changes nothing the view or the map decides

    def __setitem__(self, key, value):
        self.since.add(key)
        super().__setitem__(key, value)

    def mark(self) -> set:
        got, self.since = self.since, set()
        return got
