"""Rules as data: one YAML file per rule in ``rules/``, validated with the file and field named.

A rule names a check (Python in ``recon/checks``), its parameters, the words the spec uses, and
small positive and negative code examples that the test suite runs, so a rule cannot silently stop
matching. A user adds a rule by adding a YAML file (``--rules DIR`` or ``RECON_RULES_PATH``).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .yamltext import YAMLError, load_yaml

from .errors import ReconError
from .findings import SEVERITIES
from .resources import resource_dir

RULES_DIR = resource_dir("rules")
REQUIRED = ("id", "title", "severity", "category", "finds", "why", "fix", "check")


EXAMPLE_PATH = "sglang/srt/example.py"  # where a one-file example's code is put


@dataclass(frozen=True)
class Expect:
    """A finding an example must give: where its primary evidence lands and a fragment of its message."""

    path: str
    line: int
    message: str


@dataclass(frozen=True)
class Example:
    """Code a rule is tried on (``{path: source}``), and for a positive example every finding it must
    give, no more and no fewer."""

    files: dict
    expect: tuple = ()


SPEC_SECTIONS = ("gates", "backend-choice", "capture", "tensor-core-paths", "dense-configs", "root-cause", "will-it-run")


@dataclass(frozen=True)
class RuleSpec:
    """Where a rule's findings go in the spec (every finding is in its appendix too), and the words
    ``spec`` and ``apply`` use for it: the ``spec:`` mapping of the rule's YAML. The spec and apply
    read these, never rule ids."""

    section: Optional[str] = None  # one of SPEC_SECTIONS; None: the appendix only
    rank: Optional[int] = None  # root-cause: listed by rank, what costs the most first
    match: str = "kernel"  # root-cause: "kernel" (its kernel is on the MoE chain) or "file" (it is in a file of the chain)
    slot_kernel: bool = False  # root-cause: its one-row-per-program findings name the per-slot kernel
    apply: Optional[str] = None  # why `recon apply`'s swap helps with what this rule finds (its commit message)


@dataclass
class Rule:
    id: str
    title: str
    severity: str
    category: str
    finds: str  # what it finds
    why: str  # why it costs
    fix: str  # how to fix
    check: str  # name of the registered check
    params: Any = field(default_factory=dict)  # the check's params dataclass once loaded (a dict before)
    examples: dict[str, list] = field(default_factory=dict)  # {"positive": [Example], "negative": [Example]}
    spec: RuleSpec = field(default_factory=RuleSpec)  # where its findings go in the spec
    source: str = ""  # the YAML file it came from


class RuleError(ReconError):
    pass


def _example(path: Path, where: str, item: Any, positive: bool) -> Example:
    """One example: ``{code: ..., expect: [...]}`` or ``{files: {path: code}, expect: [...]}``; a
    negative one may also be a bare code string or a ``{path: code}`` mapping. A positive example pins every finding it gives:
    ``{line, message}`` (plus ``path`` when it has several files)."""
    if isinstance(item, str) and not positive:
        return Example({EXAMPLE_PATH: item})
    if isinstance(item, dict) and not positive and not ({"code", "files", "expect"} & set(item)):  # {path: code}
        item = {"files": item}
    if not isinstance(item, dict) or not ({"code", "files"} & set(item)) or set(item) - {"code", "files", "expect"}:
        raise RuleError(f"{path}: {where} must be a mapping with 'code' (or 'files') and 'expect'")
    if "code" in item:
        if not isinstance(item["code"], str) or "files" in item:
            raise RuleError(f"{path}: {where}.code must be source text (and no 'files' beside it)")
        files = {EXAMPLE_PATH: item["code"]}
    else:
        files = item["files"]
        if not isinstance(files, dict) or not files or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise RuleError(f"{path}: {where}.files must map paths to source text")
    expect = item.get("expect") or []
    if positive and not expect:
        raise RuleError(f"{path}: {where}.expect is missing: a positive example pins each finding (line and a message fragment)")
    if not positive and expect:
        raise RuleError(f"{path}: {where}.expect: a negative example gives no finding")
    out = []
    for j, e in enumerate(expect):
        w = f"{where}.expect[{j}]"
        if not isinstance(e, dict) or set(e) - {"path", "line", "message"} or "line" not in e or "message" not in e:
            raise RuleError(f"{path}: {w} must be a mapping with line, message (and path when the example has several files)")
        p = e.get("path") or (next(iter(files)) if len(files) == 1 else None)
        if p not in files:
            raise RuleError(f"{path}: {w}.path must name one of the example's files ({', '.join(files)})")
        if not isinstance(e["line"], int) or isinstance(e["line"], bool) or not 1 <= e["line"] <= len(files[p].splitlines()):
            raise RuleError(f"{path}: {w}.line must be a line of {p}")
        if not isinstance(e["message"], str) or not e["message"]:
            raise RuleError(f"{path}: {w}.message must be a fragment of the finding's message")
        out.append(Expect(p, e["line"], e["message"]))
    return Example(dict(files), tuple(out))


# a rule file's text -> its parsed YAML: every scan and map loads the rules again, and parsing them
# was most of that (the caller gets a deep copy: the parse below edits what it reads)
_PARSED: dict[str, object] = {}


def _yaml_of(text: str):
    if text not in _PARSED:
        _PARSED[text] = load_yaml(text)
    return copy.deepcopy(_PARSED[text])


def _load_one(path: Path) -> Rule:
    try:
        data = _yaml_of(path.read_text(encoding="utf-8"))
    except YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise RuleError(f"{path}:{where} is not valid YAML: {getattr(e, 'problem', e)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(f"{path}: cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise RuleError(f"{path}: a rule file must hold a mapping, found {type(data).__name__}")
    for key in REQUIRED:
        if key not in data or data[key] in (None, ""):
            raise RuleError(f"{path}: field '{key}' is missing")
        if not isinstance(data[key], str):
            raise RuleError(f"{path}: field '{key}' must be a string")
    if data["severity"] not in SEVERITIES:
        raise RuleError(f"{path}: field 'severity' must be one of {', '.join(SEVERITIES)}, not {data['severity']!r}")
    params = data.get("params") or {}
    if not isinstance(params, dict):
        raise RuleError(f"{path}: field 'params' must be a mapping")
    examples = data.get("examples") or {}
    if not isinstance(examples, dict) or not set(examples) <= {"positive", "negative"}:
        raise RuleError(f"{path}: field 'examples' must be a mapping with 'positive' and/or 'negative' lists")
    for kind, items in examples.items():
        if not isinstance(items, list):
            raise RuleError(f"{path}: field 'examples.{kind}' must be a list")
        examples[kind] = [_example(path, f"examples.{kind}[{i}]", item, kind == "positive") for i, item in enumerate(items)]
    spec = data.get("spec") or {}
    if not isinstance(spec, dict):
        raise RuleError(f"{path}: field 'spec' must be a mapping")
    rspec = typed_params(path, "spec", RuleSpec, spec, "spec")
    if rspec.section is not None and rspec.section not in SPEC_SECTIONS:
        raise RuleError(f"{path}: spec.section must be one of {', '.join(SPEC_SECTIONS)}, not {rspec.section!r}")
    if rspec.match not in ("kernel", "file"):
        raise RuleError(f"{path}: spec.match must be kernel or file, not {rspec.match!r}")
    if rspec.section == "root-cause" and rspec.rank is None:
        raise RuleError(f"{path}: spec.rank is missing (a root cause needs its rank)")
    known = set(REQUIRED) | {"params", "examples", "spec"}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise RuleError(f"{path}: field '{unknown[0]}' is not a rule field (known: {', '.join(sorted(known))})")
    return Rule(
        id=data["id"],
        title=data["title"],
        severity=data["severity"],
        category=data["category"],
        finds=data["finds"].strip(),
        why=data["why"].strip(),
        fix=data["fix"].strip(),
        check=data["check"],
        params=params,
        examples=examples,
        spec=rspec,
        source=str(path),
    )


def _typed(where: str, value: Any, hint: Any) -> Any:
    """``value`` (from YAML) checked against the type ``hint``; a RuleError naming ``where`` if it is not one."""
    from .checks import Devices
    from .profiles import load_device

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _typed(where, value, inner[0]) if len(inner) == 1 else value
    if hint is Devices:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RuleError(f"{where} must be a list of device names")
        try:
            return Devices(load_device(v) for v in value)
        except ReconError as e:
            raise RuleError(f"{where}: {e}") from None
    if hint is Any:
        return value
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif origin in (list, tuple):
        if not isinstance(value, list):
            raise RuleError(f"{where} must be a list, not {type(value).__name__}")
        return [_typed(f"{where}[{i}]", v, args[0] if args else Any) for i, v in enumerate(value)]
    elif origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise RuleError(f"{where} must be a mapping, not {type(value).__name__}")
        return value
    else:
        ok = True
    if not ok:
        raise RuleError(f"{where} must be {getattr(hint, '__name__', hint)}, not {type(value).__name__} ({value!r})")
    return value


def typed_params(path, check: str, cls: type, params: dict, label: str = "params") -> Any:
    """A rule's ``params:`` as the check's parameter dataclass: every key known, every value of its
    declared type, devices loaded, the declared defaults for the rest."""
    from .checks import Devices

    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in params:
        if key not in known:
            what = f"check {check!r} takes no parameter" if label == "params" else f"'{label}' has no key"
            raise RuleError(f"{path}: {label}.{key}: {what} {key!r}"
                            f" (known: {', '.join(sorted(known)) or 'none'})")
    values = {k: _typed(f"{path}: {label}.{k}", v, hints[k]) for k, v in params.items()}
    for k, f in known.items():  # a default that names devices is resolved like a YAML value
        if k not in values and hints[k] is Devices and f.default is not dataclasses.MISSING and not isinstance(f.default, Devices):
            values[k] = _typed(f"{path}: {label}.{k}", list(f.default), Devices)
    return cls(**values)


def rule_dirs(extra: Optional[list[Path]] = None) -> list[Path]:
    dirs = [RULES_DIR]
    env = os.environ.get("RECON_RULES_PATH")
    if env:
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += list(extra or [])
    return dirs


def load_rules(extra: Optional[list[Path]] = None) -> list[Rule]:
    """Every rule, sorted by id; a later folder's rule replaces an earlier one of the same id."""
    from .checks import registry

    rules: dict[str, Rule] = {}
    for d in rule_dirs(extra):
        if not d.is_dir():
            raise RuleError(f"rules folder not found: {d}")
        for path in sorted(d.glob("*.y*ml")):
            rule = _load_one(path)
            if rule.check not in registry():
                raise RuleError(f"{path}: field 'check' names an unknown check {rule.check!r} (known: {', '.join(sorted(registry()))})")
            rule.params = typed_params(path, rule.check, registry()[rule.check].params_class, rule.params)
            rules[rule.id] = rule
    return [rules[k] for k in sorted(rules)]


def get_rule(rule_id: str, extra: Optional[list[Path]] = None) -> Rule:
    rules = {r.id: r for r in load_rules(extra)}
    if rule_id not in rules:
        raise ReconError(f"no rule {rule_id!r}; known: {', '.join(sorted(rules))}")
    return rules[rule_id]
