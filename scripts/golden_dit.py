#!/usr/bin/env python3
"""Golden outputs for SwiftVR's DiT (Wan2.2-TI2V-5B, one step), independent of vsr.

Written from the published architecture (Diffusers WanTransformer3DModel, as
SwiftVR's rvr/models/transformer.py runs it) with PyTorch's own operators,
float32 on the CPU:

  tokens = Conv3d patch embedding (1,2,2) of the latents, flattened (f, h, w)
  temb   = time_embedder(Timesteps(256, flip_sin_to_cos)(1000)); mod = time_proj(silu(temb))
  text   = linear_2(gelu_tanh(linear_1(prompt)))
  block  = x += gate * attn1(LN(x)*(1+scale)+shift)   (RMSNorm q/k over dim, RoPE 44/42/42 with the
                                                       global temporal index, 16x16 windows over all
                                                       frames, shift 8 in odd blocks, owner rule)
           x += attn2(LN_affine(x), text)              (RMSNorm q/k)
           x += c_gate * ffn(LN(x)*(1+c_scale)+c_shift) (tanh GELU)
  head   = proj_out(LN(x)*(1+scale)+shift) with (table + temb), unpatchified; v is the output.

Usage: python3 scripts/golden_dit.py CHECKPOINT_DIR OUT_DIR F H W OFFSET
(CHECKPOINT_DIR from `vsr checkpoint synth --family swiftvr --preset tiny|block`.)
Writes OUT_DIR/dit_in.f32 (latents, NHWC F x H x W x 48, standard normal from
numpy's default_rng(11)) and OUT_DIR/dit_v.f32 (the prediction, same layout)
for the given global temporal offset of the first latent.
"""
import json, math, os, struct, sys
import numpy as np
import torch
import torch.nn.functional as F



def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        if t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        else:
            continue
        out[name] = torch.from_numpy(a.reshape(t["shape"]).copy())
    return out


def window_starts(n, shift, win=16):
    if n <= win:
        return [0]
    cand = []
    k = 0
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


def owners(n, starts, shifted, win=16):
    size = min(win, n)
    own = []
    for p in range(n):
        hold = [i for i, s in enumerate(starts) if s <= p < s + size]
        own.append(hold[-1] if shifted else hold[0])
    return own


