#!/usr/bin/env python3
"""Golden .pth fixtures for issue 39: real torch.save files of the common
super-resolution architectures, with outputs computed independently of vsr.

Each architecture is a from-scratch PyTorch module written from the
published code, with the published module names, so that state_dict() keys
and shapes are those of the real models:

  ESRGAN, new keys   XPixelGroup/BasicSR basicsr/archs/rrdbnet_arch.py (RRDBNet,
                     pixel_unshuffle from basicsr/archs/arch_util.py for scales
                     2 and 1), commit 8d56e3a045f9fb3e1d8872f92ee4a4f07f886b0a
  ESRGAN, 2019 keys  xinntao/ESRGAN RRDBNet_arch.py (conv_first, RRDB_trunk.N.RDBk,
                     trunk_conv, upconv1/2, HRconv, conv_last),
                     commit 73e9b634cf987f5996ac2dd33f4050922398a921
  ESRGAN, old keys   chaiNNer-org/spandrel libs/spandrel/spandrel/architectures/
                     ESRGAN/__arch/RRDB.py and __arch_helpers/block.py (model.0,
                     model.1.sub.N.RDBk.convj.0, model.1.sub.NB, then per x2
                     Upsample/conv/LeakyReLU, HR conv, LeakyReLU, last conv),
                     commit b0c3eb2d044112a5302200757e84f839b971393b
  SRVGGNetCompact    xinntao/Real-ESRGAN realesrgan/archs/srvgg_arch.py,
                     commit a4abfb2979a7bbff3f69f58f58ae324608821e27
  SPAN               hongyuanyu/SPAN basicsr/archs/span_arch.py, commit
                     c77a5917759f09e66fbc7124220c5afc5ee221e5; the no_norm
                     buffer (no mean/range normalisation) as in spandrel's
                     architectures/SPAN/__arch/span.py (commit above)
  Real-CUGAN         bilibili/ailab Real-CUGAN/upcunet_v3.py (UpCunet2x/3x/4x,
                     tile_mode=0), commit 2799af78ef105b414cc4b796c67c8511acdcdf6f;
                     "pro" files hold the key "pro" (the int 1 in the official
                     files, a zeros(1) tensor in spandrel's) and map the input
                     to x*0.7+0.15 and the output back with (y-0.15)/0.7
  RealPLKSR          neosr-project/neosr neosr/archs/realplksr_arch.py, commit
                     31c7022620c682cf0961c8634d60787179145c5b, with spandrel's
                     layer_norm option (architectures/PLKSR/__arch/RealPLKSR.py)

Sizes are small (few blocks and features; Real-CUGAN at 1/8 of its fixed
widths 32/64/128/256: detect.width in the manifest), weights are
deterministic random values scaled so that activations stay O(1), and the
reference output is the float64 forward on the CPU of exactly the values
stored in the file (float16/bfloat16 files: the rounded values), cast to
float32, before any clamping. PyTorch's own float32 CPU forward and, when
CUDA is there, its float16/bfloat16 forwards are measured against it and
recorded in the manifest, as what a vsr backend may be held to.

Usage: python3 scripts/golden_pth.py OUT_DIR  (CASES="name ..." for some cases only)
Writes OUT_DIR/manifest.json and per case NAME.pth (torch.save, zip format),
for some cases NAME.legacy.pth (_use_new_zipfile_serialization=False),
NAME.safetensors (written here: 8-byte little-endian header length, JSON
header, raw little-endian data) and NAME.shared.pth (every tensor a view of
one storage, one of them a permuted, non-contiguous view), and NAME.in.npy /
NAME.out.npy (float32 NCHW). testdata/pth/README.md describes the manifest.
Every file written is read back (torch.load(weights_only=True), or this
script's safetensors reader) and compared with what was meant to be stored.
"""
import copy
import io
import json
import math
import os
import struct
import sys
import zipfile
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- ESRGAN ---


def lrelu(x, slope=0.2):
    return F.leaky_relu(x, slope)


class DenseBlock(nn.Module):
    """ResidualDenseBlock(_5C): five 3x3 convolutions over the concatenation
    of the input and every earlier output, LeakyReLU(0.2) after the first
    four, x5 * 0.2 + x. Old keys wrap each convolution as convj.0 (with its
    LeakyReLU as convj.1, which holds no parameters)."""

    def __init__(self, nf, gc, old):
        super().__init__()
        self.old = old
        for j in range(1, 6):
            cin, cout = nf + (j - 1) * gc, (gc if j < 5 else nf)
            conv = nn.Conv2d(cin, cout, 3, 1, 1)
            if old:
                conv = nn.Sequential(conv, nn.LeakyReLU(0.2)) if j < 5 else nn.Sequential(conv)
            setattr(self, "conv%d" % j, conv)

    def forward(self, x):
        feats = [x]
        for j in range(1, 5):
            y = getattr(self, "conv%d" % j)(torch.cat(feats, 1))
            feats.append(y if self.old else lrelu(y))
        return self.conv5(torch.cat(feats, 1)) * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, nf, gc, names, old):
        super().__init__()
        self.names = names
        for n in names:
            setattr(self, n, DenseBlock(nf, gc, old))

    def forward(self, x):
        out = x
        for n in self.names:
            out = getattr(self, n)(out)
        return out * 0.2 + x


