"""recon apply's load-time prepack: the codemod's third edit on small sources, and the bundle's hook
and lookup run on the CPU (Triton interpreter) against a layer shaped like SGLang's after its sm120
branch. The edit on the real 0.5.13.post1 file is in test_apply.py."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from recon.apply import codemod
from recon.apply.swap import PREPACK, WRAPPER

HOST = "slot_forward"
SRC = '''class M:
    def process_weights_after_loading(self, layer):
        if on_sm120():
            layer.s = layer.s.to(float)
            layer._backend = "slot"
            return
        layer._backend = "other"

    def apply(self, layer, x):
        if layer._backend == "slot":
            from pkg.slot import slot_forward
            w13 = layer.w13_weight.data
            out = slot_forward(hidden_states=x, w13_packed=w13, w2_packed=layer.w2_weight.data,
                               w13_scale=layer.s13.data, w2_scale=layer.s2)
            return out
        return None
'''


def test_prepack_call_goes_before_the_branch_return_and_reverts_exactly():
    patched = codemod.patch(SRC, "M.apply", 13, HOST, "pkg.grouped")
    new, why = codemod.add_prepack(patched, "M.apply", HOST, "pkg.grouped")
    assert why is None
    lines = new.splitlines()
    at = lines.index('            layer._backend = "slot"')
    assert lines[at + 2] == f"            from pkg.grouped import {PREPACK}"
    assert lines[at + 3] == f"            {PREPACK}(layer, 'w13_weight', 'w2_weight', 's13', 's2')"
    assert lines[at + 4] == "            return"
    assert new.count(f"{PREPACK}(") == 1 and f"{WRAPPER}(slot_forward" in new
    assert codemod.unpatch(new, "pkg.grouped") == (SRC, 4)
    # also on the unpatched source (the host called directly)
    assert codemod.add_prepack(SRC, "M.apply", HOST, "pkg.grouped")[1] is None


@pytest.mark.parametrize("change, reason", [
    (('layer._backend = "other"', 'layer._backend = "slot"'), "2 statements set _backend"),
    (('if layer._backend == "slot":', 'if True:'), "not under an `if"),
    (("w2_packed=layer.w2_weight.data", "w2_packed=other.w2"), "w2_packed is not read from"),
    (("slot_forward(hidden_states", "slot_forward(*a, hidden_states"), None),
])
def test_prepack_edit_left_out_where_the_code_is_ambiguous(change, reason):
    src = SRC.replace(*change)
    new, why = codemod.add_prepack(src, "M.apply", HOST, "pkg.grouped")
    if reason is None:
        assert why is None
    else:
        assert new == src and reason in why


# --- the hook and the lookup, run -------------------------------------------------------------------

E, H, I, M, TOPK = 4, 64, 64, 3, 2


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    torch = pytest.importorskip("torch")
    old = os.environ.get("TRITON_INTERPRET")
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before triton and the bundle's kernels are imported
    pytest.importorskip("triton")
    from recon.apply import bundle

    root = tmp_path_factory.mktemp("bundle")
    for rel, data in bundle.build("recon_prepack_bundle", "mxfp4_moe_forward_triton", "pkg.slot").items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("recon_prepack_bundle")
    finally:
        sys.path.remove(str(root))
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def _layer(torch):
    """The layer as SGLang 0.5.13's sm120 branch leaves it: int8 weights, uint8 scales made float32."""
    g = torch.Generator().manual_seed(0)
    P = lambda t: torch.nn.Parameter(t, requires_grad=False)  # noqa: E731
    layer = torch.nn.Module()
    layer.w13_weight = P(torch.randint(-128, 128, (E, 2 * I, H // 2), dtype=torch.int8, generator=g))
    layer.w2_weight = P(torch.randint(-128, 128, (E, H, I // 2), dtype=torch.int8, generator=g))
    s13 = torch.randint(116, 124, (E, 2 * I, H // 32), dtype=torch.uint8, generator=g)
    s2 = torch.randint(116, 124, (E, H, I // 32), dtype=torch.uint8, generator=g)
    layer.w13_weight_scale_inv = P(s13.view(torch.float8_e8m0fnu).to(torch.float32))
    layer.w2_weight_scale_inv = P(s2.view(torch.float8_e8m0fnu).to(torch.float32))
    return layer, s13, s2


NAMES = ("w13_weight", "w2_weight", "w13_weight_scale_inv", "w2_weight_scale_inv")


def _never(hidden_states, w13_packed, w2_packed, w13_scale, w2_scale, topk_ids, topk_weights, hidden_size,
           intermediate_size, inplace=False, routed_scaling_factor=None, clamp_limit=None):
    raise AssertionError("the slot function ran")


def _args(torch, layer):
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(M, H, generator=g).to(torch.bfloat16),
                w13_packed=layer.w13_weight.data, w2_packed=layer.w2_weight.data,
                w13_scale=layer.w13_weight_scale_inv.data, w2_scale=layer.w2_weight_scale_inv.data,
                topk_ids=torch.randint(0, E, (M, TOPK), dtype=torch.int32, generator=g),
                topk_weights=torch.rand(M, TOPK, generator=g), hidden_size=H, intermediate_size=I)


def test_hook_keeps_one_copy_and_the_forward_finds_it(entry, monkeypatch):
    import torch

    layer, s13, s2 = _layer(torch)
    raw = _args(torch, layer)
    raw = {**raw, "w13_scale": raw["w13_scale"].clone(), "w2_scale": raw["w2_scale"].clone()}
    w13_at = layer.w13_weight.data_ptr()
    p = getattr(entry, PREPACK)(layer, *NAMES)
    # one copy: the weights aliased, the scale Parameters e8m0 views of the prepacked bytes
    assert p.w13.data_ptr() == w13_at and p.w2.data_ptr() == layer.w2_weight.data_ptr()
    for name, mine, want in (("w13_weight_scale_inv", p.s13, s13), ("w2_weight_scale_inv", p.s2, s2)):
        t = getattr(layer, name)
        assert isinstance(t, torch.nn.Parameter) and t.dtype == torch.float8_e8m0fnu and t.data_ptr() == mine.data_ptr()
        assert torch.equal(t.view(torch.uint8), want)
    assert layer._recon_mxfp4_prepacked is p
    seen = []
    moe = importlib.import_module(entry.__name__ + ".moe")
    real = moe.grouped_mxfp4_moe
    monkeypatch.setattr(moe, "grouped_mxfp4_moe", lambda **kw: seen.append(kw["w13_packed"]) or real(**kw))
    a = entry.mxfp4_moe_forward_grouped(_never, **_args(torch, layer))  # as apply calls it: .data of each
    b = entry.mxfp4_moe_forward_grouped(_never, **raw)  # float32 scales, copies: not the prepacked tensors
    assert seen[0] is p and isinstance(seen[1], torch.Tensor)
    assert torch.equal(a, b) and torch.isfinite(a.float()).all() and a.abs().sum() > 0
    # the prepacked w13 with another copy of a scale tensor: not the prepacked set, so the raw path
    seen.clear()
    other = _args(torch, layer)
    other["w2_scale"] = other["w2_scale"].clone()
    entry.mxfp4_moe_forward_grouped(_never, **other)
    assert isinstance(seen[0], torch.Tensor)
    # the entry goes with the layer
    del layer, p
    import gc

    gc.collect()
    assert w13_at not in entry._PREPACKED


def test_hook_switched_off_at_load_leaves_the_layer_as_sglang_made_it(entry, monkeypatch):
    import torch

    layer, _, _ = _layer(torch)
    before = {n: getattr(layer, n) for n in NAMES}
    monkeypatch.setenv(entry.ENV_VAR, "0")
    assert getattr(entry, PREPACK)(layer, *NAMES) is None
    assert all(getattr(layer, n) is t for n, t in before.items()) and layer.w13_weight_scale_inv.dtype == torch.float32
    assert not hasattr(layer, "_recon_mxfp4_prepacked")