def rope_angles(f, h, w, offset, head_dim):
    hw = 2 * (head_dim // 6)
    dims = [head_dim - 2 * hw, hw, hw]
    parts = []
    grids = torch.meshgrid(torch.arange(f) + offset, torch.arange(h), torch.arange(w), indexing="ij")
    for g, d in zip(grids, dims):
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        parts.append(g.reshape(-1, 1).double() * theta)
    return torch.cat(parts, dim=1)  # (tokens, head_dim/2)


def apply_rope(x, ang):  # x: (tokens, heads, head_dim)
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2))
    rot = torch.polar(torch.ones_like(ang), ang)[:, None, :]
    return torch.view_as_real(xc * rot).reshape(x.shape).float()


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def main():
    ck, out = sys.argv[1], sys.argv[2]
    F_, H_, W_, OFFSET = (int(a) for a in sys.argv[3:7])
    cfg = json.load(open(os.path.join(ck, "transformer", "config.json")))
    W = load(os.path.join(ck, "transformer", "diffusion_pytorch_model.safetensors"))
    P = load(os.path.join(ck, "prompt_embedding.safetensors"))["prompt_emb"][0].float()
    D = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    heads, hd, eps = cfg["num_attention_heads"], cfg["attention_head_dim"], cfg["eps"]
    cin = cfg["in_channels"]
    lin = lambda x, k: F.linear(x, W[k + ".weight"].float(), W[k + ".bias"].float())
    # Time and text conditioning.
    half = cfg["freq_dim"] // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half) * 1000
    tproj = torch.cat([torch.cos(freqs), torch.sin(freqs)])[None]
    temb = lin(F.silu(lin(tproj, "condition_embedder.time_embedder.linear_1")), "condition_embedder.time_embedder.linear_2")
    mod = lin(F.silu(temb), "condition_embedder.time_proj").reshape(6, D)
    text = lin(F.gelu(lin(P, "condition_embedder.text_embedder.linear_1"), approximate="tanh"), "condition_embedder.text_embedder.linear_2")
    # Latents and patch embedding.
    rng = np.random.default_rng(11)
    lat = rng.standard_normal((F_, H_, W_, cin)).astype(np.float32)
    x5 = torch.from_numpy(lat).permute(3, 0, 1, 2)[None]  # (1, C, F, H, W)
    tok = F.conv3d(x5, W["patch_embedding.weight"].float(), W["patch_embedding.bias"].float(), stride=(1, 2, 2))
    f, h, w = tok.shape[2:]
    x = tok.flatten(2).transpose(1, 2)[0]  # (L, D)
    ang = rope_angles(f, h, w, OFFSET, hd)
    torch.set_num_threads(os.cpu_count())
    for b in range(cfg["num_layers"]):
        p = f"blocks.{b}."
        m = W[p + "scale_shift_table"].float()[0] + mod
        shift, scale, gate, cshift, cscale, cgate = m
        n = F.layer_norm(x, (D,), eps=eps) * (1 + scale) + shift
        q = rms(lin(n, p + "attn1.to_q"), W[p + "attn1.norm_q.weight"].float(), eps)
        k = rms(lin(n, p + "attn1.to_k"), W[p + "attn1.norm_k.weight"].float(), eps)
        v = lin(n, p + "attn1.to_v")
        q = apply_rope(q.reshape(-1, heads, hd), ang)
        k = apply_rope(k.reshape(-1, heads, hd), ang)
        v = v.reshape(-1, heads, hd)
        shifted = b % 2 == 1
        sh, sw = window_starts(h, 8 if shifted else 0), window_starts(w, 8 if shifted else 0)
        oh, ow = owners(h, sh, shifted), owners(w, sw, shifted)
        att = torch.zeros_like(q)
        grid = torch.arange(f * h * w).reshape(f, h, w)
        for i, ys in enumerate(sh):
            for j, xs in enumerate(sw):
                idx = grid[:, ys:ys + min(16, h), xs:xs + min(16, w)].reshape(-1)
                o = F.scaled_dot_product_attention(q[idx].transpose(0, 1), k[idx].transpose(0, 1), v[idx].transpose(0, 1)).transpose(0, 1)
                for t_, tok_i in enumerate(idx.tolist()):
                    yy, xx = (tok_i // w) % h, tok_i % w
                    if oh[yy] == i and ow[xx] == j:
                        att[tok_i] = o[t_]
        x = x + lin(att.reshape(-1, D), p + "attn1.to_out.0") * gate
        n = F.layer_norm(x, (D,), W[p + "norm2.weight"].float(), W[p + "norm2.bias"].float(), eps)
        q = rms(lin(n, p + "attn2.to_q"), W[p + "attn2.norm_q.weight"].float(), eps).reshape(-1, heads, hd)
        k = rms(lin(text, p + "attn2.to_k"), W[p + "attn2.norm_k.weight"].float(), eps).reshape(-1, heads, hd)
        v = lin(text, p + "attn2.to_v").reshape(-1, heads, hd)
        o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)).transpose(0, 1)
        x = x + lin(o.reshape(-1, D), p + "attn2.to_out.0")
        n = F.layer_norm(x, (D,), eps=eps) * (1 + cscale) + cshift
        x = x + lin(F.gelu(lin(n, p + "ffn.net.0.proj"), approximate="tanh"), p + "ffn.net.2") * cgate
    table = W["scale_shift_table"].float()[0]
    shift, scale = table[0] + temb[0], table[1] + temb[0]
    y = lin(F.layer_norm(x, (D,), eps=eps) * (1 + scale) + shift, "proj_out")  # (L, 4*C)
    cout = cfg["out_channels"] or cin
    y = y.reshape(f, h, w, 1, 2, 2, cout).permute(0, 3, 1, 4, 2, 5, 6).reshape(f, 2 * h, 2 * w, cout)
    lat.astype("<f4").tofile(os.path.join(out, "dit_in.f32"))
    y.numpy().astype("<f4").tofile(os.path.join(out, "dit_v.f32"))
    print("v", tuple(y.shape), float(y.std()), "torch", torch.__version__)


if __name__ == "__main__":
    main()
