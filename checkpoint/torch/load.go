package torch

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// Load reads the torch.save file at path, in the zip or the legacy format
// (told apart by content), and returns the object it holds as the Go values
// listed in value.go: for a state dict, a *Dict of *Tensor values. Nothing
// the file names is run (see the package doc for the allow-list); a global
// outside it gives an error wrapping [ErrRefused]. Every error is one line
// that names the file.
func Load(path string) (any, error) {
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
	v, err := read(fd, st.Size())
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
func read(r io.ReaderAt, size int64) (any, error) {
	var head [512]byte
	n, err := r.ReadAt(head[:min(size, int64(len(head)))], 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	h := head[:n]
	switch {
	case bytes.HasPrefix(h, zipMagic), bytes.HasPrefix(h, emptyZipMagic):
		return readZip(r, size)
	case len(h) > 0 && (h[0] == 0x80 || h[0] == 'L'):
		// A pickle: PROTO, or protocol 0 and 1's text LONG of the magic number.
		return readLegacy(r, size)
	case len(h) >= 262 && string(h[257:262]) == "ustar":
		return nil, fmt.Errorf("a tar archive: the tar format of PyTorch before 0.1.10 is not supported; re-save the file with a newer PyTorch")
	}
	return nil, fmt.Errorf("not a torch.save file (neither a zip archive nor a pickle)")
}

// finish reads every tensor's data from its storage, which must have been
// read. Non-contiguous views are copied, in all at most budget bytes.
func finish(v any, tensors []*Tensor, budget int64) (any, error) {
	var copied int64
	for _, t := range tensors {
		if t.view.st.data == nil {
			return nil, fmt.Errorf("storage %q has no data in the file", t.view.st.key)
		}
		if err := t.materialize(&copied, budget); err != nil {
			return nil, err
		}
	}
	return v, nil
}
