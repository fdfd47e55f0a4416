package arch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// Open reads the state dict in the file at path, tensors and all; with
// header set, only the names, shapes and types (the Data of each tensor
// is nil), which is all Detect needs. It is the one place vsr opens a
// state dict file.
//
// Today it reads .safetensors files (checkpoint/safetensors) and refuses
// PyTorch pickles; package checkpoint/torch's statedict.Open (issue 39,
// item 1) takes its place for both.
func Open(path string, header bool) (*statedict.Dict, error) {
	if err := safetensors.CheckNotPickle(path); err != nil {
		if errors.Is(err, safetensors.ErrPickle) {
			return nil, fmt.Errorf("%s is a PyTorch pickle (.pth): this vsr cannot read them yet; convert it to .safetensors (safetensors.torch.save_file)", path)
		}
		return nil, err
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &statedict.Dict{Metadata: f.Metadata()}
	for _, name := range f.Names() {
		ti, _ := f.Info(name)
		t := &statedict.Tensor{Shape: ti.Shape, DType: statedict.DType(ti.DType)}
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("%s: tensor %s is %s: vsr reads F32, F16 and BF16 state dicts", path, name, ti.DType)
		}
		if !header {
			b, err := f.Bytes(name)
			if err != nil {
				return nil, err
			}
			t.Data = append([]byte(nil), b...)
		}
		if err := d.Add(name, t); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Sniff reports whether the file at path is a state dict of an
// architecture Detect recognises (whether vsr runs it or not), with the
// Info and the state dict's header. A file that is no state dict, or one
// of no known architecture (a CDA-VSR checkpoint), is not.
func Sniff(path string) (*Info, *statedict.Dict, bool) {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return nil, nil, false
	}
	d, err := Open(path, true)
	if err != nil {
		return nil, nil, false
	}
	info, err := Detect(d)
	if err != nil {
		return nil, nil, false
	}
	Name(info, path)
	return info, d, true
}

// Name adds to info what the file's name tells and the weights cannot:
// a Real-CUGAN's denoise level or conservative variant
// (up2x-latest-conservative.pth, up4x-latest-denoise3x.pth).
func Name(info *Info, path string) {
	if info.Arch != "RealCUGAN" {
		return
	}
	base := strings.ToLower(filepath.Base(path))
	for _, v := range []string{"conservative", "no-denoise", "denoise1x", "denoise2x", "denoise3x"} {
		if strings.Contains(base, v) {
			if info.Variant != "" {
				info.Variant += ", "
			}
			info.Variant += v
			info.why("the file name says %s (the weights cannot tell Real-CUGAN's variants apart)", v)
			return
		}
	}
}

// Metadata keys that Write sets from an Info (act_type, actMeta, too for
// an SRVGGNetCompact, so that a weightless activation's kind survives).
const (
	MetaArch    = "architecture"
	MetaVariant = "architecture_variant"
	MetaScale   = "scale"
)

// Write writes d as a .safetensors file at path, its tensors in d's order
// and types, with d's metadata and, when info is not nil, the
// architecture found (MetaArch, MetaVariant, MetaScale and an
// SRVGGNetCompact's act_type).
func Write(path string, d *statedict.Dict, info *Info) error {
	meta := map[string]string{}
	for k, v := range d.Metadata {
		meta[k] = v
	}
	if info != nil {
		meta[MetaArch] = info.Arch
		if info.Variant != "" {
			meta[MetaVariant] = info.Variant
		}
		if info.Scale > 0 {
			meta[MetaScale] = fmt.Sprint(info.Scale)
		}
		if info.Activation != "" && info.Activation != "prelu" {
			meta[actMeta] = info.Activation
		}
	}
	var ts []safetensors.WriteTensor
	for _, k := range d.Keys {
		t := d.Tensors[k]
		ts = append(ts, safetensors.WriteTensor{Name: k, DType: safetensors.DType(t.DType), Shape: t.Shape, Data: t.Data})
	}
	return safetensors.Write(path, ts, meta)
}
