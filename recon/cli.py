"""The ``recon`` command line (Typer + Rich).

Exit codes: 0 done; 1 a query found nothing (unknown symbol, no path); 2 bad input (missing path,
unknown version, bad revision, malformed rule or profile); 3 a check crashed (its error is shown;
the other rules' findings are still written).
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__
from .errors import ReconError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Read an SGLang tree like a GPU-inference engineer: what runs, what is slow, why, and what to do.")
query_app = typer.Typer(no_args_is_help=True, help="Questions answered from the dispatch graph.")
graph_app = typer.Typer(no_args_is_help=True, help="Export the dispatch graph.")
rules_app = typer.Typer(no_args_is_help=True, help="The rules recon checks.")
cache_app = typer.Typer(no_args_is_help=True, help="What recon's cache holds (RECON_CACHE_DIR), and pruning it.")
app.add_typer(query_app, name="query")
app.add_typer(graph_app, name="graph")
app.add_typer(rules_app, name="rules")
app.add_typer(cache_app, name="cache")

# Piped output keeps long paths on one line (wide, soft-wrapped) so it greps and diffs cleanly.
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 240)
err = Console(stderr=True, soft_wrap=True)

PathOpt = typer.Option(None, "--path", help="An SGLang repo root (with python/sglang), an unpacked wheel, or the sglang package folder.")
RevOpt = typer.Option(None, "--rev", help="Read the tree at this git revision of --path (from git objects; the work tree is not touched).")
VersionOpt = typer.Option(None, "--sglang", help="A released SGLang version, fetched from PyPI with pip download --no-deps.")
RulesOpt = typer.Option(None, "--rules", help="An extra folder of rule YAML files.")


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
    err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
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
        err.print(f"[dim]target:[/dim] {target.label}{ver} [dim]— {target.reason}[/dim]", highlight=False)
    progress = None
    bar = None
    if not quiet and err.is_terminal:
        bar = Progress(TextColumn("indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True)
        task = bar.add_task("index", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        progress = advance
        bar.start()
    try:
        tree = load(target, progress)
    finally:
        if bar is not None:
            bar.stop()
    diags = tree.index.diagnostics
    if diags and not quiet:
        err.print(f"[yellow]{len(diags)} file(s) not indexed[/yellow] (first: {diags[0][0]}: {diags[0][1]}); `recon index` lists them", highlight=False)
    return tree


def _flags(tree, server_args: Optional[str], env: Optional[list[str]]) -> tuple[dict, dict]:
    """--server-args checked against the tree's own ServerArgs, --env as NAME=VALUE pairs."""
    from .runtime import parse_env, parse_server_args

    envs = parse_env(env)
    flags = parse_server_args(tree, server_args)
    if envs:
        from .runtime import undeclared_envs

        for name in undeclared_envs(tree, envs):
            err.print(f"[yellow]warning:[/yellow] SGLang declares no environment variable {name} (it may be read elsewhere)", highlight=False)
    return flags, envs


def _print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@app.command()
def version() -> None:
    """Print recon's version."""
    out.print(f"recon {__version__}")


