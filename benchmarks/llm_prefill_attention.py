"""A sampling batch's prefill attention on a CPU, four ways, at SmolLM2-135M's shapes: what a
change to the prefill's attention could win, before anyone writes one.

    OMP_NUM_THREADS=1 python benchmarks/llm_prefill_attention.py [--rows 7] [--rounds 3]

One layer's attention of a batch of ``--rows`` prompts (9 query heads, 3 key/value heads, head
size 64) after the shared prefix (81 tokens, computed once per adapter: ``PrefixCache``), the
prompts 430-600 tokens long and left-padded as ``sample_batch`` pads them:

- ``sdpa``: what the sampler runs (transformers' sdpa: key/value heads repeated, a boolean
  causal + padding mask, bf16);
- ``sdpa_gqa``: the same with ``enable_gqa`` (no repeated heads);
- ``unmasked``: the same call without a mask, which the rows of one length could use: the
  cost of the padding mask;
- ``explicit``: ``softmax(q K^T) V`` as two bf16 batched matmuls, the scores in float32;
- ``float32``: sdpa with a mask in float32.

Interleaved rounds (A, B, C, ... each round), CPU time of one thread; each line prints ms per
layer, its ratio to ``sdpa`` and the attention's GFLOP/s (4 * rows * heads * q * kv * dim over
the unmasked work; no physical peak is printed, as the kernel's own rate is the question here).
The outputs are checked equal to ``sdpa``'s (bf16 rounding) before timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

HEADS, KV_HEADS, DIM, PREFIX = 9, 3, 64, 81


def inputs(rows: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    lengths = [430 + (600 - 430) * i // max(rows - 1, 1) for i in range(rows)]
    total = max(lengths)
    q_len = total - PREFIX
    q = torch.randn(rows, HEADS, q_len, DIM, generator=gen).to(dtype)
    k = torch.randn(rows, KV_HEADS, total, DIM, generator=gen).to(dtype)
    v = torch.randn(rows, KV_HEADS, total, DIM, generator=gen).to(dtype)
    # Row b: the prefix, then its left padding, then its own tokens; query i sits at PREFIX + i.
    pos = torch.arange(total)
    qpos = PREFIX + torch.arange(q_len)
    mask = torch.empty(rows, 1, q_len, total, dtype=torch.bool)
    for b, length in enumerate(lengths):
        pad = total - length
        valid = (pos < PREFIX) | (pos >= PREFIX + pad)
        mask[b, 0] = (pos[None, :] <= qpos[:, None]) & valid[None, :]
    return q, k, v, mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    q, k, v, mask = inputs(args.rows, torch.bfloat16)
    qf, kf, vf = q.float(), k.float(), v.float()
    groups = HEADS // KV_HEADS
    rows, _, q_len, _ = q.shape
    total = k.shape[2]

    def sdpa():
        kk, vv = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)

    def sdpa_gqa():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def unmasked():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def explicit():
        s = torch.matmul(q.reshape(rows, KV_HEADS, groups * q_len, DIM), k.transpose(-1, -2))
        s = s.view(rows, KV_HEADS, groups, q_len, total).float().mul_(DIM**-0.5)
        s.masked_fill_(~mask[:, :, None], float("-inf"))
        p = torch.softmax(s, -1).to(q.dtype).view(rows, KV_HEADS, groups * q_len, total)
        return torch.matmul(p, v).view(rows, HEADS, q_len, DIM)

    def float32():
        return F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, enable_gqa=True)

    ways = {"sdpa": sdpa, "sdpa_gqa": sdpa_gqa, "unmasked": unmasked, "explicit": explicit}
    ways["float32"] = float32
    reference = sdpa().float()
    for name in ("sdpa_gqa", "explicit", "float32"):
        err = (ways[name]().float() - reference).abs().max().item()
        if err > 0.05:
            raise SystemExit(f"{name} differs from sdpa by {err:.3g}")
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, fn in ways.items():
            start = time.process_time()
            for _ in range(args.reps):
                fn()
            times[name].append((time.process_time() - start) / args.reps)
    flop = 4 * rows * HEADS * q_len * total * DIM
    base = statistics.median(times["sdpa"])
    print(f"{rows} rows, {q_len} queries over {total} keys a row, one layer, CPU time")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(
            f"{name:>9}: {t * 1e3:7.1f} ms   {t / base:5.2f}x sdpa   {flop / t / 1e9:6.1f} GFLOP/s"
        )


if __name__ == "__main__":
    main()
