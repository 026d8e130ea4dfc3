"""Off-device SASS statistics of the grouped-GEMM kernels (no GPU needed).

Compiles a kernel for sm_90 with the Triton the device runs (3.6.0 there;
install it beside the dev venv: pip install --target /tmp/t36 triton==3.6.0,
then PYTHONPATH=/tmp/t36), and prints registers/stack/shared memory and the
instruction mix of the main K loop (the longest backward branch), so a change
to the dequant can be costed per weight value before spending device time.

  PYTHONPATH=/tmp/t36:. python bench/reference_impl/sass_stats.py
"""
import collections
import os
import re
import subprocess
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from reference_impl.kernels.gemm1_swiglu import gemm1_swiglu_kernel  # noqa: E402
from reference_impl.kernels.gemm2_combine import gemm2_combine_kernel  # noqa: E402

CUOBJ = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")


def _i32(names):
    return {n: "i32" for n in names.split()}


SIG1 = dict(x_ptr="*bf16", w_ptr="*u8", s_ptr="*u8", act_ptr="*bf16", sorted_ptr="*i32", block_expert_ptr="*i32",
            **_i32("S K I NB TOPK stride_xm stride_we stride_wn stride_se stride_sn stride_am"), clamp_limit="fp32")
SIG2 = dict(a_ptr="*bf16", w_ptr="*u8", s_ptr="*u8", out_ptr="*bf16", sorted_ptr="*i32", block_expert_ptr="*i32",
            topk_w_ptr="*fp32", **_i32("S N K NB TOPK stride_am stride_we stride_wn stride_se stride_sn stride_om"),
            scale_factor="fp32")


def compile_sass(fn, sig, consts, num_warps, num_stages, path):
    sig = dict(sig, **{k: "constexpr" for k in consts})
    # pointers, strides and sizes are specialized as multiples of 16, as at run time
    attrs = {(i,): [["tt.divisibility", 16]] for i, (k, v) in enumerate(sig.items())
             if v.startswith("*") or k.startswith("stride") or k in ("K", "N", "I")}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_stages=num_stages))
    with open(path, "wb") as f:
        f.write(k.asm["cubin"])
    res = subprocess.run([CUOBJ, "-res-usage", path], capture_output=True, text=True).stdout
    sass = subprocess.run([CUOBJ, "-sass", path], capture_output=True, text=True).stdout
    return re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", res), sass


def loop_mix(sass):
    ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", sass)]
    best = None
    for addr, txt in ins:
        m = re.search(r"BRA\s+(0x[0-9a-f]+)", txt)
        if m and int(m.group(1), 16) < addr:
            lo = int(m.group(1), 16)
            if best is None or addr - lo > best[1] - best[0]:
                best = (lo, addr)
    body = [t for a, t in ins if best and best[0] <= a <= best[1]]
    return len(body), collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for t in body)


def main():
    fast = dict(DOT_F32=False, FAST_DEQUANT=True)
    cases = []
    for vec in (False, True):  # scale exponents: bytes a K step ahead (tuned) / cp.async'd 32-bit words
        cases += [(f"gemm1 BN32 BK128 scale_vec={vec}", gemm1_swiglu_kernel, SIG1,
                   dict(HAS_CLAMP=False, BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, SCALE_VEC=vec, **fast), 4, 5, 2 * 32 * 128),
                  (f"gemm2 BN64 BK128 scale_vec={vec}", gemm2_combine_kernel, SIG2,
                   dict(OUT_MODE=0, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SCALE_VEC=vec, **fast), 4, 5, 64 * 128)]
    for name, fn, sig, consts, nw, ns, values in cases:
        res, sass = compile_sass(fn, sig, consts, nw, ns, f"/tmp/{name.split()[0]}.cubin")
        n, mix = loop_mix(sass)
        per = values / (32 * nw)  # weight values per thread per iteration
        print(f"{name}: {res} loop {n} instr = {n / per:.2f}/weight value; {dict(mix.most_common(8))}")


if __name__ == "__main__":
    main()