@app.command()
def index(path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format")) -> None:
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
        t.add_row(k, str(info[k]))
    t.add_row("node kinds", ", ".join(f"{k} {v}" for k, v in info["node_kinds"].items()))
    out.print(t)
    for d in info["diagnostics"]:
        out.print(f"[yellow]not indexed[/yellow] {d['path']}: {d['message']}", highlight=False)


# ---------------------------------------------------------------------------------------- query
def _run_query(fn, fmt: Fmt, path, rev, sglang, render):
    from .query import AmbiguousSymbol

    try:
        tree = load_target(path, rev, sglang, quiet=fmt == Fmt.json)
        result = fn(tree.graph)
    except AmbiguousSymbol as e:
        if fmt == Fmt.json:
            _print_json({"error": "ambiguous", "candidates": e.candidates})
            raise typer.Exit(1)
        _fail(e)
    except ReconError as e:
        _fail(e)
    if fmt == Fmt.json:
        _print_json(result)
    else:
        render(result)


@query_app.command("where")
def q_where(symbol: str, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format")) -> None:
    """Where SYMBOL is defined, and how (def, class, or assignment wrapping another callable)."""
    from .query import where

    def render(r):
        out.print(f"{r['symbol']}  [bold]{r['at']}[/bold]  ({r['kind']})", highlight=False)
        if r.get("defined_by") == "assignment":
            out.print(f"  defined by assignment, wrapping {r.get('wraps_symbol') or r['wraps']} ({r.get('wraps_at', '?')})", highlight=False)
            if r.get("bound_arguments"):
                out.print(f"  bound arguments: {r['bound_arguments']}", highlight=False)
            if r.get("aliases"):
                out.print(f"  same object as: {', '.join(r['aliases'])}", highlight=False)
        else:
            out.print(f"  defined by {r['defined_by']}", highlight=False)
        if r.get("decorators"):
            out.print(f"  decorators: {', '.join(r['decorators'])}", highlight=False)

    _run_query(lambda G: where(G, symbol), fmt, path, rev, sglang, render)


def _render_edges(rows, title):
    t = Table(title=title, show_lines=False)
    for c in ("symbol", "edge", "call site", "defined at"):
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(r["symbol"], r["edge"] + (f" ({r['via']})" if r.get("via") else ""), r["call_at"], r["defined_at"])
    out.print(t)
    if not rows:
        out.print("none")


@query_app.command("callers")
def q_callers(symbol: str, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format"), dynamic: bool = typer.Option(True, help="Include calls inferred by method name (dynamic dispatch).")) -> None:
    """Who calls, launches, wraps or captures SYMBOL."""
    from .query import callers

    _run_query(lambda G: callers(G, symbol, dynamic), fmt, path, rev, sglang, lambda r: _render_edges(r, f"callers of {symbol}"))


@query_app.command("callees")
def q_callees(symbol: str, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format"), dynamic: bool = typer.Option(True, help="Include calls inferred by method name (dynamic dispatch).")) -> None:
    """What SYMBOL calls, launches or wraps."""
    from .query import callees

    _run_query(lambda G: callees(G, symbol, dynamic), fmt, path, rev, sglang, lambda r: _render_edges(r, f"callees of {symbol}"))


@query_app.command("path")
def q_path(src: str, dst: str, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format")) -> None:
    """The call path from SRC to DST, each hop with file:line."""
    from .query import path as find_path

    def render(hops):
        for i, h in enumerate(hops):
            if i == 0:
                out.print(f"{h['node']}  ({h['at']})", highlight=False)
            else:
                tag = " [yellow](inferred: dynamic dispatch)[/yellow]" if h.get("inferred") else ""
                out.print(f"  └─{h['via_edge']} @ {h['call_at']} → {h['node']}  ({h['at']}){tag}", highlight=False)

    _run_query(lambda G: [h.to_dict() for h in find_path(G, src, dst)], fmt, path, rev, sglang, render)


@query_app.command("launches")
def q_launches(symbol: str, path: Optional[Path] = PathOpt, rev: Optional[str] = RevOpt, sglang: Optional[str] = VersionOpt, fmt: Fmt = typer.Option(Fmt.text, "--format"), depth: int = typer.Option(8, help="How many call hops to follow."), dynamic: bool = typer.Option(False, help="Also follow calls inferred by method name.")) -> None:
    """Triton kernels and native ops reachable from SYMBOL."""
    from .query import launches

    def render(rows):
        t = Table(title=f"launched from {symbol}")
        for c in ("kernel / op", "kind", "launched at", "defined at", "route"):
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(r["symbol"], r["kind"], r["launched_at"], r["defined_at"], " → ".join(r["route"]))
        out.print(t)

    _run_query(lambda G: launches(G, symbol, depth, dynamic), fmt, path, rev, sglang, render)


@graph_app.command("export")
def graph_export(
    fmt: GraphFmt = typer.Option(GraphFmt.json, "--format"),
    root: Optional[str] = typer.Option(None, "--root", help="Export only what this symbol reaches."),
    depth: int = typer.Option(3, "--depth"),
    output: Optional[Path] = typer.Option(None, "-o", "--output"),
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
) -> None:
    """Export the graph as GraphML, JSON, DOT or Mermaid."""
    from .cache import atomic_write_bytes
    from .export import export

    try:
        tree = load_target(path, rev, sglang)
        text = export(tree.graph, fmt.value, root, depth)
    except ReconError as e:
        _fail(e)
    if output:
        atomic_write_bytes(output, text.encode("utf-8"))
        err.print(f"wrote {output}")
    else:
        sys.stdout.write(text)

# ----------------------------------------------------------------------------------- rules, scan
DeviceOpt = typer.Option(None, "--device", help="GPU: a name as torch reports it, a short alias (rtx-pro-6000, h200, b200, ...) or a profile file. Default: RTX PRO 6000 Blackwell Server Edition.")
ServerArgsOpt = typer.Option(None, "--server-args", help='SGLang server flags in its own syntax, e.g. "--moe-runner-backend marlin --tp 2" (checked against the tree\'s ServerArgs).')
EnvOpt = typer.Option(None, "--env", help="An environment variable as SGLang would read it, NAME=VALUE (repeatable); unset ones take the default the code declares.")
ModelOpt = typer.Option(None, "--model", help="Model: a name or alias (DeepSeek-V4-Flash, gpt-oss-120b, ...) or a Hugging Face config.json. Default: DeepSeek-V4-Flash.")


@rules_app.command("list")
def rules_list(rules_dir: Optional[list[Path]] = RulesOpt, fmt: Fmt = typer.Option(Fmt.text, "--format")) -> None:
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
        t.add_row(r.id, r.severity, r.category, r.title)
    out.print(t)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@cache_app.command("info")
def cache_info(fmt: Fmt = typer.Option(Fmt.text, "--format")) -> None:
    """Files and size per cache area."""
    from .cache import cache_dir
    from .cacheadmin import DERIVED, info

    root = cache_dir()
    areas = info(root)
    if fmt == Fmt.json:
        _print_json({"root": str(root), "areas": [{"name": a.name, "files": a.files, "bytes": a.bytes} for a in areas]})
        return
    t = Table(title=str(root))
    for c in ("area", "kind", "files", "size"):
        t.add_column(c, justify="right" if c in ("files", "size") else "left")
    for a in areas:
        t.add_row(a.name, "derived" if a.name in DERIVED else "fetched", str(a.files), _mb(a.bytes))
    t.add_row("total", "", str(sum(a.files for a in areas)), _mb(sum(a.bytes for a in areas)))
    out.print(t)


@cache_app.command("prune")
def cache_prune(
    older_than: float = typer.Option(30.0, "--older-than", min=0.0, help="Remove derived entries not used for this many days."),
    everything: bool = typer.Option(False, "--all", help="Remove every derived entry (facts, indexes, graphs, findings)."),
    wheels: bool = typer.Option(False, "--wheels", help="Also remove downloaded and unpacked SGLang wheels."),
) -> None:
    """Remove stale cache entries. Safe while other runs use the cache: a missing entry is rebuilt."""
    from .cache import cache_dir
    from .cacheadmin import prune

    root = cache_dir()
    gone = prune(root, older_than, everything=everything, wheels=wheels)
    what = "every derived entry" if everything else f"entries unused for {older_than:g} days"
    out.print(f"removed {gone.files} files ({_mb(gone.bytes)}): {what}{' and the wheels' if wheels else ''} under {root}", highlight=False)


@rules_app.command("show")
def rules_show(rule_id: str, rules_dir: Optional[list[Path]] = RulesOpt) -> None:
    """One rule in full: what it finds, why it costs, how to fix, its check and examples."""
    from .rules import get_rule

    try:
        r = get_rule(rule_id, rules_dir)
    except ReconError as e:
        _fail(e)
    out.print(f"[bold]{r.id}[/bold] — {r.title}  ({r.severity}, {r.category})", highlight=False)
    for head, body in (("What it finds", r.finds), ("Why it costs", r.why), ("How to fix", r.fix)):
        out.print(f"\n[bold]{head}[/bold]\n{body}", highlight=False)
    out.print(f"\n[bold]Check[/bold] {r.check}  params: {json.dumps(r.params, sort_keys=True)}", highlight=False)
    for kind in ("positive", "negative"):
        for ex in r.examples.get(kind, []):
            text = ex if isinstance(ex, str) else "\n".join(f"# {k}\n{v}" for k, v in ex.items())
            out.print(f"\n[bold]{kind} example[/bold]\n{text}", highlight=False)
    out.print(f"\n[dim]{r.source}[/dim]", highlight=False)


@app.command()
def scan(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    fmt: ScanFmt = typer.Option(ScanFmt.text, "--format"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here (atomically) instead of stdout."),
    rules_dir: Optional[list[Path]] = RulesOpt,
    only: Optional[list[str]] = typer.Option(None, "--rule", help="Run only these rule ids."),
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
) -> None:
    """Findings for a device and a model, each with file:line evidence (text, JSON or SARIF 2.1.0)."""
    from .cache import atomic_write_bytes
    from .profiles import load_device, load_model
    from .rules import load_rules
    from .sarif import to_sarif
    from .scan import run_rules

    try:
        dev = load_device(device)
        mdl = load_model(model)
        rules = load_rules(rules_dir)
        if only:
            unknown = sorted(set(only) - {r.id for r in rules})
            if unknown:
                raise ReconError(f"no rule {', '.join(unknown)}; known: {', '.join(r.id for r in rules)}")
            rules = [r for r in rules if r.id in only]
        tree = load_target(path, rev, sglang, quiet=fmt != ScanFmt.text and output is None)
        flags, envs = _flags(tree, server_args, env)
    except ReconError as e:
        _fail(e)
    result = run_rules(tree, dev, mdl, rules, server_flags=flags, env=envs)
    for rule_id, msg in result.errors:
        err.print(f"[red]rule {rule_id} failed:[/red] {msg}", highlight=False)
    if fmt == ScanFmt.sarif:
        text = json.dumps(to_sarif(result.findings, rules, __version__, tree.target.label), indent=2, sort_keys=True) + "\n"
    elif fmt == ScanFmt.json:
        doc = {
            "target": {"label": tree.target.label, "version": tree.target.version, "revision": tree.target.revision},
            "device": dev.name,
            "model": mdl.name,
            "findings": [f.to_dict() for f in result.findings],
            "errors": [{"rule": r, "message": m} for r, m in result.errors],
            "diagnostics": [{"path": p, "message": m} for p, m in tree.index.diagnostics],
        }
        text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    else:
        text = None
    if text is not None:
        if output:
            atomic_write_bytes(output, text.encode("utf-8"))
            err.print(f"wrote {output} ({len(result.findings)} findings)")
        else:
            sys.stdout.write(text)
    else:
        out.print(f"[bold]{len(result.findings)} findings[/bold] for {dev.name} + {mdl.name} on {tree.target.label}", highlight=False)
        for f in result.findings:
            colour = {"error": "red", "warning": "yellow"}.get(f.severity, "cyan")
            p = f.primary
            where_ = f"{p.path}:{p.line}" if p else ""
            out.print(f"[{colour}]{f.severity:<7}[/{colour}] [bold]{f.rule_id}[/bold] {where_}\n        {f.message}", highlight=False)
            for ev in f.evidence[1:6]:
                out.print(f"        [dim]{ev.path}:{ev.line}[/dim] {ev.note}", highlight=False)
            if len(f.evidence) > 6:
                out.print(f"        [dim]… {len(f.evidence) - 6} more places (see --format json)[/dim]", highlight=False)
    if result.errors:
        raise typer.Exit(3)


@app.command("apply")
def apply_cmd(
    path: Path = typer.Option(..., "--path", help="The SGLang checkout to change: a git work tree (the change goes on branch recon/grouped-mxfp4)."),
    device: Optional[str] = typer.Option(None, "--device", help="Device profile name, alias or file (default: RTX PRO 6000 Blackwell Server Edition)."),
    model: Optional[str] = ModelOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff; write nothing."),
    revert: bool = typer.Option(False, "--revert", help="Take the change out and return to the branch you were on."),
    force: bool = typer.Option(False, "--force", help="With uncommitted changes: stash them and restore them afterwards."),
    no_git: bool = typer.Option(False, "--no-git", help="Write the files only, no branch or commit (undo with --no-git --revert)."),
) -> None:
    """Put the grouped MXFP4 MoE kernel into an SGLang checkout at the slot-GEMV swap-in point, on its own branch; reversibly."""
    from .apply import run as run_apply

    try:
        result = run_apply(path, device, model, dry_run, revert, force, no_git)
    except ReconError as e:
        _fail(e)
    if result.diff:
        sys.stdout.write(result.diff)
    for line in result.lines:
        out.print(line, highlight=False)


class SpecFmt(str, Enum):
    md = "md"
    json = "json"


@app.command()
def spec(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    fmt: SpecFmt = typer.Option(SpecFmt.md, "--format"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here (atomically) instead of stdout."),
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
) -> None:
    """The optimization spec (Markdown or JSON): MoE dispatch chain, root causes with file:line, missing configs, plan with roofline numbers."""
    from .cache import atomic_write_bytes
    from .profiles import load_device, load_model
    from .spec import render, spec_for, spec_target

    try:
        dev = load_device(device)
        mdl = load_model(model)
        sglang, reason = spec_target(path, rev, sglang)
        tree = load_target(path, rev, sglang, quiet=output is None and fmt == SpecFmt.json, reason=reason)
        flags, envs = _flags(tree, server_args, env)
        text = render(spec_for(tree, dev, mdl, target_reason=reason, server_flags=flags, env=envs), fmt.value)
    except ReconError as e:
        _fail(e)
    if output:
        atomic_write_bytes(output, text.encode("utf-8"))
        err.print(f"wrote {output}")
    else:
        sys.stdout.write(text)




@app.command()
def runtime(
    path: Optional[Path] = PathOpt,
    rev: Optional[str] = RevOpt,
    sglang: Optional[str] = VersionOpt,
    device: Optional[str] = DeviceOpt,
    model: Optional[str] = ModelOpt,
    server_args: Optional[str] = ServerArgsOpt,
    env: Optional[list[str]] = EnvOpt,
    fmt: Fmt = typer.Option(Fmt.text, "--format"),
) -> None:
    """What runs for the MoE layer on a device for a model and server flags: the server arguments SGLang resolves, the quant method its registry and get_quant_method pick, and the kernels or library ops its apply reaches."""
    from .checks import CheckContext
    from .profiles import load_device, load_model
    from .runtime import build
    from .runtime_text import render_text

    try:
        dev = load_device(device)
        mdl = load_model(model)
        tree = load_target(path, rev, sglang, quiet=fmt == Fmt.json)
        flags, envs = _flags(tree, server_args, env)
        view = build(CheckContext(tree, dev, mdl, server_flags=flags, env=envs), flags, envs)
    except ReconError as e:
        _fail(e)
    if fmt == Fmt.json:
        _print_json(view.to_dict())
    else:
        sys.stdout.write(render_text(view))


def main() -> None:
    """Console entry: run the app, then leave without tearing down the large graph object by object
    (freeing hundreds of MB of small objects costs longer than the query that built them)."""
    code = 0
    try:
        app()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
