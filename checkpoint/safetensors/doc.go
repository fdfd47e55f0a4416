// Package safetensors reads and writes the safetensors checkpoint format and
// recognises PyTorch pickles, which it does not read.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON header, then the data section:
//
//	{"name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
//	 "__metadata__": {"key": "value"}}
//
// data_offsets are [begin, end) byte offsets relative to the start of the
// data section. [Open] validates the whole header against the file before it
// hands out anything: every tensor must have a known dtype, non-negative
// integer dimensions, exactly elems*dtype-size bytes, lie inside the data
// section and not overlap another tensor; keys must not repeat. Gaps between
// tensors and trailing bytes are allowed, as the format permits, but no
// tensor view ever covers them.
//
// [OpenSet] opens either one file or a sharded checkpoint through its
// .safetensors.index.json ({"metadata": {...}, "weight_map": {"tensor":
// "shard file"}}) and presents all shards as one namespace.
//
// PyTorch's torch.save files (.pt, .pth, .bin, .ckpt) are Python pickles,
// which can run arbitrary code when Python loads them. This package
// recognises them by their content ([CheckNotPickle]) and reports them with
// [ErrPickle] where a safetensors file is required (SwiftVR and CDA-VSR
// checkpoints); it never parses a pickle. Package checkpoint/torch reads the
// state dicts in them with an allow-list interpreter that runs none of their
// code, and package checkpoint/statedict reads either format.
package safetensors
