#!/usr/bin/env python3
"""Checks testdata/pth against the published architecture code itself.

Loads every fixture file's state dict with load_state_dict(strict=True) into
the published module (the files at the commits scripts/golden_pth.py cites,
read with `git show COMMIT:PATH` from local clones), runs it in float64 on
the CPU and compares the output with NAME.out.npy: the float32 cast alone
gives about 3e-8, so the check asks for 1e-6. Real-CUGAN's published code
has fixed widths (32 to 256), so for it golden_pth.py's UpCunet is built at
full width, loaded into the published UpCunet2x/3x/4x (tile_mode 0, its
byte rounding removed) and compared on several input sizes, and the
fixtures' keys are compared with the published module's.

Only the import lines of the published files are replaced (registries,
spandrel's hyper-parameter decorator and helper imports) and spandrel's
ESRGAN growth, fixed at 32 there, is made a module variable.

Usage: python3 scripts/golden_pth_published.py FIXTURE_DIR REPO=GITDIR ...
with GITDIR a clone (or bare mirror) of each of XPixelGroup/BasicSR,
xinntao/Real-ESRGAN, xinntao/ESRGAN, hongyuanyu/SPAN, bilibili/ailab,
neosr-project/neosr and chaiNNer-org/spandrel, e.g.
BasicSR=/src/BasicSR Real-ESRGAN=/src/Real-ESRGAN ... (the name after the
slash). Needs PyTorch and NumPy; exits non-zero on any mismatch.
"""
import copy
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.dont_write_bytecode = True  # no __pycache__ in scripts/ or the temporary tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_pth as G  # noqa: E402

SP = "libs/spandrel/spandrel/architectures/"
FILES = [  # repository, commit, path, where it goes in the temporary tree
    ("BasicSR", "8d56e3a045f9fb3e1d8872f92ee4a4f07f886b0a", "basicsr/archs/rrdbnet_arch.py", "basicsr/archs/rrdbnet_arch.py"),
    ("BasicSR", "8d56e3a045f9fb3e1d8872f92ee4a4f07f886b0a", "basicsr/archs/arch_util.py", "arch_util_full.py"),
    ("Real-ESRGAN", "a4abfb2979a7bbff3f69f58f58ae324608821e27", "realesrgan/archs/srvgg_arch.py", "srvgg_arch.py"),
    ("ESRGAN", "73e9b634cf987f5996ac2dd33f4050922398a921", "RRDBNet_arch.py", "esrgan2019_arch.py"),
    ("SPAN", "c77a5917759f09e66fbc7124220c5afc5ee221e5", "basicsr/archs/span_arch.py", "span_arch.py"),
    ("ailab", "2799af78ef105b414cc4b796c67c8511acdcdf6f", "Real-CUGAN/upcunet_v3.py", "upcunet_v3.py"),
    ("neosr", "31c7022620c682cf0961c8634d60787179145c5b", "neosr/archs/realplksr_arch.py", "neosr/archs/realplksr_arch.py"),
    ("spandrel", "b0c3eb2d044112a5302200757e84f839b971393b", SP + "ESRGAN/__arch/RRDB.py", "sp/RRDB.py"),
    ("spandrel", "b0c3eb2d044112a5302200757e84f839b971393b", SP + "__arch_helpers/block.py", "sp/block.py"),
    ("spandrel", "b0c3eb2d044112a5302200757e84f839b971393b", SP + "__arch_helpers/padding.py", "sp/padding.py"),
    ("spandrel", "b0c3eb2d044112a5302200757e84f839b971393b", SP + "SPAN/__arch/span.py", "sp/span.py"),
    ("spandrel", "b0c3eb2d044112a5302200757e84f839b971393b", SP + "PLKSR/__arch/RealPLKSR.py", "sp/RealPLKSR.py"),
]

