"""The benchmark's SGLang -> FlashInfer weight layout (bench/reference_impl/bench_flashinfer.py)
keeps every weight: [gate; up] becomes [up; gate], and padding to multiples of 128 adds zeros only.
CPU only; FlashInfer's own interleave helpers (CUDA) are not exercised here."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "reference_impl"))


@pytest.mark.parametrize("E,H,I", [(2, 256, 128), (2, 320, 192), (1, 288, 160)])
def test_up_first_padded_keeps_weights(E, H, I):
    from refimpl_data import make_problem
    from reference_impl.reference import dequant_mxfp4
    bf = pytest.importorskip("bench_flashinfer")
    b = make_problem(1, E, H, I, 1, seed=3)
    w13, s13, w2, s2, Hp, Ip = bf.up_first_padded(b, H, I)
    assert Hp % 128 == 0 and Ip % 128 == 0 and Hp - H < 128 and Ip - I < 128
    d0 = dequant_mxfp4(b["w13_packed"], b["w13_scale"])
    d1 = dequant_mxfp4(w13, s13)
    assert d1.shape == (E, 2 * Ip, Hp)
    assert torch.equal(d1[:, :I, :H], d0[:, I:])            # up first
    assert torch.equal(d1[:, Ip:Ip + I, :H], d0[:, :I])     # then gate
    assert d1[:, I:Ip].abs().sum() == 0 and d1[:, Ip + I:].abs().sum() == 0 and d1[:, :, H:].abs().sum() == 0
    e0 = dequant_mxfp4(b["w2_packed"], b["w2_scale"])
    e1 = dequant_mxfp4(w2, s2)
    assert torch.equal(e1[:, :H, :I], e0) and e1[:, H:].abs().sum() == 0 and e1[:, :, I:].abs().sum() == 0
