#!/usr/bin/env python3
"""PyTorch baselines for issue 39's benchmark: the architectures vsr runs
from .pth files, at their published sizes, with golden_pth.py's modules
(written from the published code, imported from beside this file) and its
random weights, timed on CUDA in fp16 at 640x360 beside `vsr bench` of the
same files.

  save DIR     write DIR/NAME.pth (torch.save of the state dict) for each
               network and time its eager fp16 forward
  compile DIR  time torch.compile of the same networks (DEADLINE seconds in
               all, default 240: the networks left when it passes are named
               and skipped)
  profile DIR  torch.profiler's CUDA kernel table of 3 forwards, eager and
               torch.compile (where each kernel's time goes, to set beside
               vsr's ncu summary)

Each line: NAME, the FLOPs of its convolutions per frame (2 per
multiply-add, counted by forward hooks: what vsr's figure is divided by as
well), the median milliseconds of ITERS (default 10) synchronised
forwards after warm-up, frames/s and TFLOP/s. cuDNN benchmark mode, TF32
off.

Usage: python3 scripts/bench_torch_pth.py save|compile|profile DIR [NAME ...]
"""
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_pth as g  # noqa: E402

W, H = 640, 360

NETS = {
    # realesrgan-x4plus's RRDBNet (BasicSR keys): 64 features, 23 blocks, growth 32
    "esrgan_x4plus": lambda: g.RRDBNetNew("basicsr", 64, 23, 32, 4),
    # realesr-animevideov3's SRVGGNetCompact: 64 features, 16 convolutions, PReLU
    "compact_x4": lambda: g.SRVGGNetCompact(64, 16, 4, "prelu"),
    # SPAN x4, 48 features (spandrel's default), input normalisation
    "span_x4": lambda: g.SPAN(48, 4),
    # Real-CUGAN UpCunet4x at its published widths (32/64/128/256)
    "cugan_x4": lambda: g.UpCunet(4, 32),
    # RealPLKSR x4: 64 features, 28 blocks, kernel 17, GroupNorm(4), attention
    "realplksr_x4": lambda: g.RealPLKSR(64, 28, 4),
}


def build(name):
    m = NETS[name]()
    g.init_weights(m, 1)
    if name.startswith("span"):
        g.span_scale_conv1(m)
        g.span_consistent_eval_conv(m)
    return m.eval()


def flops(m, x):
    total = [0]

    def hook(mod, inp, out):
        if isinstance(mod, g.Conv3XC):  # SPAN's: one folded 3x3 convolution (F.conv2d, no module call)
            mod = mod.eval_conv
        k = mod.weight.shape[2] * mod.weight.shape[3]
        if isinstance(mod, nn.ConvTranspose2d):  # each input pixel scatters its kernel
            total[0] += 2 * mod.in_channels * mod.out_channels * k * inp[0].shape[2] * inp[0].shape[3]
        else:
            total[0] += 2 * mod.in_channels // mod.groups * mod.out_channels * k * out.shape[2] * out.shape[3]

    hs = [mod.register_forward_hook(hook) for mod in m.modules() if isinstance(mod, (nn.Conv2d, nn.ConvTranspose2d, g.Conv3XC))]
    with torch.no_grad():
        m(x)
    for h in hs:
        h.remove()
    return total[0]


def timed(f, x, iters, warm):
    with torch.no_grad():
        for _ in range(warm):
            f(x)
        torch.cuda.synchronize()
        ms = []
        for _ in range(iters):
            t = time.perf_counter()
            f(x)
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    return ms[len(ms) // 2]


def profiled(label, f, x):
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        for _ in range(3):
            f(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                f(x)
            torch.cuda.synchronize()
    print("-- %s: kernels of 3 forwards" % label)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=90), flush=True)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(NETS)
    iters = int(os.environ.get("ITERS", "10"))
    deadline = time.time() + float(os.environ.get("DEADLINE", "240"))
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(out, exist_ok=True)
    print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    for name in names:
        if mode == "compile" and time.time() > deadline:
            print("%s: torch.compile skipped (DEADLINE passed)" % name, flush=True)
            continue
        m = build(name)
        if mode == "save":
            torch.save(m.state_dict(), os.path.join(out, name + ".pth"))
        x = torch.rand(1, 3, H, W, device="cuda").half()
        m = m.cuda().half()
        if mode == "profile":
            profiled(name + " eager fp16", m, x)
            profiled(name + " torch.compile fp16", torch.compile(m), x)
            continue
        f = flops(m, x)
        t0 = time.time()
        fn = torch.compile(m) if mode == "compile" else m
        ms = timed(fn, x, iters, 3)
        label = "torch.compile fp16" if mode == "compile" else "eager fp16"
        extra = ", compile and warm-up %.0f s" % (time.time() - t0 - ms * iters / 1e3) if mode == "compile" else ""
        print("%s: %s %.1f GFLOP/frame, %.2f ms, %.2f frames/s, %.1f TFLOP/s%s" % (
            name, label, f / 1e9, ms, 1e3 / ms, f / ms / 1e9, extra), flush=True)
        del m, fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
