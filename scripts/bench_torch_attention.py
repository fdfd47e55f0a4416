#!/usr/bin/env python3
"""cuDNN's fused attention and FlashAttention (through PyTorch) on the SwiftVR DiT's shapes.

The side of the comparison that vsr does not run itself: issue 5 asks whether cuDNN's
fused attention (graph API) beats vsr's own kernel (backend/cuda/attention.cu). PyTorch's
scaled_dot_product_attention reaches cuDNN's fused flash attention through the same graph
API (SDPBackend.CUDNN_ATTENTION) and FlashAttention-2 (SDPBackend.FLASH_ATTENTION), so
timing both here, beside `go test ./backend/cuda -bench Attention` in the same call, answers
it without writing the graph-API binding first.

Shapes (bf16, 24 heads of 128), as BenchmarkWindowAttention and BenchmarkAttention use:
  window: a middle chunk of 6 x 45 x 80 latent tokens in shifted 16 x 16 windows: 4 x 6
          windows of 6 * 256 = 1536 tokens, each attending densely to itself. A dense kernel
          computes every window in full (36864 queries); vsr's kernel computes only the
          21600 queries each window owns. "effective TFLOP/s" counts the owned queries only
          (4 * 21600 * 1536 * 128 * 24 FLOPs), the figure vsr's benchmark reports.
  cross:  21600 queries over the 512 prompt keys.
"window" times the dense call alone (it favours cuDNN); "window+gather" also gathers q, k
and v from the token layout into windows and each token's output back from one window that
contains it (the last whose start is at or before it), as a dense kernel needs around it.

Usage: python3 scripts/bench_torch_attention.py [--iters 50]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def bench(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    heads, d = 24, 128
    win_tokens, windows, owned = 1536, 24, 21600
    cases = {
        "window": ((windows, heads, win_tokens, d), (windows, heads, win_tokens, d),
                   4 * owned * win_tokens * d * heads, 4 * windows * win_tokens * win_tokens * d * heads),
        "cross": ((1, heads, owned, d), (1, heads, 512, d),
                  4 * owned * 512 * d * heads, 4 * owned * 512 * d * heads),
    }
    # Window gather indices of the shifted 6 x 45 x 80 grid (starts as vsr computes them).
    f, h, w = 6, 45, 80
    ys, xs = [0, 8, 24, 29], [0, 8, 24, 40, 56, 64]
    t = torch.arange(f * h * w, device="cuda").view(f, h, w)
    gather = torch.stack([t[:, y:y + 16, x:x + 16].reshape(-1) for y in ys for x in xs])  # (24, 1536)
    oy = torch.tensor([max(i for i, s in enumerate(ys) if s <= y) for y in range(h)], device="cuda")
    ox = torch.tensor([max(j for j, s in enumerate(xs) if s <= x) for x in range(w)], device="cuda")
    fy, yy, xx = torch.meshgrid(torch.arange(f, device="cuda"), torch.arange(h, device="cuda"),
                                torch.arange(w, device="cuda"), indexing="ij")
    wi = oy[yy] * len(xs) + ox[xx]
    local = (fy * 16 + (yy - torch.tensor(ys, device="cuda")[oy[yy]])) * 16 + (xx - torch.tensor(xs, device="cuda")[ox[xx]])
    scatter = (wi * win_tokens + local).reshape(-1)  # token -> row of the windows' output

    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for name, (qs, ks, eff, raw) in cases.items():
        q = torch.randn(qs, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(ks, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(ks, device="cuda", dtype=torch.bfloat16)
        ref = None
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            with sdpa_kernel(backend):
                try:
                    out = F.scaled_dot_product_attention(q, k, v)
                except RuntimeError as e:
                    print(f"{name:6s} {backend.name:16s} not available: {str(e).splitlines()[0]}")
                    continue
                if ref is None:
                    ref = out.float()
                diff = ((out.float() - ref).norm() / ref.norm()).item()
                t = bench(lambda: F.scaled_dot_product_attention(q, k, v), args.iters)
            print(f"{name:13s} {backend.name:16s} {t * 1e3:8.3f} ms  effective {eff / t / 1e12:6.1f} TFLOP/s"
                  f"  computed {raw / t / 1e12:6.1f} TFLOP/s  rel. diff to first {diff:.1e}")
            if name != "window":
                continue
            tq, tk, tv = (torch.randn(owned, heads * d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

            def windowed():
                qw, kw, vw = (z[gather].view(windows, win_tokens, heads, d).transpose(1, 2) for z in (tq, tk, tv))
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(qw, kw, vw)
                return o.transpose(1, 2).reshape(windows * win_tokens, heads * d)[scatter]

            t = bench(windowed, args.iters)
            print(f"{'window+gather':13s} {backend.name:16s} {t * 1e3:8.3f} ms  effective {eff / t / 1e12:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
