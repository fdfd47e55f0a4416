#!/usr/bin/env python3
"""Golden outputs for realesrgan-x4plus, computed independently of vsr.

A from-scratch PyTorch implementation of Real-ESRGAN's RRDBNet
(num_in_ch=3, num_out_ch=3, scale=4, num_feat=64, num_block=23,
num_grow_ch=32), as published in xinntao/BasicSR basicsr/archs/rrdbnet_arch.py:

    RDB(x):  x1 = lrelu(conv1(x));  x2 = lrelu(conv2(cat(x, x1)))
             x3 = lrelu(conv3(cat(x, x1, x2)));  x4 = lrelu(conv4(cat(x, x1, x2, x3)))
             x5 = conv5(cat(x, x1, x2, x3, x4));  return x5 * 0.2 + x
    RRDB(x): return rdb3(rdb2(rdb1(x))) * 0.2 + x
    net(x):  feat = conv_first(x);  feat = feat + conv_body(23 x RRDB(feat))
             feat = lrelu(conv_up1(nearest x2(feat)));  feat = lrelu(conv_up2(nearest x2(feat)))
             return conv_last(lrelu(conv_hr(feat)))

with LeakyReLU(0.2) and 3x3 convolutions (padding 1) throughout. The ncnn
.bin is read with numpy by its layout (per convolution, in the order the
network defines them: a 4-byte fp16 tag 0x01306B47, OIHW fp16 weights, fp32
bias), not with vsr's parser. Computation is float64 on the CPU.

Usage: python3 scripts/golden_x4plus.py MODEL_DIR FIXTURE_DIR
For FIXTURE_DIR/frame0_48x32.rgb and frame150_33x21.rgb (packed RGB24) it
writes FIXTURE_DIR/frame*_WxH.x4plus.f32: the float32 NHWC output
(1, 4H, 4W, 3), little-endian, before any clamping or rounding.
"""
import os, re, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv(cin, cout):
    return nn.Conv2d(cin, cout, 3, 1, 1)


def lrelu(x):
    return F.leaky_relu(x, 0.2)


class RDB(nn.Module):
    def __init__(self, f=64, g=32):
        super().__init__()
        self.convs = nn.ModuleList([conv(f + i * g, g) for i in range(4)] + [conv(f + 4 * g, f)])

    def forward(self, x):
        feats = [x]
        for c in self.convs[:4]:
            feats.append(lrelu(c(torch.cat(feats, 1))))
        return self.convs[4](torch.cat(feats, 1)) * 0.2 + x


class RRDB(nn.Module):
    def __init__(self):
        super().__init__()
        self.rdbs = nn.ModuleList([RDB(), RDB(), RDB()])

    def forward(self, x):
        out = x
        for r in self.rdbs:
            out = r(out)
        return out * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, blocks=23):
        super().__init__()
        self.conv_first = conv(3, 64)
        self.body = nn.ModuleList([RRDB() for _ in range(blocks)])
        self.conv_body = conv(64, 64)
        self.conv_up1 = conv(64, 64)
        self.conv_up2 = conv(64, 64)
        self.conv_hr = conv(64, 64)
        self.conv_last = conv(64, 3)

    def convs(self):
        yield self.conv_first
        for b in self.body:
            for r in b.rdbs:
                yield from r.convs
        yield from (self.conv_body, self.conv_up1, self.conv_up2, self.conv_hr, self.conv_last)

    def forward(self, x):
        feat = self.conv_first(x)
        body = feat
        for b in self.body:
            body = b(body)
        feat = feat + self.conv_body(body)
        feat = lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")))
        feat = lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")))
        return self.conv_last(lrelu(self.conv_hr(feat)))


def load_ncnn_bin(model, path):
    data = open(path, "rb").read()
    off = 0
    for m in model.convs():
        tag = int.from_bytes(data[off:off + 4], "little")
        assert tag == 0x01306B47, hex(tag)
        off += 4
        n = m.weight.numel()
        w = np.frombuffer(data, dtype="<f2", count=n, offset=off).astype(np.float64)
        off += (2 * n + 3) // 4 * 4
        b = np.frombuffer(data, dtype="<f4", count=m.out_channels, offset=off).astype(np.float64)
        off += 4 * m.out_channels
        m.weight.data = torch.from_numpy(w.copy()).reshape(m.weight.shape)
        m.bias.data = torch.from_numpy(b.copy())
    assert off == len(data), (off, len(data))


def main():
    model_dir, fixture_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(os.cpu_count() or 1)
    net = RRDBNet().double().eval()
    load_ncnn_bin(net, os.path.join(model_dir, "realesrgan-x4plus.bin"))
    for name in ("frame0_48x32.rgb", "frame150_33x21.rgb"):
        path = os.path.join(fixture_dir, name)
        w, h = map(int, re.search(r"_(\d+)x(\d+)\.rgb$", path).groups())
        rgb = np.fromfile(path, dtype=np.uint8).reshape(1, h, w, 3)
        x = torch.from_numpy(rgb.astype(np.float64) / 255.0).permute(0, 3, 1, 2)
        with torch.no_grad():
            y = net(x)
        out = y.permute(0, 2, 3, 1).contiguous().numpy().astype("<f4")
        out.tofile(path[:-4] + ".x4plus.f32")
        print(path, tuple(out.shape), float(np.abs(out).mean()))


if __name__ == "__main__":
    main()
