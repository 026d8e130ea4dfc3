"""Symbolic links in a target: which ones stay inside its root, on disk and in git objects.

recon reads trees it does not trust (a pull request's checkout in CI). A link inside the tree
(``srt/evil.py -> /home/ci/.ssh/id_rsa``) must not make it read, index or quote a file outside the
folder it was given. The rule, the same for folders and git revisions:

- a link whose resolved path leaves the target root is never followed; it is reported (see
  :data:`LEAVES_ROOT`) whatever it points to, so the user sees what was left out;
- a link to a *file* inside the root is followed (the bytes are the tree's own, and Python would
  import them under the link's name too);
- a link to a *folder* is never descended, inside the root or not: what it holds is read under its
  real path already, and links that point back up cannot make a walk loop.
"""

from __future__ import annotations

import os
import posixpath
from typing import Optional

LEAVES_ROOT = "symbolic link leaves the target root"
BROKEN = "broken symbolic link (target missing, or a loop of links)"
MAX_HOPS = 16  # a chain of links in a git tree longer than this is treated as a loop


def real_root(path) -> str:
    return os.path.realpath(path)


def inside(path, bound: str) -> bool:
    """Does ``path``, with every link in it resolved, lie in ``bound`` (a real path)?

    ``os.path.realpath`` resolves each component (a link to a folder above the file counts too)
    and stops on loops instead of raising, so a cycle of links ends here as a path, not a hang.
    """
    real = os.path.realpath(path)
    return real == bound or real.startswith(bound.rstrip(os.sep) + os.sep)


def git_link_target(link_path: str, text: str) -> Optional[str]:
    """The repository path a git link (mode 120000) at ``link_path`` names, or None when it leaves
    the repository: an absolute target, or one whose ``..`` climb above the top."""
    if not text or text.startswith("/") or "\0" in text:
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), text))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return None
    return "" if joined == "." else joined
