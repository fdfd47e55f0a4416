#!/usr/bin/env python3
"""PyTorch eager baseline of the whole SwiftVR network, for side-by-side benchmarks with vsr.

ReAE encoder -> Wan2.2-TI2V-5B DiT (one step at t=1000) -> ReAE decoder, run over a
synthetic video with the streaming chunk protocol of LightX2V's streaming.py as vsr
implements it (model/swiftvr/stream.go, engine.go, forward.go, window.go; see
docs/SWIFTVR.md). Written from the published architecture with PyTorch's own
operators only (torch + numpy, no compilation, no extra packages); weights are read
straight from the official checkpoint layout, as `vsr checkpoint synth --family swiftvr`
writes it.

Per chunk, on the device:
  uint8 frames (the video's last frame repeated past its end; +3 copies in the last chunk)
  -> crop to a multiple of 8 -> to the compute dtype -> bilinear resize (align_corners=False)
  -> /255 -> zero-pad bottom/right to a multiple of 32
  -> ReAE encode (causal: each MemBlock keeps the last input frame of the previous chunk)
  -> DiT (RoPE temporal offset = global latent index; the LAST chunk prepends the previous
     chunk's last clip_len/4+1-latents INPUT latents, zeros if none; --dit-overlap k prepends
     k to middle chunks) -> restored latent = input - v (own latents only)
  -> ReAE decode -> pixel shuffle -> clamp [0,1] -> crop -> x*255 truncated to uint8 (NHWC),
     keeping the chunk's output frames [max(0,start-3), min(F, start+n-(0 if last else 3))).

ReAE: TemporalGrow runs before its nearest upsample (LightX2V's reorder; --temporal-grow after
for the official order) and per-frame layers run --reae-frame-batch frames at a time (default
1; 0 = whole chunk), writing into one output buffer. DiT: time embedding, text embedding and
every block's cross-attention K/V are computed once at load (float32, then cast); q/k/v are
one fused linear; RoPE (t/h/w = 44/42/42 of the head dim, float64 angles, float32 rotation)
is applied before windows are gathered; all 16x16-token windows of a block (spanning every
latent frame of the chunk, shift 8 in odd blocks, edge windows overlapping) are gathered into
one (windows, heads, tokens, head_dim) batch with precomputed index tensors and run through
one scaled_dot_product_attention call (flash backend for bf16 on CUDA); each token's output is
gathered back from its owner window. LayerNorm / RMSNorm, modulation and gated residuals are
computed in float32 and cast back, as Diffusers' WanTransformer3DModel does in a bf16 pipeline.

Timing: one untimed warm-up pass over the whole video, then --repeats timed passes, each
between torch.cuda.synchronize() calls; CUDA events split every chunk into encode (frame
preparation included) / DiT / decode (post-processing included). Reported: median video
time, median middle-chunk stage times, DiT FLOPs (2*M*N*K per linear, 4*Lq*Lk*D per
attention, windows counted as run, overlaps included) and achieved TFLOP/s, peak memory.

Usage:
  python3 scripts/bench_torch_swiftvr.py CKPT_DIR --frames 361 --in-size 640x360 \\
      --out-size 2560x1440 [--clip-len 24] [--repeats 3] [--dtype bf16|fp32] [--device cuda] [--json]
Tiny CPU check:
  python3 scripts/bench_torch_swiftvr.py /tmp/tinyck --device cpu --dtype fp32 \\
      --frames 30 --in-size 64x48 --out-size 128x96 --repeats 1
"""
import argparse
import json
import math
import mmap
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

WINDOW = 16

# ----------------------------------------------------------------------------- safetensors

_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


class SafeFile:
    """A safetensors file, memory-mapped; tensors are copied out one at a time."""

    def __init__(self, path):
        self.path = path
        self._f = open(path, "rb")
        n = struct.unpack("<Q", self._f.read(8))[0]
        self.header = json.loads(self._f.read(n))
        self.header.pop("__metadata__", None)
        self.base = 8 + n
        # ACCESS_COPY: a private, writable mapping (torch.frombuffer wants a writable
        # buffer); nothing is ever written, so the file is untouched and pages stay shared.
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_COPY)

    def keys(self):
        return self.header.keys()

    def shape(self, name):
        return list(self.header[name]["shape"])

    def get(self, name, device, dtype):
        t = self.header[name]
        src = _ST_DTYPES[t["dtype"]]
        b, e = t["data_offsets"]
        shape = list(t["shape"])
        count = (e - b) // torch.empty((), dtype=src).element_size()
        if count == 0:
            return torch.zeros(shape, dtype=dtype, device=device)
        x = torch.frombuffer(self._mm, dtype=src, count=count, offset=self.base + b).reshape(shape)
        if torch.device(device).type == "cpu":
            return x.to(dtype=dtype, copy=True)  # never keep a view of the mapping
        return x.to(device=device).to(dtype)  # copy as stored, convert on the device


class WeightSet:
    """Tensor name -> file, over one or several safetensors files."""

    def __init__(self, files):
        self.files = files
        self.where = {}
        for f in files:
            for k in f.keys():
                self.where[k] = f

    def __contains__(self, name):
        return name in self.where

    def shape(self, name):
        return self.where[name].shape(name)

    def get(self, name, device, dtype):
        if name not in self.where:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        return self.where[name].get(name, device, dtype)


