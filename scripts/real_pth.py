#!/usr/bin/env python3
"""Writes real torch.save files, and the state dict each should read as, for
checkpoint/statedict's TestRealTorchFiles. Run on a host with PyTorch and
safetensors (the GPU host); testdata/pth/torch2.11/ was made by this script
with PyTorch 2.11.0 (the committed files; writing them again gives other
bytes, e.g. each zip's serialization_id).

For every case it writes DIR/zip-CASE.pth and DIR/legacy-CASE.pth
(torch.save's zip and legacy formats) and beside each NAME.pth a
NAME.expected.safetensors: the F32/F16/BF16 tensors statedict.Open must
find, contiguous, under the keys spandrel would use. Each .pth is also read
back by torch.load(weights_only=True). A case torch itself cannot save is
reported and left out (the legacy format cannot save uint16 or float8).

    python3 scripts/real_pth.py DIR
    VSR_PTH_DIR=DIR go test ./checkpoint/statedict -run TestRealTorchFiles
"""

import collections
import os
import sys

import torch
import torch.nn as nn
from safetensors.torch import save_file


def floats(d):
    return collections.OrderedDict(
        (k, v.detach().contiguous().clone()) for k, v in d.items()
        if v.dtype in (torch.float32, torch.float16, torch.bfloat16))


def cases():
    torch.manual_seed(0)
    # convolutions, a BatchNorm (int64 num_batches_tracked) and a PReLU
    net = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.PReLU(8), nn.Conv2d(8, 12, 3, 1, 1))
    sd = net.state_dict()
    base = torch.arange(24.).reshape(4, 6)
    views = {"row": base[1], "cols": base[:, 2:4], "t": base.t(), "whole": base, "step": base[::2, ::3]}
    half = {k: v.half() for k, v in sd.items()}
    bf16 = {k: v.bfloat16() for k, v in sd.items()}
    return {  # case: (object saved, expected state dict)
        "plain": (sd, floats(sd)),
        "half": (half, floats(half)),
        "bf16": (bf16, floats(bf16)),
        "ema": ({"params_ema": sd, "params": {"x": torch.zeros(1)}, "iter": 5}, floats(sd)),
        "module": (collections.OrderedDict(("module." + k, v) for k, v in sd.items()), floats(sd)),
        "keepvars": (net.state_dict(keep_vars=True), floats(sd)),  # Parameters
        "views": (views, floats(views)),  # one storage, offsets and strides
        "wrap": ({"state_dict": sd, "epoch": 3, "lr": 1e-4, "name": "x"}, floats(sd)),
        # float8 and uint16 have no typed storage class: _rebuild_tensor_v3
        "v3": ({"w": base, "f8": base.to(torch.float8_e4m3fn), "u16": base.to(torch.uint16)},
               floats({"w": base})),
    }


def main(out):
    os.makedirs(out, exist_ok=True)
    for case, (obj, expected) in cases().items():
        for zipped in (True, False):
            name = os.path.join(out, ("zip-" if zipped else "legacy-") + case)
            try:
                torch.save(obj, name + ".pth", _use_new_zipfile_serialization=zipped)
                save_file(dict(expected), name + ".expected.safetensors")
                torch.load(name + ".pth", weights_only=True)
            except Exception as e:
                print(f"{name}: torch cannot: {e}")
                for f in (name + ".pth", name + ".expected.safetensors"):
                    if os.path.exists(f):
                        os.remove(f)
    print(torch.__version__)


if __name__ == "__main__":
    main(sys.argv[1])
