"""--help is enough: every option and argument says what it is for, and no placeholder leaks."""
from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from recon.cli import app

runner = CliRunner()


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, path + (name,))


COMMANDS = [p for p, c in _commands(typer.main.get_command(app)) if not hasattr(c, "commands")]


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_parameter_is_described(path):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    missing = [p.name for p in cmd.params if p.name != "help" and not (getattr(p, "help", None) or "").strip()]
    assert not missing, f"recon {' '.join(path)}: no help for {missing}"


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_no_type_placeholders_in_help(path):
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for bad in ("<bool>", "<str>", "<path>", "<int>", "<float>", "list[", "{"):
        assert bad not in r.output, f"recon {' '.join(path)} --help shows {bad}"
