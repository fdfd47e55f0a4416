#!/usr/bin/env python3
"""Golden outputs for realesr-animevideov3, computed independently of vsr.

This is a from-scratch PyTorch implementation of Real-ESRGAN's
SRVGGNetCompact (num_in_ch=3, num_out_ch=3, num_feat=64, num_conv=16,
upscale=4, act_type='prelu'), as published in
xinntao/Real-ESRGAN realesrgan/archs/srvgg_arch.py:

    body = [conv3x3(3,64), PReLU(64)] + 16 x [conv3x3(64,64), PReLU(64)]
           + [conv3x3(64, 3*4*4)]
    out  = pixel_shuffle(body(x), 4) + interpolate(x, scale_factor=4, 'nearest')

The x2 and x3 graphs append a bicubic resize of the x4 output by 0.5 / 0.75
(align_corners=False, A=-0.75, edge-clamped), which is PyTorch's own
F.interpolate(mode='bicubic').

The ncnn .bin is read here with numpy, by its documented layout (per conv: a
4-byte fp16 tag 0x01306B47, OIHW fp16 weights, fp32 bias; per PReLU: fp32
slopes), not with vsr's parser. Computation is float32 on the CPU (no TF32).

Usage: python3 scripts/golden_compact.py MODEL_DIR FIXTURE_DIR
For every FIXTURE_DIR/frame*_WxH.rgb (packed RGB24) it writes
FIXTURE_DIR/frame*_WxH.x{2,3,4}.f32: the float32 NHWC output (1, H*s, W*s, 3),
little-endian, before any clamping or rounding.
"""
import glob, os, re, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SRVGGNetCompact(nn.Module):
    def __init__(self, num_feat=64, num_conv=16, upscale=4):
        super().__init__()
        self.upscale = upscale
        body = [nn.Conv2d(3, num_feat, 3, 1, 1), nn.PReLU(num_parameters=num_feat)]
        for _ in range(num_conv):
            body += [nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.PReLU(num_parameters=num_feat)]
        body += [nn.Conv2d(num_feat, 3 * upscale * upscale, 3, 1, 1)]
        self.body = nn.Sequential(*body)
        self.upsampler = nn.PixelShuffle(upscale)

    def forward(self, x):
        out = self.upsampler(self.body(x))
        return out + F.interpolate(x, scale_factor=self.upscale, mode="nearest")


def load_ncnn_bin(model, path):
    data = open(path, "rb").read()
    off = 0
    for m in model.body:
        if isinstance(m, nn.Conv2d):
            tag = int.from_bytes(data[off:off + 4], "little")
            assert tag == 0x01306B47, hex(tag)
            off += 4
            n = m.weight.numel()
            w = np.frombuffer(data, dtype="<f2", count=n, offset=off).astype(np.float32)
            off += (2 * n + 3) // 4 * 4
            b = np.frombuffer(data, dtype="<f4", count=m.out_channels, offset=off)
            off += 4 * m.out_channels
            m.weight.data = torch.from_numpy(w.copy()).reshape(m.weight.shape)
            m.bias.data = torch.from_numpy(b.copy())
        elif isinstance(m, nn.PReLU):
            n = m.weight.numel()
            s = np.frombuffer(data, dtype="<f4", count=n, offset=off)
            off += 4 * n
            m.weight.data = torch.from_numpy(s.copy())
    assert off == len(data), (off, len(data))


def main():
    model_dir, fixture_dir = sys.argv[1], sys.argv[2]
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    net = SRVGGNetCompact().eval()
    load_ncnn_bin(net, os.path.join(model_dir, "realesr-animevideov3-x4.bin"))
    for path in sorted(glob.glob(os.path.join(fixture_dir, "frame*_*x*.rgb"))):
        w, h = map(int, re.search(r"_(\d+)x(\d+)\.rgb$", path).groups())
        rgb = np.fromfile(path, dtype=np.uint8).reshape(1, h, w, 3)
        x = torch.from_numpy(rgb.astype(np.float32)).permute(0, 3, 1, 2) / 255.0
        with torch.no_grad():
            y4 = net(x)
            outs = {4: y4}
            for s in (2, 3):
                outs[s] = F.interpolate(y4, size=(h * s, w * s), mode="bicubic", align_corners=False)
        for s, y in outs.items():
            dst = path[:-4] + f".x{s}.f32"
            y.permute(0, 2, 3, 1).contiguous().numpy().astype("<f4").tofile(dst)
            print(dst, tuple(y.shape), float(y.mean()), float(y.std()))
    print("torch", torch.__version__)


if __name__ == "__main__":
    main()
