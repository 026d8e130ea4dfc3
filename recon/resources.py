"""Where the top-level ``rules/`` and ``templates/`` folders are at run time.

In a source checkout or an editable install they sit beside the ``recon``
package. A regular install (``pip install .``, a wheel) puts them under
``<prefix>/share/recon/`` (pyproject's data-files), so both are looked up.
"""
from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _candidates(name: str) -> list[Path]:
    roots = [_SOURCE_ROOT]
    for prefix in (sys.prefix, sysconfig.get_path("data")):
        if prefix:
            roots.append(Path(prefix) / "share" / "recon")
    return [root / name for root in roots]


def resource_dir(name: str) -> Path:
    """The first existing ``name`` folder (``rules`` or ``templates``); the source
    location when none exists, so an error message names a real expectation."""
    for path in _candidates(name):
        if path.is_dir():
            return path
    return _SOURCE_ROOT / name
