"""Grouped MXFP4 MoE vs the PyTorch reference and a float64 computation, at
small shapes (CPU: Triton interpreter; GPU: compiled)."""
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("triton", reason="triton is not installed")

from refimpl_data import make_problem  # noqa: E402
from reference_impl import grouped_mxfp4_moe, reference_mxfp4_moe  # noqa: E402
from reference_impl.moe import poisoned_forward  # noqa: E402
from reference_impl import moe as moe_mod  # noqa: E402
from reference_impl.routing import max_blocks, route_torch  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu":
    assert os.environ.get("TRITON_INTERPRET") == "1"
TOL = 1e-2


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def check(p, **kw):
    out = poisoned_forward(**p, **kw)
    kw.pop("deterministic", None)
    kw.pop("config", None)
    ref = reference_mxfp4_moe(**p, **kw)
    ref64 = reference_mxfp4_moe(**p, compute_dtype=torch.float64, **kw)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert torch.isfinite(out).all(), "unwritten (poisoned) values reached the output"
    assert rel(out, ref) <= TOL
    assert rel(out, ref64) <= TOL
    return out


CASES = [
    # M, E, H, I, topk, scale dtype, clamp, rsf, invalid fraction, deterministic
    (1, 8, 64, 64, 2, "e8m0", None, None, 0.0, False),
    (3, 8, 96, 64, 4, "uint8", 0.75, 2.5, 0.25, False),   # K tail (96 % 64), clamp, -1 slots
    (7, 4, 64, 96, 3, "float32", None, 0.5, 0.1, True),   # I tail, deterministic
    (5, 16, 128, 32, 4, "e8m0", 1.0, None, 0.0, True),
]


@pytest.mark.parametrize("M,E,H,I,topk,sd,clamp,rsf,inv,det", CASES)
def test_matches_reference(M, E, H, I, topk, sd, clamp, rsf, inv, det):
    p = make_problem(M, E, H, I, topk, device=DEV, seed=1000 * M + E, scale_dtype=sd, invalid_frac=inv)
    check(p, clamp_limit=clamp, routed_scaling_factor=rsf, deterministic=det)


