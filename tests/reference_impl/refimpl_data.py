"""Random MXFP4 MoE problems for the tests and the benchmark (never zeros)."""
import torch


def make_problem(M, E, H, I, topk, *, device="cpu", seed=0, scale_dtype="e8m0",
                 invalid_frac=0.0, dup_experts=None):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(M, H, generator=g) * 0.5).to(torch.bfloat16)
    w13 = torch.randint(-128, 128, (E, 2 * I, H // 2), generator=g, dtype=torch.int16).to(torch.int8)
    w2 = torch.randint(-128, 128, (E, H, I // 2), generator=g, dtype=torch.int16).to(torch.int8)
    # E8M0 exponents around 2**-4 .. 2**-2 so the activations stay O(1)
    s13 = torch.randint(121, 126, (E, 2 * I, H // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    s2 = torch.randint(121, 126, (E, H, I // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    pool = E if dup_experts is None else dup_experts
    ids = torch.stack([torch.randperm(pool, generator=g)[:topk] for _ in range(M)]) if M else \
        torch.empty(0, topk, dtype=torch.int64)
    if invalid_frac > 0 and M:
        drop = torch.rand(M, topk, generator=g) < invalid_frac
        ids = torch.where(drop, torch.full_like(ids, -1), ids)
    ids = ids.to(torch.int32)
    tw = torch.rand(M, topk, generator=g).softmax(-1).to(torch.float32) if M else torch.empty(0, topk)

    def sc(s):
        if scale_dtype == "uint8":
            return s
        if scale_dtype == "float32":
            return torch.exp2(s.float() - 127)
        return s.view(torch.float8_e8m0fnu)

    t = dict(hidden_states=x, w13_packed=w13, w2_packed=w2, w13_scale=sc(s13), w2_scale=sc(s2),
             topk_ids=ids, topk_weights=tw, hidden_size=H, intermediate_size=I)
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
