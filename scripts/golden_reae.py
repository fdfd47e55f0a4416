#!/usr/bin/env python3
"""Golden outputs for SwiftVR's ReAE, computed independently of vsr.

A from-scratch PyTorch implementation of the ReAE as published in
H-oliday/SwiftVR swiftvr/models/reae.py (TAEHV topology): pixel_unshuffle(2),
encoder (conv, ReLU, 3 x [TPool, stride-2 conv, 3 x MemBlock], conv to the
latent channels), decoder (tanh(x/3)*3, conv, ReLU, 3 x [3 x MemBlock,
nearest x2, TGrow, conv], ReLU, conv), pixel_shuffle(2). A MemBlock computes
relu(conv4(relu(conv2(relu(conv0(cat[x_t, x_{t-1}]))))) + x_t) with x_{-1} = 0
over the whole sequence at once; TPool folds s frames into channels and runs
a 1x1 conv; TGrow(c,1) is a 1x1 conv, TGrow(c,2) repeats each frame twice
(nearest interpolation in time) and runs Conv3d (3,1,1) with padding (1,0,0).
Float32 on the CPU.

It writes, into OUT_DIR:
  reae_tiny.safetensors  the weights (official key names, fp32), random from a
                         fixed seed, widths reduced (encoder 8, decoder
                         16/8/8/8, latent 8) so CPU tests stay fast;
                         written by a small safetensors writer below (the
                         format is an 8-byte header length, a JSON header,
                         then the raw data)
  reae_in.f32            input frames (8, 32, 48, 3) NHWC in [0,1]
  reae_latent.f32        encoder output (2, 2, 3, 8) NHWC
  reae_out.f32           decoder output (8, 32, 48, 3) NHWC, before clamping

With a second argument, the weights are read from that reae.safetensors
instead (a checkpoint written by `vsr checkpoint synth --preset tiny`, read by
the minimal reader below) and the outputs are named reae_synth_*.f32.

Usage: python3 scripts/golden_reae.py OUT_DIR [REAE.safetensors]
"""
import json, struct, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ENC, DEC, LAT = 8, [16, 8, 8, 8], 8


def make_weights(seed=20261129):
    rng = np.random.default_rng(seed)
    w = {}

    def put(name, shape, fan_in, scale):
        w[name] = (rng.standard_normal(shape) * scale * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def conv(key, out, inp, k, bias, scale=1.0):
        put(key + ".weight", (out, inp, k, k), inp * k * k, scale)
        if bias:
            w[key + ".bias"] = (rng.standard_normal(out) * 0.1).astype(np.float32)

    def mem(key, c):
        conv(key + ".conv.0", c, 2 * c, 3, True)
        conv(key + ".conv.2", c, c, 3, True)
        conv(key + ".conv.4", c, c, 3, True, 0.3)

    conv("encoder.0", ENC, 12, 3, True)
    for base, s in ((2, 2), (7, 2), (12, 1)):
        put(f"encoder.{base}.conv.weight", (ENC, s * ENC, 1, 1), s * ENC, 0.7)
        conv(f"encoder.{base + 1}", ENC, ENC, 3, False)
        for j in range(3):
            mem(f"encoder.{base + 2 + j}", ENC)
    conv("encoder.17", LAT, ENC, 3, True)
    conv("decoder.1", DEC[0], LAT, 3, True)
    for i, base in enumerate((3, 9, 15)):
        c = DEC[i]
        for j in range(3):
            mem(f"decoder.{base + j}", c)
        if i == 0:
            put(f"decoder.{base + 4}.proj.weight", (c, c, 1, 1), c, 0.7)
        else:
            put(f"decoder.{base + 4}.conv3d.weight", (c, c, 3, 1, 1), 2 * c, 0.7)
        conv(f"decoder.{base + 5}", DEC[i + 1], c, 3, False)
    conv("decoder.22", 12, DEC[3], 3, True, 0.5)
    return w


def load_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(t["shape"]).copy()
    return out


def save_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Mem(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1),
                                  nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):  # x: (T, C, H, W), the whole sequence
        past = torch.cat([torch.zeros_like(x[:1]), x[:-1]], 0)
        return F.relu(self.conv(torch.cat([x, past], 1)) + x)


