#!/usr/bin/env python3
"""Writes the hand-made torch.save fixtures testdata/pth/handmade-*.

These files are made WITHOUT PyTorch (this machine has none), with Python's
own pickle and zipfile modules, in torch.save's exact layout as
torch/serialization.py writes it (_save and _legacy_save):

  * fake modules named torch, torch._utils and torch.cuda are put in
    sys.modules so that pickle writes the same GLOBAL opcodes torch does
    (torch._utils._rebuild_tensor_v2, torch.FloatStorage, ...);
  * tensors reduce to _rebuild_tensor_v2(storage, offset, size, stride,
    requires_grad, OrderedDict()) and storages become persistent ids
    ('storage', torch.FloatStorage, key, 'cpu', numel), as torch's
    Tensor.__reduce_ex__ and persistent_id do;
  * zip: <top>/data.pkl, <top>/byteorder, <top>/data/<key> stored
    uncompressed with each record's data 64-byte aligned by an 'FB' padding
    extra field, <top>/version and <top>/.data/version;
  * legacy: the magic number, protocol version 1001, sys_info, the object,
    the sorted storage keys, then each storage as an 8-byte little-endian
    element count and its little-endian bytes.

Real torch.save fixtures are made on the GPU host by scripts/golden_pth.py
(another script); these hand-made ones cover what that cannot: big-endian
files, old top-folder names, shared and non-contiguous storages, and
malicious pickles.

The malicious fixtures (handmade-evil-*.pth) each hold a payload that
creates a marker file named pwned-<name> in the current directory when the
pickle is loaded by Python. Run with --verify, this script loads each
payload once with Python's own pickle in a temporary directory (with the
fake torch modules, and the extension registry entry the EXT1 payload
relies on) and checks that the marker really appears, so the Go test that
checks the marker never appears tests a real attack.

Usage: python3 scripts/handmade_pth.py [--verify]   (from the repo root)
"""

import collections
import copyreg
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import types
import zipfile

OUT = os.path.join("testdata", "pth")

# --- fake torch modules, so pickle writes torch's globals ---------------

torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
torch_cuda = types.ModuleType("torch.cuda")
torch.__path__ = []  # a package, so torch._utils resolves
sys.modules.update({"torch": torch, "torch._utils": torch_utils, "torch.cuda": torch_cuda})
torch._utils = torch_utils
torch.cuda = torch_cuda

ELEM = {"F32": ("f", 4), "F16": ("e", 2), "BF16": (None, 2), "I64": ("q", 8)}


def storage_class(name, dtype, module=torch):
    cls = type(name, (), {"dtype": dtype})
    cls.__module__ = module.__name__
    cls.__qualname__ = name
    setattr(module, name, cls)
    return cls


STORAGE = {
    "F32": storage_class("FloatStorage", "F32"),
    "F16": storage_class("HalfStorage", "F16"),
    "BF16": storage_class("BFloat16Storage", "BF16"),
    "I64": storage_class("LongStorage", "I64"),
}
CUDA_FLOAT = storage_class("FloatStorage", "F32", torch_cuda)


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    return ("tensor", storage, offset, size, stride)


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2


def _rebuild_parameter(data, requires_grad, hooks):
    return data


_rebuild_parameter.__module__ = "torch._utils"
torch_utils._rebuild_parameter = _rebuild_parameter


def encode(dtype, values):
    """Little-endian bytes of values in dtype (bf16: exact values only)."""
    if dtype == "BF16":
        out = b""
        for v in values:
            b = struct.pack("<f", v)
            assert b[:2] == b"\0\0", f"{v} is not exact in bfloat16"
            out += b[2:]
        return out
    return struct.pack("<%d%s" % (len(values), ELEM[dtype][0]), *values)


class Storage:
    """A storage: dtype, values; cls overrides the storage class global."""

    def __init__(self, dtype, values, cls=None):
        self.dtype, self.values = dtype, values
        self.cls = cls or STORAGE[dtype]


