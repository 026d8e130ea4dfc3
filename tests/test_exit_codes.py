"""Every row of the exit-code table, on every command it applies to (the README and --help state it).

0 done; 1 nothing found or nothing to do; 2 bad input; 3 a check (or recon) crashed.
Rows that need apply's git checkout are in test_apply.py; cache verify's in test_wheel_cache.py.
"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from recon import checks
from recon.cli import app, run as run_cli
from recon.errors import EXIT_CODES_HELP
from tests.conftest import make_tree

runner = CliRunner()

FILES = {
    "sglang/srt/a.py": "def helper():\n    pass\n\ndef twin():\n    pass\n",
    "sglang/srt/b.py": "from sglang.srt.a import helper\n\ndef run():\n    helper()\n\ndef twin():\n    pass\n",
}
RULE = """id: test-boom
title: a check that crashes
severity: warning
category: test
finds: nothing
why: it crashes
fix: none
check: test_boom
"""


@checks.check("test_boom")
def _boom(ctx, rule):
    raise KeyError("planted")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return str(make_tree(tmp_path_factory.mktemp("exit") / "t", FILES))


@pytest.fixture
def boom_rules(tmp_path):
    d = tmp_path / "rules"
    d.mkdir()
    (d / "boom.yaml").write_text(RULE)
    return d


def cli(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


@pytest.mark.parametrize("args", [
    ["rules", "list"],
    ["rules", "show", "arch-gate"],
    ["index", "--path", "{t}"],
    ["query", "where", "helper", "--path", "{t}"],
    ["query", "callers", "helper", "--path", "{t}"],
    ["query", "path", "b.run", "helper", "--path", "{t}"],
    ["graph", "export", "--format", "dot", "--path", "{t}"],
    ["scan", "--path", "{t}"],  # a scan that finds nothing is done, not "nothing found"
    ["spec", "--path", "{t}", "--format", "json"],
])
def test_0_done(tree, args):
    r = cli(*[a.format(t=tree) for a in args])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, says", [
    (["query", "where", "no_such_thing"], "no symbol"),
    (["query", "callees", "no_such_thing", "--format", "json"], "no symbol"),
    (["query", "where", "twin"], "names 2 symbols"),
    (["query", "launches", "twin"], "names 2 symbols"),
    (["query", "path", "helper", "b.run"], "no call path"),
])
def test_1_nothing_found(tree, args, says):
    r = cli(*args, "--path", tree)
    assert r.exit_code == 1 and says in r.output, r.output


def test_1_ambiguous_name_as_json_lists_the_candidates(tree):
    r = cli("query", "where", "twin", "--path", tree, "--format", "json")
    assert r.exit_code == 1
    assert json.loads(r.stdout)["candidates"] == ["sglang.srt.a.twin", "sglang.srt.b.twin"]


@pytest.mark.parametrize("args", [
    ["index"], ["query", "where", "x"], ["query", "callers", "x"], ["query", "callees", "x"], ["query", "path", "x", "y"],
    ["query", "launches", "x"], ["graph", "export"], ["scan"], ["spec"], ["apply"],
])
def test_2_missing_path_on_every_command(tmp_path, args):
    r = cli(*args, "--path", tmp_path / "missing")
    assert r.exit_code == 2 and "does not exist" in r.output
    # one message, one whole line (an error is never folded: a script reads it from "error: ")
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output


@pytest.mark.parametrize("args, says", [
    (["scan", "--device", "no-such-gpu"], "no-such-gpu"),
    (["spec", "--device", "no-such-gpu"], "no-such-gpu"),
    (["apply", "--device", "no-such-gpu"], "no-such-gpu"),
    (["spec", "--model", "no-such-model"], "no-such-model"),
    (["scan", "--rule", "no-such-rule"], "no rule"),
    (["index", "--sglang", "0.5.5"], "not both"),
    (["graph", "export", "--rev", "HEAD"], "not a git repository"),
])
def test_2_bad_input(tree, args, says):
    r = cli(*args, "--path", tree)
    assert r.exit_code == 2 and says in r.output, r.output


def test_2_bad_version_and_bad_rules(tmp_path):
    assert cli("index", "--sglang", "latest!").exit_code == 2
    r = cli("rules", "list", "--rules", tmp_path / "none")
    assert r.exit_code == 2 and "rules folder not found" in r.output


def test_3_a_crashed_check_is_named_and_the_rest_still_written(tree, boom_rules, tmp_path):
    out = tmp_path / "scan.json"
    r = cli("scan", "--path", tree, "--rules", boom_rules, "--format", "json", "-o", out)
    assert r.exit_code == 3 and "rule test-boom failed" in r.output and "KeyError" in r.output
    doc = json.loads(out.read_text())
    assert doc["errors"][0]["rule"] == "test-boom"


def test_3_spec_with_a_crashed_check(tree, boom_rules, tmp_path):
    out = tmp_path / "spec.json"
    r = cli("spec", "--path", tree, "--format", "json", "-o", out, env={"RECON_RULES_PATH": str(boom_rules)})
    assert r.exit_code == 3 and "rule test-boom failed" in r.output
    assert json.loads(out.read_text())["errors"][0]["rule"] == "test-boom"


def test_3_recon_crashing_is_one_line_not_a_traceback(monkeypatch, capsys, tree):
    import recon.query

    def broken(G, symbol):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(recon.query, "where", broken)
    assert run_cli(["query", "where", "helper", "--path", tree]) == 3
    err = capsys.readouterr().err
    assert "recon crashed: RuntimeError: planted bug" in err and "Traceback" not in err


@pytest.mark.parametrize("args", [[], ["spec"], ["scan"], ["query", "where"], ["cache", "prune"], ["apply"]])
def test_every_help_states_the_table(args):
    r = cli(*args, "--help")
    assert r.exit_code == 0 and " ".join(EXIT_CODES_HELP.split()) in " ".join(r.output.split())


def test_130_ctrl_c_is_one_line(monkeypatch, capsys, tree):
    """Ctrl-C (SIGINT) mid-command: one line on stderr, exit 130 (the table's row)."""
    import os
    import signal

    import recon.query

    def interrupted(G, symbol):
        os.kill(os.getpid(), signal.SIGINT)  # the signal itself, as a terminal sends it
        raise AssertionError("the interrupt did not stop the command")

    monkeypatch.setattr(recon.query, "where", interrupted)
    assert run_cli(["query", "where", "helper", "--path", tree]) == 130
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if not x.startswith("target: ")]  # the usual preamble before the command ran
    assert lines == ["interrupted (Ctrl-C): nothing more was written"]  # one line: no blank line, no "Aborted!"
    assert "130" in EXIT_CODES_HELP


def test_version_option_and_command():
    from recon import __version__

    for args in (["--version"], ["version"]):
        r = cli(*args)
        assert r.exit_code == 0 and r.output.strip() == f"recon {__version__}"
