"""Which findings go where in the spec, read from the rules' ``spec:`` metadata (never from rule ids)."""

from __future__ import annotations

from typing import Optional


class Roles:
    """The rules' ``spec:`` mappings, by section: a finding goes where its rule says."""

    def __init__(self, rules=None):
        if rules is None:
            from ..rules import load_rules

            rules = load_rules()
        self.spec = {r.id: r.spec for r in rules}

    def section(self, rule_id: str) -> Optional[str]:
        s = self.spec.get(rule_id)
        return s.section if s else None

    def is_(self, f, section: str) -> bool:
        """Does finding ``f`` belong to ``section``?"""
        return self.section(f.rule_id) == section

    def root_causes(self) -> list[str]:
        """Rule ids whose findings can be root causes, by rank."""
        return sorted((k for k, s in self.spec.items() if s.section == "root-cause"), key=lambda k: (self.spec[k].rank, k))

    def rank(self, rule_id: str) -> float:
        """A root cause's rank; a cause the spec derives from a rule's findings (the slot re-read)
        ranks right after that rule."""
        s = self.spec.get(rule_id)
        return float(s.rank) if s and s.rank is not None else float("inf")

    def match(self, rule_id: str) -> str:
        s = self.spec.get(rule_id)
        return s.match if s else "kernel"

    def slot_kernel(self, rule_id: str) -> bool:
        s = self.spec.get(rule_id)
        return bool(s and s.slot_kernel)
