package arch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// Open reads the state dict in the file at path, tensors and all; with
// header set, only the names, shapes and types (the Data of each tensor
// is nil), which is all Detect needs. It is the one place vsr opens a
// state dict file: a .safetensors file or a PyTorch torch.save file (.pth,
// zip or legacy format, read by package checkpoint/torch without running
// any pickle code), through statedict.Open, so the containers and key
// prefixes training code adds are removed as spandrel removes them.
// Entries that are not F32, F16 or BF16 tensors are left out
// ([OpenWithSkipped] lists them).
//
// With header set, a .safetensors file's header is all that is read, and
// of a torch.save file its pickle, never a storage's data
// (statedict.OpenHeader): Detect needs only the names, shapes and types.
// A torch.save file's header (or its error) is kept, keyed by the path,
// size and modification time, so that Sniff, which runs on every
// model.Find, parses each .pth once. The Dict returned with header set may
// be shared: treat it as read-only.
func Open(path string, header bool) (*statedict.Dict, error) {
	if header {
		return headers.open(path)
	}
	d, _, err := statedict.OpenWithSkipped(path)
	return d, err
}

// OpenWithSkipped is Open, tensors and all, that also returns the
// entries of the file's state dict it left out and why.
func OpenWithSkipped(path string) (*statedict.Dict, []statedict.Skipped, error) {
	return statedict.OpenWithSkipped(path)
}

// headerCache holds the headers of the torch.save files Open has read.
type headerCache struct {
	mu sync.Mutex
	m  map[headerKey]headerEntry
	// read reads a header (statedict.OpenHeader; tests count the reads).
	read func(path string) (*statedict.Dict, []statedict.Skipped, error)
}

// headerKey names one version of a file.
type headerKey struct {
	path  string
	size  int64
	mtime time.Time
}

type headerEntry struct {
	d   *statedict.Dict
	err error
}

// maxHeaders bounds the cache; when full it starts again empty.
const maxHeaders = 256

var headers = &headerCache{m: map[headerKey]headerEntry{}, read: statedict.OpenHeader}

// open returns the header of the file at path: read anew for a
// .safetensors file, from the cache for a torch.save file read before
// at the same size and modification time.
func (c *headerCache) open(path string) (*statedict.Dict, error) {
	if err := safetensors.CheckNotPickle(path); !errors.Is(err, safetensors.ErrPickle) {
		if err != nil {
			return nil, err
		}
		d, _, err := c.read(path)
		return d, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	k := headerKey{path, st.Size(), st.ModTime()}
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return e.d, e.err
	}
	e.d, _, e.err = c.read(path)
	c.mu.Lock()
	if len(c.m) >= maxHeaders {
		clear(c.m)
	}
	c.m[k] = e
	c.mu.Unlock()
	return e.d, e.err
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