def open_transformer(ck):
    tdir = os.path.join(ck, "transformer")
    index = os.path.join(tdir, "diffusion_pytorch_model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as fh:
            names = sorted(set(json.load(fh)["weight_map"].values()))
    elif os.path.exists(os.path.join(tdir, "diffusion_pytorch_model.safetensors")):
        names = ["diffusion_pytorch_model.safetensors"]
    else:
        names = sorted(n for n in os.listdir(tdir) if n.startswith("diffusion_pytorch_model") and n.endswith(".safetensors"))
    if not names:
        raise SystemExit(f"{tdir}: no diffusion_pytorch_model*.safetensors")
    with open(os.path.join(tdir, "config.json")) as fh:
        cfg = json.load(fh)
    return cfg, WeightSet([SafeFile(os.path.join(tdir, n)) for n in names])


# ----------------------------------------------------------------------------- attention

_SDPA = getattr(F, "scaled_dot_product_attention", None)


def sdpa(q, k, v):
    """softmax(q k^T / sqrt(d)) v over (..., L, d); PyTorch's fused kernel when present
    (PyTorch >= 2.0), else the plain formula in float32 (old CPU-only installs)."""
    if _SDPA is not None:
        return _SDPA(q, k, v)
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    return torch.matmul(s.softmax(-1), v.float()).to(q.dtype)


def sdpa_context(choice, device, dtype):
    """A context manager that restricts scaled_dot_product_attention's backends, and its
    name. 'auto' = flash for bf16/fp16 on CUDA, PyTorch's own choice otherwise."""
    import contextlib
    if choice == "auto":
        choice = "flash" if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) else "default"
    if choice == "default" or _SDPA is None:
        return contextlib.nullcontext(), ("default" if _SDPA is not None else "fallback-math")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext(), "default"
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[choice]
    return sdpa_kernel([backend]), choice


# ----------------------------------------------------------------------------- chunk protocol

class Chunk:
    def __init__(self, index, start, n, last):
        self.index, self.start, self.n, self.last = index, start, n, last

    def latent_count(self):
        return (self.n - 1) // 4 + 1

    def output_range(self, frames):
        trim = 0 if self.last else 3
        return max(0, self.start - 3), min(frames, self.start + self.n - trim)

    def __repr__(self):
        return f"Chunk({self.index}, start={self.start}, n={self.n}, last={self.last})"


