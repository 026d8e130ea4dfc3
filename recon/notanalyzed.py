"""Files recon did not analyze, in every output it writes.

A file that could not be read, parsed or trusted is an index diagnostic (``Index.diagnostics``:
``(path, reason)``). A finding about the rest of the tree is only as good as what was read, so
every output says which files were left out: a section of the spec (Markdown and JSON), SARIF
``toolExecutionNotifications``, ``scan --format json``, and one summary line on stderr. Everything
here reads the diagnostics generically, so a new kind of diagnostic shows up everywhere by itself.
"""

from __future__ import annotations

from typing import Optional

SARIF_ID = "recon/not-analyzed"


def entries(tree) -> list[dict]:
    """``[{"path", "reason"}]``, sorted by path."""
    return [{"path": p, "reason": m} for p, m in tree.index.diagnostics]


def summary_line(items: list[dict]) -> Optional[str]:
    """One line for stderr, or None when every file was analyzed."""
    if not items:
        return None
    first = items[0]
    more = f" and {len(items) - 1} more" if len(items) > 1 else ""
    return f"{len(items)} file(s) not analyzed: {first['path']} ({first['reason']}){more}; `recon index` lists them all"


def sarif_notifications(items: list[dict], uri_base_id: str) -> list[dict]:
    """SARIF 2.1.0 ``notification`` objects, one per file not analyzed."""
    return [
        {
            "descriptor": {"id": SARIF_ID},
            "level": "warning",
            "message": {"text": f"not analyzed: {d['reason']}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": d["path"].lstrip("/"), "uriBaseId": uri_base_id}}}],
        }
        for d in items
    ]