def test_many_rows_per_expert_both_routings(monkeypatch):
    """40 slots on 3 experts: several BLOCK_M=16 blocks per expert; the
    single-kernel routing and the tensor-op routing give the same result."""
    p = make_problem(20, 3, 64, 64, 2, device=DEV, seed=7)
    cfg = {"BLOCK_M": 16, "gemm1": {"BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2},
           "gemm2": {"BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2}}
    a = check(p, config=cfg, deterministic=True)
    monkeypatch.setattr(moe_mod, "ROUTE_KERNEL_MAX_SLOTS", 0)
    b = check(p, config=cfg, deterministic=True)
    assert torch.equal(a, b)


def test_route_kernel_matches_tensor_ops():
    import triton
    from reference_impl.kernels.route import route_kernel

    g = torch.Generator().manual_seed(3)
    for S_rows, topk, E, BM in [(5, 4, 8, 16), (33, 2, 6, 16), (16, 8, 256, 32)]:
        ids = torch.randint(-1, E, (S_rows, topk), generator=g, dtype=torch.int32).to(DEV)
        S = ids.numel()
        a, b = route_torch(ids, E, BM)
        NB = max_blocks(S, E, BM)
        P = NB * BM
        s2 = torch.empty(P, dtype=torch.int32, device=DEV)
        b2 = torch.empty(NB, dtype=torch.int32, device=DEV)
        EP = triton.next_power_of_2(E + 1)
        scratch = torch.empty(2 * EP, dtype=torch.int32, device=DEV)
        route_kernel[(1,)](ids, s2, b2, scratch, S, E, P, NB, S_PAD=max(16, triton.next_power_of_2(S)),
                           E_PAD=EP, BLOCK_M=BM, FILL=1024)
        assert torch.equal(a, s2) and torch.equal(b, b2)
        # every valid slot appears exactly once, in a block of its own expert
        flat = ids.flatten().long()
        rows = a[a < S].long()
        assert sorted(rows.tolist()) == [i for i in range(S) if 0 <= flat[i] < E]
        blk = torch.nonzero(a < S).flatten() // BM
        assert torch.equal(b[blk].long(), flat[rows])


def test_deterministic_is_bitwise_repeatable():
    p = make_problem(6, 4, 64, 64, 3, device=DEV, seed=11)
    a = grouped_mxfp4_moe(**p, deterministic=True)
    b = grouped_mxfp4_moe(**p, deterministic=True)
    assert torch.equal(a, b)


def test_m_zero_returns_empty():
    p = make_problem(0, 4, 64, 64, 2, device=DEV)
    out = grouped_mxfp4_moe(**p)
    assert out.shape == (0, 64) and out.dtype == torch.bfloat16


def test_inplace_keyword_accepted():
    p = make_problem(2, 4, 64, 64, 2, device=DEV, seed=5)
    out = grouped_mxfp4_moe(**p, inplace=False)
    assert rel(out, reference_mxfp4_moe(**p)) <= TOL


@pytest.mark.parametrize("arg,mutate", [
    ("hidden_states", lambda p: p.update(hidden_states=p["hidden_states"].float())),
    ("hidden_states", lambda p: p.update(hidden_states=p["hidden_states"][:, :32])),
    ("hidden_size", lambda p: p.update(hidden_size=48)),
    ("intermediate_size", lambda p: p.update(intermediate_size=40)),
    ("w13_packed", lambda p: p.update(w13_packed=p["w13_packed"].float())),
    ("w13_packed", lambda p: p.update(w13_packed=p["w13_packed"][:, :-2])),
    ("w2_packed", lambda p: p.update(w2_packed=p["w2_packed"][..., :-1])),
    ("w13_scale", lambda p: p.update(w13_scale=p["w13_scale"][..., :-1])),
    ("w2_scale", lambda p: p.update(w2_scale=p["w2_scale"].to(torch.float16))),
    ("topk_ids", lambda p: p.update(topk_ids=p["topk_ids"].float())),
    ("topk_ids", lambda p: p.update(topk_ids=p["topk_ids"][:1])),
    ("topk_weights", lambda p: p.update(topk_weights=p["topk_weights"][:, :1])),
    ("topk_ids", lambda p: p.update(topk_ids=p["topk_ids"].to("meta"))),
])
def test_bad_input_raises_value_error_naming_argument(arg, mutate):
    p = make_problem(3, 4, 64, 64, 2, device=DEV, seed=2)
    mutate(p)
    with pytest.raises(ValueError, match=arg):
        grouped_mxfp4_moe(**p)


def _cfg(bk1, bk2, vec):
    g = lambda bn, bk: {"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4, "num_stages": 2, "scale_vec": vec}  # noqa: E731
    return {"BLOCK_M": 16, "gemm1": g(32, bk1), "gemm2": g(32, bk2)}


@pytest.mark.parametrize("H,I,bk1,bk2,vec", [
    (384, 256, 128, 128, True),    # scales as 32-bit words: 3 and 2 K steps
    (384, 256, 256, 256, True),    # word path with a K tail (384 = 256 + 128)
    (384, 256, 128, 128, False),   # the same shapes with bytes fetched a step ahead
    (160, 96, 128, 64, True),      # K/32 = 5, 3: words impossible, byte path with tails
])
def test_scale_paths_agree_with_reference(H, I, bk1, bk2, vec):
    """Every K step must see its own scale group: the word path unpacks four
    groups a word; the byte path carries the next step's exponents."""
    if vec:
        assert moe_mod.scale_vec_ok(_cfg(bk1, bk2, vec)["gemm1"], H) == (H // 32 % 4 == 0)
    p = make_problem(5, 4, H, I, 2, device=DEV, seed=H + I + bk1 + vec)
    check(p, config=_cfg(bk1, bk2, vec), deterministic=True)


def test_decode_config_runs_or_falls_back():
    """A decode-path config ("path": "mma", Gluon kernels) runs where they can (sm_90+),
    and elsewhere (the CPU interpreter here) falls back to the tl.dot kernels, same result."""
    cfg = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2}, "gemm2": {"Q": 1, "num_warps": 2}}
    p = make_problem(5, 4, 256, 128, 2, device=DEV, seed=11, invalid_frac=0.2)
    check(p, config=cfg, routed_scaling_factor=1.5)
    can = DEV == "cuda" and torch.cuda.get_device_capability() >= (9, 0) and moe_mod._decode_mma is not None
    assert moe_mod._mma_path(cfg, torch.device(DEV)) == can
    assert not moe_mod._mma_path({"BLOCK_M": 16}, torch.device(DEV))
    # a config the decode kernels cannot take names the key, on any device
    with pytest.raises(ValueError, match="gemm2.atom_vec=4"):
        grouped_mxfp4_moe(**p, config={**cfg, "gemm2": {"Q": 1, "num_warps": 2, "atom_vec": 4}})
    with pytest.raises(ValueError, match="gemm1.Q=3"):
        moe_mod._mma_path({**cfg, "gemm1": {"Q": 3}}, torch.device(DEV))
    with pytest.raises(ValueError, match="gemm2.num_warps=3"):
        moe_mod._mma_path({**cfg, "gemm2": {"num_warps": 3}}, torch.device(DEV))
    with pytest.raises(ValueError, match="pdl=yes"):
        moe_mod._mma_path({**cfg, "pdl": "yes"}, torch.device(DEV))
    for bad in (16, 300, 64.0, True):
        with pytest.raises(ValueError, match=f"gemm1.maxnreg={bad}"):
            moe_mod._mma_path({**cfg, "gemm1": {"Q": 1, "num_warps": 2, "maxnreg": bad}}, torch.device(DEV))
    assert moe_mod._mma_path({**cfg, "gemm1": {"Q": 1, "num_warps": 2, "maxnreg": 64}}, torch.device(DEV)) == can
    assert moe_mod._mma_path({**cfg, "pdl": True}, torch.device(DEV)) == can
    for bad in (1, 7, 2.0, True, "3"):  # TMA ring stages: 2..6, or 0 for direct loads
        with pytest.raises(ValueError, match=f"gemm1.tma={bad}"):
            moe_mod._mma_path({**cfg, "gemm1": {"Q": 1, "num_warps": 2, "tma": bad}}, torch.device(DEV))
    with pytest.raises(ValueError, match="gemm1.ahead without tma"):
        moe_mod._mma_path({**cfg, "gemm1": {"Q": 1, "num_warps": 2, "ahead": 1}}, torch.device(DEV))
    for bad in (3, True, 1.0):
        with pytest.raises(ValueError, match=f"gemm1.ahead={bad}"):
            moe_mod._mma_path({**cfg, "gemm1": {"Q": 1, "num_warps": 2, "tma": 2, "ahead": bad}}, torch.device(DEV))
    with pytest.raises(ValueError, match="gemm2.tma with atom_vec 2"):
        moe_mod._mma_path({**cfg, "gemm2": {"Q": 1, "num_warps": 2, "tma": 2}}, torch.device(DEV))
    tma = {**cfg, "gemm1": {"Q": 1, "num_warps": 2, "tma": 2}, "gemm2": {"Q": 1, "num_warps": 2, "tma": 3, "atom_vec": 8}}
    assert moe_mod._mma_path(tma, torch.device(DEV)) == can
    check(p, config=tma)  # runs the TMA form where it can, the tl.dot fallback here
    with pytest.raises(ValueError, match="gemm2.Q=4"):
        moe_mod._mma_path({**cfg, "gemm2": {"Q": 4}}, torch.device(DEV))
    for c in (1, 2):
        assert moe_mod._mma_path({**cfg, "gemm2": {"Q": c, "num_warps": 2, "atom_vec": 8}}, torch.device(DEV)) == can


def test_l2_prefetch_config_is_checked_and_covers_each_expert():
    """gemm1.l2 / l2_at (the gate/up GEMM prefetching the down weights into L2, bench/NOTES.md v16):
    bad values name the key; the pieces the threads take cover each expert's down weights and scales
    whole (a multiple of 16 bytes each, or a power of two of 128-byte lines)."""
    cfg = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2, "tma": 2}, "gemm2": {"Q": 1, "num_warps": 2, "tma": 2,
                                                                                 "atom_vec": 8}}
    for bad in (5, -1, True, 1.0):
        with pytest.raises(ValueError, match=f"gemm1.l2={bad}"):
            moe_mod.check_mma_config({**cfg, "gemm1": {**cfg["gemm1"], "l2": bad}})
    with pytest.raises(ValueError, match="gemm1.l2_at=65"):
        moe_mod.check_mma_config({**cfg, "gemm1": {**cfg["gemm1"], "l2": 2, "l2_at": 65}})
    with pytest.raises(ValueError, match="gemm1.l2_at without tma"):
        moe_mod.check_mma_config({**cfg, "gemm1": {"Q": 1, "num_warps": 2, "l2": 2, "l2_at": 3}})
    with pytest.raises(ValueError, match="gemm2.l2"):
        moe_mod.check_mma_config({**cfg, "gemm2": {**cfg["gemm2"], "l2": 2}})
    moe_mod.check_mma_config({**cfg, "gemm1": {**cfg["gemm1"], "l2": 3, "l2_at": 8}})
    for H, I in ((4096, 2048), (2880, 2880), (384, 640)):
        w2 = torch.zeros(2, H, I // 2, dtype=torch.uint8)
        s2 = torch.zeros(2, H, I // 32, dtype=torch.uint8)
        for q, nw in ((1, 2), (2, 4), (1, 8)):
            for pol in (1, 2, 3, 4):
                c1 = {"Q": q, "num_warps": nw, "l2": pol}
                got, (_, _, wb, sb), k = moe_mod._l2_args(c1, w2, s2, H, I)
                parts = -(-I // (16 * q)) * 32 * nw
                assert got == pol and (wb, sb) == (H * I // 2, H * I // 32)
                for total, piece in ((wb, k["w2_piece"]), (sb, k["s2_piece"])):
                    assert piece * parts >= total and piece % 16 == 0
                    if pol >= 3:
                        lines = piece // 128
                        assert piece % 128 == 0 and lines & (lines - 1) == 0
                    else:
                        assert (piece - 16) * parts < total  # no larger than needed
        assert moe_mod._l2_args({"Q": 1, "num_warps": 2}, w2, s2, H, I)[0] == 0
        assert moe_mod._l2_args({"Q": 1, "num_warps": 2, "l2": 2}, w2[:, :, 1:], s2, H, I)[0] == 0  # unaligned: off


def test_tma_ring_on_sm120_only_with_a_new_enough_ptxas(monkeypatch):
    """ptxas 12.8 / 12.9 (Triton 3.4 / 3.6) compile the TMA ring's copies on sm_120 into calls of a
    system routine with a stack frame: there the decode path takes its direct-load form (defaults
    without tma, a config with tma refused, saying why); 13.0+ and the other architectures keep it."""
    from reference_impl import arch as arch_mod, configs as cfgs
    for ver, native in (((12, 8), False), ((12, 9), False), (None, False), ((13, 0), True), ((13, 4), True)):
        monkeypatch.setattr(arch_mod, "ptxas_version", lambda cc, v=ver: v)
        a = arch_mod.for_capability((12, 0))
        assert a.mma and a.mma_tma == native and arch_mod.for_capability((12, 1)).mma_tma == native
        assert arch_mod.for_capability((9, 0)).mma_tma and arch_mod.for_capability((10, 0)).mma_tma
        c = cfgs.default_config(1, 256, 8, 4096, 2048, a, arch_mod.H200_LIKE)
        assert c["path"] == "mma" and bool(c["gemm1"].get("tma")) == native and bool(c["gemm2"].get("tma")) == native
        tma = {"path": "mma", "gemm1": {"Q": 1, "num_warps": 2, "tma": 2},
               "gemm2": {"Q": 1, "num_warps": 2, "tma": 2, "atom_vec": 8}}
        if native:
            cfgs.validate(tma, a, "x")
        else:
            with pytest.raises(ValueError, match="gemm1.tma=2: sm_120 cannot run the decode path's TMA form "
                                                 r"\(with this Triton's ptxas .*13.0\+"):
                cfgs.validate(tma, a, "x")


def test_decode_loads_unmasked_only_where_warps_share_k_evenly():
    """The decode GEMMs drop their load masks only where every warp walks whole 128-value
    chunks of K to the end and the rows fill the tiles: DSV4's K = 4096 / 2048 with 1..8 warps,
    not gpt-oss's 2880, nor 384 = 3 chunks over 2 warps (the second warp's last trip would read
    a chunk past K)."""
    c = lambda nw, q=1: {"num_warps": nw, "Q": q}  # noqa: E731
    assert not moe_mod._decode_mask(4096, 2048, c(8)) and not moe_mod._decode_mask(2048, 4096, c(2, 2))
    assert moe_mod._decode_mask(2880, 2880, c(2))
    assert moe_mod._decode_mask(384, 2048, c(2)) and not moe_mod._decode_mask(384, 2048, c(1))
    assert moe_mod._decode_mask(4096, 2056, c(1))  # 2056 rows: a partial tile of 16


PTX_OPS = {
    "and.b32": lambda a, b: a & b,
    "or.b32": lambda a, b: a | b,
    "shl.b32": lambda a, b: (a << b) & 0xFFFFFFFF,
    "shr.u32": lambda a, b: a >> b,
    "mul.lo.u32": lambda a, b: (a * b) & 0xFFFFFFFF,
}


def run_dequant_ptx(word: int) -> list:
    """The decode/prefill kernels' e2m1 dequant (gluon_common.DQ, the PTX string the kernels
    inline) run op by op on one 32-bit word, up to the scale multiply: the four bf16x2 registers."""
    from reference_impl.kernels.gluon_common import DQ
    regs = {"W": word}
    for stmt in DQ.format(w="W", o="o", sc="SC").replace("\n", " ").split(";"):
        stmt = stmt.strip()
        if not stmt or stmt.startswith("mul.rn.bf16x2"):
            continue
        op, args = stmt.split(None, 1)
        dst, a, b = [x.strip() for x in args.split(",")]
        val = lambda x: regs[x] if x in regs else int(x, 0)  # noqa: E731
        regs[dst] = PTX_OPS[op](val(a), val(b))
    return [regs[f"o{i}"] for i in range(4)]


def test_dequant_ptx_gives_e2m1_times_2_pow_minus_126():
    """Register i holds nibbles i (low half) and i + 4 (high half) of the word as bf16 equal to
    the e2m1 value times 2**-126 (0.5 a bf16 subnormal), sign included: every nibble value in
    every position, the other nibbles random (a stray bit of a neighbour would show)."""
    import random
    e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    bf16 = lambda h: torch.tensor([h], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).double().item()  # noqa
    rng = random.Random(5)
    for _ in range(64):
        word = rng.getrandbits(32)
        for i, r in enumerate(run_dequant_ptx(word)):
            for half, k in ((r & 0xFFFF, i), (r >> 16, i + 4)):
                nib = (word >> (4 * k)) & 0xF
                want = (-1.0 if nib & 8 else 1.0) * e2m1[nib & 7]
                assert bf16(half) * 2.0 ** 126 == want, (hex(word), i, k)
                assert half & 0x7E3F == 0  # only the sign and the 3 magnitude bits are set


def test_prefill_config_runs_or_falls_back():
    """A prefill-path config ("path": "wgmma", Gluon kernels) runs on sm_90 only, and
    elsewhere (the CPU interpreter here) falls back to the tl.dot kernels, same result."""
    from reference_impl import wgmma_path
    cfg = {"path": "wgmma", "BLOCK_M": 64, "gemm1": {"STAGES": 3, "num_warps": 4},
           "gemm2": {"STAGES": 3, "num_warps": 4}}
    p = make_problem(6, 4, 256, 128, 2, device=DEV, seed=12, invalid_frac=0.2)
    check(p, config=cfg, clamp_limit=0.5)
    can = DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0) and wgmma_path._k is not None
    assert wgmma_path.usable(cfg, torch.device(DEV)) == can
    assert not wgmma_path.usable({"path": "mma"}, torch.device(DEV))
    with pytest.raises(ValueError, match="BLOCK_M=48"):
        grouped_mxfp4_moe(**p, config={**cfg, "BLOCK_M": 48})
    with pytest.raises(ValueError, match="gemm2.num_warps=2"):
        wgmma_path.usable({**cfg, "gemm2": {"num_warps": 2}}, torch.device(DEV))
    # the warp-specialized gate/up GEMM and the down GEMM's atomics width
    with pytest.raises(ValueError, match="gemm1.ws=5"):
        wgmma_path.usable({**cfg, "gemm1": {"STAGES": 4, "ws": 5}}, torch.device(DEV))
    with pytest.raises(ValueError, match="gemm2.ws=1"):
        wgmma_path.usable({**cfg, "gemm2": {"STAGES": 4, "ws": 1}}, torch.device(DEV))
    with pytest.raises(ValueError, match="gemm1.LAG=4"):
        wgmma_path.usable({**cfg, "gemm1": {"STAGES": 4, "ws": 4, "LAG": 4}}, torch.device(DEV))
    with pytest.raises(ValueError, match="gemm2.atom_vec=4"):
        wgmma_path.usable({**cfg, "gemm2": {"STAGES": 3, "atom_vec": 4}}, torch.device(DEV))
    assert wgmma_path.usable({**cfg, "gemm1": {"STAGES": 4, "ws": 4, "LAG": 3},
                              "gemm2": {"STAGES": 3, "ws": 2, "atom_vec": 8}}, torch.device(DEV)) == can
    # token parts: BLOCK_M = (T0 + T1) + T2, two TMA boxes of a power of two rows each
    assert wgmma_path.token_parts(cfg) == (16, 16, 32)
    big = {**cfg, "BLOCK_M": 160, "parts": [64, 64], "gemm1": {"STAGES": 4, "ws": 3}}
    assert wgmma_path.token_parts(big) == (64, 64, 32)
    assert wgmma_path.usable(big, torch.device(DEV)) == can
    with pytest.raises(ValueError, match=r"parts=\[48, 48\] with BLOCK_M=160"):
        wgmma_path.usable({**big, "parts": [48, 48]}, torch.device(DEV))
    with pytest.raises(ValueError, match=r"parts=\[64, 64, 32\]"):
        wgmma_path.usable({**big, "parts": [64, 64, 32]}, torch.device(DEV))
    with pytest.raises(ValueError, match="BLOCK_M=288"):
        wgmma_path.usable({**big, "BLOCK_M": 288}, torch.device(DEV))


def test_physical_k_is_a_permutation_within_each_scale_group_row():
    """The prefill kernels' k order: a bijection of 0..127 that keeps each logical k16 step's
    values inside the 4 scale groups of its lanes (t4 = the group: 32 t4 <= k < 32 t4 + 32)."""
    from reference_impl.kernels.prefill_wgmma import physical_k
    ks = [physical_k(L) for L in range(128)]
    assert sorted(ks) == list(range(128))
    for L in range(128):
        assert ks[L] // 32 == (L >> 1) & 3  # lane t4 of the wgmma A fragment reads group t4
        assert ks[L] // 8 % 4 == L >> 5  # word m of the group feeds k16 steps 2m, 2m + 1


def test_prefill_prep_gathers_sorted_rows_in_kernel_k_order():
    """prefill_prep_kernel: row r of xp is the hidden state of sorted slot r's token, each
    128-value chunk in physical_k order, times 2**64, zeros from K to the padded KP;
    padding rows are left as they were (their MMA columns are never stored)."""
    import triton
    from reference_impl.kernels.prefill_wgmma import physical_k
    from reference_impl.kernels.prep_act import prefill_prep_kernel
    M, K, topk, ROWS, BLOCK = 3, 160, 2, 16, 128  # K = 128 + 32: a tail chunk
    KP = triton.cdiv(K, 128) * 128
    g = torch.Generator(device=DEV).manual_seed(6)
    x = torch.randn(M, K, generator=g, device=DEV).to(torch.bfloat16)
    S = M * topk
    order = [5, 0, 3, S, S, 1, 2, 4]
    srt = torch.tensor(order + [S] * (2 * ROWS - len(order)), dtype=torch.int32, device=DEV)
    xp = torch.full((srt.numel(), KP), float("nan"), dtype=torch.bfloat16, device=DEV)
    prefill_prep_kernel[(srt.numel() // ROWS, KP // BLOCK)](
        x, xp, srt, S, K, KP, topk, x.stride(0), xp.stride(0), ROWS=ROWS, BLOCK=BLOCK)
    src = torch.tensor([128 * (L // 128) + physical_k(L % 128) for L in range(KP)], device=DEV)
    inside = src < K
    for r, slot in enumerate(srt.tolist()):
        if slot >= S:
            assert torch.isnan(xp[r].float()).all()
            continue
        want = torch.zeros(KP, device=DEV)
        want[inside] = x[slot // topk].float()[src[inside]] * 2.0 ** 64
        assert torch.equal(xp[r].float(), want), r


def _b_pairs(x):
    """The decode path's B-pair layout of x: within every 8 values k0 k4 k1 k5 k2 k6 k3 k7, times 2**64."""
    M, H = x.shape
    order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7], device=x.device)
    return (x.float() * 2.0 ** 64).view(M, H // 8, 8)[:, :, order].reshape(M, H)


def test_prep_act_lays_out_b_pairs_and_zeroes_output():
    """prep_act_kernel (decode path): within every 8 values the order k0 k4 k1 k5 k2 k6
    k3 k7, times 2**64 (exact in bf16), and the output buffer zeroed."""
    from reference_impl.kernels.prep_act import prep_act_kernel
    M, H = 3, 96
    g = torch.Generator(device=DEV).manual_seed(5)
    x = torch.randn(M, H, generator=g, device=DEV).to(torch.bfloat16)
    xb = torch.full((M, H), float("nan"), dtype=torch.bfloat16, device=DEV)
    out = torch.full((M, H), 7.0, dtype=torch.float32, device=DEV)
    prep_act_kernel[(2,)](x, xb, out, M * H, H, x.stride(0), xb.stride(0), out.stride(0), ZERO_OUT=True, BLOCK=256)
    assert torch.equal(xb.float(), _b_pairs(x))
    assert torch.count_nonzero(out) == 0


def test_route_prep_kernel_is_routing_plus_prep_in_one_launch():
    """route_prep_kernel (the decode path's first launch): program 0 gives route_torch's
    outputs, the others prep_act's B pairs and the zeroed output, poisoned beforehand."""
    import triton
    from reference_impl.kernels.prep_act import route_prep_kernel

    g = torch.Generator().manual_seed(9)
    M, topk, E, H, BM = 5, 4, 12, 96, 8
    ids = torch.randint(-1, E, (M, topk), generator=g, dtype=torch.int32).to(DEV)
    x = torch.randn(M, H, generator=g).to(torch.bfloat16).to(DEV)
    S = ids.numel()
    NB = max_blocks(S, E, BM)
    P = NB * BM
    s2 = torch.full((P,), -7, dtype=torch.int32, device=DEV)
    b2 = torch.full((NB,), -7, dtype=torch.int32, device=DEV)
    EP = triton.next_power_of_2(E + 1)
    scratch = torch.empty(2 * EP, dtype=torch.int32, device=DEV)
    xb = torch.full((M, H), float("nan"), dtype=torch.bfloat16, device=DEV)
    out = torch.full((M, H), 7.0, dtype=torch.float32, device=DEV)
    BLOCK = 128
    route_prep_kernel[(1 + triton.cdiv(M * H, BLOCK),)](
        ids, s2, b2, scratch, S, E, P, NB, x, xb, out, M * H, H, x.stride(0), xb.stride(0), out.stride(0),
        S_PAD=max(16, triton.next_power_of_2(S)), E_PAD=EP, BLOCK_M=BM, FILL=1024, ZERO_OUT=True, BLOCK=BLOCK)
    a, b = route_torch(ids, E, BM)
    assert torch.equal(a, s2) and torch.equal(b, b2)
    assert torch.equal(xb.float(), _b_pairs(x))
    assert torch.count_nonzero(out) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter test (the GPU tests run the eager graph)")
@pytest.mark.parametrize("ids_dtype,tw_dtype", [(torch.int32, torch.float32), (torch.int64, torch.bfloat16)])
def test_stage_inputs_copies_the_eager_graph_inputs(ids_dtype, tw_dtype):
    """The eager graph's one staging launch copies hidden states (several programs), topk_ids and
    topk_weights (program 0) as they are, and writes nothing past them."""
    from reference_impl.kernels.stage_inputs import stage_inputs_kernel
    M, H, topk, BLOCK = 3, 96, 5, 128
    x = torch.randn(M, H).to(torch.bfloat16)
    ids = torch.randint(-1, 9, (M, topk)).to(ids_dtype)
    tw = torch.rand(M, topk).to(tw_dtype)
    xs = torch.full((M * H + 7,), float("nan"), dtype=torch.bfloat16)
    ids_s = torch.full((M * topk + 3,), 77, dtype=ids_dtype)
    tw_s = torch.full((M * topk + 3,), 5.0, dtype=tw_dtype)
    stage_inputs_kernel[(-(-M * H // BLOCK),)](x, xs, M * H, ids, ids_s, tw, tw_s, M * topk, BLOCK=BLOCK, S_PAD=16)
    assert torch.equal(xs[:M * H].view(M, H), x) and xs[M * H:].isnan().all()
    assert torch.equal(ids_s[:M * topk].view(M, topk), ids) and (ids_s[M * topk:] == 77).all()
    assert torch.equal(tw_s[:M * topk].view(M, topk), tw) and (tw_s[M * topk:] == 5.0).all()
