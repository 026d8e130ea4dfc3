"""Which part of the decode GEMMs' loop sets their time: the tuned configs timed with the group's
inline asm cut down, one variant a process (the kernels read the asm as a global when they
compile, so it is swapped before the first launch):

  full      the shipped asm: dequant (shifts, masks, the scale multiply) + the group's 8 MMAs
  nodq      the words go into the MMAs as they are (no dequant): MMAs, loads, ring, barriers
  skeleton  no dequant and no MMA (the words are folded into the accumulator with one xor and
            one add each): what moving the bytes costs
  bytes     a stand-in with the instruction mix of a byte-wise dequant (e2m1 -> e5m2 bytes, 4 values
            an op, then one byte permute a pair into f16 halves) and the scale applied after the
            MMAs (two FMAs a word) instead of a bf16x2 multiply a pair: 13 instructions a word
            against the shipped 19, to price that redesign before writing it

Results of nodq and skeleton are wrong on purpose; only their times mean anything.

  python bench/reference_impl/probe_skeleton.py --variant nodq [--ms 1,16,64] [--models ...]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench", "reference_impl"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference_impl"))
from triton.experimental.gluon import language as gl  # noqa: E402

from reference_impl.kernels import gluon_common  # noqa: E402

_NODQ = "mov.b32 {o}0, {w}; mov.b32 {o}1, {w}; mov.b32 {o}2, {w}; mov.b32 {o}3, {w};\n"
# e2m1 nibbles -> e5m2 bytes (low nibbles: 2 shifts, 2 masks, 1 or; high: 1 shift, 2 masks, 1 or),
# then each byte pair into the high bytes of an f16x2 register (prmt)
_BYTES = """
shl.b32 m, {w}, 1; shl.b32 s, {w}, 4; and.b32 m, m, 0x0E0E0E0E; and.b32 s, s, 0x80808080; or.b32 e, m, s;
shr.u32 m, {w}, 3; and.b32 m, m, 0x0E0E0E0E; and.b32 s, {w}, 0x80808080; or.b32 t, m, s;
prmt.b32 {o}0, e, 0, 0x1404; prmt.b32 {o}1, e, 0, 0x3424; prmt.b32 {o}2, t, 0, 0x1404; prmt.b32 {o}3, t, 0, 0x3424;
"""


def _asm(variant):
    """gluon_common._group_asm with the dequant and/or the MMAs replaced (same operands)."""
    if variant == "full":
        return gluon_common._group_asm()
    body = ["{", ".reg .b32 m, s, t, e, l0, l1, l2, l3, h0, h1, h2, h3;"]
    for w in range(4):
        dq = _BYTES if variant == "bytes" else _NODQ
        body.append(dq.format(w=f"${4 + w}", o="l") + dq.format(w=f"${8 + w}", o="h"))
        c = "$36,$37,$38,$39" if w == 0 else "$0,$1,$2,$3"
        if variant == "bytes":  # the MMAs, then the group scale folded in by two FMAs a word
            body.append(f"{gluon_common.MMA} {{$0,$1,$2,$3}}, {{l0,h0,l1,h1}}, {{${20 + w},${24 + w}}}, {{{c}}};")
            body.append(f"{gluon_common.MMA} {{$0,$1,$2,$3}}, {{l2,h2,l3,h3}}, {{${28 + w},${32 + w}}}, "
                        "{$0,$1,$2,$3};")
            body.append(f"fma.rn.f32 ${w % 4}, ${w % 4}, $12, ${(w + 1) % 4}; fma.rn.f32 ${(w + 2) % 4}, "
                        f"${(w + 2) % 4}, $16, ${(w + 3) % 4};")
        elif variant == "nodq":
            body.append(f"{gluon_common.MMA} {{$0,$1,$2,$3}}, {{l0,h0,l1,h1}}, {{${20 + w},${24 + w}}}, {{{c}}};")
            body.append(f"{gluon_common.MMA} {{$0,$1,$2,$3}}, {{l2,h2,l3,h3}}, {{${28 + w},${32 + w}}}, "
                        "{$0,$1,$2,$3};")
        else:  # skeleton: keep every word and B pair live, one xor + one add a word
            if w == 0:
                body.append("mov.b32 $0, $36; mov.b32 $1, $37; mov.b32 $2, $38; mov.b32 $3, $39;")
            body.append(f"xor.b32 t, l0, h0; xor.b32 t, t, ${20 + w}; add.f32 ${w}, ${w}, t;")
    body.append("}")
    return "\n".join(body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="full", choices=("full", "nodq", "skeleton", "bytes"))
    ap.add_argument("--ms", default="1,16,64")
    ap.add_argument("--models", default="DeepSeek-V4-Flash,gpt-oss-120b")
    args = ap.parse_args()
    # before any kernel compiles; mma_tile (gluon_common) reads the asm as its module's global
    gluon_common.GROUP_ASM = gl.constexpr(_asm(args.variant))

    from reference_impl import grouped_mxfp4_moe
    from bench_moe import time_graph
    from probe_decode import kernel_times, tuned_problems

    for mname, M, p, kw, cfg in tuned_problems(args.models.split(","), map(int, args.ms.split(","))):
        fn = lambda: grouped_mxfp4_moe(**p, config=cfg, **kw)  # noqa: E731
        time_graph(fn)
        t = time_graph(fn)
        print(f"{args.variant} {mname} M={M} graph {t * 1e3:.1f} us  kernels (us): {kernel_times(fn)}", flush=True)


if __name__ == "__main__":
    main()
