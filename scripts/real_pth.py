#!/usr/bin/env python3
"""Writes real torch.save files, and the state dict each should read as, for
checkpoint/statedict's TestRealTorchFiles (run on a host with PyTorch and
safetensors; the files are not committed).

For every case NAME it writes DIR/NAME.pth (torch.save, zip or legacy
format) and DIR/NAME.expected.safetensors: the F32/F16/BF16 tensors vsr's
statedict.Open must find, contiguous, under the keys spandrel would use.
Then run, from the repository root:

    VSR_PTH_DIR=DIR go test ./checkpoint/statedict -run TestRealTorchFiles

Usage: python3 scripts/real_pth.py DIR
"""

import collections
import os
import sys

import torch
import torch.nn as nn
from safetensors.torch import save_file


class Net(nn.Module):
    """Convolutions, a BatchNorm (int64 num_batches_tracked) and a buffer."""

    def __init__(self):
        super().__init__()
        self.conv_first = nn.Conv2d(3, 8, 3, 1, 1)
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.PReLU(8))
        self.upconv = nn.Conv2d(8, 12, 3, 1, 1)


def floats(sd):
    return collections.OrderedDict(
        (k, v.detach().contiguous().clone()) for k, v in sd.items()
        if v.dtype in (torch.float32, torch.float16, torch.bfloat16))


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    net = Net()
    sd = net.state_dict()
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = {"row": base[1], "cols": base[:, 2:4], "t": base.t(), "whole": base, "step": base[::2, ::3]}
    cases = {
        # name: (object saved, expected state dict)
        "zip-plain": (sd, floats(sd)),
        "zip-half": ({k: v.half() for k, v in sd.items()}, floats({k: v.half() for k, v in sd.items()})),
        "zip-bf16": ({k: v.bfloat16() for k, v in sd.items()}, floats({k: v.bfloat16() for k, v in sd.items()})),
        "zip-params-ema": ({"params_ema": sd, "params": {"x": torch.zeros(1)}, "iter": 5},
                           floats(sd)),
        "zip-module": (collections.OrderedDict(("module." + k, v) for k, v in sd.items()), floats(sd)),
        "zip-keep-vars": (net.state_dict(keep_vars=True), floats(sd)),
        "zip-views": (views, floats(views)),
        "zip-state-dict-wrapper": ({"state_dict": sd, "epoch": 3, "lr": 1e-4, "name": "x"}, floats(sd)),
        # float8 and uint16 have no typed storage class: _rebuild_tensor_v3
        "zip-v3": ({"w": base, "f8": base.to(torch.float8_e4m3fn), "u16": base.to(torch.uint16)},
                   floats({"w": base})),
    }
    for name, (obj, expected) in list(cases.items()):
        cases[name.replace("zip-", "legacy-")] = (obj, expected)
    for name, (obj, expected) in cases.items():
        torch.save(obj, os.path.join(out, name + ".pth"),
                   _use_new_zipfile_serialization=name.startswith("zip-"))
        save_file(dict(expected), os.path.join(out, name + ".expected.safetensors"))
        # torch itself reads it back with weights_only=True
        torch.load(os.path.join(out, name + ".pth"), weights_only=True)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
