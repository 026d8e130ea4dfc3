"""Progress per phase: live on a terminal (stderr), one line per phase with -v off a terminal,
nothing otherwise; stdout carries only the command's output."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from recon.rules import load_rules
from tests.conftest import make_tree

FILES = {"sglang/srt/a.py": "def helper():\n    pass\n", "sglang/srt/b.py": "from sglang.srt.a import helper\n\ndef run():\n    helper()\n"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def tree(tmp_path):
    return str(make_tree(tmp_path / "t", FILES))


def _recon(*args, cache):
    env = dict(os.environ, RECON_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True, env=env)


def test_verbose_off_a_terminal_says_one_line_per_phase(tree, tmp_path):
    cold = _recon("-v", "scan", "--path", tree, "--format", "json", cache=tmp_path / "c")
    quiet = _recon("scan", "--path", tree, "--format", "json", cache=tmp_path / "c")
    warm = _recon("-v", "scan", "--path", tree, "--format", "json", cache=tmp_path / "c")
    assert cold.returncode == quiet.returncode == warm.returncode == 0
    assert "recon: " not in quiet.stderr  # off a terminal and without -v: no progress at all
    phases = [l for l in cold.stderr.splitlines() if l.startswith("recon: ")]
    assert [l.split()[1].rstrip(":") for l in phases if l.split()[1].endswith(":")] == ["index", "graph", "checks"]
    assert "recon: index: 4 files, 4 read" in cold.stderr and "recon: graph: built" in cold.stderr
    assert sum(1 for l in phases if l.startswith("recon: checks arch-gate: 0 findings")) == 1  # a line per rule
    assert "recon: index: 4 files, 0 read" in warm.stderr and "recon: graph: cached" in warm.stderr
    assert "(cached)" in warm.stderr
    assert cold.stdout == quiet.stdout == warm.stdout  # stdout untouched


def test_on_a_terminal_the_phases_show_live_and_stay_out_of_stdout(tree, tmp_path):
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120", RECON_CACHE_DIR=str(tmp_path / "c"))
    p = subprocess.Popen([sys.executable, "-m", "recon", "scan", "--path", tree], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    raw = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    assert p.wait() == 0
    text = ANSI.sub("", raw.decode("utf-8", "replace"))
    assert re.search(r"index .* 4/4 .* 4 files, 4 read", text) and re.search(r"graph .* built, 7 nodes", text)
    n = len(load_rules())  # every shipped rule runs on the tree
    assert re.search(rf"checks .* {n}/{n} .* {n} rules, 0 findings", text)
    # the command's own line is whole on the screen: no bar drawn into it
    visible = [line.rstrip("\r").split("\r")[-1] for line in text.split("\n")]
    assert any(v.startswith("0 findings for ") for v in visible), visible