STUBS = {
    "basicsr/__init__.py": "", "basicsr/utils/__init__.py": "", "basicsr/archs/__init__.py": "",
    "basicsr/utils/registry.py": "class _R:\n    def register(self):\n        return lambda c: c\nARCH_REGISTRY = _R()\n",
    "neosr/__init__.py": "", "neosr/archs/__init__.py": "", "neosr/utils/__init__.py": "",
    "neosr/utils/registry.py": "class _R:\n    def register(self):\n        return lambda c: c\nARCH_REGISTRY = _R()\n",
    "neosr/archs/arch_util.py": "DySample = None\ndef net_opt():\n    return 4, None\n",
}

HOOKS = "from spandrel.util import store_hyperparameters", "store_hyperparameters = lambda **k: (lambda c: c)"
EDITS = {  # file -> (published text, what is put in its place)
    "sp/RRDB.py": [HOOKS, ("from ...__arch_helpers import block as B", "import block as B"),
                   ("from ...__arch_helpers.padding import pad_to_multiple", "from padding import pad_to_multiple"),
                   ("import math", "import math\nGC = 32"), ("gc=32,", "gc=GC,")],
    "sp/span.py": [HOOKS],
    "sp/RealPLKSR.py": [HOOKS, ("from spandrel.architectures.__arch_helpers.dysample import DySample",
                                "DySample = None")],
    "upcunet_v3.py": [("return ((x-0.15) * (255/0.7)).round().clamp_(0, 255).byte()", "return (x-0.15)/0.7"),
                      ("return (x * 255).round().clamp_(0, 255).byte()", "return x")],
}


def lay_out(tree, repos):
    for rel, text in STUBS.items():
        os.makedirs(os.path.join(tree, os.path.dirname(rel)), exist_ok=True)
        open(os.path.join(tree, rel), "w").write(text)
    for repo, commit, path, dst in FILES:
        if repo not in repos:
            sys.exit("no clone given for %s: pass %s=GITDIR" % (repo, repo))
        text = subprocess.run(["git", "-C", repos[repo], "show", "%s:%s" % (commit, path)], check=True,
                              capture_output=True, text=True).stdout
        for pub, ours in EDITS.get(dst, []):
            if pub not in text:
                sys.exit("%s at %s has no %r: the edits here are for that file" % (path, commit, pub))
            text = text.replace(pub, ours, 1 if pub == "import math" else -1)
        os.makedirs(os.path.join(tree, os.path.dirname(dst) or "."), exist_ok=True)
        open(os.path.join(tree, dst), "w").write(text)
    # BasicSR's RRDBNet needs make_layer and pixel_unshuffle only (arch_util imports compiled ops)
    full = open(os.path.join(tree, "arch_util_full.py")).read()
    keep = [full[full.index("def make_layer"):full.index("\n\n\n", full.index("def make_layer"))],
            full[full.index("def pixel_unshuffle"):full.index("\n\n\n", full.index("def pixel_unshuffle"))]]
    open(os.path.join(tree, "basicsr/archs/arch_util.py"), "w").write(
        "from torch import nn as nn\n\ndef default_init_weights(*a, **k):\n    pass\n\n\n" + "\n\n\n".join(keep) + "\n")
    sys.path[:0] = [tree, os.path.join(tree, "sp")]


