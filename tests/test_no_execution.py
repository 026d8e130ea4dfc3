"""recon never executes the code it reads: side effects planted wherever an analysis looks
(module tops, gate bodies and their defaults, decorators, class bodies, grids, autotune configs,
module constants, platform tables, branch tests, config-path f-strings) never run, through every
command that reads code: index, scan (all rules) and spec, for two devices.
"""

from __future__ import annotations

from typer.testing import CliRunner

from recon.cli import app
from tests.conftest import make_tree


def _planted(sentinel) -> dict:
    boom = f"__import__('os').system('touch {sentinel}')"
    write = f"open({str(sentinel)!r}, 'w').write('ran')"
    return {
        "sglang/__init__.py": f"{write}\nraise SystemExit(3)\n",
        "sglang/srt/utils.py": (
            "import functools\nimport torch\n\n\n"
            f"def is_sm90_supported(device=({boom})):\n"
            f"    major = torch.cuda.get_device_capability()[0]\n    {boom}\n    x = {write}\n"
            f"    return major == 9 and bool(eval('{write}'))\n\n\n"
            f"is_sm100_supported = functools.lru_cache(maxsize=1)(functools.partial(eval, {write!r}))\n"
            f"_PLATFORM = {{'is_sm90': 'is_sm90_supported', 'x': {boom}}}\n\n\n"
            f"def __getattr__(name):\n    {boom}\n    return globals()[_PLATFORM[name]]\n"
        ),
        "sglang/srt/layers/moe/k.py": (
            "import torch\nimport triton\nimport triton.language as tl\n"
            "from sglang.srt.utils import is_sm90_supported\n\n"
            f"_BLOCK = {boom}\n\n\n"
            f"@triton.autotune(configs=[triton.Config({{'BLOCK': ({boom}) or 64}}, num_warps=4)], key=['N'])\n"
            "@triton.jit\ndef kern(a, N, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
            "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n    for i in range(0, N, BLOCK):\n"
            "        acc += tl.sum(tl.load(a + i) * tl.load(a + i + 1), axis=0)\n\n\n"
            f"class Method:\n    {write}\n\n"
            f"    def apply(self, x, M, cfg=({boom})):\n"
            f"        if is_sm90_supported() and ({boom}):\n"
            f"            kern[lambda META: ({boom}, M)](x, M, BLOCK=_BLOCK)\n"
            f"        grid = (({write}) and M,)\n        kern[grid](x, M)\n"
            "        y = torch.empty((M, 8)) * x\n"
            f"        path = f\"N={{({boom})}},device_name={{x}}.json\"\n"
            "        return y.to(torch.float32)\n"
        ),
    }


def test_no_command_runs_the_code_it_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("RECON_CACHE_DIR", str(tmp_path / "cache"))
    sentinel = tmp_path / "ran"
    root = make_tree(tmp_path / "t", _planted(sentinel))
    runner = CliRunner()
    ran = []
    for cmd in (["index"], ["scan", "--format", "sarif"], ["spec"], ["spec", "--format", "json"]):
        for device in ("h200", "rtx-pro-6000"):
            args = [*cmd, "--path", str(root)] + (["--device", device] if cmd[0] != "index" else [])
            res = runner.invoke(app, args)
            assert res.exit_code == 0, (args, res.stderr)
            ran.append(" ".join(cmd))
    assert len(ran) == 8 and not sentinel.exists()
    # the planted code was read: its gate, kernel and launch are in the graph the commands used
    res = runner.invoke(app, ["query", "launches", "sglang.srt.layers.moe.k.Method.apply", "--path", str(root)])
    assert res.exit_code == 0 and "kern" in res.stdout
