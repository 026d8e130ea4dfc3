"""Mechanisms the differential oracle (bench/oracle: SGLang's own argument resolution run beside
recon) found wrong, each pinned by a one-feature synthetic tree and by a real release that the
rest of the suite does not read (``tree_unseen``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from recon.errors import ReconError
from recon.runtime import parse_server_args

_ARG_GROUPS = {
    "sglang/srt/server_args.py": (
        "from sglang.srt.arg_groups.fields.exec_ import ExecArgs\n"
        "class ServerArgs(ExecArgs):\n"
        "    model_path: str = ''\n"
    ),
    "sglang/srt/arg_groups/choices.py": "RUNNER_CHOICES = ['auto', 'triton', 'marlin']\n",
    "sglang/srt/arg_groups/fields/exec_.py": (
        "from typing import Annotated as A\n"
        "from sglang.srt.arg_groups.arg_utils import Arg\n"
        "from sglang.srt.arg_groups.choices import RUNNER_CHOICES\n"
        "class ExecArgs:\n"
        "    moe_runner_backend: A[str, Arg(help='x', choices=RUNNER_CHOICES)] = 'auto'\n"
    ),
    "sglang/srt/arg_groups/arg_utils.py": "class Arg:\n    def __init__(self, **kw):\n        pass\n",
}


def test_choices_imported_from_another_module_are_checked(synthetic):
    # The choices list is a module-level name of another module, bound by an import: no graph node.
    tree = synthetic(_ARG_GROUPS)
    assert parse_server_args(tree, "--moe-runner-backend marlin") == {"moe_runner_backend": "marlin"}
    with pytest.raises(ReconError, match="not one of SGLang's choices .*auto, triton, marlin"):
        parse_server_args(tree, "--moe-runner-backend nonsense")


def test_bad_choice_exits_2_on_arg_groups_releases(tree_unseen, tree_new):
    for tree in (tree_unseen, tree_new):
        with pytest.raises(ReconError, match="not one of SGLang's choices") as e:
            parse_server_args(tree, "--moe-runner-backend nonsense")
        assert e.value.exit_code == 2
        with pytest.raises(ReconError, match="not one of SGLang's choices"):
            parse_server_args(tree, "--attention-backend nonsense")
        assert parse_server_args(tree, "--attention-backend triton") == {"attention_backend": "triton"}


def test_cli_bad_choice_exit_code_on_unseen_release(tree_unseen):
    from recon.cli import app
    from conftest import UNSEEN_VERSION

    res = CliRunner().invoke(app, ["runtime", "--sglang", UNSEEN_VERSION, "--server-args",
                                   "--moe-runner-backend nonsense", "--format", "json"])
    assert res.exit_code == 2, res.output
