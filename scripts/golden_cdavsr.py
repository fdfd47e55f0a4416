#!/usr/bin/env python3
"""Golden outputs for CDA-VSR, computed independently of vsr.

A from-scratch PyTorch implementation of the CDA-VSR forward pass as
docs/MODELS.md ("CDA-VSR reference") describes the authors' architecture (sspBIT/CDA-VSR,
class CDAVSR), with PyTorch's own operators: F.conv2d, F.leaky_relu,
F.grid_sample for the nearest warp (border, align_corners=True) and for the
deformable sampling (bilinear, zeros, align_corners=True, one call per group
of 32 channels, times the mask, then the 1x1 dcn convolution), F.pixel_shuffle
and F.interpolate (bilinear, align_corners=False) for the base image.

The checkpoint is read from its safetensors bytes with numpy (8-byte header
length, JSON header, raw little-endian float32), not with vsr's parser.
Computation is float32 on the CPU, so that the warp's coordinate round trip
(normalise, un-normalise) rounds as PyTorch's float32 does.

Usage: python3 scripts/golden_cdavsr.py CHECKPOINT FIXTURE_DIR W H STEPS
Reads FIXTURE_DIR/{x,mv,res}K.f32 (NHWC float32: frame (H,W,3), motion (H,W,2)
x then y in pixels, residual (H,W,1)) and writes FIXTURE_DIR/outK.f32, the
NHWC float32 output (sH, sW, 3) of step K: step 0 the I path, the others P.
"""
import json, struct, sys
import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(data[base + b:base + e], dtype="<f4").copy()).reshape(t["shape"])
    return tensors, meta


class CDAVSR:
    def __init__(self, w, meta):
        self.w = w
        self.s = int(round((w["upconv1.weight"].shape[0] / 3) ** 0.5))
        self.sigmoid_gate = meta.get("cda_vsr.gate") == "sigmoid"
        self.dtype = w["conv_first.weight"].dtype

    def conv(self, x, name, pad=None):
        wt = self.w[name + ".weight"]
        if pad is None:
            pad = wt.shape[-1] // 2
        return F.conv2d(x, wt, self.w.get(name + ".bias"), padding=pad)

    def resblocks(self, x, prefix, n):
        for i in range(n):
            x = x + self.conv(F.relu(self.conv(x, f"{prefix}.{i}.conv1")), f"{prefix}.{i}.conv2")
        return x

    def grid(self, px, py, W, H):
        # pixel coordinates -> grid_sample's [-1, 1] (align_corners=True), in float32
        return torch.stack((2.0 * px / (W - 1) - 1.0, 2.0 * py / (H - 1) - 1.0), dim=-1).to(self.dtype)

    def step(self, x, state, mv, res, i_path):
        N, _, H, W = x.shape
        lrelu = lambda t: F.leaky_relu(t, 0.1)
        feat = self.resblocks(self.conv(x, "conv_first"), "feature_extraction", 3)
        if i_path:
            rec = self.resblocks(feat, "reconstruction_I", 24)
        else:
            ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float32, device=x.device),
                                    torch.arange(W, dtype=torch.float32, device=x.device), indexing="ij")
            mvx, mvy = mv[:, 0], mv[:, 1]
            g = self.grid(xs + mvx, ys + mvy, W, H)
            warped = F.grid_sample(state, g, mode="nearest", padding_mode="border", align_corners=True)
            o = torch.cat((warped, feat, mv), 1)
            o = lrelu(self.conv(o, "deform_align.conv_offset.0"))
            o = lrelu(self.conv(o, "deform_align.conv_offset.2"))
            o = lrelu(self.conv(o, "deform_align.conv_offset.4"))
            o = self.conv(o, "deform_align.conv_offset.6")
            off = 8 * torch.tanh(o[:, 0:8])
            mask = torch.sigmoid(o[:, 8:12])
            parts = []
            for gi in range(4):
                dy = off[:, 2 * gi] + mvy
                dx = off[:, 2 * gi + 1] + mvx
                gg = self.grid(xs + dx, ys + dy, W, H)
                smp = F.grid_sample(state[:, 32 * gi:32 * gi + 32], gg, mode="bilinear", padding_mode="zeros", align_corners=True)
                parts.append(smp * mask[:, gi:gi + 1])
            aligned = F.conv2d(torch.cat(parts, 1), self.w["deform_align.dcn.weight"])
            wl = lrelu(self.conv(res, "conv_weight_l.0"))
            wl = lrelu(self.conv(wl, "conv_weight_l.2"))
            wl = self.conv(wl, "conv_weight_l.4")
            gated = aligned * torch.sigmoid(wl) if self.sigmoid_gate else aligned * (1 + wl)
            rec = self.resblocks(self.conv(torch.cat((gated, feat), 1), "convs.0"), "reconstruction_P", 12)
        new_state = torch.cat((feat, self.conv(rec, "conv_h")), 1)
        out = F.pixel_shuffle(self.conv(rec, "upconv1"), self.s)
        out = out + F.interpolate(x, scale_factor=self.s, mode="bilinear", align_corners=False)
        return out, new_state


def main():
    ckpt, fixture, W, H, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(4)
    w, meta = load_safetensors(ckpt)
    net = CDAVSR(w, meta)
    read = lambda name, c: torch.from_numpy(np.fromfile(f"{fixture}/{name}", dtype="<f4").reshape(1, H, W, c).copy()).permute(0, 3, 1, 2)
    state = None
    with torch.no_grad():
        for k in range(steps):
            x, mv, res = read(f"x{k}.f32", 3), read(f"mv{k}.f32", 2), read(f"res{k}.f32", 1)
            out, state = net.step(x, state, mv, res, k == 0)
            o = out.permute(0, 2, 3, 1).contiguous().numpy().astype("<f4")
            o.tofile(f"{fixture}/out{k}.f32")
            print(k, o.shape, float(np.abs(o).mean()))


if __name__ == "__main__":
    main()
