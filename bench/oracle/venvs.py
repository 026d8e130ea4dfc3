"""The oracle's virtual environments: one base venv (torch's CPU build and the light packages
SGLang's argument code imports) shared by every release, plus one ``pip install --target``
overlay per pinned ``transformers`` version. A release runs with its own unpacked source (recon's
wheel cache) and its overlay on PYTHONPATH, so one base serves all releases.

Nothing here is imported by recon: recon only parses SGLang; this bench runs it to check recon.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# What ServerArgs and the modules it imports need at import and post-init time, and that installs
# on a CPU machine. torch 2.13.0's CPU build comes from the local wheel folder.
BASE_PACKAGES = [
    "torch==2.13.0", "numpy", "msgspec", "psutil", "requests", "pydantic", "packaging", "orjson",
    "pyzmq", "tqdm", "sentencepiece", "safetensors", "huggingface_hub", "einops", "pyyaml",
    "filelock", "regex", "aiohttp", "fastapi", "uvicorn", "uvloop", "pybase64", "setproctitle",
    "partial_json_parser", "pillow", "openai", "tiktoken", "interegular", "prometheus-client",
    "python-multipart", "easydict", "distro", "watchfiles", "xxhash", "zstandard", "blobfile",
    "scipy", "jinja2", "python-dateutil", "compressed-tensors", "ninja", "dill", "cloudpickle",
]


def _run(cmd: list, log: Path) -> None:
    with open(log, "a") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"oracle: {' '.join(cmd[:4])} ... failed; see {log}")


def base_python(root: Path) -> Path:
    """The base venv's python, built the first time (about a minute and a half)."""
    py = root / "base" / "bin" / "python"
    stamp = root / "base" / ".oracle-packages"
    want = "\n".join(BASE_PACKAGES)
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    root.mkdir(parents=True, exist_ok=True)
    if not py.exists():
        _run([sys.executable, "-m", "venv", str(root / "base")], root / "base.log")
    _run([str(py), "-m", "pip", "install", "-q", *BASE_PACKAGES], root / "base.log")
    stamp.write_text(want)
    return py


def overlay(root: Path, py: Path, transformers_pin: str, extra: tuple = ()) -> Path:
    """A folder holding ``transformers==pin`` (with its own tokenizers/hub pins) for PYTHONPATH,
    plus ``extra`` requirements the release pins differently from what the base venv holds."""
    tag = "" if not extra else "-" + __import__("hashlib").sha1("\n".join(extra).encode()).hexdigest()[:8]
    dest = root / "overlays" / f"transformers-{transformers_pin}{tag}"
    if (dest / ".done").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    # With its dependencies: 4.x and 5.x pin different tokenizers / huggingface_hub (and 5.x's hub
    # needs httpx); the overlay shadows the base venv's copies on PYTHONPATH.
    _run([str(py), "-m", "pip", "install", "-q", "--target", str(dest), "--upgrade",
          f"transformers=={transformers_pin}", *extra], root / "overlay.log")
    (dest / ".done").write_text("")
    return dest


def env_for(root: Path, release_root: Path, overlay_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = os.pathsep.join([str(release_root), str(overlay_dir)])
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the release's source is recon's shared wheel cache: leave it as unpacked
    env["HOME"] = str(root / "home")  # caches SGLang or HF write land here, not in the user's home
    return env
