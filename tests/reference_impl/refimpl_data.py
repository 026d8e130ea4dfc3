"""Random MXFP4 MoE problems for the tests and the benchmark (never zeros)."""
import torch


def make_problem(M, E, H, I, topk, *, device="cpu", seed=0, scale_dtype="e8m0",
                 invalid_frac=0.0, dup_experts=None):
    g = torch.Generator(device=device).manual_seed(seed)
    kw = dict(generator=g, device=device)
    x = (torch.randn(M, H, **kw) * 0.5).to(torch.bfloat16)
    w13 = torch.randint(-128, 128, (E, 2 * I, H // 2), dtype=torch.int16, **kw).to(torch.int8)
    w2 = torch.randint(-128, 128, (E, H, I // 2), dtype=torch.int16, **kw).to(torch.int8)
    # E8M0 exponents around 2**-4 .. 2**-2 so the activations stay O(1)
    s13 = torch.randint(121, 126, (E, 2 * I, H // 32), dtype=torch.int32, **kw).to(torch.uint8)
    s2 = torch.randint(121, 126, (E, H, I // 32), dtype=torch.int32, **kw).to(torch.uint8)
    pool = E if dup_experts is None else dup_experts
    ids = torch.rand(M, pool, **kw).argsort(-1)[:, :topk]  # distinct experts per token
    if invalid_frac > 0 and M:
        drop = torch.rand(M, topk, **kw) < invalid_frac
        ids = torch.where(drop, torch.full_like(ids, -1), ids)
    ids = ids.to(torch.int32)
    tw = torch.rand(M, topk, **kw).softmax(-1).to(torch.float32) if M else torch.empty(0, topk, device=device)

    def sc(s):
        if scale_dtype == "uint8":
            return s
        if scale_dtype == "float32":
            return torch.exp2(s.float() - 127)
        return s.view(torch.float8_e8m0fnu)

    t = dict(hidden_states=x, w13_packed=w13, w2_packed=w2, w13_scale=sc(s13), w2_scale=sc(s2),
             topk_ids=ids, topk_weights=tw, hidden_size=H, intermediate_size=I)
    return t
