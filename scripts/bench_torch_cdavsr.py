#!/usr/bin/env python3
"""PyTorch eager baseline for CDA-VSR on the GPU: the same forward pass as
scripts/golden_cdavsr.py (imported from beside this file), fp16 and fp32
(TF32 off) on CUDA, cuDNN benchmark mode. Prints the median milliseconds of
20 P steps (after 5 warm-up steps) and of 20 I steps, each synchronised, per
input size and precision.

Usage: python3 scripts/bench_torch_cdavsr.py CHECKPOINT [WxH ...]
"""
import os, sys, time
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_cdavsr import CDAVSR, load_safetensors


def main():
    ckpt = sys.argv[1]
    sizes = sys.argv[2:] or ["320x180", "640x360"]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    w0, meta = load_safetensors(ckpt)
    for dt, name in [(torch.float16, "fp16"), (torch.float32, "fp32")]:
        w = {k: v.cuda().to(dt) for k, v in w0.items()}
        net = CDAVSR(w, meta)
        for size in sizes:
            run(net, dt, name, size)


def run(net, dt, name, size):
    """Times P and I steps of net at size WxH in dtype dt."""
    W, H = map(int, size.split("x"))
    x = torch.rand(1, 3, H, W, device="cuda").to(dt)
    mv = (torch.rand(1, 2, H, W, device="cuda") * 3).to(dt)
    res = (torch.rand(1, 1, H, W, device="cuda") * 0.05).to(dt)
    with torch.no_grad():
        _, state = net.step(x, None, mv, res, True)

        def timed(i_path):
            ts = []
            for k in range(25):
                torch.cuda.synchronize()
                t = time.perf_counter()
                net.step(x, state, mv, res, i_path)
                torch.cuda.synchronize()
                if k >= 5:
                    ts.append((time.perf_counter() - t) * 1e3)
            return sorted(ts)[len(ts) // 2]

        p, i = timed(False), timed(True)
    print(f"torch eager {name} {size}: P step {p:.3f} ms, I step {i:.3f} ms")


if __name__ == "__main__":
    main()
