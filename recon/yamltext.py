"""YAML text as recon reads it: PyYAML's safe loader, with libyaml's parser where PyYAML was built
with it (a warm command reads every rule and profile again; the pure-Python parser was most of a
warm run's time). Both build the same Python values through the same safe constructor; libyaml
refuses nesting past its own depth limit with a ``yaml.YAMLError`` instead of recursing."""

from __future__ import annotations

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
YAMLError = yaml.YAMLError


def load_yaml(text: str):
    """The value of one YAML document (``None`` for an empty one)."""
    return yaml.load(text, Loader=_LOADER)
