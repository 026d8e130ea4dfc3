"""The tuner's bad-input answers, config files (user folder first, checked whole against the
architecture), the heuristic defaults and the tuner's search space: all without a GPU."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("triton", reason="triton is not installed")

from refimpl_data import make_problem  # noqa: E402
from reference_impl import arch, configs, grouped_mxfp4_moe, moe, tune  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SM = {cc: arch.for_capability(cc) for cc in arch.COMPILED}
SHAPES = [dict(E=256, H=4096, I=2048, topk=8), dict(E=128, H=2880, I=2880, topk=4)]


def run_tune(*args, env=None):
    e = dict(os.environ, **(env or {}))
    e["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even where the tests run on one
    return subprocess.run([sys.executable, "-m", "reference_impl.tune", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,msg", [
    (["--shape", "E=8,H=100,I=64,topk=2"], "hidden_size H=100 is not a positive multiple of 32"),
    (["--shape", "E=8,H=128,I=48,topk=2"], "intermediate_size I=48 is not a positive multiple of 32"),
    (["--shape", "E=8,H=128"], "missing I, topk"),
    (["--model", "gpt-oss-120b"], "no CUDA GPU found"),
    (["--hf-config", "/nonexistent/config.json"], "cannot read it as JSON"),
])
def test_tuner_bad_input_is_one_line_and_exit_2(args, msg):
    r = run_tune(*args)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and msg in lines[0] and lines[0].startswith("reference_impl.tune: "), r.stderr
    assert "Traceback" not in r.stderr


def test_tuner_unsupported_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    assert tune.main(["--model", "deepseek-v4-flash"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Tesla T4" in err[0] and "7.5 is not supported" in err[0]


def test_hf_config_shapes(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"num_local_experts": 128, "hidden_size": 2880, "intermediate_size": 2880,
                             "num_experts_per_tok": 4, "swiglu_limit": 7.0}))
    assert tune.shape_from_hf_config(str(p)) == dict(E=128, H=2880, I=2880, topk=4, clamp=7.0, rsf=None)
    p.write_text(json.dumps({"text_config": {"n_routed_experts": 256, "hidden_size": 4096, "intermediate_size": 18432,
                                             "moe_intermediate_size": 2048, "num_experts_per_tok": 8,
                                             "routed_scaling_factor": 2.5}}))
    assert tune.shape_from_hf_config(str(p)) == dict(E=256, H=4096, I=2048, topk=8, clamp=None, rsf=2.5)
    p.write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 11008}))  # a dense model
    with pytest.raises(tune.BadInput, match="num_local_experts"):
        tune.shape_from_hf_config(str(p))


def _write(d, name, table):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w") as f:
        json.dump(table, f)
    return os.path.join(d, name)


def test_user_folder_takes_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("REFIMPL_CONFIG_DIR", str(tmp_path))
    assert configs.user_config_dir() == str(tmp_path)
    mine = {"path": "mma", "gemm1": {"Q": 2, "num_warps": 1}, "gemm2": {"Q": 2, "num_warps": 1, "atom_vec": 8}}
    name = configs.config_file_name(256, 2048, "NVIDIA H200")
    bundled = configs.get_config(1, 256, 8, 4096, 2048, "NVIDIA H200", SM[(9, 0)])
    assert bundled != mine and bundled["path"] == "mma"
    path = _write(tmp_path, name, {"1": mine, "4096": mine})
    assert configs.find_config_file(256, 2048, "NVIDIA H200") == path
    assert configs.get_config(1, 256, 8, 4096, 2048, "NVIDIA H200", SM[(9, 0)]) == mine
    monkeypatch.delenv("REFIMPL_CONFIG_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert configs.user_config_dir() == str(tmp_path / "xdg" / "reference_impl" / "configs")


@pytest.mark.parametrize("entry,cc,msg", [
    ({"path": "wgmma", "BLOCK_M": 64, "gemm1": {"STAGES": 3, "num_warps": 4}, "gemm2": {"STAGES": 3, "num_warps": 4}},
     (12, 0), "key '16': path='wgmma': sm_120 cannot run it"),
    ({"path": "mma", "gemm1": {"Q": 1, "num_warps": 2}, "gemm2": {"Q": 1, "num_warps": 2}},
     (8, 0), "key '16': path='mma': sm_80 cannot run it"),
    ({"path": "mma", "gemm1": {"Q": 3, "num_warps": 2}, "gemm2": {"Q": 1, "num_warps": 2}},
     (9, 0), "key '16': config: the decode path .* gemm1.Q=3"),
    ({"BLOCK_M": 16, "gemm1": {"BLOCK_N": 48, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2},
      "gemm2": {"BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2}}, (9, 0), "key '16'.*gemm1.BLOCK_N=48"),
    ({"path": "tcgen05", "gemm1": {}, "gemm2": {}}, (10, 0), "key '16': path='tcgen05'"),
])
def test_config_file_failing_validation_names_file_and_key(tmp_path, monkeypatch, entry, cc, msg):
    monkeypatch.setenv("REFIMPL_CONFIG_DIR", str(tmp_path))
    good = configs.default_config(1, 64, 2, 256, 128, SM[cc])
    path = _write(tmp_path, configs.config_file_name(64, 128, "Some GPU"), {"1": good, "16": entry})
    with pytest.raises(ValueError, match=f"^{path}: {msg}"):
        configs.get_config(1, 64, 2, 256, 128, "Some GPU", SM[cc])  # the whole file is checked, M=1's entry too


def test_config_file_bad_key_or_json(tmp_path, monkeypatch):
    monkeypatch.setenv("REFIMPL_CONFIG_DIR", str(tmp_path))
    good = configs.default_config(1, 64, 2, 256, 128, SM[(9, 0)])
    path = _write(tmp_path, configs.config_file_name(64, 128, "GPU A"), {"one": good})
    with pytest.raises(ValueError, match=f"^{path}: key 'one' is not a positive batch size"):
        configs.get_config(1, 64, 2, 256, 128, "GPU A", SM[(9, 0)])
    path = os.path.join(tmp_path, configs.config_file_name(64, 128, "GPU B"))
    open(path, "w").write("{not json")
    with pytest.raises(ValueError, match=f"^{path}: not a readable JSON file"):
        configs.get_config(1, 64, 2, 256, 128, "GPU B", SM[(9, 0)])


def test_explicit_config_this_gpu_cannot_run_is_an_error(monkeypatch):
    """On a real device (here: answered as sm_80) a Gluon config is a ValueError, not a fallback."""
    p = make_problem(3, 4, 64, 64, 2, device="cpu", seed=2)
    # CPU tensors pass the validation as under the interpreter, also where the suite runs on a GPU
    # (nothing is launched: the config is refused first)
    monkeypatch.setattr(moe, "_interpreting", lambda: True)
    monkeypatch.setattr(moe, "_device_arch", lambda dev: SM[(8, 0)])
    monkeypatch.setattr(arch, "for_device", lambda dev, env=True: SM[(8, 0)])
    cfg = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2}, "gemm2": {"Q": 1, "num_warps": 2}}
    with pytest.raises(ValueError, match="^config: path='mma': sm_80 cannot run it"):
        grouped_mxfp4_moe(**p, config=cfg)


def test_defaults_follow_architecture_and_shape():
    for s in SHAPES:
        args = (s["E"], s["topk"], s["H"], s["I"])
        h200 = [configs.default_config(M, *args, SM[(9, 0)], arch.H200_LIKE) for M in tune.MS]
        assert [c.get("path") for c in h200] == ["mma"] * 5 + ["wgmma"] * 2
        assert h200[-1]["gemm1"].get("ws") and h200[-1]["BLOCK_M"] > 128  # one block holds most experts' tokens
        assert all(c["gemm1"].get("tma") for c in h200[:5])
        # no wgmma on sm_100 / sm_120: the decode path, then the tl.dot kernels
        for cc in ((10, 0), (12, 0)):
            assert [configs.default_config(M, *args, SM[cc]).get("path", "dot") for M in tune.MS] == \
                ["mma"] * 5 + ["dot"] * 2
        assert {configs.default_config(M, *args, SM[(8, 0)]).get("path", "dot") for M in tune.MS} == {"dot"}
        for cc, a in SM.items():
            for M in tune.MS:
                configs.validate(configs.default_config(M, *args, a), a, f"sm_{cc} M={M}")
    # fewer SMs: fewer programs fill the GPU, so two tiles a program come sooner
    small = arch.DeviceProps(sm_count=20, smem_per_block=101376)
    assert configs.default_config(4, 256, 8, 4096, 2048, SM[(12, 0)], small)["gemm1"]["Q"] == 2
    assert configs.default_config(4, 256, 8, 4096, 2048, SM[(12, 0)], arch.H200_LIKE)["gemm1"]["Q"] == 1


def test_tuner_candidates_are_valid_configs():
    """Every one-knob change of every seed is a config its architecture accepts."""
    for a in SM.values():
        for s in SHAPES:
            for M in tune.MS:
                for seed in tune.seeds(M, dict(s, clamp=None, rsf=None), a, arch.H200_LIKE):
                    configs.validate(seed, a, "seed")
                    for knob in tune.knobs(seed, a):
                        for patch in knob:
                            c = tune.apply(seed, patch)
                            configs.validate(c, a, f"{a.name} M={M} {patch}")


# run under the Triton interpreter with no GPU in a child process: the interpreter has to be on
# before the kernels are decorated, which a test in a process that imported them with a GPU cannot do
_LAUNCH_ERROR = """
import torch
from refimpl_data import make_problem
from reference_impl import grouped_mxfp4_moe, moe
assert not hasattr(moe, "_STATE")
from triton.runtime.errors import InterpreterError
p = make_problem(3, 4, 64, 64, 2, device="cpu", seed=5)
try:
    before = grouped_mxfp4_moe(**p, deterministic=True)