class TPool(nn.Module):
    def __init__(self, c, s):
        super().__init__()
        self.s = s
        self.conv = nn.Conv2d(c * s, c, 1, bias=False)

    def forward(self, x):
        t, c, h, w = x.shape
        return self.conv(x.reshape(-1, self.s * c, h, w))


class TGrow(nn.Module):
    def __init__(self, c, s):
        super().__init__()
        self.s = s
        if s == 1:
            self.proj = nn.Conv2d(c, c, 1, bias=False)
        else:
            self.conv3d = nn.Conv3d(c, c, (3, 1, 1), padding=(1, 0, 0), bias=False)

    def forward(self, x):
        t, c, h, w = x.shape
        if self.s == 1:
            return self.proj(x)
        x = F.interpolate(x.unsqueeze(2), size=(self.s, h, w), mode="nearest")
        return self.conv3d(x).permute(0, 2, 1, 3, 4).reshape(t * self.s, c, h, w)


class Clamp(nn.Module):
    def forward(self, x):
        return torch.tanh(x / 3) * 3


def build():
    e, d = ENC, DEC
    enc = nn.Sequential(
        nn.Conv2d(12, e, 3, padding=1), nn.ReLU(),
        TPool(e, 2), nn.Conv2d(e, e, 3, stride=2, padding=1, bias=False), Mem(e), Mem(e), Mem(e),
        TPool(e, 2), nn.Conv2d(e, e, 3, stride=2, padding=1, bias=False), Mem(e), Mem(e), Mem(e),
        TPool(e, 1), nn.Conv2d(e, e, 3, stride=2, padding=1, bias=False), Mem(e), Mem(e), Mem(e),
        nn.Conv2d(e, LAT, 3, padding=1))
    dec = nn.Sequential(
        Clamp(), nn.Conv2d(LAT, d[0], 3, padding=1), nn.ReLU(),
        Mem(d[0]), Mem(d[0]), Mem(d[0]), nn.Upsample(scale_factor=2), TGrow(d[0], 1), nn.Conv2d(d[0], d[1], 3, padding=1, bias=False),
        Mem(d[1]), Mem(d[1]), Mem(d[1]), nn.Upsample(scale_factor=2), TGrow(d[1], 2), nn.Conv2d(d[1], d[2], 3, padding=1, bias=False),
        Mem(d[2]), Mem(d[2]), Mem(d[2]), nn.Upsample(scale_factor=2), TGrow(d[2], 2), nn.Conv2d(d[2], d[3], 3, padding=1, bias=False),
        nn.ReLU(), nn.Conv2d(d[3], 12, 3, padding=1))
    m = nn.Module()
    m.encoder, m.decoder = enc, dec
    return m


def main():
    global ENC, DEC, LAT
    out = sys.argv[1]
    torch.backends.cudnn.allow_tf32 = False
    prefix = "reae"
    if len(sys.argv) > 2:
        weights = load_safetensors(sys.argv[2])
        prefix = "reae_synth"
        ENC, LAT = weights["encoder.0.weight"].shape[0], weights["encoder.17.weight"].shape[0]
        DEC = [weights[f"decoder.{i}.weight"].shape[0] for i in (1, 8, 14, 20)]
    else:
        weights = make_weights()
        save_safetensors(f"{out}/reae_tiny.safetensors", weights)
    m = build().eval()
    m.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
    rng = np.random.default_rng(7)
    x = rng.random((8, 32, 48, 3), dtype=np.float32)
    with torch.no_grad():
        t = torch.from_numpy(x).permute(0, 3, 1, 2)
        z = m.encoder(F.pixel_unshuffle(t, 2))
        y = F.pixel_shuffle(m.decoder(z), 2)
    x.astype("<f4").tofile(f"{out}/{prefix}_in.f32")
    z.permute(0, 2, 3, 1).contiguous().numpy().astype("<f4").tofile(f"{out}/{prefix}_latent.f32")
    y.permute(0, 2, 3, 1).contiguous().numpy().astype("<f4").tofile(f"{out}/{prefix}_out.f32")
    print("latent", tuple(z.shape), float(z.std()), "out", tuple(y.shape), float(y.mean()), float(y.std()))
    print("torch", torch.__version__)


if __name__ == "__main__":
    main()
