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


def test_version():
    from recon import __version__

    for args in (["--version"], ["version"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0 and r.stdout == f"recon {__version__}\n"


# the commands that write a document (a report on a tree, a device, a model): each takes -o/--output
DOCUMENTS = [("scan",), ("spec",), ("kernels",), ("runtime",), ("graph", "export")]


@pytest.mark.parametrize("path", DOCUMENTS, ids=[" ".join(p) for p in DOCUMENTS])
def test_every_document_command_takes_output(path):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
    assert {"-o", "--output"} <= opts, f"recon {' '.join(path)} has no -o/--output"