except InterpreterError as e:  # this machine's interpreter cannot run the kernels at all
    print("INTERPRETER UNUSABLE:", repr(e)[-300:])
    raise SystemExit(0)
real = moe.gemm2_combine_kernel


class Broken:
    def __getitem__(self, grid):
        def launch(*a, **k):
            raise RuntimeError("cannot build this kernel")
        return launch


moe.gemm2_combine_kernel = Broken()
try:
    grouped_mxfp4_moe(**p, deterministic=True)
    raise SystemExit("no error from the broken launch")
except RuntimeError as e:
    assert "cannot build" in str(e), e
moe.gemm2_combine_kernel = real
assert torch.equal(grouped_mxfp4_moe(**p, deterministic=True), before)
print("same")
"""


def test_launch_error_changes_no_later_call():
    """A launch that fails raises; the next call runs as before (no process-wide mode switch)."""
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "reference_impl")]))
    r = subprocess.run([sys.executable, "-c", _LAUNCH_ERROR], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    # seen on the H200 machine (Triton 3.6's interpreter with numpy 2.5: int() of a 1-element array)
    if "INTERPRETER UNUSABLE" in r.stdout:
        pytest.skip("the Triton interpreter here cannot run the kernels: " + r.stdout.strip()[-200:])
    assert r.returncode == 0 and r.stdout.strip().endswith("same"), r.stderr[-3000:]


def test_fast_launch_reuses_a_compiled_kernel_only_for_the_same_specialization(monkeypatch):
    """moe._launch: the JIT on a plan's first call of a specialization, the compiled kernel's own
    launcher after; a different constexpr (HAS_CLAMP), dtype or pointer alignment goes to the JIT again."""
    import triton
    calls = []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def launch_metadata(self, grid, stream, *args):
            return None

        def run(self, *a):
            calls.append(("fast", a[:3], a[9:]))

    class Param:
        def __init__(self, name, default):
            self.name, self.default, self.has_default = name, default, default is not None

    class Kernel:
        arg_names = ["x", "n", "HAS_CLAMP", "BLOCK"]
        params = [Param("x", None), Param("n", None), Param("HAS_CLAMP", None), Param("BLOCK", 64)]

        def __getitem__(self, grid):
            def jit(*args, **kw):
                calls.append(("jit", grid, kw))
                return Compiled()
            return jit

    class Driver:
        def get_current_stream(self, index):
            return 7

    monkeypatch.setattr(moe, "_interpreting", lambda: False)
    monkeypatch.setattr(moe, "_driver", lambda: Driver())
    monkeypatch.setattr(moe, "_FAST_LAUNCH", True)
    pl = moe._Plan.__new__(moe._Plan)
    pl.cached, pl.launched, pl.dev_index = True, {}, 0
    x = torch.zeros(64, dtype=torch.float32)
    k = Kernel()
    moe._launch(pl, "g", k, (4,), (x, 5), dict(HAS_CLAMP=False))
    moe._launch(pl, "g", k, (4,), (x, 5), dict(HAS_CLAMP=False))
    assert [c[0] for c in calls] == ["jit", "fast"]
    assert calls[1][1] == (4, 1, 1) and calls[1][2][1:] == (5, False, 64)  # args, constexprs, defaults
    moe._launch(pl, "g", k, (4,), (x, 5), dict(HAS_CLAMP=True))  # another constexpr
    moe._launch(pl, "g", k, (4,), (x.double(), 5), dict(HAS_CLAMP=False))  # another dtype
    moe._launch(pl, "g", k, (4,), (x[1:], 5), dict(HAS_CLAMP=False))  # not 16-byte aligned
    assert [c[0] for c in calls] == ["jit", "fast", "jit", "jit", "jit"]
    monkeypatch.setattr(moe, "_FAST_LAUNCH", False)
    moe._launch(pl, "g", k, (4,), (x, 5), dict(HAS_CLAMP=False))
    assert calls[-1][0] == "jit"
    assert triton.knobs.runtime is not None
