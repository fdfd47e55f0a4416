// Package torch reads the files torch.save writes (.pth, .pt, .ckpt, .bin)
// without running any of the Python code a pickle can name.
//
// A torch.save file is a Python pickle of the saved object whose tensors
// refer, by key, to raw storages kept beside it. Two layouts exist, and
// [Load] tells them apart by content, never by name:
//
//   - The zip format (PyTorch 1.6 and later): a zip archive whose records
//     share one top folder (archive/, or the file's stem in older versions):
//     <top>/data.pkl is the pickle, <top>/data/<key> each storage's bytes
//     (stored uncompressed and 64-byte aligned by torch; compressed records
//     are read too), <top>/byteorder "little" or "big" (absent: little), and
//     version records that are not needed to read the data.
//   - The legacy format (before 1.6, or _use_new_zipfile_serialization=False):
//     five pickles in a row (torch's magic number 0x1950a86a20f9469cfc6c, the
//     protocol version 1001, a sys_info dict, the object, then the sorted list
//     of storage keys), followed by each listed storage as an 8-byte
//     little-endian element count and its little-endian bytes.
//
// The pickle interpreter is an allow-list. It builds dicts, OrderedDicts,
// lists, tuples, strings, bytes, integers, floats, None and bools, and
// tensors through these globals only: torch._utils._rebuild_tensor_v2, the
// older _rebuild_tensor, and _rebuild_tensor_v3 (an untyped storage's bytes
// viewed as a dtype named by a global, for float8 and the unsigned types);
// torch._utils._rebuild_parameter and _rebuild_parameter_with_state (which
// return the tensor and drop its attributes); the typed storage classes
// (torch.FloatStorage and the other <Type>Storage names, also under
// torch.cuda, and torch.UntypedStorage); the torch dtypes as plain values;
// torch.Size; collections.OrderedDict; and _codecs.encode(str, "latin1")
// and bytes(), how protocols 0 to 2 spell bytes. Any other global, from the
// GLOBAL, STACK_GLOBAL or INST opcodes, is refused the moment it is named,
// before anything is called, with an error wrapping [ErrRefused] that names
// it ("refusing posix.system: ..."). Calls (REDUCE, NEWOBJ, NEWOBJ_EX, OBJ,
// INST) reach only the allow-listed callables above, each implemented in
// Go on checked arguments; BUILD only sets the attributes of an OrderedDict
// (a module's state_dict() carries _metadata; the attributes are dropped);
// the extension registry (EXT1, EXT2, EXT4), out-of-band buffers and sets
// are refused.
//
// Every size the pickle declares is checked before memory is allocated for
// it: a storage's element count against the bytes the file holds for it, a
// tensor's offset, sizes and strides against its storage, integer and string
// lengths against the bytes left, and the interpreter's stack and memo
// against fixed bounds. Of each storage only the bytes its tensors' views
// reach are read, never what a zip record says it holds, which the file
// itself sets: the views' bytes together must stay within
// [Options.MaxBytes] ([DefaultMaxBytes]) before any storage is read, a
// deflated record may hold no more than its tensors use, and is inflated
// once to check its size and CRC before memory is allocated for it. [Options.Header] reads the
// pickle and checks all of this without reading any storage. Tensors that view part of a storage share its bytes
// when the view is contiguous and get a contiguous copy otherwise; big-endian
// zip files are converted to little-endian. Errors are one line naming the
// file.
package torch