def published(c):
    from basicsr.archs.rrdbnet_arch import RRDBNet
    import esrgan2019_arch, srvgg_arch, span_arch, RRDB, span, RealPLKSR
    from neosr.archs.realplksr_arch import realplksr
    n, s, d = c["name"], c["scale"], c["detect"]
    if c["arch"] == "ESRGAN":
        if d["keys"] == "new":
            return RRDBNet(3, 3, scale=s, num_feat=d["features"], num_block=d["blocks"], num_grow_ch=d["growth"])
        if d["keys"] == "esrgan2019":
            return esrgan2019_arch.RRDBNet(3, 3, d["features"], d["blocks"], gc=d["growth"])
        RRDB.GC = d["growth"]
        return RRDB.RRDBNet(in_nc=3, out_nc=3, num_filters=d["features"], num_blocks=d["blocks"], scale=s)
    if c["arch"] == "SRVGGNetCompact":
        return srvgg_arch.SRVGGNetCompact(3, 3, d["features"], d["convs"], s, d["act"])
    if c["arch"] == "SPAN":
        if d["norm"]:
            return span_arch.SPAN(3, 3, feature_channels=d["features"], upscale=s)
        return span.SPAN(num_in_ch=3, num_out_ch=3, feature_channels=d["features"], upscale=s, norm=False)
    if c["arch"] == "RealPLKSR":
        if not d["layer_norm"]:
            return realplksr(dim=d["features"], n_blocks=d["blocks"], upscaling_factor=s, kernel_size=d["kernel"],
                             use_ea=d["ea"])
        return RealPLKSR.RealPLKSR(dim=d["features"], n_blocks=d["blocks"], upscaling_factor=s,
                                   kernel_size=d["kernel"], use_ea=d["ea"], layer_norm=True)
    return None


def state_dict(fixtures, f):
    p = os.path.join(fixtures, f["path"])
    if f["format"] == "safetensors":
        sd, _ = G.read_safetensors(p)
    else:
        sd = G.torch_load(p)
        if f["container"] != "plain":
            sd = sd[f["container"]]
    n = len(f["prefix"])
    return {k[n:]: (v.float() if torch.is_tensor(v) else v) for k, v in sd.items()}


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    import json
    fixtures = sys.argv[1]
    repos = dict(a.split("=", 1) for a in sys.argv[2:])
    tree = tempfile.mkdtemp(prefix="golden-pth-published-")
    lay_out(tree, repos)
    import upcunet_v3
    man = json.load(open(os.path.join(fixtures, "manifest.json")))
    bad = 0
    for c in man["cases"]:
        x = torch.from_numpy(np.load(os.path.join(fixtures, c["input"]))).double()
        ref = torch.from_numpy(np.load(os.path.join(fixtures, c["output"]))).double()
        if c["arch"] == "RealCUGAN":
            pub = getattr(upcunet_v3, "UpCunet%dx" % c["scale"])()
            keys = [k for k in state_dict(fixtures, c["files"][0]) if k != "pro"]
            ok = keys == list(pub.state_dict().keys())
            bad += not ok
            print("%-18s keys %s the published UpCunet%dx's" % (c["name"], "equal" if ok else "DIFFER from", c["scale"]))
            continue
        m = published(c)
        for f in c["files"]:
            mm = copy.deepcopy(m)
            mm.load_state_dict(state_dict(fixtures, f), strict=True)
            with torch.no_grad():
                e = G.rel_err(mm.double().eval()(x), ref)
            bad += not e < 1e-6
            print("%-18s %-30s %-40s rel %.2e" % (c["name"], f["path"], type(m).__module__ + "." + type(m).__name__, e))
    for s, pro in ((2, None), (3, None), (4, None), (2, "int"), (3, "int")):
        mine = G.UpCunet(s, 32, pro=pro).eval()
        G.init_weights(mine, 10 + s)
        pub = getattr(upcunet_v3, "UpCunet%dx" % s)()
        pub.load_state_dict(mine.state_dict(), strict=True)
        for h, w in ((21, 22), (22, 21), (40, 33)):
            x = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(h * w)).double()
            with torch.no_grad():
                e = G.rel_err(mine.double()(x), pub.double().eval()(x * 0.7 + 0.15 if pro else x, 0, 0, 1, bool(pro)))
            bad += not e < 1e-12
            print("UpCunet%dx%s full width %dx%d: golden_pth against published rel %.2e" % (s, " pro" if pro else "", h, w, e))
    print("%s: %d mismatches" % ("FAIL" if bad else "ok", bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
