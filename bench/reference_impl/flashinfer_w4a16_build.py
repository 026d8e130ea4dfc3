"""Build FlashInfer's sm_90 CUTLASS fused-MoE module with only what its W4A16 MXFP4 path runs.

FlashInfer JIT-compiles `fused_moe_90` from 248 units (every activation x weight type pair, 220
generated CUTLASS instantiation files): several CPU-hours, far past one 10-minute device call.
bench_flashinfer.py runs one pair, bf16 activations x MXFP4 weights, so this builds FlashInfer's
own build file (its JitSpec writes it) restricted to:
  * the 23 generated files that instantiate `sm90_generic_mixed_moe_gemm_kernelLauncher` for
    `<__nv_bfloat16, SafeFP4, ...>` (184 kernels: every tile, cluster and schedule FlashInfer's
    autotuner can pick for that pair, untouched);
  * the hand-written units of that path (binding, bf16 x fp4 GEMM runner, mixed-input utilities,
    TMA warp-specialized input, heuristics, common code), compiled with FlashInfer's own flags;
  * one small unit of our own in place of `cutlass_fused_moe_instantiation.cu`, instantiating only
    `CutlassMoeFCRunner<__nv_bfloat16, Fp4Type>` (and the bf16 finalize routing).
Every symbol the other type pairs would have supplied is linked to a stub that throws a C++
exception, so a call into a pair that was not built fails loudly instead of running; the W4A16
path never reaches one. The .so goes where FlashInfer looks for a prebuilt module
(`flashinfer/data/aot/fused_moe_90/fused_moe_90.so`), so `cutlass_fused_moe` loads it unchanged.

  python flashinfer_w4a16_build.py ninja   # FlashInfer's build.ninja -> build_w4a16.ninja + target lists
  ninja -f BUILD/build_w4a16.ninja -j N $(cat BUILD/gen_targets.txt BUILD/other_targets.txt)
  python flashinfer_w4a16_build.py link --out fused_moe_90.so [--extra-objs DIR]
  python flashinfer_w4a16_build.py utils   # FlashInfer's own small trtllm_utils module (JIT, ~35 s on 2
                                           # cores): the autotuner's delay kernel; without it no tactic profiles

Needs flashinfer-python importable (with torch), nvcc (CUDA 13.0 here) and, where the toolkit
lacks them, cuBLAS/cuRAND headers and libnvrtc (FLASHINFER_EXTRA_CUDAFLAGS / _LDFLAGS).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

KEEP = ["tma_warp_specialized_input", "kernels_bf16_fp4.", "mixed_utils", "fused_moe_binding", "deepgemm_jit_setup",
        "common_", "preQuantScale", "cutlass_heuristic", "lora_lora"]
PAIR = "kernelLauncher<__nv_bfloat16, SafeFP4"
OWN_UNIT = ('#include "cutlass_fused_moe_kernels.cuh"\n#include "moe_kernels.h"\n'
            "namespace tensorrt_llm::kernels::cutlass_kernels {\n"
            "template class CutlassMoeFCRunner<__nv_bfloat16, Fp4Type>;\n"
            "INSTANTIATE_FINALIZE_MOE_ROUTING(__nv_bfloat16, __nv_bfloat16, __nv_bfloat16);\n}\n")


def spec():
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
    s = gen_cutlass_fused_moe_sm90_module()
    s.write_ninja()
    return s, jit_env


def cmd_ninja(_args):
    s, jit_env = spec()
    build = os.path.dirname(str(s.ninja_path))
    head, rest = open(s.ninja_path).read().split("\nbuild ", 1)
    gen_dir = jit_env.FLASHINFER_GEN_SRC_DIR / "cutlass_instantiations/90/gemm_grouped/90"
    pair = {f for f in os.listdir(gen_dir) if PAIR in open(gen_dir / f).read()}
    keep, gen, other = [], [], []
    for b in rest.split("\nbuild "):
        out, src = b.split(":", 1)[0].strip(), (b.split()[2] if len(b.split()) > 2 else "")
        name = os.path.basename(out)
        if out.endswith(".so") or "fused_moe_instantiation" in name:
            continue
        if "generated" in name:
            if os.path.basename(src) in pair:
                keep.append(b), gen.append(out)
        elif any(k in name for k in KEEP):
            keep.append(b), other.append(out)
    unit = jit_env.FLASHINFER_CSRC_DIR / "fused_moe/cutlass_backend/w4a16_bf16_fp4_instantiation.cu"
    unit.write_text(OWN_UNIT)
    obj = os.path.join(build, "w4a16_instantiation.cuda.o")
    keep.append(f"{obj}: cuda_compile {unit}")
    other.append(obj)
    with open(os.path.join(build, "build_w4a16.ninja"), "w") as f:
        f.write(head + "\n" + "\n".join("build " + k.rstrip() for k in keep) + "\n")
    for name, lst in (("gen_targets.txt", gen), ("other_targets.txt", other)):
        with open(os.path.join(build, name), "w") as f:
            f.write("\n".join(lst) + "\n")
    print(build, len(gen), "generated units,", len(other), "others")


def _dyn_symbols(path, undefined):
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, path], capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if not parts or (undefined and parts[0] != "U"):
            continue
        syms.add(parts[-1].split("@")[0])
    return syms


def cmd_link(args):
    build = args.build or os.path.dirname(str(spec()[0].ninja_path))
    objs = [line.strip() for name in ("other_targets.txt", "gen_targets.txt")
            for line in open(os.path.join(build, name)) if line.strip()]
    if args.extra_objs:  # units compiled elsewhere (the device) with the same build file
        for o in glob.glob(os.path.join(args.extra_objs, "*.o")):
            dst = os.path.join(build, os.path.basename(o))
            if not os.path.exists(dst):
                shutil.copy(o, dst)
    present = [o for o in objs if os.path.exists(o)]
    absent = sorted(set(objs) - set(present))
    if absent:
        print("not built (their symbols become throwing stubs):", *map(os.path.basename, absent), sep="\n  ")
    ld = open(os.path.join(build, "build_w4a16.ninja")).read()
    ldflags = re.search(r"^ldflags = (.*?)\n\n", ld, re.S | re.M).group(1).replace("$\n", " ").split()
    cuda_home = re.search(r"^cuda_home = (.*)$", ld, re.M).group(1)
    ldflags = [f.replace("$cuda_home", cuda_home) for f in ldflags]
    tmp = args.out + ".nostub.so"
    subprocess.run(["c++", *present, *ldflags, "-o", tmp], check=True)
    libdirs = [f[2:] for f in ldflags if f.startswith("-L")]
    provided = set()
    import tvm_ffi
    libs = [os.path.join(os.path.dirname(tvm_ffi.__file__), "lib", "libtvm_ffi.so")]
    for lib in ("libcudart.so", "libnvrtc.so"):
        libs += [p for d in libdirs for p in glob.glob(os.path.join(d, lib + "*"))][:1]
    for lib in ("libstdc++.so.6", "libc.so.6", "libm.so.6", "libgcc_s.so.1"):
        libs.append(subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip())
    for lib in libs:
        provided |= _dyn_symbols(lib, False)
    missing = sorted(x for x in _dyn_symbols(tmp, True) - provided
                     if not re.match(r"^(cu[A-Z]|TVMFFI|__gmon_start__|_ITM_|__cxa_finalize)", x))
    print(len(missing), "symbols of units not built -> throwing stubs")
    stub_dir = os.path.join(build, "w4a16_stubs")
    os.makedirs(stub_dir, exist_ok=True)
    with open(os.path.join(stub_dir, "thrower.cpp"), "w") as f:
        f.write('#include <stdexcept>\nextern "C" [[noreturn]] void w4a16_unit_not_built() {\n'
                '  throw std::runtime_error("fused_moe_90 (W4A16 build): this type pair was not built");\n}\n')
    with open(os.path.join(stub_dir, "stubs.S"), "w") as f:
        f.write('.section .note.GNU-stack,"",@progbits\n.text\n')
        for sym in missing:  # a tail jump: the exception unwinds straight into the caller
            f.write(f".globl {sym}\n.type {sym},@function\n{sym}:\n  jmp w4a16_unit_not_built@PLT\n")
    for src, obj in (("thrower.cpp", "thrower.o"), ("stubs.S", "stubs.o")):
        subprocess.run(["c++", "-fPIC", "-O2", "-c", os.path.join(stub_dir, src), "-o",
                        os.path.join(stub_dir, obj)], check=True)
    subprocess.run(["c++", *present, os.path.join(stub_dir, "thrower.o"), os.path.join(stub_dir, "stubs.o"),
                    *ldflags, "-o", args.out], check=True)
    left = sorted(x for x in _dyn_symbols(args.out, True) - provided
                  if not re.match(r"^(cu[A-Z]|TVMFFI|__gmon_start__|_ITM_|__cxa_finalize)", x))
    os.remove(tmp)
    print("linked", args.out, os.path.getsize(args.out), "bytes; unresolved beyond CUDA/tvm-ffi/libc:", left)


def cmd_utils(_args):
    from flashinfer.jit.tllm_utils import gen_trtllm_utils_module
    s = gen_trtllm_utils_module()
    s.build()
    print(s.jit_library_path)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ninja")
    sub.add_parser("utils")
    lk = sub.add_parser("link")
    lk.add_argument("--out", required=True)
    lk.add_argument("--extra-objs", default=None)
    lk.add_argument("--build", default=None, help="the build folder `ninja` printed (default: ask FlashInfer)")
    args = ap.parse_args()
    {"ninja": cmd_ninja, "link": cmd_link, "utils": cmd_utils}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
