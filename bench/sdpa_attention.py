#!/usr/bin/env python3
"""PyTorch's attention alone, for the side-by-side rows of docs/BENCHMARKS.md (not a test): the median of 5 forward +
backward calls of torch.nn.functional.scaled_dot_product_attention on (1, heads, tokens, head_dim) q, k, v at
2 threads, in GFLOP/s at bench_attention's counts (forward 4 T^2 hd a head, backward 10 T^2 hd).

  bench/sdpa_attention.py HEADS TOKENS HEAD_DIM      (in the reference venv: scripts/reference-venv.sh)
"""
import sys
import time

import torch

torch.set_num_threads(2)
heads, tokens, hd = (int(a) for a in sys.argv[1:4])
q, k, v = (torch.randn(1, heads, tokens, hd, requires_grad=True) for _ in range(3))
attend = torch.nn.functional.scaled_dot_product_attention
for _ in range(2):   # warm-up
    attend(q, k, v).backward(torch.ones(1, heads, tokens, hd))
fwd, bwd = [], []
for _ in range(5):
    t0 = time.perf_counter()
    o = attend(q, k, v)
    t1 = time.perf_counter()
    o.backward(torch.ones_like(o))
    fwd.append(t1 - t0)
    bwd.append(time.perf_counter() - t1)
f, b = sorted(fwd)[2], sorted(bwd)[2]
flops = 4.0 * tokens * tokens * hd * heads
print("torch %s SDPA T=%d hd=%d heads=%d: forward %.3f s (%.1f GFLOP/s), backward %.3f s (%.1f GFLOP/s)"
      % (torch.__version__, tokens, hd, heads, f, flops / f * 1e-9, b, 2.5 * flops / b * 1e-9))