class Tensor:
    def __init__(self, storage, offset, size, stride, param=False):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.param = param

    def __reduce_ex__(self, proto):
        t = (_rebuild_tensor_v2, (self.storage, self.offset, tuple(self.size),
                                  tuple(self.stride), False, collections.OrderedDict()))
        if self.param:
            return (_rebuild_parameter, (Tensor(self.storage, self.offset, self.size, self.stride),
                                         True, collections.OrderedDict()))
        return t


def contiguous(dtype, shape, values):
    stride, s = [], 1
    for d in reversed(shape):
        stride.insert(0, s)
        s *= d
    return Tensor(Storage(dtype, values), 0, shape, stride)


def pickle_object(obj, legacy):
    """Pickles obj as torch.save does; returns (bytes, storages by key)."""
    keys, storages = {}, {}

    def persistent_id(o):
        if not isinstance(o, Storage):
            return None
        if legacy:
            key = keys.setdefault(id(o), str(1000 + len(keys)))  # str(storage._cdata)
        else:
            key = keys.setdefault(id(o), str(len(keys)))
        storages[key] = o
        pid = ("storage", o.cls, key, "cpu", len(o.values))
        return pid + (None,) if legacy else pid

    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=2)
    p.persistent_id = persistent_id
    p.dump(obj)
    return buf.getvalue(), storages


