"""``python -m recon``. Python puts the working directory first on ``sys.path`` for ``-m``; run
inside an untrusted checkout, its ``yaml.py`` or ``git/`` would be imported in place of the real
ones. The entry is dropped before anything else is imported (recon's own modules are found through
the package already imported; the installed ``recon`` script never had the entry)."""

import os
import sys


def _drop_cwd(path: list) -> None:
    cwd = os.path.realpath(os.getcwd())
    path[:] = [p for p in path if p not in ("", ".") and os.path.realpath(p) != cwd]


_drop_cwd(sys.path)

from recon.cli import main  # noqa: E402 - after the path is safe

main()
