"""Rendering the context: JSON as is, Markdown through the Jinja2 templates in ``templates/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from ..columns import markdown
from ..errors import ReconError
from ..safetext import inert, json_text, md_code, md_text
from ..resources import resource_dir


TEMPLATES_DIR = resource_dir("templates")


class _Md(str):
    """Markdown already made safe (a code span, recon's own chart): ``finalize`` leaves it as is."""


def to_json(ctx: dict) -> str:
    return json_text(json.dumps(ctx, indent=2, sort_keys=True, ensure_ascii=False)) + "\n"


def render_markdown(ctx: dict, templates_dir: Optional[Path] = None) -> str:
    import jinja2

    d = Path(templates_dir or TEMPLATES_DIR)
    name = "spec-dense.md.j2" if ctx.get("dense") else "spec.md.j2"  # a dense model's spec has no MoE sections
    if not (d / name).is_file():
        raise ReconError(f"spec template not found: {d / name}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(d)), undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["mb"] = lambda b: f"{b / 1e6:,.2f} MB" if b is not None else "?"
    env.filters["us"] = lambda x: "—" if x is None else f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"
    env.filters["ms"] = lambda x: "?" if x is None else (f"{x:.4f}" if x < 0.1 else f"{x:.3f}" if x < 10 else f"{x:.1f}")
    # Every value reaches the text through `finalize`: as Markdown text that forms no link, image,
    # code span or table cell (recon.safetext.md_text). A code span is the `code` filter (`code_cell`
    # in a table row), fenced longer than any backtick run inside; `trusted` is Markdown recon built
    # itself from escaped parts (the Mermaid chart), `fenced` a line inside a fenced block.
    env.finalize = lambda v: v if isinstance(v, _Md) else md_text(v)
    env.filters["code"] = lambda s: _Md(md_code(s)) if s or s == 0 else "—"
    env.filters["code_cell"] = lambda s: _Md(md_code(s, cell=True)) if s or s == 0 else "—"
    env.filters["trusted"] = lambda s: _Md(s)
    env.filters["fenced"] = lambda s: _Md(" " + inert(s) if inert(s).startswith(("`", "~")) else inert(s))
    text = env.get_template(name).render(**ctx)
    # headings set off by one blank line, one blank line between blocks, one newline at the end
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        line = line.rstrip()
        if line.startswith("```"):
            fenced = not fenced
        heading = not fenced and line.startswith("#")
        if heading and out and out[-1]:
            out.append("")
        if not line and out and not out[-1]:
            continue
        if out and out[-1].startswith("#") and line and not fenced:
            out.append("")
        out.append(line)
    # prose and list lines at 100 columns (recon.columns.markdown); table rows and headings whole
    return markdown("\n".join(out).strip("\n")) + "\n"


def render(ctx: dict, fmt: str = "md") -> str:
    if fmt == "json":
        return to_json(ctx)
    if fmt == "md":
        return render_markdown(ctx)
    raise ReconError(f"unknown spec format {fmt!r}; known: md, json")