def aligned_info(zf, name):
    """A ZipInfo whose data starts 64-byte aligned, as PyTorchStreamWriter pads."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    start = zf.fp.tell() + 30 + len(name.encode())
    pad = (-(start + 4)) % 64
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    return info


def write_zip(path, obj, top="archive", byteorder="little", pkl=None):
    data, storages = pickle_object(obj, legacy=False) if pkl is None else (pkl, {})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(aligned_info(zf, f"{top}/data.pkl"), data)
        zf.writestr(aligned_info(zf, f"{top}/byteorder"), byteorder)
        for key in sorted(storages, key=int):
            st = storages[key]
            raw = encode(st.dtype, st.values)
            if byteorder == "big":
                e = ELEM[st.dtype][1]
                raw = b"".join(raw[i:i + e][::-1] for i in range(0, len(raw), e))
            zf.writestr(aligned_info(zf, f"{top}/data/{key}"), raw)
        zf.writestr(aligned_info(zf, f"{top}/version"), "3\n")
        zf.writestr(aligned_info(zf, f"{top}/.data/version"), "3\n")


def write_legacy(path, obj):
    data, storages = pickle_object(obj, legacy=True)
    sys_info = dict(protocol_version=1001, little_endian=True,
                    type_sizes=dict(short=2, int=4, long=4))
    with open(path, "wb") as f:
        for head in (0x1950A86A20F9469CFC6C, 1001, sys_info):
            pickle.dump(head, f, protocol=2)
        f.write(data)
        keys = sorted(storages)
        pickle.dump(keys, f, protocol=2)
        for key in keys:
            st = storages[key]
            f.write(struct.pack("<q", len(st.values)) + encode(st.dtype, st.values))


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, little-endian bytes)."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


# --- the state dict -----------------------------------------------------

def state_dict(cls_f32=None):
    """An OrderedDict with _metadata (as Module.state_dict() returns) holding
    every case: f32/f16/bf16, a parameter, two tensors sharing a storage at
    offsets, a non-contiguous (transposed) view, a scalar and an int64
    num_batches_tracked. Returns (sd, expected safetensors tensors)."""
    sd = collections.OrderedDict()
    w = [0.5, -1.25, 2.0, 3.5, -0.125, 7.0]
    sd["conv.weight"] = Tensor(Storage("F32", w, cls_f32), 0, [2, 3, 1, 1], [3, 1, 1, 1])
    sd["conv.bias"] = Tensor(Storage("F32", [1.5, -2.5], cls_f32), 0, [2], [1], param=True)
    sd["half.weight"] = contiguous("F16", [3, 2], [0.5, 1.0, -2.0, 0.25, 65504.0, -0.0])
    sd["bf.weight"] = contiguous("BF16", [4], [1.0, -3.0, 0.5, 256.0])
    shared = Storage("F32", [float(i) for i in range(10)], cls_f32)
    sd["shared.a"] = Tensor(shared, 2, [2, 2], [2, 1])
    sd["shared.b"] = Tensor(shared, 7, [3], [1])
    # transposed view of a 3x2 storage: shape (2, 3), stride (1, 2)
    sd["transposed.weight"] = Tensor(Storage("F32", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], cls_f32), 0, [2, 3], [1, 2])
    sd["scalar"] = Tensor(Storage("F32", [9.0, 42.0], cls_f32), 1, [], [])
    sd["bn.num_batches_tracked"] = Tensor(Storage("I64", [12345]), 0, [], [])
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("conv", {"version": 1})])
    f32 = lambda v: encode("F32", v)
    expected = [
        ("conv.weight", "F32", [2, 3, 1, 1], f32(w)),
        ("conv.bias", "F32", [2], f32([1.5, -2.5])),
        ("half.weight", "F16", [3, 2], encode("F16", [0.5, 1.0, -2.0, 0.25, 65504.0, -0.0])),
        ("bf.weight", "BF16", [4], encode("BF16", [1.0, -3.0, 0.5, 256.0])),
        ("shared.a", "F32", [2, 2], f32([2.0, 3.0, 4.0, 5.0])),
        ("shared.b", "F32", [3], f32([7.0, 8.0, 9.0])),
        ("transposed.weight", "F32", [2, 3], f32([1.0, 3.0, 5.0, 2.0, 4.0, 6.0])),
        ("scalar", "F32", [], f32([42.0])),
    ]
    return sd, expected


def prefixed(sd, prefix):
    out = collections.OrderedDict((prefix + k, v) for k, v in sd.items())
    out._metadata = sd._metadata
    return out


# --- malicious pickles --------------------------------------------------

def unicode(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def marker(name):
    return "pwned-" + name


EVIL = {
    # posix.system("touch pwned-system")
    "system": b"\x80\x02cposix\nsystem\n" + unicode("touch " + marker("system")) + b"\x85R.",
    # builtins.eval("open('pwned-eval','w').close()")
    "eval": b"\x80\x02cbuiltins\neval\n" + unicode(f"open('{marker('eval')}','w').close()") + b"\x85R.",
    # builtins.exec("open('pwned-exec','w').close()") through STACK_GLOBAL
    "exec": b"\x80\x04" + b"\x8c\x08builtins" + b"\x8c\x04exec\x93" +
            unicode(f"open('{marker('exec')}','w').close()") + b"\x85R.",
    # getattr(__import__('os'), 'system')('touch pwned-getattr')
    "getattr": b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\n" + unicode("os") + b"\x85R" +
               unicode("system") + b"\x86R" + unicode("touch " + marker("getattr")) + b"\x85R.",
    # subprocess.Popen(['touch', 'pwned-popen']) (verified with .wait())
    "popen": b"\x80\x02csubprocess\nPopen\n(" + unicode("touch") + unicode(marker("popen")) +
             b"l\x85R.",
    # an OrderedDict whose tensor's storage offset is posix.system(...)
    # (returns 0): the REDUCE nested in a tensor's arguments
    "nested": None,  # made by nested_payload()
    # the extension registry: EXT1 240, which a process that registered
    # copyreg.add_extension('posix', 'system', 240) resolves to posix.system
    "ext1": b"\x80\x02\x82\xf0" + unicode("touch " + marker("ext1")) + b"\x85R.",
}


def nested_payload():
    class SystemCall:
        def __reduce__(self):
            return (os.system, ("touch " + marker("nested"),))

    class EvilTensor(Tensor):
        def __reduce_ex__(self, proto):
            return (_rebuild_tensor_v2, (self.storage, SystemCall(), (2,), (1,), False,
                                         collections.OrderedDict()))

    sd = collections.OrderedDict(w=EvilTensor(Storage("F32", [1.0, 2.0]), 0, [2], [1]))
    data, _ = pickle_object(sd, legacy=False)
    assert b"posix\nsystem" in data
    return sd, data


def verify_evil(pkls):
    """Loads each payload with Python's pickle in a temporary directory and
    checks that its marker appears: the attacks are real."""
    copyreg.add_extension("posix", "system", 240)

    class Loader(pickle.Unpickler):
        def persistent_load(self, pid):
            return Storage("F32", [0.0] * pid[4])

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for name, data in pkls.items():
                v = Loader(io.BytesIO(data)).load()
                if isinstance(v, subprocess.Popen):
                    v.wait()
                assert os.path.exists(marker(name)), f"payload {name} did not run"
                print(f"verified: Python's pickle runs the {name} payload (created {marker(name)})")
        finally:
            os.chdir(cwd)
            copyreg.remove_extension("posix", "system", 240)


# --- plain values in every pickle protocol ------------------------------

def plain_values():
    shared = [1, "x"]
    od = collections.OrderedDict([("a", 1), ("b", [2.5])])
    return {
        "str": ["", "héllo\n\\ 'q' \"dq\"", "\u20ac\U0001f600", "x" * 300],
        "bytes": [b"", b"\x00\xff abc", b"y" * 300],
        "int": [0, 1, -1, 255, 256, 65535, 65536, -(2 ** 31), 2 ** 31 - 1, 2 ** 31, 2 ** 63 - 1,
                -(2 ** 63), 2 ** 63, -(2 ** 70), 0x1950A86A20F9469CFC6C],
        "float": [0.0, 1.5, -0.25, 1e100, -1e-300],
        "tuple": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
        "const": [None, True, False],
        "od": od,
        "empty_od": collections.OrderedDict(),
        "nested": {"x": [[], {}], 7: "int key", None: "none key", 2.5: "float key", b"k": "bytes key"},
        "shared": [shared, shared],
    }


def canon(v):
    """The structure the Go test renders a loaded value to, as JSON."""
    if v is None:
        return {"none": True}
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, str):
        return {"str": v}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return {"list": [canon(x) for x in v]}
    if isinstance(v, tuple):
        return {"tuple": [canon(x) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[canon(k), canon(x)] for k, x in v.items()],
                "ordered": isinstance(v, collections.OrderedDict)}
    raise TypeError(type(v))


def main():
    os.makedirs(OUT, exist_ok=True)
    values = plain_values()
    for proto in range(6):
        with open(os.path.join(OUT, f"handmade-values-p{proto}.pkl"), "wb") as f:
            pickle.dump(values, f, protocol=proto)
    with open(os.path.join(OUT, "handmade-values.json"), "w") as f:
        json.dump(canon(values), f, indent=1, sort_keys=True)
        f.write("\n")
    sd, expected = state_dict()
    wrapped = {"params_ema": prefixed(sd, "module."), "params": collections.OrderedDict(), "iter": 7}
    write_zip(os.path.join(OUT, "handmade-zip.pth"), wrapped)
    write_legacy(os.path.join(OUT, "handmade-legacy.pth"), wrapped)
    # big-endian, an old-style top folder, torch.cuda storage classes
    big_sd, _ = state_dict(CUDA_FLOAT)
    write_zip(os.path.join(OUT, "handmade-big.pth"), big_sd, top="RealESRGAN_x4plus", byteorder="big")
    write_safetensors(os.path.join(OUT, "handmade-expected.safetensors"), expected)

    pkls = dict(EVIL)
    nested, pkls["nested"] = nested_payload()
    for name, data in pkls.items():
        path = os.path.join(OUT, f"handmade-evil-{name}.pth")
        if name == "nested":  # with its storage, so only the payload is wrong
            write_zip(path, nested)
        else:
            write_zip(path, None, pkl=data)
    # one legacy file with a payload in the object pickle
    with open(os.path.join(OUT, "handmade-evil-legacy.pth"), "wb") as f:
        for head in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
            pickle.dump(head, f, protocol=2)
        f.write(pkls["system"].replace(marker("system").encode(), marker("legacy").encode()))
        pickle.dump([], f, protocol=2)
    if "--verify" in sys.argv:
        pkls["legacy"] = pkls["system"].replace(marker("system").encode(), marker("legacy").encode())
        verify_evil(pkls)


if __name__ == "__main__":
    main()
