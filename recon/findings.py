"""Findings: what a check reports, each with the code that proves it."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

SEVERITIES = ("error", "warning", "note")


@dataclass(frozen=True)
class Evidence:
    """One cited place: ``path`` relative to the target root, 1-based lines."""

    path: str
    line: int
    end_line: Optional[int] = None
    note: str = ""  # what this line shows ("tl.sum over the product", "gate defined here")
    snippet: str = ""  # the cited source line(s), stripped, for the reader


@dataclass
class Finding:
    rule_id: str
    message: str
    severity: str = "warning"
    evidence: list[Evidence] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # structured values (numbers, names) for spec/JSON

    @property
    def primary(self) -> Optional[Evidence]:
        return self.evidence[0] if self.evidence else None

    @property
    def fingerprint(self) -> str:
        """Stable across runs of the same tree: rule, message and cited places."""
        h = hashlib.sha1(self.rule_id.encode())
        h.update(self.message.encode())
        for e in self.evidence:
            h.update(f"{e.path}:{e.line}".encode())
        return h.hexdigest()[:16]

    def sort_key(self):
        p = self.primary
        return (SEVERITIES.index(self.severity) if self.severity in SEVERITIES else 9, self.rule_id, p.path if p else "", p.line if p else 0, self.message)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fingerprint"] = self.fingerprint
        return d
