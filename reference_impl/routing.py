"""Routing with pure tensor ops: slots sorted by expert, padded to BLOCK_M.

No host sync and no data-dependent shape: every buffer is sized from (M, topk,
E, BLOCK_M) alone, so the same graph replays with any routing.

Outputs
  sorted_slots [NB * BLOCK_M] int32: slot index (m * topk + j) at each padded
                row, S (= M * topk) for padding rows;
  block_expert [NB] int32: the expert of each block of BLOCK_M rows, -1 past the end.
NB = max_blocks(S, E, BLOCK_M) bounds sum_e ceil(count_e / BLOCK_M).
"""
from __future__ import annotations

import torch


def max_blocks(num_slots: int, num_experts: int, block_m: int) -> int:
    return (num_slots + block_m - 1) // block_m + min(num_experts, num_slots)


def route_torch(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    S = topk_ids.numel()
    E = num_experts
    NB = max_blocks(S, E, block_m)
    P = NB * block_m
    dev = topk_ids.device
    ids = topk_ids.reshape(-1).to(torch.int64)
    ids = torch.where((ids < 0) | (ids >= E), E, ids)  # bucket E = contributes nothing
    counts = torch.zeros(E + 1, dtype=torch.int64, device=dev)
    counts.scatter_add_(0, ids, torch.ones_like(ids))
    counts = counts[:E]
    padded = (counts + block_m - 1) // block_m * block_m
    start = torch.cumsum(counts, 0) - counts
    pstart = torch.cumsum(padded, 0) - padded
    order = torch.argsort(ids, stable=True)
    se = ids[order]
    ok = se < E
    sec = se.clamp(max=E - 1)
    dest = pstart[sec] + torch.arange(S, device=dev) - start[sec]
    dest = torch.where(ok, dest, P)  # invalid slots land in a dump row
    sorted_slots = torch.full((P + 1,), S, dtype=torch.int32, device=dev)
    sorted_slots.scatter_(0, dest, order.to(torch.int32))
    block_expert = torch.full((NB + 1,), -1, dtype=torch.int32, device=dev)
    block_expert.scatter_(0, torch.where(ok, dest // block_m, NB), se.to(torch.int32))
    return sorted_slots[:P], block_expert[:NB]
