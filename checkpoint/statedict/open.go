package statedict

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/checkpoint/torch"
)

// Skipped is an entry of a file's state dict that Open leaves out of the
// Dict, and why: a tensor of an element type other than F32, F16 or BF16
// (BatchNorm's int64 num_batches_tracked, float64 buffers), or a value that
// is not a tensor.
type Skipped struct {
	Key string
	Why string
}

// unwrapKeys are the keys under which training code nests the state dict,
// in the order spandrel tries them (spandrel's canonicalize_state_dict).
var unwrapKeys = []string{"model_state_dict", "state_dict", "params_ema", "params-ema", "params", "model", "net"}

// commonPrefixes are the key prefixes spandrel removes, each when every key
// has it, in this order: DataParallel's "module." and "netG.".
var commonPrefixes = []string{"module.", "netG."}

// Open reads the state dict in the file at path: a .safetensors file or a
// torch.save file (zip or legacy format, read by package checkpoint/torch
// without running any pickle code), told apart by content, never by name.
//
// The state dict is then found as spandrel finds it (chaiNNer-org/spandrel,
// libs/spandrel/spandrel/__helpers/canonicalize.py, canonicalize_state_dict):
// if the top-level dict has one of the keys "model_state_dict",
// "state_dict", "params_ema", "params-ema", "params", "model", "net" whose
// value is a dict (the first such key in that order), that dict is the state
// dict (once, not recursively); then the prefixes "module." and "netG." are
// each removed, in that order, when every key has it. Safetensors files get
// the same prefix removal.
//
// The Dict holds the F32, F16 and BF16 tensors, in the file's order; other
// entries are left out ([OpenWithSkipped] lists them). Tensors that viewed
// one storage of a torch.save file may share their Data: treat it as
// read-only. A file whose state
// dict is not a dict with string keys, or holds no such tensor, is an error.
// Every error is one line naming the file.
func Open(path string) (*Dict, error) {
	d, _, err := OpenWithSkipped(path)
	return d, err
}

// OpenWithSkipped is [Open] that also returns the entries it left out.
func OpenWithSkipped(path string) (*Dict, []Skipped, error) {
	return open(path, false)
}

// OpenHeader is [OpenWithSkipped] without the tensors' values: the Dict's
// keys, shapes and types are Open's, and every Data is nil. Of a
// .safetensors file it reads only the header; of a torch.save zip, its
// pickle and the sizes of its records, never their data (torch.Options'
// Header), so that a record built to inflate without end costs nothing
// here; a legacy torch.save file is read, as its storages follow its
// pickle, but none is copied. A torch.save file whose tensors would be
// refused by Open (more data than torch.DefaultMaxBytes, a deflated
// record holding more than its tensors use) is refused by OpenHeader
// too.
func OpenHeader(path string) (*Dict, []Skipped, error) {
	return open(path, true)
}

// open is OpenWithSkipped, or OpenHeader with header set.
func open(path string, header bool) (*Dict, []Skipped, error) {
	err := safetensors.CheckNotPickle(path)
	switch {
	case err == nil:
		return openSafetensors(path, header)
	case errors.Is(err, safetensors.ErrPickle):
		return openTorch(path, header)
	}
	return nil, nil, err
}

// entry is one key of a file's state dict before filtering: a tensor, or
// why it is left out.
type entry struct {
	key string
	t   *Tensor
	why string
}

// floatDType is the Dict dtype for a file's dtype name, if it keeps it.
func floatDType(name string) (DType, bool) {
	switch d := DType(name); d {
	case F32, F16, BF16:
		return d, true
	}
	return "", false
}

// openSafetensors reads a .safetensors file, copying the tensors out of its
// mapping (none, with header set).
func openSafetensors(path string, header bool) (*Dict, []Skipped, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	infos := make([]*safetensors.TensorInfo, 0, len(f.Names()))
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		infos = append(infos, info)
	}
	slices.SortStableFunc(infos, func(a, b *safetensors.TensorInfo) int { return cmp.Compare(a.Begin, b.Begin) })
	entries := make([]entry, 0, len(infos))
	for _, info := range infos {
		d, ok := floatDType(string(info.DType))
		if !ok {
			entries = append(entries, entry{key: info.Name, why: "a " + string(info.DType) + " tensor"})
			continue
		}
		t := &Tensor{Shape: slices.Clone(info.Shape), DType: d}
		if !header {
			b, err := f.Bytes(info.Name)
			if err != nil {
				return nil, nil, err
			}
			t.Data = slices.Clone(b)
		}
		entries = append(entries, entry{key: info.Name, t: t})
	}
	return build(path, entries, f.Metadata())
}

// openTorch reads a torch.save file (no storage, with header set) and
// finds its state dict.
func openTorch(path string, header bool) (*Dict, []Skipped, error) {
	v, err := torch.Options{Header: header}.Load(path)
	if err != nil {
		return nil, nil, err
	}
	top, ok := v.(*torch.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("statedict: %q holds a %s, not a state dict (a dict of tensors)", path, torch.TypeName(v))
	}
	for _, k := range unwrapKeys {
		if inner, ok := top.Get(k); ok {
			if d, ok := inner.(*torch.Dict); ok {
				top = d
				break
			}
		}
	}
	entries := make([]entry, 0, top.Len())
	for i := range top.Len() {
		k, v := top.Entry(i)
		key, ok := k.(string)
		if !ok {
			return nil, nil, fmt.Errorf("statedict: %q: a key of the state dict is a %s (%v), not a str: not a state dict", path, torch.TypeName(k), k)
		}
		t, ok := v.(*torch.Tensor)
		if !ok {
			entries = append(entries, entry{key: key, why: "a " + torch.TypeName(v) + ", not a tensor"})
			continue
		}
		d, ok := floatDType(string(t.DType))
		if !ok {
			entries = append(entries, entry{key: key, why: "a " + string(t.DType) + " tensor"})
			continue
		}
		entries = append(entries, entry{key: key, t: &Tensor{Shape: t.Shape, DType: d, Data: t.Data}})
	}
	return build(path, entries, nil)
}

// build removes the common prefixes from every key (tensor or not, as
// spandrel does) and makes the Dict of the tensors kept.
func build(path string, entries []entry, metadata map[string]string) (*Dict, []Skipped, error) {
	for _, p := range commonPrefixes {
		if len(entries) > 0 && !slices.ContainsFunc(entries, func(e entry) bool { return !strings.HasPrefix(e.key, p) }) {
			for i := range entries {
				entries[i].key = entries[i].key[len(p):]
			}
		}
	}
	d := &Dict{Tensors: map[string]*Tensor{}, Metadata: metadata}
	var skipped []Skipped
	for _, e := range entries {
		if e.t == nil {
			skipped = append(skipped, Skipped{Key: e.key, Why: e.why})
			continue
		}
		if err := d.Add(e.key, e.t); err != nil {
			return nil, nil, fmt.Errorf("statedict: %q: %v", path, err)
		}
	}
	if len(d.Keys) == 0 {
		return nil, nil, fmt.Errorf("statedict: %q holds no F32, F16 or BF16 tensors: not a state dict of a model vsr can run", path)
	}
	d.Skipped = skipped
	return d, skipped, nil
}