def pixel_unshuffle(x, r):
    # basicsr/archs/arch_util.py pixel_unshuffle
    b, c, hh, hw = x.shape
    assert hh % r == 0 and hw % r == 0, (hh, hw, r)
    v = x.view(b, c, hh // r, r, hw // r, r)
    return v.permute(0, 1, 3, 5, 2, 4).reshape(b, c * r * r, hh // r, hw // r)


# attribute names of the two new-key layouts
NEW_NAMES = {
    "basicsr": dict(first="conv_first", body="body", rdb=("rdb1", "rdb2", "rdb3"), trunk="conv_body",
                    up="conv_up%d", hr="conv_hr", last="conv_last"),
    "esrgan2019": dict(first="conv_first", body="RRDB_trunk", rdb=("RDB1", "RDB2", "RDB3"), trunk="trunk_conv",
                       up="upconv%d", hr="HRconv", last="conv_last"),
}


class RRDBNetNew(nn.Module):
    """BasicSR's RRDBNet (x4; x2 and x1 through pixel unshuffle by 2 and 4 in
    front of conv_first) or the 2019 ESRGAN repository's (x4)."""

    def __init__(self, layout, nf, nb, gc, scale, in_ch=3, out_ch=3):
        super().__init__()
        n = NEW_NAMES[layout]
        self.n = n
        self.unshuffle = {1: 4, 2: 2, 4: 1}[scale]
        setattr(self, n["first"], nn.Conv2d(in_ch * self.unshuffle ** 2, nf, 3, 1, 1))
        setattr(self, n["body"], nn.Sequential(*[RRDB(nf, gc, n["rdb"], False) for _ in range(nb)]))
        setattr(self, n["trunk"], nn.Conv2d(nf, nf, 3, 1, 1))
        for i in (1, 2):
            setattr(self, n["up"] % i, nn.Conv2d(nf, nf, 3, 1, 1))
        setattr(self, n["hr"], nn.Conv2d(nf, nf, 3, 1, 1))
        setattr(self, n["last"], nn.Conv2d(nf, out_ch, 3, 1, 1))

    def forward(self, x):
        n, g = self.n, lambda k: getattr(self, self.n[k])
        if self.unshuffle > 1:
            x = pixel_unshuffle(x, self.unshuffle)
        feat = g("first")(x)
        feat = feat + g("trunk")(g("body")(feat))
        for i in (1, 2):
            feat = lrelu(getattr(self, n["up"] % i)(F.interpolate(feat, scale_factor=2, mode="nearest")))
        return g("last")(lrelu(g("hr")(feat)))


class ShortcutBlock(nn.Module):
    def __init__(self, sub):
        super().__init__()
        self.sub = sub

    def forward(self, x):
        return x + self.sub(x)


class RRDBNetOld(nn.Module):
    """The old-arch ESRGAN: one nn.Sequential named model (scale 1, 2, 4 or 8:
    log2(scale) nearest-x2 upconv blocks)."""

    def __init__(self, nf, nb, gc, scale, in_ch=3, out_ch=3):
        super().__init__()
        layers = [nn.Conv2d(in_ch, nf, 3, 1, 1),
                  ShortcutBlock(nn.Sequential(*[RRDB(nf, gc, ("RDB1", "RDB2", "RDB3"), True) for _ in range(nb)],
                                              nn.Conv2d(nf, nf, 3, 1, 1)))]
        for _ in range(int(round(math.log2(scale)))):
            layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(nf, nf, 3, 1, 1), nn.LeakyReLU(0.2)]
        layers += [nn.Conv2d(nf, nf, 3, 1, 1), nn.LeakyReLU(0.2), nn.Conv2d(nf, out_ch, 3, 1, 1)]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


# ------------------------------------------------------- SRVGGNetCompact ---


class SRVGGNetCompact(nn.Module):
    def __init__(self, nf, nconv, scale, act, in_ch=3, out_ch=3):
        super().__init__()
        self.scale = scale

        def activation():
            return {"prelu": lambda: nn.PReLU(num_parameters=nf), "relu": lambda: nn.ReLU(),
                    "leakyrelu": lambda: nn.LeakyReLU(negative_slope=0.1)}[act]()

        self.body = nn.ModuleList([nn.Conv2d(in_ch, nf, 3, 1, 1), activation()])
        for _ in range(nconv):
            self.body.append(nn.Conv2d(nf, nf, 3, 1, 1))
            self.body.append(activation())
        self.body.append(nn.Conv2d(nf, out_ch * scale * scale, 3, 1, 1))
        self.upsampler = nn.PixelShuffle(scale)

    def forward(self, x):
        out = x
        for m in self.body:
            out = m(out)
        return self.upsampler(out) + F.interpolate(x, scale_factor=self.scale, mode="nearest")


# ------------------------------------------------------------------ SPAN ---


class Conv3XC(nn.Module):
    """sk (1x1) + conv (1x1 -> 3x3 valid on the zero-padded input -> 1x1),
    gain 2. In eval mode the published forward recomputes eval_conv from
    conv and sk at every call (update_params) and runs that 3x3 convolution
    with padding 1: the eval_conv tensors stored in a file are never used."""

    def __init__(self, c_in, c_out, gain=2):
        super().__init__()
        self.sk = nn.Conv2d(c_in, c_out, 1, 1, 0)
        self.conv = nn.Sequential(nn.Conv2d(c_in, c_in * gain, 1, 1, 0),
                                  nn.Conv2d(c_in * gain, c_out * gain, 3, 1, 0),
                                  nn.Conv2d(c_out * gain, c_out, 1, 1, 0))
        self.eval_conv = nn.Conv2d(c_in, c_out, 3, 1, 1)

    def folded(self):
        """The eval_conv weight and bias update_params computes, here by
        contraction in float64: w[o,i] = w3[o,n] w2[n,m] w1[m,i] (+ sk at the
        centre), b = w3 (sum of w2 over taps and m, times b1, + b2) + b3 + b_sk."""
        w1 = self.conv[0].weight.double()[:, :, 0, 0]
        b1 = self.conv[0].bias.double()
        w2 = self.conv[1].weight.double()
        b2 = self.conv[1].bias.double()
        w3 = self.conv[2].weight.double()[:, :, 0, 0]
        b3 = self.conv[2].bias.double()
        w = torch.einsum("on,nmyx,mi->oiyx", w3, w2, w1)
        w[:, :, 1, 1] += self.sk.weight.double()[:, :, 0, 0]
        b = w3 @ (torch.einsum("nmyx,m->n", w2, b1) + b2) + b3 + self.sk.bias.double()
        return w, b

    def forward(self, x):
        w, b = self.folded()
        return F.conv2d(x, w.to(x.dtype), b.to(x.dtype), padding=1)

    def forward_unfolded(self, x):
        # the published training-mode forward: equal to forward() in exact arithmetic
        return self.conv(F.pad(x, (1, 1, 1, 1))) + self.sk(x)


class SPAB(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1_r = Conv3XC(c, c)
        self.c2_r = Conv3XC(c, c)
        self.c3_r = Conv3XC(c, c)

    def forward(self, x):
        # The published act1 is SiLU(inplace=True): it overwrites out1, so the
        # out1 SPAB returns (SPAN concatenates block_6's) is SiLU(out1).
        out1 = F.silu(self.c1_r(x))
        out3 = self.c3_r(F.silu(self.c2_r(out1)))
        sim_att = torch.sigmoid(out3) - 0.5
        return (out3 + x) * sim_att, out1


class SPAN(nn.Module):
    RGB_MEAN = (0.4488, 0.4371, 0.4040)  # a float32 tensor in the published code

    def __init__(self, nf, scale, norm=True, in_ch=3, out_ch=3):
        super().__init__()
        if not norm:
            self.register_buffer("no_norm", torch.zeros(1))
        self.norm = norm
        self.conv_1 = Conv3XC(in_ch, nf)
        for i in range(1, 7):
            setattr(self, "block_%d" % i, SPAB(nf))
        self.conv_cat = nn.Conv2d(nf * 4, nf, 1, 1, 0)
        self.conv_2 = Conv3XC(nf, nf)
        self.upsampler = nn.Sequential(nn.Conv2d(nf, out_ch * scale * scale, 3, 1, 1), nn.PixelShuffle(scale))

    def forward(self, x):
        if self.norm:
            mean = torch.tensor(self.RGB_MEAN, dtype=torch.float32).view(1, 3, 1, 1).to(x.device, x.dtype)
            x = (x - mean) * 255.0
        feat = self.conv_1(x)
        b1, _ = self.block_1(feat)
        b, _ = self.block_2(b1)
        b, _ = self.block_3(b)
        b, _ = self.block_4(b)
        b, _ = self.block_5(b)
        b6, b5_2 = self.block_6(b)
        b6 = self.conv_2(b6)
        return self.upsampler(self.conv_cat(torch.cat([feat, b6, b1, b5_2], 1)))


# ------------------------------------------------------------ Real-CUGAN ---


class SEBlock(nn.Module):
    def __init__(self, c, reduction=8):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c // reduction, 1, 1, 0, bias=True)
        self.conv2 = nn.Conv2d(c // reduction, c, 1, 1, 0, bias=True)

    def forward(self, x):
        if x.dtype == torch.float16:  # the published code takes the mean in float32 for half tensors
            x0 = torch.mean(x.float(), dim=(2, 3), keepdim=True).half()
        else:
            x0 = torch.mean(x, dim=(2, 3), keepdim=True)
        return x * torch.sigmoid(self.conv2(F.relu(self.conv1(x0))))


class UNetConv(nn.Module):
    def __init__(self, cin, cmid, cout, se):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin, cmid, 3, 1, 0), nn.LeakyReLU(0.1),
                                  nn.Conv2d(cmid, cout, 3, 1, 0), nn.LeakyReLU(0.1))
        if se:
            self.seblock = SEBlock(cout)
        self.se = se

    def forward(self, x):
        z = self.conv(x)
        return self.seblock(z) if self.se else z


def crop(x, n):
    return x[:, :, n:-n, n:-n]  # F.pad(x, (-n, -n, -n, -n))


class UNet1(nn.Module):
    """UNet1 (x3: UNet1x3, whose deconvolution is 5/3/2). w is the base width
    (32 in the published models: convolutions of 32, 64 and 128 channels)."""

    def __init__(self, cin, cout, deconv, w, x3=False):
        super().__init__()
        self.conv1 = UNetConv(cin, w, 2 * w, se=False)
        self.conv1_down = nn.Conv2d(2 * w, 2 * w, 2, 2, 0)
        self.conv2 = UNetConv(2 * w, 4 * w, 2 * w, se=True)
        self.conv2_up = nn.ConvTranspose2d(2 * w, 2 * w, 2, 2, 0)
        self.conv3 = nn.Conv2d(2 * w, 2 * w, 3, 1, 0)
        if deconv:
            self.conv_bottom = nn.ConvTranspose2d(2 * w, cout, *((5, 3, 2) if x3 else (4, 2, 3)))
        else:
            self.conv_bottom = nn.Conv2d(2 * w, cout, 3, 1, 0)

    def forward(self, x):
        x1 = self.conv1(x)
        x2 = lrelu(self.conv1_down(x1), 0.1)
        x1 = crop(x1, 4)
        x2 = lrelu(self.conv2_up(self.conv2(x2)), 0.1)
        x3 = lrelu(self.conv3(x1 + x2), 0.1)
        return self.conv_bottom(x3)


class UNet2(nn.Module):
    def __init__(self, cin, cout, w):
        super().__init__()
        self.conv1 = UNetConv(cin, w, 2 * w, se=False)
        self.conv1_down = nn.Conv2d(2 * w, 2 * w, 2, 2, 0)
        self.conv2 = UNetConv(2 * w, 2 * w, 4 * w, se=True)
        self.conv2_down = nn.Conv2d(4 * w, 4 * w, 2, 2, 0)
        self.conv3 = UNetConv(4 * w, 8 * w, 4 * w, se=True)
        self.conv3_up = nn.ConvTranspose2d(4 * w, 4 * w, 2, 2, 0)
        self.conv4 = UNetConv(4 * w, 2 * w, 2 * w, se=True)
        self.conv4_up = nn.ConvTranspose2d(2 * w, 2 * w, 2, 2, 0)
        self.conv5 = nn.Conv2d(2 * w, 2 * w, 3, 1, 0)
        self.conv_bottom = nn.Conv2d(2 * w, cout, 3, 1, 0)

    def forward(self, x, alpha=1.0):
        x1 = self.conv1(x)
        x2 = lrelu(self.conv1_down(x1), 0.1)
        x1 = crop(x1, 16)
        x2 = self.conv2(x2)
        x3 = lrelu(self.conv2_down(x2), 0.1)
        x2 = crop(x2, 4)
        x3 = lrelu(self.conv3_up(self.conv3(x3)), 0.1)
        x4 = self.conv4(x2 + x3) * alpha
        x4 = lrelu(self.conv4_up(x4), 0.1)
        x5 = lrelu(self.conv5(x1 + x4), 0.1)
        return self.conv_bottom(x5)


class UpCunet(nn.Module):
    """UpCunet2x/3x/4x, the tile_mode=0 path, returning the float image
    before the published code's round/clamp to bytes. pro: None, "int" (the
    official files' "pro": 1, added to the state dict when saving) or
    "tensor" (spandrel's zeros(1) buffer named pro)."""

    def __init__(self, scale, w, pro=None, in_ch=3, out_ch=3):
        super().__init__()
        self.scale = scale
        self.pro_mode = pro
        if pro == "tensor":
            self.register_buffer("pro", torch.zeros(1))
        if scale == 4:
            self.unet1 = UNet1(in_ch, 2 * w, True, w)
            self.unet2 = UNet2(2 * w, 2 * w, w)
            self.ps = nn.PixelShuffle(2)
            self.conv_final = nn.Conv2d(2 * w, 4 * out_ch, 3, 1, 0)
        else:
            self.unet1 = UNet1(in_ch, out_ch, True, w, x3=(scale == 3))
            self.unet2 = UNet2(in_ch, out_ch, w)

    def forward(self, x):
        s = self.scale
        _, _, h0, w0 = x.shape
        if self.pro_mode:
            x = x * 0.7 + 0.15
        x00 = x
        m, p = {2: (2, 18), 3: (4, 14), 4: (2, 19)}[s]
        ph, pw = ((h0 - 1) // m + 1) * m, ((w0 - 1) // m + 1) * m
        x = F.pad(x, (p, p + pw - w0, p, p + ph - h0), "reflect")
        x = self.unet1(x)
        x0 = self.unet2(x)
        x = x0 + crop(x, 20)
        if s == 4:
            x = self.ps(crop(self.conv_final(x), 1))
        x = x[:, :, :h0 * s, :w0 * s]
        if s == 4:
            x = x + F.interpolate(x00, scale_factor=4, mode="nearest")
        if self.pro_mode:
            x = (x - 0.15) / 0.7
        return x


# ------------------------------------------------------------- RealPLKSR ---


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return self.weight[:, None, None] * ((x - u) / torch.sqrt(s + self.eps)) + self.bias[:, None, None]


class PLKConv2d(nn.Module):
    def __init__(self, pdim, k):
        super().__init__()
        self.conv = nn.Conv2d(pdim, pdim, k, 1, k // 2)
        self.idx = pdim

    def forward(self, x):
        return torch.cat([self.conv(x[:, :self.idx]), x[:, self.idx:]], 1)


class EA(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(dim, dim, 3, 1, 1), nn.Sigmoid())

    def forward(self, x):
        return x * self.f(x)


class PLKBlock(nn.Module):
    def __init__(self, dim, k, split, use_ea, groups, layer_norm):
        super().__init__()
        self.layer_norm = LayerNorm(dim) if layer_norm else nn.Identity()
        self.channel_mixer = nn.Sequential(nn.Conv2d(dim, dim * 2, 3, 1, 1), nn.Mish(), nn.Conv2d(dim * 2, dim, 3, 1, 1))
        self.lk = PLKConv2d(int(dim * split), k)
        self.attn = EA(dim) if use_ea else nn.Identity()
        self.refine = nn.Conv2d(dim, dim, 1, 1, 0)
        self.norm = nn.Identity() if layer_norm else nn.GroupNorm(groups, dim)

    def forward(self, x):
        y = self.channel_mixer(self.layer_norm(x))
        return self.norm(self.refine(self.attn(self.lk(y)))) + x


class RealPLKSR(nn.Module):
    def __init__(self, dim, nb, scale, k=17, split=0.25, use_ea=True, groups=4, layer_norm=False):
        super().__init__()
        self.scale = scale
        self.feats = nn.Sequential(nn.Conv2d(3, dim, 3, 1, 1),
                                   *[PLKBlock(dim, k, split, use_ea, groups, layer_norm) for _ in range(nb)],
                                   nn.Dropout2d(0.0), nn.Conv2d(dim, 3 * scale * scale, 3, 1, 1))
        self.to_img = nn.PixelShuffle(scale)

    def forward(self, x):
        return self.to_img(self.feats(x) + torch.repeat_interleave(x, self.scale ** 2, dim=1))


# ----------------------------------------------------------------- cases ---

# Each case: name, arch, scale, variant, builder, input (H, W), seed, detection
# facts, and how its files are written: container ("plain", "params_ema",
# "params", "state_dict"), prefix ("" or "module."), dtype of the stored
# tensors, and extra formats ("legacy", "safetensors", "shared").
NF, NB, GC = 8, 2, 4  # ESRGAN features, blocks, growth (published: 64, 23, 32)
W_CUGAN = 4  # Real-CUGAN base width (published: 32)


def case(name, arch, scale, variant, build, size, seed, facts, container="plain", prefix="", dtype="F32",
         extra=(), tweak=None):
    return dict(name=name, arch=arch, scale=scale, variant=variant, build=build, size=size, seed=seed,
                facts=facts, container=container, prefix=prefix, dtype=dtype, extra=tuple(extra), tweak=tweak)


def esr(nf=NF, nb=NB, gc=GC, **kw):
    return dict(in_channels=3, out_channels=3, features=nf, blocks=nb, growth=gc, **kw)


def span_scale_conv1(m):
    # the published SPAN multiplies the input by 255 before conv_1: scale
    # conv_1's output back so that random weights keep activations O(1)
    with torch.no_grad():
        for t in (m.conv_1.conv[2].weight, m.conv_1.conv[2].bias, m.conv_1.sk.weight, m.conv_1.sk.bias):
            t.mul_(1 / 255.0)


def span_consistent_eval_conv(m):
    # eval_conv as an exported (eval-mode) model holds it: the fold of conv and sk
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, Conv3XC):
                w, b = mod.folded()
                mod.eval_conv.weight.copy_(w.float())
                mod.eval_conv.bias.copy_(b.float())


CASES = [
    case("esrgan_new_x4", "ESRGAN", 4, "new keys (BasicSR RRDBNet), x4; {'params_ema': sd} as Real-ESRGAN releases it",
         lambda: RRDBNetNew("basicsr", NF, NB, GC, 4), (12, 16), 101, esr(unshuffle=1, keys="new"),
         container="params_ema", extra=("legacy",)),
    case("esrgan_new_x2", "ESRGAN", 2, "new keys, x2: pixel unshuffle by 2 in front (conv_first has 12 input channels)",
         lambda: RRDBNetNew("basicsr", NF, NB, GC, 2), (12, 16), 102, esr(unshuffle=2, keys="new"),
         container="params_ema", extra=("safetensors",)),
    case("esrgan_new_x1", "ESRGAN", 1, "new keys, x1: pixel unshuffle by 4 in front (conv_first has 48 input channels)",
         lambda: RRDBNetNew("basicsr", NF, NB, GC, 1), (12, 16), 103, esr(unshuffle=4, keys="new")),
    case("esrgan_2019_x4", "ESRGAN", 4, "2019 ESRGAN repository keys (RRDB_trunk, trunk_conv, upconv1/2, HRconv), x4",
         lambda: RRDBNetNew("esrgan2019", NF, 1, GC, 4), (11, 13), 104, esr(nb=1, unshuffle=1, keys="esrgan2019")),
    case("esrgan_old_x4", "ESRGAN", 4, "old-arch keys (model.0, model.1.sub.N.RDBk.convj.0), x4, float16 storages",
         lambda: RRDBNetOld(NF, NB, GC, 4), (11, 13), 105, esr(unshuffle=1, keys="old"), dtype="F16",
         extra=("legacy",)),
    case("esrgan_old_x8", "ESRGAN", 8, "old-arch keys, x8 (three upconv blocks: model.3, model.6, model.9)",
         lambda: RRDBNetOld(NF, 1, GC, 8), (8, 10), 106, esr(nb=1, unshuffle=1, keys="old"),
         prefix="module."),
    case("esrgan_old_x2", "ESRGAN", 2, "old-arch keys, x2 (one upconv block, no pixel unshuffle)",
         lambda: RRDBNetOld(NF, 1, GC, 2), (12, 16), 107, esr(nb=1, unshuffle=1, keys="old")),
    case("esrgan_old_x1", "ESRGAN", 1, "old-arch keys, x1 (no upconv block: model.2 and model.4 are the HR and last convs)",
         lambda: RRDBNetOld(NF, 1, GC, 1), (12, 16), 108, esr(nb=1, unshuffle=1, keys="old")),

    case("compact_prelu_x4", "SRVGGNetCompact", 4, "PReLU (body.1.weight), x4; {'params': sd} as realesr-animevideov3.pth",
         lambda: SRVGGNetCompact(16, 4, 4, "prelu"), (13, 17), 201,
         dict(in_channels=3, out_channels=3, features=16, convs=4, act="prelu"), container="params",
         extra=("legacy", "safetensors", "shared")),
    case("compact_prelu_x2", "SRVGGNetCompact", 2, "PReLU, x2",
         lambda: SRVGGNetCompact(8, 3, 2, "prelu"), (12, 16), 202,
         dict(in_channels=3, out_channels=3, features=8, convs=3, act="prelu")),
    case("compact_relu_x2", "SRVGGNetCompact", 2,
         "ReLU, x2: no activation parameters (body.1 absent), so the activation is not in the keys",
         lambda: SRVGGNetCompact(8, 3, 2, "relu"), (12, 16), 203,
         dict(in_channels=3, out_channels=3, features=8, convs=3, act="relu"), prefix="module."),
    case("compact_lrelu_x4", "SRVGGNetCompact", 4,
         "LeakyReLU(0.1), x4, bfloat16 storages: the activation is not in the keys",
         lambda: SRVGGNetCompact(8, 3, 4, "leakyrelu"), (12, 16), 204,
         dict(in_channels=3, out_channels=3, features=8, convs=3, act="leakyrelu"), dtype="BF16",
         extra=("safetensors",)),

    case("span_x4", "SPAN", 4,
         "x4, mean/255 normalisation; eval_conv tensors stale (random, as in a training checkpoint): "
         "the published forward recomputes them from conv.0-2 and sk",
         lambda: SPAN(5, 4), (12, 16), 301, dict(in_channels=3, out_channels=3, features=5, norm=True),
         extra=("legacy",), tweak=span_scale_conv1),
    case("span_x2_nonorm", "SPAN", 2,
         "x2, no_norm buffer (no normalisation, spandrel/neosr); eval_conv consistent with conv and sk; "
         "{'state_dict': sd}",
         lambda: SPAN(4, 2, norm=False), (12, 16), 302, dict(in_channels=3, out_channels=3, features=4, norm=False),
         container="state_dict", tweak=span_consistent_eval_conv),

    case("cugan_2x", "RealCUGAN", 2, "UpCunet2x (UNet1 + UNet2, reflect pad 18, crop), 1/8 width",
         lambda: UpCunet(2, W_CUGAN), (21, 22), 401, dict(in_channels=3, out_channels=3, width=W_CUGAN, pro=False)),
    case("cugan_3x", "RealCUGAN", 3, "UpCunet3x (UNet1x3: 5/3/2 deconvolution; pad to a multiple of 4, reflect 14), 1/8 width",
         lambda: UpCunet(3, W_CUGAN), (22, 21), 402, dict(in_channels=3, out_channels=3, width=W_CUGAN, pro=False)),
    case("cugan_4x", "RealCUGAN", 4,
         "UpCunet4x (reflect pad 19, conv_final, crop 1, pixel shuffle, + nearest x4 input), 1/8 width",
         lambda: UpCunet(4, W_CUGAN), (21, 22), 403, dict(in_channels=3, out_channels=3, width=W_CUGAN, pro=False)),
    case("cugan_2x_pro", "RealCUGAN", 2, "pro UpCunet2x as the official files hold it: key 'pro' -> the int 1",
         lambda: UpCunet(2, W_CUGAN, pro="int"), (21, 22), 404,
         dict(in_channels=3, out_channels=3, width=W_CUGAN, pro=True), extra=("legacy",)),
    case("cugan_3x_pro", "RealCUGAN", 3, "pro UpCunet3x as spandrel saves it: key 'pro' -> a zeros(1) tensor",
         lambda: UpCunet(3, W_CUGAN, pro="tensor"), (22, 21), 405,
         dict(in_channels=3, out_channels=3, width=W_CUGAN, pro=True)),

    case("realplksr_x4", "RealPLKSR", 4, "x4, GroupNorm(4), element-wise attention, kernel 17, split 0.25",
         lambda: RealPLKSR(8, 2, 4), (12, 16), 501,
         dict(in_channels=3, out_channels=3, features=8, blocks=2, kernel=17, split_channels=2, ea=True,
              layer_norm=False)),
    case("realplksr_x2_ln", "RealPLKSR", 2, "x2, LayerNorm (spandrel's layer_norm), no attention, kernel 13",
         lambda: RealPLKSR(8, 2, 2, k=13, use_ea=False, layer_norm=True), (12, 16), 502,
         dict(in_channels=3, out_channels=3, features=8, blocks=2, kernel=13, split_channels=2, ea=False,
              layer_norm=True), container="params_ema"),
]


# --------------------------------------------------------------- weights ---


def init_weights(model, seed):
    """Deterministic random weights: convolutions N(0, 1/fan_in) (for a
    transposed convolution fan_in is in_channels * kh * kw / stride^2, the
    inputs each output sums), biases N(0, 0.05^2), PReLU slopes in
    [0.05, 0.3), norm scales 1 + N(0, 0.1^2) and shifts N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                k = m.weight.shape[2] * m.weight.shape[3]
                if isinstance(m, nn.Conv2d):
                    fan_in = m.in_channels // m.groups * k
                else:
                    fan_in = m.in_channels * k / (m.stride[0] * m.stride[1])
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(fan_in))
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
            elif isinstance(m, nn.PReLU):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 0.25 + 0.05)
            elif isinstance(m, (nn.GroupNorm, LayerNorm)):
                m.weight.copy_(1 + torch.randn(m.weight.shape, generator=g) * 0.1)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return g


TORCH_DTYPE = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def round_to(model, dtype):
    # the float32 values a file of this dtype holds
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.to(dtype).float())


# ----------------------------------------------------------------- files ---


def stored_dict(model, c):
    """The state dict as the file holds it (after the container is removed):
    fresh contiguous tensors of the case's dtype, plus non-tensor entries."""
    sd = OrderedDict()
    for k, v in model.state_dict().items():
        sd[c["prefix"] + k] = v.detach().clone().to(TORCH_DTYPE[c["dtype"]]) if v.is_floating_point() else v.clone()
    if getattr(model, "pro_mode", None) == "int":
        sd[c["prefix"] + "pro"] = 1
    return sd


def wrap(sd, container):
    return sd if container == "plain" else {container: sd}


def shared_dict(sd):
    """The same tensors as views of one float storage: each at its own offset,
    the first 4-D tensor found after the first stored as a permuted
    (1, 0, 2, 3) view of an (I, O, kh, kw) block, so non-contiguous."""
    tensors = [(k, v) for k, v in sd.items() if torch.is_tensor(v)]
    total = sum(v.numel() for _, v in tensors)
    flat = torch.zeros(total, dtype=tensors[0][1].dtype)
    out, off, permuted = OrderedDict(), 0, None
    for i, (k, v) in enumerate(tensors):
        n = v.numel()
        region = flat[off:off + n]
        if permuted is None and i > 0 and v.dim() == 4:
            o, ci, kh, kw = v.shape
            region.copy_(v.permute(1, 0, 2, 3).reshape(-1))
            view = region.view(ci, o, kh, kw).permute(1, 0, 2, 3)
            permuted = k
        else:
            region.copy_(v.reshape(-1))
            view = region.view(v.shape)
        out[k] = view
        off += n
    for k, v in sd.items():
        if not torch.is_tensor(v):
            out[k] = v
    assert permuted is not None and not out[permuted].is_contiguous()
    return out, permuted


ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same 16 bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()  # little-endian: main() checks the host


def write_safetensors(path, sd, metadata):
    """safetensors by its specification: u64 little-endian header length, a
    JSON header (name -> dtype, shape, data_offsets; __metadata__ strings),
    padded with spaces to a multiple of 8, then the tensors' bytes."""
    header, blobs, off = OrderedDict(), [], 0
    header["__metadata__"] = metadata
    for k, v in sd.items():
        if not torch.is_tensor(v):
            continue
        b = tensor_bytes(v)
        header[k] = {"dtype": ST_DTYPE[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    np_dtype = {"F32": "<f4", "F16": "<f2", "BF16": "<i2"}
    out = OrderedDict()
    for k, t in header.items():
        b, e = t["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + e], dtype=np_dtype[t["dtype"]]).reshape(t["shape"]).copy()
        v = torch.from_numpy(a)
        out[k] = v.view(torch.bfloat16) if t["dtype"] == "BF16" else v
    return out, meta


def torch_load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # a PyTorch without weights_only
        return torch.load(path, map_location="cpu")


def storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def same_dict(got, want, what):
    assert list(got.keys()) == list(want.keys()), (what, list(got.keys())[:4], list(want.keys())[:4])
    for k, w in want.items():
        g = got[k]
        if torch.is_tensor(w):
            assert torch.is_tensor(g) and g.dtype == w.dtype and g.shape == w.shape, (what, k)
            assert torch.equal(g, w), (what, k)
        else:
            assert g == w, (what, k, g, w)


def zip_folder(path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    return sorted({n.split("/")[0] for n in names if n.endswith("data.pkl")})


def save_npy(path, t):
    np.save(path, t.detach().cpu().numpy().astype("<f4"))


# ------------------------------------------------------------------- run ---


def rel_err(got, want):
    d = (got.double() - want.double()).norm().item()
    return d / want.double().norm().item()


def forward(model, x, dtype, device="cpu"):
    m = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        return m(x.to(device=device, dtype=dtype)).double().cpu()


def self_checks(model, x, ref):
    """Checks inside the references: SPAN's folded eval_conv against the
    published training-mode chain; Real-CUGAN's output size."""
    if isinstance(model, SPAN):
        m = copy.deepcopy(model).double()
        conv3xc = [mod for mod in m.modules() if isinstance(mod, Conv3XC)]
        for mod in conv3xc:
            mod.forward = mod.forward_unfolded
        with torch.no_grad():
            e = rel_err(m(x.double()), ref)
        assert e < 1e-12, ("SPAN folded against unfolded", e)


def run_case(c, out_dir):
    torch.manual_seed(c["seed"])
    model = c["build"]().eval()
    g = init_weights(model, c["seed"])
    if c["tweak"]:
        c["tweak"](model)
    round_to(model, TORCH_DTYPE[c["dtype"]])
    h, w = c["size"]
    x = torch.rand((1, 3, h, w), generator=g)
    s = c["scale"]

    ref = forward(model, x, torch.float64)
    assert ref.shape == (1, 3, h * s, w * s), (c["name"], tuple(ref.shape))
    assert torch.isfinite(ref).all(), c["name"]
    self_checks(model, x, ref)
    errs = {"torch_cpu_f32": rel_err(forward(model, x, torch.float32), ref)}
    if torch.cuda.is_available():
        for label, dt in (("torch_cuda_f32", torch.float32), ("torch_cuda_f16", torch.float16),
                          ("torch_cuda_bf16", torch.bfloat16)):
            try:
                y = forward(model, x, dt, "cuda")
                errs[label] = rel_err(y, ref) if torch.isfinite(y).all() else None
            except Exception as e:  # an op without a kernel for this dtype: say so, go on
                errs[label] = "failed: %s" % str(e).splitlines()[0][:120]

    name = c["name"]
    save_npy(os.path.join(out_dir, name + ".in.npy"), x)
    save_npy(os.path.join(out_dir, name + ".out.npy"), ref)
    sd = stored_dict(model, c)
    obj = wrap(sd, c["container"])
    files = []

    def add(fname, fmt, **kw):
        p = os.path.join(out_dir, fname)
        files.append(dict(path=fname, format=fmt, bytes=os.path.getsize(p), **kw))
        return p

    # zip: the params_ema cases through a buffer (top folder "archive"), the others to the path
    p = os.path.join(out_dir, name + ".pth")
    if c["container"] == "params_ema":
        buf = io.BytesIO()
        torch.save(obj, buf)
        open(p, "wb").write(buf.getvalue())
    else:
        torch.save(obj, p)
    add(name + ".pth", "zip", container=c["container"], prefix=c["prefix"], zip_folder=zip_folder(p))
    if "legacy" in c["extra"]:
        torch.save(obj, os.path.join(out_dir, name + ".legacy.pth"), _use_new_zipfile_serialization=False)
        add(name + ".legacy.pth", "legacy", container=c["container"], prefix=c["prefix"])
    if "shared" in c["extra"]:
        shd, permuted = shared_dict(sd)
        ptrs = {storage_ptr(v) for v in shd.values() if torch.is_tensor(v)}
        assert len(ptrs) == 1, ptrs
        torch.save(wrap(shd, c["container"]), os.path.join(out_dir, name + ".shared.pth"))
        add(name + ".shared.pth", "zip", container=c["container"], prefix=c["prefix"],
            zip_folder=zip_folder(os.path.join(out_dir, name + ".shared.pth")),
            storage="one storage for every tensor; %s a permuted (non-contiguous) view" % permuted)
    if "safetensors" in c["extra"]:
        meta = {"format": "pt", "vsr.golden": name}
        write_safetensors(os.path.join(out_dir, name + ".safetensors"), sd, meta)
        add(name + ".safetensors", "safetensors", container="plain", prefix=c["prefix"])

    # read every file back
    for f in files:
        p = os.path.join(out_dir, f["path"])
        if f["format"] == "safetensors":
            got, meta = read_safetensors(p)
            same_dict(got, OrderedDict((k, v) for k, v in sd.items() if torch.is_tensor(v)), p)
            continue
        got = torch_load(p)
        if c["container"] != "plain":
            assert list(got.keys()) == [c["container"]], (p, list(got.keys()))
            got = got[c["container"]]
        same_dict(got, sd, p)
        if "storage" in f:
            assert len({storage_ptr(v) for v in got.values() if torch.is_tensor(v)}) == 1, p

    tensors = [v for v in sd.values() if torch.is_tensor(v)]
    entry = OrderedDict(
        name=name, arch=c["arch"], scale=s, variant=c["variant"], dtype=c["dtype"],
        files=files,
        input=name + ".in.npy", input_shape=list(x.shape),
        output=name + ".out.npy", output_shape=list(ref.shape),
        detect=c["facts"], tensors=len(tensors), tensor_elems=sum(t.numel() for t in tensors),
        keys_sample=[k for k in sd.keys()][:3] + [k for k in sd.keys()][-2:],
        rel_err=errs, seed=c["seed"])
    print("%-18s out %-16s mean %+.4f std %.4f max|y| %7.3f  f32 %.2e  %s" % (
        name, "x".join(map(str, ref.shape[2:])), ref.mean().item(), ref.std().item(), ref.abs().max().item(),
        errs["torch_cpu_f32"], " ".join("%s %s" % (k[6:], ("%.2e" % v) if isinstance(v, float) else v)
                                        for k, v in errs.items() if k.startswith("torch_cuda"))))
    return entry


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    out_dir = sys.argv[1]
    assert sys.byteorder == "little", "the fixtures are little-endian: run this on a little-endian host"
    os.makedirs(out_dir, exist_ok=True)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    only = os.environ.get("CASES", "").split()
    entries = [run_case(c, out_dir) for c in CASES if not only or c["name"] in only]
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    manifest = OrderedDict(
        generator="scripts/golden_pth.py", torch=torch.__version__, cuda_device=dev,
        reference="float64 forward on the CPU of the stored values, cast to float32, before any clamping",
        tolerance=OrderedDict(cpu_f32_rel=1e-5,
                              gpu_note="rel_err.torch_cuda_f16/bf16: PyTorch's own error on this case; "
                                       "hold vsr's GPU within a small multiple of it"),
        cases=entries)
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print("%d cases, %d files, %d bytes in %s (torch %s%s)" % (
        len(entries), len(os.listdir(out_dir)), total, out_dir, torch.__version__, ", " + dev if dev else ""))


if __name__ == "__main__":
    main()
