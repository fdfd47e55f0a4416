package torch

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
)

// Load reads the torch.save file at path, in the zip or the legacy format
// (told apart by content), and returns the object it holds as the Go values
// listed in value.go: for a state dict, a *Dict of *Tensor values. Nothing
// the file names is run (see the package doc for the allow-list); a global
// outside it gives an error wrapping [ErrRefused]. Every error is one line
// that names the file. Load is the zero [Options]' Load.
func Load(path string) (any, error) { return Options{}.Load(path) }

// DefaultMaxBytes is the most tensor data [Options.Load] reads from one
// file unless told otherwise: ten times the largest state dicts of the
// super-resolution architectures vsr knows, far below what a file built
// to exhaust memory declares.
const DefaultMaxBytes = 2 << 30

// Options say how [Options.Load] reads a file; the zero value reads it as
// [Load] does.
type Options struct {
	// Header reads the pickle and checks every size it declares and every
	// record's size, but reads (and inflates) no storage: each Tensor has
	// its DType and Shape, and a nil Data.
	Header bool
	// MaxBytes bounds the tensor data of one file: the sum, over its
	// storages, of the bytes from the storage's start that its tensors'
	// views reach, which is all that is read of it. A file that needs
	// more is refused before any storage is read, with or without Header.
	// 0 or less is DefaultMaxBytes.
	MaxBytes int64
}

// Load is [Load] with the options o: the same object and the same errors,
// but no storage read with o.Header, and at most o.MaxBytes of tensor data.
// A zip record is read, and inflated, only as far as its storage's tensors
// reach, however large the zip says it is.
func (o Options) Load(path string) (any, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("torch: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("torch: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("torch: %q: not a regular file", path)
	}
	v, err := o.read(fd, st.Size())
	if err != nil {
		return nil, fmt.Errorf("torch: %q: %w", path, err)
	}
	return v, nil
}

var (
	zipMagic = []byte("PK\x03\x04")
	// emptyZipMagic starts a zip archive with no entries.
	emptyZipMagic = []byte("PK\x05\x06")
)

// read reads a torch.save file of the given size from r.
func (o Options) read(r io.ReaderAt, size int64) (any, error) {
	var head [512]byte
	n, err := r.ReadAt(head[:min(size, int64(len(head)))], 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	h := head[:n]
	switch {
	case bytes.HasPrefix(h, zipMagic), bytes.HasPrefix(h, emptyZipMagic):
		return o.readZip(r, size)
	case len(h) > 0 && (h[0] == 0x80 || h[0] == 'L'):
		// A pickle: PROTO, or protocol 0 and 1's text LONG of the magic number.
		return o.readLegacy(r, size)
	case len(h) >= 262 && string(h[257:262]) == "ustar":
		return nil, fmt.Errorf("a tar archive: the tar format of PyTorch before 0.1.10 is not supported; re-save the file with a newer PyTorch")
	}
	return nil, fmt.Errorf("not a torch.save file (neither a zip archive nor a pickle)")
}

// finish checks the bytes the tensors reach in their storages against
// o.MaxBytes, then has read fill each storage the tensors view with at
// least its need bytes, or only check it with o.Header (nil read: the
// storages hold their data already), and sets every tensor's shape and,
// unless o.Header, its data. Non-contiguous views are copied, in all at
// most budget bytes.
func (o Options) finish(v any, tensors []*Tensor, budget int64, read func(*storage) error) (any, error) {
	storages, err := o.needs(tensors)
	if err != nil {
		return nil, err
	}
	for _, st := range storages {
		if st.need == 0 {
			continue
		}
		if read != nil {
			if err := read(st); err != nil {
				return nil, err
			}
		}
		if st.data == nil && !o.Header {
			return nil, fmt.Errorf("storage %q has no data in the file", st.key)
		}
	}
	var copied int64
	for _, t := range tensors {
		if err := t.materialize(o.Header, &copied, budget); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// needs sets each viewed storage's need from its tensors' views and
// returns the storages in the order the tensors first view them; their
// needs together may not pass o.MaxBytes.
func (o Options) needs(tensors []*Tensor) ([]*storage, error) {
	limit := o.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	var out []*storage
	seen := map[*storage]bool{}
	for _, t := range tensors {
		st := t.view.st
		if !seen[st] {
			seen[st] = true
			st.need = 0
			out = append(out, st)
		}
		st.need = max(st.need, t.view.end*int64(t.DType.Size()))
	}
	var total int64
	for _, st := range out {
		total += min(st.need, math.MaxInt64-total)
	}
	if total > limit {
		return nil, fmt.Errorf("its tensors reach %s of storage data, more than the limit of %s for one file: the file is damaged or crafted, or far larger than a super-resolution model", sizeOf(total), sizeOf(limit))
	}
	return out, nil
}

// sizeOf is n bytes in words: "4294967296 bytes (4.0 GiB)".
func sizeOf(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
