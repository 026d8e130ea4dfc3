"""The ``recon`` command line (Typer + Rich).

Exit codes: one table for every command, :data:`recon.errors.EXIT_CODES_HELP`, shown in every
``--help``: 0 done; 1 nothing found or nothing to do; 2 bad input; 3 a check (or recon) crashed.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
import typer.core
from rich.console import Console
from .safetext import inert, terminal as esc  # Rich markup and control characters from the tree shown as text
from rich.table import Table

from . import __version__, notanalyzed, progress
from .columns import WIDTH, FoldingStream, fold_text
from .errors import CRASHED, EXIT_CODES_HELP, NOTHING, ReconError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Read an SGLang tree like a GPU-inference engineer: what runs, what is slow, why, and what to do.")
query_app = typer.Typer(no_args_is_help=True, help="Questions answered from the dispatch graph.")
graph_app = typer.Typer(no_args_is_help=True, help="Export the dispatch graph.")
rules_app = typer.Typer(no_args_is_help=True, help="The rules recon checks.")
cache_app = typer.Typer(no_args_is_help=True, help="What recon's cache holds (RECON_CACHE_DIR), and pruning it.")
def _show_version(value: bool) -> None:
    if value:
        out.print(f"recon {__version__}", markup=False)
        raise typer.Exit(0)


@app.callback()
def _options(verbose: bool = typer.Option(False, "-v", "--verbose", help="Off a terminal, one line per phase (index, graph, each check) on stderr; on a terminal the phases always show."),
             show_version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version, help="Print recon's version and exit.")) -> None:
    progress.use(err, verbose)
    _VERBOSE[0] = verbose  # text views list every assumption with -v (else only those that change a choice)


_VERBOSE = [False]


app.add_typer(query_app, name="query")
app.add_typer(graph_app, name="graph")
app.add_typer(rules_app, name="rules")
app.add_typer(cache_app, name="cache")

# Off a terminal every line is folded to 100 columns (recon.columns): lists stay lists, a path is cut
# only where it is longer than a line. On a terminal Rich wraps to the window.
out = Console(file=FoldingStream(lambda: sys.stdout), soft_wrap=True, width=None if sys.stdout.isatty() else WIDTH)
err = Console(file=FoldingStream(lambda: sys.stderr), soft_wrap=True, width=None if sys.stderr.isatty() else WIDTH)

PathOpt = typer.Option(None, "--path", metavar="DIR", help="An SGLang repo root (with python/sglang), an unpacked wheel, or the sglang package folder.")
RevOpt = typer.Option(None, "--rev", metavar="REV", help="Read the tree at this git revision of --path (from git objects; the work tree is not touched).")
VersionOpt = typer.Option(None, "--sglang", metavar="VERSION", help="A released SGLang version, fetched from PyPI with pip download --no-deps.")
RulesOpt = typer.Option(None, "--rules", metavar="DIR", help="An extra folder of rule YAML files (repeatable).")
ServerArgsOpt = typer.Option(None, "--server-args", metavar="FLAGS", help='SGLang server flags in its own syntax, e.g. "--moe-runner-backend marlin --tp-size 2" (checked against the tree\'s ServerArgs).')
EnvOpt = typer.Option(None, "--env", metavar="NAME=VALUE", help="An environment variable as SGLang would read it (repeatable); unset ones take the default the code declares.")
QDeviceOpt = typer.Option(None, "--device", metavar="GPU", help="Answer for what runs on this GPU (with --model, --server-args): the runtime view's path.")
QModelOpt = typer.Option(None, "--model", metavar="MODEL", help="Answer for what runs for this model (with --device, --server-args).")


def _help_type(self, ctx):
    """--help shows no type for an on/off flag (Typer's would print ``<bool>``)."""
    return None if getattr(self, "is_flag", False) else _typer_help_type(self, ctx)


_typer_help_type = getattr(typer.core.TyperOption, "display_type_rich", None)
if _typer_help_type is not None:  # Typer versions that print a type column
    typer.core.TyperOption.display_type_rich = _help_type
if hasattr(typer.core.TyperArgument, "_usage_display_name"):  # Typer versions that print {SYMBOL}, <str>
    typer.core.TyperArgument._usage_display_name = lambda self: self.display_name_raw + ("..." if self.nargs != 1 else "")
    typer.core.TyperArgument.display_type_rich = lambda self, ctx: None  # the metavar and help say what it is


class Fmt(str, Enum):
    text = "text"
    json = "json"


class ScanFmt(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"


class GraphFmt(str, Enum):
    graphml = "graphml"
    json = "json"
    dot = "dot"
    mermaid = "mermaid"


def _fail(e: ReconError) -> None:
    err.print(f"[red]error:[/red] {esc(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(getattr(e, "exit_code", 2))


def load_target(path: Optional[Path], rev: Optional[str], sglang: Optional[str], quiet: bool = False, reason: Optional[str] = None):
    """Resolve and load the target, with a progress bar on a cold index; returns a Tree."""
    from .target import resolve
    from .tree import load

    target = resolve(path, rev, sglang)
    if reason:
        target.reason = reason
    if not quiet:
        ver = f" (SGLang {target.version})" if target.version else ""
        err.print(f"[dim]target:[/dim] {esc(target.label + ver)} [dim]— {esc(target.reason)}[/dim]", highlight=False)
    tree = load(target)  # its phases (index, graph) report through recon.progress
    line = notanalyzed.summary_line(notanalyzed.entries(tree))
    if line:  # even when quiet: what a shared output does not cover is never silent
        err.print(inert(line), style="yellow", markup=False, highlight=False)
    return tree


def _scenario(tree, device, model, server_args, env):
    """``open_scenario`` with its warnings printed (the one place a command turns options into a scenario)."""
    from .scenario import open_scenario

    sc, warnings = open_scenario(tree, device, model, server_args, env)
    for w in warnings:
        err.print(f"[yellow]warning:[/yellow] {esc(w)}", highlight=False)
    return sc


def _print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@app.command()
def version() -> None:
    """Print recon's version."""
    out.print(f"recon {__version__}", markup=False)


@app.command()
def index(path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts.")) -> None:
    """Index a target and build its graph; print counts and every file that could not be indexed."""
    try:
        tree = load_target(path, rev, sglang)
    except ReconError as e:
        _fail(e)
    G = tree.graph
    kinds: dict[str, int] = {}
    for _, d in G.nodes(data=True):
        kinds[d.get("kind", "?")] = kinds.get(d.get("kind", "?"), 0) + 1
    info = {
        "target": tree.target.label,
        "version": tree.target.version,
        "files": tree.index.stats["files"],
        "extracted": tree.index.stats["extracted"],
        "graph": tree.timings.get("graph"),
        "nodes": G.number_of_nodes(),
        "edges": G.number_of_edges(),
        "node_kinds": dict(sorted(kinds.items())),
        "diagnostics": [{"path": p, "message": m} for p, m in tree.index.diagnostics],
        "seconds": round(tree.timings["index_s"] + tree.timings["graph_s"], 3),
    }
    if fmt == Fmt.json:
        _print_json(info)
        return
    t = Table(show_header=False, box=None)
    for k in ("target", "version", "files", "extracted", "graph", "nodes", "edges", "seconds"):
        t.add_row(k, esc(str(info[k])))
    t.add_row("node kinds", ", ".join(f"{k} {v}" for k, v in info["node_kinds"].items()))
    out.print(t)
    for d in info["diagnostics"]:
        out.print(f"[yellow]not indexed[/yellow] {esc(d['path'])}: {esc(d['message'])}", highlight=False)


# ---------------------------------------------------------------------------------------- query
SymbolArg = typer.Argument(..., metavar="SYMBOL", help="A qualified name, Class.method, or a short name (an ambiguous one lists its candidates).")


def _lines(lines: list[str]) -> None:
    for line in lines:  # plain text: names and paths from code are never Rich markup nor terminal controls
        out.print(inert(line), markup=False, highlight=False)


def _run_query(fn, fmt: Fmt, path, rev, sglang, render, runtime=None):
    """``runtime``: (device, model, server_args, env, fn(G, view)) when the question is asked for
    what runs on a device for a model and flags."""
    from .query import AmbiguousSymbol
    from .render.query import ambiguous

    try:
        if runtime is not None and any(runtime[:4]):
            device, model, server_args, env, rfn = runtime
            # the profiles are checked before the tree is loaded, as in every command with a scenario
            sc = _scenario(lambda: load_target(path, rev, sglang, quiet=fmt == Fmt.json), device, model, server_args, env)
            result = rfn(sc.tree.graph, sc.view)
        else:
            tree = load_target(path, rev, sglang, quiet=fmt == Fmt.json)
            result = fn(tree.graph) if fn.__code__.co_argcount == 1 else fn(tree.graph, tree)
    except AmbiguousSymbol as e:
        if fmt == Fmt.json:
            _print_json({"error": "ambiguous", "candidates": e.candidates})
        else:
            for line in ambiguous(e.name, e.candidates):
                err.print(inert(line), markup=False, highlight=False)
        raise typer.Exit(e.exit_code)
    except ReconError as e:
        _fail(e)
    if fmt == Fmt.json:
        _print_json(result)
    else:
        _lines(render(result))


@query_app.command("where")
def q_where(symbol: str = SymbolArg, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts.")) -> None:
    """Where SYMBOL is defined, and how (def, class, or assignment wrapping another callable)."""
    from .render import query as querytext
    from .query import where

    _run_query(lambda G: where(G, symbol), fmt, path, rev, sglang, querytext.where)


@query_app.command("callers")
def q_callers(symbol: str = SymbolArg, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts."), dynamic: bool = typer.Option(True, help="Include calls inferred by method name (dynamic dispatch).")) -> None:
    """Who calls, launches, wraps or captures SYMBOL, and who reaches it through a name table (get_platform().is_sm120)."""
    from .render import query as querytext
    from .query import callers

    _run_query(lambda G, tree: callers(G, symbol, dynamic, tree), fmt, path, rev, sglang, lambda r: querytext.edges(r, f"callers of {symbol}"))


@query_app.command("callees")
def q_callees(symbol: str = SymbolArg, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts."), dynamic: bool = typer.Option(True, help="Include calls inferred by method name (dynamic dispatch)."),
              device: Optional[str] = QDeviceOpt, model: Optional[str] = QModelOpt, server_args: Optional[str] = ServerArgsOpt, env: Optional[list[str]] = EnvOpt) -> None:
    """What SYMBOL calls, launches or wraps; with --device/--model/--server-args, only the calls on the path that runs there."""
    from .render import query as querytext
    from .query import callees
    from .runtime.query import callees_on_path

    _run_query(lambda G: callees(G, symbol, dynamic), fmt, path, rev, sglang, lambda r: querytext.edges(r, f"callees of {symbol}"),
               (device, model, server_args, env, lambda G, view: callees_on_path(G, view, callees(G, symbol, True), symbol)))


@query_app.command("path")
def q_path(src: str = typer.Argument(..., metavar="SRC", help="Where the path starts (a symbol)."), dst: str = typer.Argument(..., metavar="DST", help="Where it ends (a symbol)."), path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts."),
           device: Optional[str] = QDeviceOpt, model: Optional[str] = QModelOpt, server_args: Optional[str] = ServerArgsOpt, env: Optional[list[str]] = EnvOpt) -> None:
    """The call path from SRC to DST, each hop with file:line; with --device/--model/--server-args, the path that runs there (none when DST is not reached on it)."""
    from .render import query as querytext
    from .query import path as find_path
    from .runtime.query import path_on_path

    _run_query(lambda G: [h.to_dict() for h in find_path(G, src, dst)], fmt, path, rev, sglang, querytext.path,
               (device, model, server_args, env, lambda G, view: path_on_path(G, view, src, dst)))


@query_app.command("launches")
def q_launches(symbol: str = SymbolArg, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts."), depth: int = typer.Option(8, metavar="N", help="How many call hops to follow."), dynamic: bool = typer.Option(False, help="Also follow calls inferred by method name."),
               device: Optional[str] = QDeviceOpt, model: Optional[str] = QModelOpt, server_args: Optional[str] = ServerArgsOpt, env: Optional[list[str]] = EnvOpt) -> None:
    """Triton kernels and native ops reachable from SYMBOL, as one tree of the routes to them; with --device/--model/--server-args, only those on the path that runs there."""
    from .render import query as querytext
    from .query import launches
    from .runtime.query import launches_on_path

    _run_query(lambda G: launches(G, symbol, depth, dynamic), fmt, path, rev, sglang, lambda r: querytext.launches(r, symbol),
               (device, model, server_args, env, lambda G, view: launches_on_path(G, view, symbol)))


@graph_app.command("export")
def graph_export(
    fmt: GraphFmt = typer.Option(GraphFmt.json, "--format", help="graphml (yEd, Gephi), json (node-link), dot (Graphviz) or mermaid."),
    root: Optional[str] = typer.Option(None, "--root", metavar="SYMBOL", help="Export only what this symbol reaches (default: the whole graph)."),
    depth: int = typer.Option(3, "--depth", metavar="N", help="With --root: how many call hops from it to include."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout."),
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
) -> None:
    """Export the graph as GraphML, JSON, DOT or Mermaid."""
    from .cache import atomic_write_bytes
    from .render.graph import export

    try:
        tree = load_target(path, rev, sglang)
        text = export(tree.graph, fmt.value, root, depth)
    except ReconError as e:
        _fail(e)
    if output:
        atomic_write_bytes(output, text.encode("utf-8"))
        err.print(f"wrote {output}", markup=False, highlight=False)
    else:
        sys.stdout.write(text)

# ----------------------------------------------------------------------------------- rules, scan
DeviceOpt = typer.Option(None, "--device", metavar="NAME|FILE", help="GPU: a name as torch reports it, a short alias (rtx-pro-6000, h200, b200, ...) or a profile file. Default: RTX PRO 6000 Blackwell Server Edition.")
ModelOpt = typer.Option(None, "--model", metavar="NAME|FILE", help="Model: a name or alias (DeepSeek-V4-Flash, gpt-oss-120b, ...) or a Hugging Face config.json. Default: DeepSeek-V4-Flash.")


@rules_app.command("list")
def rules_list(rules_dir: Optional[list[Path]] = RulesOpt, fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts.")) -> None:
    """Every rule: id, severity, category, title."""
    from .rules import load_rules

    try:
        rules = load_rules(rules_dir)
    except ReconError as e:
        _fail(e)
    if fmt == Fmt.json:
        _print_json([{"id": r.id, "severity": r.severity, "category": r.category, "title": r.title, "check": r.check, "source": r.source} for r in rules])
        return
    t = Table()
    for c in ("id", "severity", "category", "title"):
        t.add_column(c)
    for r in rules:
        t.add_row(*map(esc, (r.id, r.severity, r.category, r.title)))
    out.print(t)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@cache_app.command("info")
def cache_info(fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts.")) -> None:
    """Files and size per cache area."""
    from .cache import cache_dir
    from .cacheadmin import DERIVED, info

    root = cache_dir()
    areas = info(root)
    if fmt == Fmt.json:
        _print_json({"root": str(root), "areas": [{"name": a.name, "files": a.files, "bytes": a.bytes} for a in areas]})
        return
    t = Table(title=esc(str(root)))
    for c in ("area", "kind", "files", "size"):
        t.add_column(c, justify="right" if c in ("files", "size") else "left")
    for a in areas:
        t.add_row(a.name, "derived" if a.name in DERIVED else "fetched", str(a.files), _mb(a.bytes))
    t.add_row("total", "", str(sum(a.files for a in areas)), _mb(sum(a.bytes for a in areas)))
    out.print(t)


@cache_app.command("prune")
def cache_prune(
    older_than: float = typer.Option(30.0, "--older-than", min=0.0, metavar="DAYS", help="Remove derived entries not used for this many days."),
    everything: bool = typer.Option(False, "--all", help="Remove every derived entry (facts, indexes, graphs, findings); with --wheels, the wheels too."),
    wheels: bool = typer.Option(False, "--wheels", help="Also remove the downloaded and unpacked SGLang wheels (fetched again when next needed)."),
) -> None:
    """Remove stale cache entries. Safe while other runs use the cache: a missing entry is rebuilt.

    `recon cache prune --all --wheels` empties the cache completely, wheels included."""
    from .cache import cache_dir
    from .cacheadmin import prune

    root = cache_dir()
    gone = prune(root, older_than, everything=everything, wheels=wheels)
    what = "every derived entry" if everything else f"entries unused for {older_than:g} days"
    out.print(f"removed {gone.files} files ({_mb(gone.bytes)}): {what}{' and the wheels' if wheels else ''} under {root}", highlight=False, markup=False)


@cache_app.command("verify")
def cache_verify(version: Optional[list[str]] = typer.Option(None, "--sglang", metavar="VERSION", help="Only this cached version (repeatable). Default: every cached one.")) -> None:
    """Hash every file of the cached SGLang wheels against each wheel's RECORD; unpack again what differs."""
    from .cache import cache_dir
    from .target import verify_unpacked

    base = cache_dir() / "wheels"
    have = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")) if base.is_dir() else []
    todo = version or have
    missing = sorted(set(todo) - set(have))
    if missing:
        _fail(ReconError(f"sglang=={', '.join(missing)} is not in the cache ({base}); cached: {', '.join(have) or 'none'}"))
    if not todo:
        err.print(f"no SGLang wheels cached under {base}: nothing to verify", highlight=False, markup=False)
        raise typer.Exit(1)
    for v in todo:
        try:
            res = verify_unpacked(v, full=True)
        except ReconError as e:
            _fail(e)
        state = f"{len(res.bad)} file(s) differed and were unpacked again" if res.bad else "every file matches"
        out.print(f"sglang=={v}: {res.files} files hashed against RECORD; {state}", highlight=False, markup=False)


@rules_app.command("show")
def rules_show(rule_id: str = typer.Argument(..., metavar="ID", help="A rule id (recon rules list shows them)."), rules_dir: Optional[list[Path]] = RulesOpt) -> None:
    """One rule in full: what it finds, why it costs, how to fix, its check and examples."""
    from .rules import get_rule

    try:
        r = get_rule(rule_id, rules_dir)
    except ReconError as e:
        _fail(e)
    out.print(f"[bold]{esc(r.id)}[/bold] — {esc(r.title)}  ({esc(r.severity)}, {esc(r.category)})", highlight=False)
    for head, body in (("What it finds", r.finds), ("Why it costs", r.why), ("How to fix", r.fix)):
        out.print(f"\n[bold]{head}[/bold]\n{esc(str(body), lines=True)}", highlight=False)
    from .checks import params_dict

    out.print(f"\n[bold]Check[/bold] {esc(r.check)}  params: {esc(json.dumps(params_dict(r.params), sort_keys=True))}", highlight=False)
    for kind in ("positive", "negative"):
        for ex in r.examples.get(kind, []):
            text = "\n".join(f"# {k}\n{v}" for k, v in ex.files.items())
            out.print(f"\n[bold]{kind} example[/bold]\n{esc(text.rstrip(), lines=True)}", highlight=False)
            for e in ex.expect:
                out.print(f"expect: {esc(e.path)}:{e.line} — {esc(e.message)}", highlight=False)
    out.print(f"\n[dim]{esc(str(r.source))}[/dim]", highlight=False)


@contextlib.contextmanager
def _to_file(output: Optional[Path]):
    """What the block prints through ``out`` goes to ``output`` (atomically, plain text folded at
    100 columns) instead of stdout; without ``output``, stdout as usual."""
    global out
    if output is None:
        yield
        return
    import io

    from .cache import atomic_write_bytes

    buf = io.StringIO()
    saved, out = out, Console(file=buf, soft_wrap=True, width=WIDTH, color_system=None, force_terminal=False)
    try:
        yield
    finally:
        out = saved
    atomic_write_bytes(output, fold_text(buf.getvalue()).encode("utf-8"))
    err.print(f"wrote {output}", markup=False, highlight=False)


@app.command()
def scan(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    fmt: ScanFmt = typer.Option(ScanFmt.text, "--format", help="text to read, json for scripts, sarif for code-scanning UIs."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout."),
    rules_dir: Optional[list[Path]] = RulesOpt,
    only: Optional[list[str]] = typer.Option(None, "--rule", metavar="ID", help="Run only this rule (repeatable)."),
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
) -> None:
    """Findings for a device and a model, each with file:line evidence (text, JSON or SARIF 2.1.0)."""
    from .cache import atomic_write_bytes
    from .rules import load_rules
    from .render.sarif import to_sarif
    from .scan import run_scenario

    rules: list = []

    def rules_then_tree():
        # the rules are checked after the profiles and before a cold index
        rules.extend(load_rules(rules_dir))
        if only:
            unknown = sorted(set(only) - {r.id for r in rules})
            if unknown:
                raise ReconError(f"no rule {', '.join(unknown)}; known: {', '.join(r.id for r in rules)}")
            rules[:] = [r for r in rules if r.id in only]
        return load_target(path, rev, sglang, quiet=fmt != ScanFmt.text and output is None)

    try:
        sc = _scenario(rules_then_tree, device, model, server_args, env)
    except ReconError as e:
        _fail(e)
    tree, dev, mdl = sc.tree, sc.device, sc.model
    result = run_scenario(sc.ctx, rules)
    for rule_id, msg in result.errors:
        err.print(f"[red]rule {esc(rule_id)} failed:[/red] {esc(msg)}", highlight=False)
    if fmt == ScanFmt.sarif:
        text = json.dumps(to_sarif(result.findings, rules, __version__, tree.target.label, notanalyzed.entries(tree), result.errors), indent=2, sort_keys=True) + "\n"
    elif fmt == ScanFmt.json:
        doc = {
            "target": {"label": tree.target.label, "version": tree.target.version, "revision": tree.target.revision},
            "device": dev.name,
            "model": mdl.name,
            "findings": [{**f.to_dict(), "placement": f.data.get("placement")} for f in result.findings],
            "errors": [{"rule": r, "message": m} for r, m in result.errors],
            "diagnostics": [{"path": p, "message": m} for p, m in tree.index.diagnostics],
            "not_analyzed": notanalyzed.entries(tree),
        }
        text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    else:
        text = None
    if text is not None:
        if output:
            atomic_write_bytes(output, text.encode("utf-8"))
            err.print(f"wrote {output} ({len(result.findings)} findings)", markup=False, highlight=False)
        else:
            sys.stdout.write(text)
    else:
        with _to_file(output):  # text to a file: the same lines, no colour, folded at 100 columns
            out.print(f"[bold]{len(result.findings)} findings[/bold] for {esc(dev.name)} + {esc(mdl.name)} on {esc(tree.target.label)}", highlight=False)
            from .placement import groups
            for title, group in groups(result.findings):
                if title:
                    out.print(f"\n[bold]{esc(title)}[/bold] ({len(group)})", highlight=False)
                _print_findings(group)
    if result.errors:
        raise typer.Exit(3)


def _print_findings(findings) -> None:
    from .placement import UNDECIDED, undecided_note

    for f in findings:
        colour = {"error": "red", "warning": "yellow"}.get(f.severity, "cyan")
        p = f.primary
        where_ = f"{p.path}:{p.line}" if p else ""
        out.print(f"[{colour}]{f.severity:<7}[/{colour}] [bold]{esc(f.rule_id)}[/bold] {esc(where_)}\n        {esc(f.message)}", highlight=False)
        if f.data.get("placement") == UNDECIDED and f.data.get("placement_tests"):
            out.print(f"        [dim]{esc(undecided_note(f.data['placement_tests']))}[/dim]", highlight=False)
        for ev in f.evidence[1:6]:
            out.print(f"        [dim]{esc(ev.path)}:{ev.line}[/dim] {esc(ev.note or '')}", highlight=False)
        if len(f.evidence) > 6:
            out.print(f"        [dim]… {len(f.evidence) - 6} more places (see --format json)[/dim]", highlight=False)


@app.command("apply")
def apply_cmd(
    path: Path = typer.Option(..., "--path", metavar="DIR", help="The SGLang checkout to change: a git work tree (the change goes on branch recon/grouped-mxfp4)."),
    device: Optional[str] = typer.Option(None, "--device", metavar="NAME|FILE", help="Device profile name, alias or file (default: RTX PRO 6000 Blackwell Server Edition)."),
    model: Optional[str] = ModelOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff; write nothing."),
    revert: bool = typer.Option(False, "--revert", help="Take the change out and return to the branch you were on."),
    force: bool = typer.Option(False, "--force", help="With uncommitted changes: stash them and restore them afterwards."),
    no_git: bool = typer.Option(False, "--no-git", help="Write the files only, no branch or commit (undo with --no-git --revert)."),
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
) -> None:
    """Put the grouped MXFP4 MoE kernel into an SGLang checkout at the slot-GEMV swap-in point, on its own branch; reversibly."""
    from .apply import run as run_apply

    try:
        result = run_apply(path, device, model, dry_run, revert, force, no_git, server_args, env)
    except ReconError as e:
        _fail(e)
    if result.diff:
        sys.stdout.write(result.diff)
    for line in result.lines:
        out.print(inert(line), highlight=False, markup=False)
    if result.status == "already-applied":
        raise typer.Exit(NOTHING)  # nothing to do


class SpecFmt(str, Enum):
    md = "md"
    json = "json"


def _with_png(ctx: dict, output: Path) -> Optional[str]:
    """The chart as a PNG beside the Markdown file (``X.md`` -> ``X.png``), linked from it, where
    matplotlib is importable; None (the Markdown as rendered) where it is not."""
    from urllib.parse import quote

    from .cache import atomic_write_bytes
    from .spec import render
    from .spec.chart import write_png

    png = output.with_suffix(".png")
    tmp = png.with_name(f".{png.name}.tmp")
    if write_png(ctx["chart"], ctx["chart"]["title"], tmp) is None:
        return None
    atomic_write_bytes(png, tmp.read_bytes())
    tmp.unlink()
    err.print(f"wrote {png}", markup=False, highlight=False)
    return render({**ctx, "chart_png": f"![{ctx['chart']['title']}]({quote(png.name)})"}, "md")


@app.command()
def spec(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    fmt: SpecFmt = typer.Option(SpecFmt.md, "--format", help="md (Markdown) to read, json: the same content as data."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout."),
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
) -> None:
    """The optimization spec (Markdown or JSON): MoE dispatch chain, root causes with file:line, missing configs, plan with roofline numbers."""
    from .cache import atomic_write_bytes
    from .spec import render, spec_of
    from .target import spec_target

    try:
        sglang, reason = spec_target(path, rev, sglang)
        sc = _scenario(lambda: load_target(path, rev, sglang, quiet=output is None and fmt == SpecFmt.json, reason=reason),
                       device, model, server_args, env)
        ctx = spec_of(sc.ctx, target_reason=reason)
        text = render(ctx, fmt.value)
        if output and fmt == SpecFmt.md and ctx.get("chart"):
            text = _with_png(ctx, output) or text
    except ReconError as e:
        _fail(e)
    if output:
        atomic_write_bytes(output, text.encode("utf-8"))
        err.print(f"wrote {output}", markup=False, highlight=False)
    else:
        sys.stdout.write(text)
    for e in ctx["errors"]:  # the spec lists them too; a script must not take it for complete
        err.print(f"[red]rule {esc(e['rule'])} failed:[/red] {esc(e['error'])}", highlight=False)
    if ctx["errors"]:
        raise typer.Exit(CRASHED)


for _t in (app, query_app, graph_app, rules_app, cache_app):  # the exit-code table in every --help
    _t.info.epilog = EXIT_CODES_HELP
    for _c in _t.registered_commands:
        _c.epilog = _c.epilog or EXIT_CODES_HELP


class Interrupted(BaseException):
    """Ctrl-C, raised by recon's own SIGINT handler: a BaseException Click does not catch (it would
    turn a KeyboardInterrupt into a blank line and an Abort), so the interrupt is said in one line."""


def _on_sigint(signum, frame):
    raise Interrupted()


INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def run(args: Optional[list[str]] = None) -> int:
    """Run the app on ``args`` (default: the command line) and return its exit code."""
    import signal
    import threading

    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGINT, _on_sigint)
    try:
        # not standalone: a usage error (unknown option, a value not among the choices) comes here
        # and is said in one line, as every other bad input is (Click would draw a box)
        code = app(args=args, standalone_mode=False)
        return code if isinstance(code, int) else 0
    except (typer.Abort, Interrupted, KeyboardInterrupt):
        progress.stop()
        err.print("interrupted (Ctrl-C): nothing more was written", markup=False, highlight=False)
        return INTERRUPTED
    except typer.TyperException as e:  # Click's usage errors (Typer's public base of them)
        if not hasattr(e, "format_message"):
            raise
        ctx = getattr(e, "ctx", None)
        where = ctx.command_path if ctx is not None else "recon"
        err.print(f"error: {inert(e.format_message())} (see '{inert(where)} --help')", markup=False, highlight=False)
        return getattr(e, "exit_code", 2)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:  # noqa: BLE001 - the last line of defence
        import traceback

        progress.stop()
        tb = traceback.extract_tb(e.__traceback__)[-1]
        err.print(f"error: recon crashed: {type(e).__name__}: {inert(e)} (at {tb.filename.rsplit('/', 1)[-1]}:{tb.lineno}); please report it",
                  markup=False, highlight=False, style="red")
        return CRASHED
    finally:
        progress.stop()
        if old is not None:
            signal.signal(signal.SIGINT, old)
    return 0




@app.command()
def runtime(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
    fmt: Fmt = typer.Option(Fmt.text, "--format", help="text to read, json for scripts."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout."),
) -> None:
    """What runs for the MoE layer on a device for a model and server flags: the server arguments SGLang resolves, the quant method its registry and get_quant_method pick, and the kernels or library ops its apply reaches. A dense model (no routed experts) has no MoE layer: its server arguments are printed and the exit code is 1 (nothing to do)."""
    from .progress import phase
    from .render.runtime import render_text

    try:
        sc = _scenario(lambda: load_target(path, rev, sglang, quiet=fmt == Fmt.json), device, model, server_args, env)
        with phase("runtime view"):
            view = sc.view
    except ReconError as e:
        _fail(e)
    if fmt == Fmt.json and output:
        from .cache import atomic_write_bytes

        atomic_write_bytes(output, (json.dumps(view.to_dict(), indent=2, sort_keys=True, default=str) + "\n").encode("utf-8"))
        err.print(f"wrote {output}", markup=False, highlight=False)
    elif fmt == Fmt.json:
        _print_json(view.to_dict())
    else:
        with _to_file(output):
            _lines(render_text(view, _VERBOSE[0]).rstrip("\n").split("\n"))
    if getattr(view, "no_moe", ""):
        # the server arguments are printed, but the MoE layer this command is about does not exist:
        # nothing to do (exit 1), said on stderr for scripts that read only the code
        err.print(f"no MoE layer: {view.no_moe}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(NOTHING)


class KernelsFmt(str, Enum):
    text = "text"
    json = "json"
    md = "md"


@app.command()
def kernels(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
    fmt: KernelsFmt = typer.Option(KernelsFmt.text, "--format", help="text to read, md (Markdown), json for scripts."),
    prefill_m: Optional[int] = typer.Option(None, "--prefill-m", metavar="M", min=1, help="Also map prefill at M tokens (attention in extend mode, roofline at M)."),
    context: int = typer.Option(4096, "--context", metavar="TOKENS", min=1, help="Tokens in each sequence's KV cache for the attention roofline (decode attention reads them once per layer)."),
    diff: Optional[str] = typer.Option(None, "--diff", metavar="VERSION", help="Compare with the map of another released SGLang version (same device, model, flags): what changes per layer."),
    diff_device: Optional[str] = typer.Option(None, "--diff-device", metavar="GPU", help="Compare with the map on another device (same tree, model, flags)."),
    diff_server_args: Optional[str] = typer.Option(None, "--diff-server-args", metavar="FLAGS", help="Compare with the map under other server flags (same tree, device, model)."),
    diff_path: Optional[Path] = typer.Option(None, "--diff-path", metavar="DIR", help="Compare with the map of another SGLang tree on disk (same device, model, flags): what a patch, such as `recon apply`'s, changes per layer."),
    diff_rev: Optional[str] = typer.Option(None, "--diff-rev", metavar="REV", help="Compare with the map at another git revision of the --path checkout (e.g. the branch `recon apply` started from)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout."),
) -> None:
    """Every layer kind's kernel for one decode step on a device, for a model and server flags: the code path that runs (file:line per hop), the gates, flags and environment defaults that chose it, CUDA-graph capture, launches per step and the roofline floor."""
    from .kernels.kmap import diff_maps
    from .render.kernels import render_diff, render_md, render_text
    from .progress import phase

    try:
        if sum(x is not None for x in (diff, diff_path, diff_rev)) > 1:
            raise ReconError("--diff, --diff-path and --diff-rev name the other tree: give one of them")
        if diff_rev is not None and path is None:
            raise ReconError("--diff-rev needs --path: the revision is of that checkout")
        sc = _scenario(lambda: load_target(path, rev, sglang, quiet=fmt == KernelsFmt.json), device, model, server_args, env)
        with phase("kernel map"):
            kmap = sc.kernel_map(prefill_m, context)
        other = None
        if diff or diff_path is not None or diff_rev is not None or diff_device or diff_server_args:
            q = fmt == KernelsFmt.json
            tree2 = ((lambda: load_target(None, None, diff, quiet=q)) if diff else
                     (lambda: load_target(diff_path, None, None, quiet=q)) if diff_path is not None else
                     (lambda: load_target(path, diff_rev, None, quiet=q)) if diff_rev is not None else sc.tree)
            sc2 = _scenario(tree2, diff_device or device, model, diff_server_args if diff_server_args is not None else server_args, env)
            with phase("kernel map (other)"):
                other = sc2.kernel_map(prefill_m, context)
    except ReconError as e:
        _fail(e)
    if other is not None:
        if diff_path is not None or diff_rev is not None:
            kmap, other = other, kmap  # the tree named by --diff-path/--diff-rev is the baseline: it -> this one
        rows = diff_maps(kmap, other)
        if fmt == KernelsFmt.json:
            doc = {"before": {"target": kmap["target"], "device": kmap["device"], "flags": kmap["flags"]},
                   "after": {"target": other["target"], "device": other["device"], "flags": other["flags"]}, "changes": rows}
        else:
            doc = render_diff(kmap, other, rows)
    else:
        doc = kmap if fmt == KernelsFmt.json else render_md(kmap, _VERBOSE[0]) if fmt == KernelsFmt.md else render_text(kmap, _VERBOSE[0])
    if output is not None:
        from .cache import atomic_write_bytes

        if isinstance(doc, dict):
            text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
        else:  # text as _lines prints it: names and paths from the tree inert
            text = doc if fmt == KernelsFmt.md else fold_text("".join(inert(x) + "\n" for x in doc.rstrip("\n").split("\n")))
        atomic_write_bytes(output, text.encode("utf-8"))
        err.print(f"wrote {output}", markup=False, highlight=False)
    elif isinstance(doc, dict):
        _print_json(doc)
    elif fmt == KernelsFmt.md:
        sys.stdout.write(doc)
    else:
        _lines(doc.rstrip("\n").split("\n"))


def main() -> None:
    """Console entry: run the app, then leave without tearing down the large graph object by object
    (freeing hundreds of MB of small objects costs longer than the query that built them).

    An exception no command handled is recon's own bug: one line naming it, exit 3 (not Python's 1,
    which would read as "nothing found").

    The cyclic collector is off for the command: a cold scenario builds millions of objects that
    live to the end (parsed modules, indexes, the engine's memos), and each full collection walked
    them all again: half the CPU of two cold specs of 0.5.5 in one process, for 4% less peak
    memory (bench/gc_share.py, bench/NOTES.md "s34"). What a command leaves is freed at exit."""
    gc.disable()
    code = run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