def padded_frames(frames):
    return ((frames - 1 + 3) // 4) * 4 + 1


def plan_chunks(frames, clip_len):
    """stream.go PlanChunks: one LAST chunk if the padded video has at most clip_len+4
    frames, else FIRST (clip_len+4), MIDDLE (clip_len) ..., LAST (the rest, 4j+1)."""
    if frames < 1 or clip_len <= 0 or clip_len % 4:
        raise ValueError("need frames >= 1 and clip_len a positive multiple of 4")
    p = padded_frames(frames)
    if p <= clip_len + 4:
        return [Chunk(0, 0, p, True)]
    cs = [Chunk(0, 0, clip_len + 4, False)]
    start = clip_len + 4
    while start < p:
        last = p - start <= clip_len
        n = p - start if last else clip_len
        cs.append(Chunk(len(cs), start, n, last))
        start += n
    return cs


def dit_input(c, clip_len, overlap):
    """stream.go DiTInput: (prefix latents, prefix is zeros, RoPE temporal offset)."""
    offset = c.start // 4
    clip_latents = clip_len // 4
    if c.last:
        pad = clip_latents + 1 - c.latent_count()
        if pad <= 0:
            return 0, False, offset
        return pad, c.index == 0, max(0, offset - pad)
    if c.index == 0 or overlap <= 0:
        return 0, False, offset
    prev = clip_latents + (1 if c.index == 1 else 0)
    k = min(overlap, prev)
    return k, False, offset - k


# ----------------------------------------------------------------------------- ReAE

def _fold(x, s):
    """(T, C, H, W) -> (T/s, s*C, H, W), frame j of each group in channels [j*C, (j+1)*C):
    a view in NCHW, one copy (and the result channels_last) in channels_last."""
    t, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        y = x.permute(0, 2, 3, 1).reshape(t // s, s, h, w, c).permute(0, 2, 3, 1, 4).reshape(t // s, h, w, s * c)
        return y.permute(0, 3, 1, 2)
    return x.reshape(t // s, s * c, h, w)


def _unfold(x, s):
    """(T, s*C, H, W) -> (s*T, C, H, W), channels [j*C, (j+1)*C) of frame t becoming frame s*t+j."""
    t, sc, h, w = x.shape
    c = sc // s
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        y = x.permute(0, 2, 3, 1).reshape(t, h, w, s, c).permute(0, 3, 1, 2, 4).reshape(t * s, h, w, c)
        return y.permute(0, 3, 1, 2)
    return x.reshape(t * s, c, h, w)


class ReAE:
    """SwiftVR's restoration-aware autoencoder (TAEHV topology) with explicit causal state:
    for every MemBlock, the last frame of its input in the previous chunk (None = zeros)."""

    def __init__(self, ws, device, dtype, tgrow_before=True, frame_batch=1, channels_last=False):
        self.device, self.dtype = device, dtype
        self.tgrow_before, self.frame_batch = tgrow_before, frame_batch
        self.mf = torch.channels_last if channels_last else torch.contiguous_format
        self.nbytes = 0

        def w(name):
            t = ws.get(name, device, dtype)
            if t.dim() == 4:
                t = t.contiguous(memory_format=self.mf)
            self.nbytes += t.numel() * t.element_size()
            return t

        def conv(key, stride=1, bias=True, relu=False):
            return ("conv", w(key + ".weight"), w(key + ".bias") if bias else None, stride, relu)

        self.n_mem = [0, 0]

        def mem(key, side):
            i = self.n_mem[side]
            self.n_mem[side] += 1
            return ("mem", [w(f"{key}.conv.{j}.weight") for j in (0, 2, 4)],
                    [w(f"{key}.conv.{j}.bias") for j in (0, 2, 4)], i)

        enc = [conv("encoder.0", relu=True)]
        c = ws.shape("encoder.0.weight")[0]
        for base in (2, 7, 12):
            s = ws.shape(f"encoder.{base}.conv.weight")[1] // c
            enc.append(("tpool", w(f"encoder.{base}.conv.weight"), s))
            enc.append(conv(f"encoder.{base + 1}", stride=2, bias=False))
            enc += [mem(f"encoder.{base + 2 + j}", 0) for j in range(3)]
        enc.append(conv("encoder.17"))
        dec = [("clamp",), conv("decoder.1", relu=True)]
        for base in (3, 9, 15):
            dec += [mem(f"decoder.{base + j}", 1) for j in range(3)]
            dec.append(("up",))
            key = f"decoder.{base + 4}"
            if key + ".proj.weight" in ws:
                dec.append(("tgrow", w(key + ".proj.weight"), 1))
            else:
                # TGrow(c, 2): each frame -> 2 copies -> Conv3d (3,1,1), zero padding (1,0,0)
                # that only sees those copies: copy 0 = (W1+W2) x, copy 1 = (W0+W1) x, i.e.
                # one 1x1 conv to 2c channels, then unfold into 2 frames.
                k3 = ws.get(key + ".conv3d.weight", device, torch.float32)[..., 0, 0]  # (c, c, 3)
                comb = torch.cat([k3[..., 1] + k3[..., 2], k3[..., 0] + k3[..., 1]], 0)
                t = comb[..., None, None].to(dtype).contiguous(memory_format=self.mf)
                self.nbytes += t.numel() * t.element_size()
                dec.append(("tgrow", t, 2))
            dec.append(conv(f"decoder.{base + 5}", bias=False, relu=(base == 15)))
        dec.append(conv("decoder.22"))
        self.latent_channels = ws.shape("encoder.17.weight")[0]
        if tgrow_before:  # TGrow commutes with the nearest upsample before it
            for i in range(len(dec) - 1):
                if dec[i][0] == "up" and dec[i + 1][0] == "tgrow":
                    dec[i], dec[i + 1] = dec[i + 1], dec[i]
        self.enc, self.dec = enc, dec

    def new_state(self):
        return [[None] * self.n_mem[0], [None] * self.n_mem[1]]

    # -- layers
    def _apply(self, layers, x, states):
        for ly in layers:
            k = ly[0]
            if k == "conv":
                _, wt, b, stride, relu = ly
                x = F.conv2d(x, wt, b, stride=stride, padding=wt.shape[-1] // 2)
                if relu:
                    x = F.relu_(x)
            elif k == "mem":
                x = self._mem(ly, x, states)
            elif k == "tpool":
                _, wt, s = ly
                x = F.conv2d(_fold(x, s) if s > 1 else x, wt)
            elif k == "tgrow":
                _, wt, s = ly
                x = F.conv2d(x, wt)
                if s > 1:
                    x = _unfold(x, s)
            elif k == "up":
                x = F.interpolate(x, scale_factor=2, mode="nearest")
            elif k == "clamp":
                x = torch.tanh(x / 3) * 3
        return x

    def _mem(self, ly, x, states):
        _, ws, bs, i = ly
        prev = states[i]
        if prev is None:
            prev = torch.zeros_like(x[:1])
        past = prev if x.shape[0] == 1 else torch.cat([prev, x[:-1]], 0)
        h = F.relu_(F.conv2d(torch.cat([x, past], 1), ws[0], bs[0], padding=1))
        h = F.relu_(F.conv2d(h, ws[1], bs[1], padding=1))
        h = F.conv2d(h, ws[2], bs[2], padding=1)
        states[i] = x[-1:].clone()
        return F.relu_(h.add_(x))

    @staticmethod
    def _changes_frames(ly):
        return ly[0] in ("tpool", "tgrow") and ly[2] != 1

    def _run(self, layers, x, states):
        i = 0
        while i < len(layers):
            j = i
            while j < len(layers) and not self._changes_frames(layers[j]):
                j += 1
            if j > i:
                x = self._segment(layers[i:j], x, states)
            if j < len(layers):
                x = self._apply(layers[j:j + 1], x, states)
                j += 1
            i = j
        return x

    def _segment(self, layers, x, states):
        n, fb = x.shape[0], self.frame_batch
        if fb <= 0 or fb >= n:
            return self._apply(layers, x, states)
        out = None
        for s in range(0, n, fb):
            y = self._apply(layers, x[s:s + fb], states)
            if out is None:
                out = torch.empty((n,) + tuple(y.shape[1:]), dtype=y.dtype, device=y.device,
                                  memory_format=self.mf)
            out[s:s + y.shape[0]] = y
        return out

    def encode(self, x, st):
        """x: (N, 3, H, W) RGB in [0,1], N % 4 == 0, H, W % 16 == 0 -> (N/4, 48, H/16, W/16)."""
        u = F.pixel_unshuffle(x, 2).contiguous(memory_format=self.mf)
        return self._run(self.enc, u, st[0])

    def decode(self, z, st):
        """z: (T, 48, h, w) -> (4T, 12, 8h, 8w), before pixel shuffle and clamping."""
        return self._run(self.dec, z.contiguous(memory_format=self.mf), st[1])


# ----------------------------------------------------------------------------- DiT

def window_starts(n, shift, win=WINDOW):
    if n <= win:
        return [0]
    cand, k = [], 0
    while k * win - shift < n:
        s = min(max(k * win - shift, 0), n - win)
        if not cand or cand[-1] != s:
            cand.append(s)
        k += 1
    out = [cand[0]]
    for i in range(1, len(cand)):
        if i + 1 < len(cand) and cand[i + 1] <= out[-1] + win:
            continue
        out.append(cand[i])
    return out


def window_owners(n, starts, shifted, win=WINDOW):
    size = min(win, n)
    own = []
    for p in range(n):
        hold = [i for i, s in enumerate(starts) if s <= p < s + size]
        own.append(hold[-1] if shifted else hold[0])
    return own


class Windows:
    """Gather/scatter indices for one block kind on an f x h x w token grid: idx (nw*wt,)
    lists every window's tokens (window-major, then (f, y, x)); src (L,) is, for each token,
    the row of its owner window's output in the (nw*wt) batch."""

    def __init__(self, f, h, w, shifted, device):
        sh = window_starts(h, WINDOW // 2 if shifted else 0)
        sw = window_starts(w, WINDOW // 2 if shifted else 0)
        oh, ow = window_owners(h, sh, shifted), window_owners(w, sw, shifted)
        wh, ww = min(WINDOW, h), min(WINDOW, w)
        grid = torch.arange(f * h * w).reshape(f, h, w)
        self.idx = torch.stack([grid[:, ys:ys + wh, xs:xs + ww].reshape(-1) for ys in sh for xs in sw]).reshape(-1).to(device)
        self.nw, self.wt = len(sh) * len(sw), f * wh * ww
        oh_t, ow_t = torch.tensor(oh), torch.tensor(ow)
        ys = oh_t[:, None].expand(h, w)
        xs = ow_t[None, :].expand(h, w)
        win = ys * len(sw) + xs  # (h, w)
        py = torch.arange(h)[:, None] - torch.tensor(sh)[oh_t][:, None]
        px = torch.arange(w)[None, :] - torch.tensor(sw)[ow_t][None, :]
        pos = (torch.arange(f)[:, None, None] * wh + py[None]) * ww + px[None]  # (f, h, w)
        self.src = (win[None] * self.wt + pos).reshape(-1).to(device)


class DiT:
    """Wan2.2-TI2V-5B as SwiftVR runs it: one step at t = 1000, the fixed prompt,
    mask-free shifted-window self-attention."""

    def __init__(self, cfg, ws, prompt, device, dtype):
        self.device, self.dtype = device, dtype
        self.heads, self.hd = cfg["num_attention_heads"], cfg["attention_head_dim"]
        self.D = D = self.heads * self.hd
        self.ffn, self.layers = cfg["ffn_dim"], cfg["num_layers"]
        self.cin = cfg["in_channels"]
        self.cout = cfg.get("out_channels") or self.cin
        self.eps = float(cfg["eps"])
        self.cross_norm = bool(cfg.get("cross_attn_norm", True))
        if list(cfg.get("patch_size", [1, 2, 2])) != [1, 2, 2]:
            raise SystemExit(f"patch_size {cfg['patch_size']}: only (1, 2, 2) is supported")
        if cfg.get("qk_norm", "rms_norm_across_heads") != "rms_norm_across_heads":
            raise SystemExit(f"qk_norm {cfg['qk_norm']!r}: only rms_norm_across_heads is supported")
        f32 = torch.float32
        self.nbytes = 0

        def w(name, dt=dtype):
            t = ws.get(name, device, dt)
            self.nbytes += t.numel() * t.element_size()
            return t

        def keep(t):
            self.nbytes += t.numel() * t.element_size()
            return t

        # Conditioning, in float32, once.
        with torch.no_grad():
            lin32 = lambda x, k: F.linear(x, ws.get(k + ".weight", device, f32), ws.get(k + ".bias", device, f32))
            half = cfg["freq_dim"] // 2
            freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float64) / half) * 1000
            tproj = torch.cat([torch.cos(freqs), torch.sin(freqs)]).float()[None].to(device)  # flip_sin_to_cos
            temb = lin32(F.silu(lin32(tproj, "condition_embedder.time_embedder.linear_1")), "condition_embedder.time_embedder.linear_2")
            mod = lin32(F.silu(temb), "condition_embedder.time_proj").reshape(6, D)
            p = prompt.to(device=device, dtype=f32)
            text = lin32(F.gelu(lin32(p, "condition_embedder.text_embedder.linear_1"), approximate="tanh"),
                         "condition_embedder.text_embedder.linear_2")
            self.prompt_tokens = text.shape[0]
            table = ws.get("scale_shift_table", device, f32).reshape(2, D)
            self.head_mod = keep(torch.stack([table[0] + temb[0], table[1] + temb[0]]))  # shift, scale
            self.patch_w = w("patch_embedding.weight").reshape(D, self.cin * 4)
            self.patch_b = w("patch_embedding.bias")
            self.out_w, self.out_b = w("proj_out.weight"), w("proj_out.bias")
            self.blocks = []
            for b in range(self.layers):
                pre = f"blocks.{b}."
                blk = {}
                blk["mod"] = keep(ws.get(pre + "scale_shift_table", device, f32).reshape(6, D) + mod)
                qkv_w = [w(pre + f"attn1.to_{n}.weight") for n in "qkv"]
                blk["qkv_w"] = torch.cat(qkv_w, 0)
                del qkv_w
                blk["qkv_b"] = torch.cat([w(pre + f"attn1.to_{n}.bias") for n in "qkv"], 0)
                blk["o1_w"], blk["o1_b"] = w(pre + "attn1.to_out.0.weight"), w(pre + "attn1.to_out.0.bias")
                blk["nq1"] = w(pre + "attn1.norm_q.weight", f32)
                blk["nk1"] = w(pre + "attn1.norm_k.weight", f32)
                if self.cross_norm:
                    blk["n2_w"], blk["n2_b"] = w(pre + "norm2.weight", f32), w(pre + "norm2.bias", f32)
                blk["q2_w"], blk["q2_b"] = w(pre + "attn2.to_q.weight"), w(pre + "attn2.to_q.bias")
                blk["nq2"] = w(pre + "attn2.norm_q.weight", f32)
                blk["o2_w"], blk["o2_b"] = w(pre + "attn2.to_out.0.weight"), w(pre + "attn2.to_out.0.bias")
                k = self._rms(lin32(text, pre + "attn2.to_k"), ws.get(pre + "attn2.norm_k.weight", device, f32))
                v = lin32(text, pre + "attn2.to_v")
                P = text.shape[0]
                blk["ck"] = keep(k.reshape(P, self.heads, self.hd).transpose(0, 1)[None].to(dtype).contiguous())
                blk["cv"] = keep(v.reshape(P, self.heads, self.hd).transpose(0, 1)[None].to(dtype).contiguous())
                blk["f1_w"], blk["f1_b"] = w(pre + "ffn.net.0.proj.weight"), w(pre + "ffn.net.0.proj.bias")
                blk["f2_w"], blk["f2_b"] = w(pre + "ffn.net.2.weight"), w(pre + "ffn.net.2.bias")
                self.blocks.append(blk)
        self._windows = {}
        hw = 2 * (self.hd // 6)
        dims = [self.hd - 2 * hw, hw, hw]  # 44 / 42 / 42 for 128
        self.rope_theta = [(10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).to(device) for d in dims]

    # -- helpers
    def _rms(self, x, wt):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * wt).to(x.dtype)

    def _ln_mod(self, x, scale, shift):
        return torch.addcmul(shift, F.layer_norm(x.float(), (self.D,), eps=self.eps), 1 + scale).to(self.dtype)

    def windows(self, f, h, w):
        key = (f, h, w)
        if key not in self._windows:
            self._windows[key] = (Windows(f, h, w, False, self.device), Windows(f, h, w, True, self.device))
        return self._windows[key]

    def rope_tables(self, f, h, w, offset):
        dev = self.device
        t = torch.arange(f, dtype=torch.float64, device=dev) + offset
        y = torch.arange(h, dtype=torch.float64, device=dev)
        x = torch.arange(w, dtype=torch.float64, device=dev)
        L = f * h * w
        ang = torch.cat([
            (t[:, None, None, None] * self.rope_theta[0]).expand(f, h, w, -1),
            (y[None, :, None, None] * self.rope_theta[1]).expand(f, h, w, -1),
            (x[None, None, :, None] * self.rope_theta[2]).expand(f, h, w, -1)], -1).reshape(L, 1, -1)
        return torch.cos(ang).float(), torch.sin(ang).float()

    def _rope(self, x, cos, sin):  # x: (L, D); rotate consecutive pairs of every head
        L = x.shape[0]
        xf = x.float().reshape(L, self.heads, -1, 2)
        x1, x2 = xf[..., 0], xf[..., 1]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(L, self.D).to(x.dtype)

    def flops(self, f, h, w):
        """Multiply-add FLOPs of one forward on an f x h x w token grid: 2*M*N*K per linear,
        4*Lq*Lk*D per attention (D = heads * head_dim), windows counted as run."""
        L, D, Fd, P = f * h * w, self.D, self.ffn, self.prompt_tokens
        lin = 2 * L * D * (3 * D + D + D + D + 2 * Fd)  # qkv, out, cross q, cross out, ffn
        total = 2 * L * (self.cin * 4) * D + 2 * L * D * (4 * self.cout)  # patch, head
        w0, w1 = self.windows(f, h, w)
        for b in range(self.layers):
            win = w1 if b % 2 else w0
            total += lin + 4 * win.nw * win.wt * win.wt * D + 4 * L * P * D
        return total

    # -- forward
    def forward(self, lat, offset):
        """lat: (f, C, H, W) latents (H, W even) whose first frame has global temporal index
        offset -> v (f, C, H, W)."""
        f, C, H, W = lat.shape
        hp, wp = H // 2, W // 2
        L, D, nh, hd = f * hp * wp, self.D, self.heads, self.hd
        dt = self.dtype
        patches = lat.to(dt).reshape(f, C, hp, 2, wp, 2).permute(0, 2, 4, 1, 3, 5).reshape(L, C * 4)
        x = F.linear(patches, self.patch_w, self.patch_b)
        cos, sin = self.rope_tables(f, hp, wp, offset)
        wins = self.windows(f, hp, wp)
        for b, blk in enumerate(self.blocks):
            shift, scale, gate, cshift, cscale, cgate = blk["mod"]
            # Self-attention in shifted windows.
            n = self._ln_mod(x, scale, shift)
            q, k, v = F.linear(n, blk["qkv_w"], blk["qkv_b"]).split(D, -1)
            q = self._rope(self._rms(q, blk["nq1"]), cos, sin)
            k = self._rope(self._rms(k, blk["nk1"]), cos, sin)
            win = wins[b % 2]

            def gather(t):
                return t.index_select(0, win.idx).view(win.nw, win.wt, nh, hd).transpose(1, 2)

            o = sdpa(gather(q), gather(k), gather(v))  # (nw, heads, wt, hd)
            del q, k, v
            o = o.transpose(1, 2).reshape(win.nw * win.wt, D).index_select(0, win.src)
            o = F.linear(o, blk["o1_w"], blk["o1_b"])
            x = torch.addcmul(x.float(), o.float(), gate).to(dt)
            # Cross-attention to the prompt.
            if self.cross_norm:
                n = F.layer_norm(x.float(), (D,), blk["n2_w"], blk["n2_b"], self.eps).to(dt)
            else:
                n = x
            q = self._rms(F.linear(n, blk["q2_w"], blk["q2_b"]), blk["nq2"])
            o = sdpa(q.view(1, L, nh, hd).transpose(1, 2), blk["ck"], blk["cv"])
            o = o.transpose(1, 2).reshape(L, D)
            x = x + F.linear(o, blk["o2_w"], blk["o2_b"])
            # Feed-forward.
            n = self._ln_mod(x, cscale, cshift)
            hmid = F.gelu(F.linear(n, blk["f1_w"], blk["f1_b"]), approximate="tanh")
            o = F.linear(hmid, blk["f2_w"], blk["f2_b"])
            del hmid
            x = torch.addcmul(x.float(), o.float(), cgate).to(dt)
        shift, scale = self.head_mod
        y = F.linear(self._ln_mod(x, scale, shift), self.out_w, self.out_b)  # (L, 4*cout)
        return y.reshape(f, hp, wp, 2, 2, self.cout).permute(0, 5, 1, 3, 2, 4).reshape(f, self.cout, H, W)


# ----------------------------------------------------------------------------- model + streaming

class SwiftVR:
    def __init__(self, ck, device, dtype, tgrow_before=True, frame_batch=1, channels_last=False, with_dit=True):
        self.device, self.dtype = device, dtype
        self.quantize = "trunc"
        self.reae = ReAE(WeightSet([SafeFile(os.path.join(ck, "reae.safetensors"))]), device, dtype,
                         tgrow_before, frame_batch, channels_last)
        self.dit = None
        if with_dit:
            cfg, ws = open_transformer(ck)
            pf = SafeFile(os.path.join(ck, "prompt_embedding.safetensors"))
            prompt = pf.get("prompt_emb", "cpu", torch.float32)[0]
            self.dit = DiT(cfg, ws, prompt, device, dtype)
            del ws, pf

    def prepare(self, u8, out_h, out_w):
        """(N, H, W, 3) uint8 -> (N, 3, Hpad, Wpad) dtype: crop to a multiple of 8, bilinear
        resize (align_corners=False), /255, zero-pad bottom/right to a multiple of 32."""
        h8, w8 = u8.shape[1] & ~7, u8.shape[2] & ~7
        x = u8[:, :h8, :w8].permute(0, 3, 1, 2).to(self.dtype)
        x = F.interpolate(x, size=(out_h, out_w), mode="bilinear", align_corners=False) / 255
        ph, pw = (out_h + 31) // 32 * 32, (out_w + 31) // 32 * 32
        if (ph, pw) != (out_h, out_w):
            x = F.pad(x, (0, pw - out_w, 0, ph - out_h))
        return x

    def postprocess(self, y, out_h, out_w):
        """(T, 12, h, w) decoder output -> (T, out_h, out_w, 3) uint8: x*255 truncated, as
        LightX2V does (rounded with quantize='round', as vsr's CPU backend does)."""
        y = F.pixel_shuffle(y, 2).clamp_(0, 1)[:, :, :out_h, :out_w] * 255
        if self.quantize == "round":
            y = y.round_()
        return y.to(torch.uint8).permute(0, 2, 3, 1).contiguous()


class Clock:
    """Marks on the device's timeline: CUDA events, or wall time on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, a, b):
        return a.elapsed_time(b) / 1000 if self.cuda else b - a


def run_video(model, frames_u8, out_h, out_w, clip_len, overlap=0, dit=True, clock=None, sink=None):
    """Streams the whole video through the network. Returns per-chunk
    (chunk, mark0, mark_encoded, mark_dit, mark_decoded) and a device checksum of the output."""
    total = frames_u8.shape[0]
    chunks = plan_chunks(total, clip_len)
    st = model.reae.new_state()
    dev = frames_u8.device
    prev_z = None
    marks = []
    checksum = torch.zeros((), dtype=torch.int64, device=dev)
    for c in chunks:
        m0 = clock.mark() if clock else None
        n_in = c.n + (3 if c.last else 0)  # the encoder sees 3 more copies of the final frame
        idx = torch.arange(c.start, c.start + n_in, device=dev).clamp_(max=total - 1)
        x = model.prepare(frames_u8.index_select(0, idx), out_h, out_w)
        z = model.reae.encode(x, st)
        del x
        m1 = clock.mark() if clock else None
        if dit and model.dit is not None:
            pre, zero, offset = dit_input(c, clip_len, overlap)
            if pre:
                if zero or prev_z is None:
                    prefix = torch.zeros((pre,) + tuple(z.shape[1:]), dtype=z.dtype, device=dev)
                else:
                    if prev_z.shape[0] < pre:
                        raise RuntimeError(f"chunk {c.index}: needs {pre} history latents, has {prev_z.shape[0]}")
                    prefix = prev_z[-pre:]
                zin = torch.cat([prefix, z], 0)
            else:
                zin = z
            v = model.dit.forward(zin, offset)[pre:]
            zr = z - v.to(z.dtype)
            del v, zin
        else:
            zr = z
        prev_z = z
        m2 = clock.mark() if clock else None
        lo, hi = c.output_range(total)
        y = model.reae.decode(zr, st)
        del zr
        first = lo - (c.start - 3)
        out = model.postprocess(y[first:first + (hi - lo)], out_h, out_w)
        del y
        checksum += out.sum(dtype=torch.int64)
        if sink is not None:
            sink(lo, hi, out)
        m3 = clock.mark() if clock else None
        marks.append((c, m0, m1, m2, m3))
    return marks, checksum


def synthetic_frames(n, h, w, device, seed=0):
    """Deterministic video: moving smooth colour waves plus uniform noise, made on the device."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    out = torch.empty((n, h, w, 3), dtype=torch.uint8, device=device)
    yy = torch.linspace(0, 1, h, device=device)[:, None, None]
    xx = torch.linspace(0, 1, w, device=device)[None, :, None]
    ph = torch.tensor([0.0, 2.1, 4.2], device=device)
    for s in range(0, n, 16):
        m = min(16, n - s)
        t = torch.arange(s, s + m, device=device, dtype=torch.float32)[:, None, None, None]
        base = (128 + 70 * torch.sin(2 * math.pi * (3 * xx + 0.013 * t) + ph)
                + 40 * torch.cos(2 * math.pi * (2 * yy - 0.021 * t) + 2 * ph))
        noise = torch.rand((m, h, w, 3), generator=g, device=device) * 40 - 20
        out[s:s + m] = (base + noise).clamp_(0, 255).to(torch.uint8)
    return out


def parse_size(s):
    w, h = s.lower().split("x")
    return int(w), int(h)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt", help="SwiftVR checkpoint directory (official layout)")
    ap.add_argument("--frames", type=int, default=361)
    ap.add_argument("--in-size", default="640x360", help="input WxH")
    ap.add_argument("--out-size", default="2560x1440", help="output WxH (even)")
    ap.add_argument("--clip-len", type=int, default=24)
    ap.add_argument("--dit-overlap", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed full passes first")
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dit", choices=["on", "off"], default="on", help="off: encode -> decode only")
    ap.add_argument("--temporal-grow", choices=["before", "after"], default="before",
                    help="TGrow before its upsample (LightX2V) or after (official order)")
    ap.add_argument("--reae-frame-batch", type=int, default=1, help="frames per pass through per-frame ReAE layers (0 = whole chunk)")
    ap.add_argument("--memory-format", choices=["auto", "nchw", "nhwc"], default="auto",
                    help="ReAE activations: auto = nhwc (channels_last) on CUDA, nchw on the CPU")
    ap.add_argument("--sdpa", choices=["auto", "flash", "efficient", "cudnn", "math", "default"], default="auto")
    ap.add_argument("--cudnn-benchmark", choices=["on", "off"], default="on")
    ap.add_argument("--quantize", choices=["trunc", "round"], default="trunc",
                    help="output x*255 -> uint8: truncate (LightX2V) or round (vsr's CPU backend)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input-raw", help="read the input from a raw rgb24 file (frames x H x W x 3) instead")
    ap.add_argument("--dump-out", help="write the last pass's output frames as raw rgb24 here (for checks: "
                    "adds a device-to-host copy per chunk to that timed pass)")
    ap.add_argument("--json", action="store_true", help="also print one JSON line")
    a = ap.parse_args(argv)

    if a.repeats < 1 or a.warmup < 0 or a.frames < 1:
        raise SystemExit("--repeats must be >= 1, --warmup >= 0, --frames >= 1")
    device = torch.device("cuda:0" if a.device == "cuda" else a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available; use --device cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    in_w, in_h = parse_size(a.in_size)
    out_w, out_h = parse_size(a.out_size)
    if out_w % 2 or out_h % 2 or in_w & ~7 == 0 or in_h & ~7 == 0:
        raise SystemExit("the output size must be even and the input at least 8x8")
    cuda = device.type == "cuda"
    channels_last = a.memory_format == "nhwc" or (a.memory_format == "auto" and cuda)
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = a.cudnn_benchmark == "on"
    # fp32 means float32: no TF32 anywhere.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    t0 = time.perf_counter()
    model = SwiftVR(a.ckpt, device, dtype, a.temporal_grow == "before", a.reae_frame_batch, channels_last, a.dit == "on")
    model.quantize = a.quantize
    sync()
    load_s = time.perf_counter() - t0
    weights_alloc = torch.cuda.memory_allocated(device) if cuda else 0

    if a.input_raw:
        raw = torch.from_numpy(__import__("numpy").fromfile(a.input_raw, dtype="uint8"))
        frames = raw.reshape(-1, in_h, in_w, 3)[:a.frames].to(device)
    else:
        frames = synthetic_frames(a.frames, in_h, in_w, device, a.seed)
    n_frames = frames.shape[0]
    chunks = plan_chunks(n_frames, a.clip_len)
    ctx, sdpa_name = sdpa_context(a.sdpa, device, dtype)
    clock = Clock(device)
    dit_on = a.dit == "on" and model.dit is not None

    # DiT FLOPs per chunk (a pure function of the chunk's token grid).
    ph, pw = (out_h + 31) // 32 * 32, (out_w + 31) // 32 * 32
    dit_flops = {}
    if dit_on:
        for c in chunks:
            pre, _, _ = dit_input(c, a.clip_len, a.dit_overlap)
            dit_flops[c.index] = model.dit.flops(c.latent_count() + pre, ph // 32, pw // 32)

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    out_buf = None
    if a.dump_out:
        out_buf = torch.empty((n_frames, out_h, out_w, 3), dtype=torch.uint8)

    def sink(lo, hi, out):
        if out_buf is not None:
            out_buf[lo:hi] = out.cpu()

    totals, stage, sums = [], {"encode": [], "dit": [], "decode": [], "chunk": []}, []
    dit_time_video = []
    with ctx:
        for _ in range(a.warmup):
            run_video(model, frames, out_h, out_w, a.clip_len, a.dit_overlap, dit_on, None, None)
        sync()
        for r in range(a.repeats):
            sync()
            t1 = time.perf_counter()
            marks, cs = run_video(model, frames, out_h, out_w, a.clip_len, a.dit_overlap, dit_on, clock,
                                  sink if r == a.repeats - 1 else None)
            sync()
            totals.append(time.perf_counter() - t1)
            sums.append(int(cs.item()))
            dit_time_video.append(sum(clock.seconds(m1, m2) for _, _, m1, m2, _ in marks))
            for c, m0, m1, m2, m3 in marks:
                if 0 < c.index < len(chunks) - 1 or len(chunks) <= 2:
                    stage["encode"].append((c.index, clock.seconds(m0, m1)))
                    stage["dit"].append((c.index, clock.seconds(m1, m2)))
                    stage["decode"].append((c.index, clock.seconds(m2, m3)))
                    stage["chunk"].append((c.index, clock.seconds(m0, m3)))
    peak_alloc = torch.cuda.max_memory_allocated(device) if cuda else 0
    peak_res = torch.cuda.max_memory_reserved(device) if cuda else 0
    if out_buf is not None:
        out_buf.numpy().tofile(a.dump_out)

    middle = len(chunks) > 2
    med = {k: statistics.median(t for _, t in v) for k, v in stage.items()}
    total_med = statistics.median(totals)
    mid_flops = statistics.median(dit_flops[i] for i, _ in stage["dit"]) if dit_on else 0
    dit_tflops = mid_flops / med["dit"] / 1e12 if dit_on and med["dit"] > 0 else 0.0
    video_flops = sum(dit_flops.values()) if dit_on else 0
    dit_video_tflops = video_flops / statistics.median(dit_time_video) / 1e12 if dit_on else 0.0
    gib = 1024 ** 3
    lens = [c.n for c in chunks]
    dev_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    desc = ", ".join(f"{n}" if k == 1 else f"{k}x{n}" for n, k in _runs(lens))
    print(f"SwiftVR, PyTorch {torch.__version__} eager {a.dtype} on {device} ({dev_name})")
    print(f"  {n_frames} frames {in_w}x{in_h} -> {out_w}x{out_h} (padded {pw}x{ph}), clip {a.clip_len}: "
          f"{len(chunks)} chunks ({desc}); DiT {'on' if dit_on else 'off'}, overlap {a.dit_overlap}")
    print(f"  ReAE: TemporalGrow {a.temporal_grow} upsample, frame batch {a.reae_frame_batch}, "
          f"{'channels_last' if channels_last else 'nchw'}; SDPA backend {sdpa_name}")
    wtxt = f", weights+tables {weights_alloc / gib:.2f} GiB on the device" if cuda else ""
    print(f"  load {load_s:.1f} s (ReAE {model.reae.nbytes / gib:.3f} GiB"
          + (f", DiT {model.dit.nbytes / gib:.2f} GiB" if model.dit else "") + f"){wtxt}")
    print(f"  {'stage':<22}{'seconds':>10}")
    print(f"  {'video (median of %d)' % len(totals):<22}{total_med:>10.3f}   {n_frames / total_med:.2f} fps; "
          f"all: {' '.join(f'{t:.3f}' for t in totals)}")
    what = "middle chunk" if middle else "chunk"
    print(f"  {what + ' (median of %d)' % len(stage['chunk']):<22}{med['chunk']:>10.3f}")
    print(f"  {'  encode':<22}{med['encode']:>10.3f}")
    print(f"  {'  DiT':<22}{med['dit']:>10.3f}")
    print(f"  {'  decode':<22}{med['decode']:>10.3f}")
    if dit_on:
        print(f"  DiT: {mid_flops / 1e12:.4g} TFLOP per {what}, {dit_tflops:.4g} TFLOP/s; "
              f"whole video {video_flops / 1e12:.4g} TFLOP in {statistics.median(dit_time_video):.3f} s, {dit_video_tflops:.4g} TFLOP/s")
    if cuda:
        print(f"  peak memory: allocated {peak_alloc / gib:.2f} GiB, reserved {peak_res / gib:.2f} GiB")
    print(f"  output checksum {sums[-1]}" + ("" if len(set(sums)) == 1 else f" (differs across repeats: {sums})"))
    res = {
        "impl": "pytorch-eager", "torch": torch.__version__, "device": dev_name, "dtype": a.dtype,
        "frames": n_frames, "in_size": [in_w, in_h], "out_size": [out_w, out_h], "clip_len": a.clip_len,
        "dit": dit_on, "dit_overlap": a.dit_overlap, "chunks": len(chunks), "chunk_frames": lens,
        "temporal_grow": a.temporal_grow, "reae_frame_batch": a.reae_frame_batch,
        "memory_format": "nhwc" if channels_last else "nchw", "sdpa": sdpa_name,
        "load_s": round(load_s, 3), "video_s": total_med, "video_s_all": totals, "fps": n_frames / total_med,
        "chunk_kind": "middle" if middle else "all", "chunk_s": med["chunk"], "encode_s": med["encode"],
        "dit_s": med["dit"], "decode_s": med["decode"], "dit_flop_per_chunk": mid_flops,
        "dit_tflops": dit_tflops, "dit_video_flop": video_flops, "dit_video_s": statistics.median(dit_time_video),
        "dit_video_tflops": dit_video_tflops,
        "weights_bytes": weights_alloc, "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_res,
        "peak_allocated_gib": peak_alloc / gib, "peak_reserved_gib": peak_res / gib, "checksum": sums[-1],
    }
    if a.json:
        print(json.dumps(res))
    return res


def _runs(xs):
    out = []
    for x in xs:
        if out and out[-1][0] == x:
            out[-1][1] += 1
        else:
            out.append([x, 1])
    return out


if __name__ == "__main__":
    main()
