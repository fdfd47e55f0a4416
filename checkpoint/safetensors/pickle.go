package safetensors

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
)

// ErrPickle is wrapped by the error for a file that is a PyTorch pickle
// (what torch.save writes: .pt, .pth, .bin, .ckpt). Loaded by Python, such
// files can run arbitrary code; this package only recognises them, by
// content, and never parses them (package checkpoint/torch reads the state
// dicts in them without running any of their code).
var ErrPickle = errors.New("PyTorch pickle (torch.save)")

var (
	// zipMagic starts a zip local file header: torch.save's default format
	// since PyTorch 1.6 is a zip holding <archive>/data.pkl.
	zipMagic = []byte("PK\x03\x04")
	// legacyMagicLE is torch's legacy-format magic number
	// 0x1950a86a20f9469cfc6c as pickled by LONG1 (protocol 1 and up).
	legacyMagicLE = []byte{0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}
	// legacyMagicText is the same number pickled with protocol 0.
	legacyMagicText = []byte("L119547037146038801333356L")
)

// CheckNotPickle returns nil unless the file at path is a PyTorch pickle, in
// which case the error wraps [ErrPickle] and tells the user how to convert
// the file. It looks only at content, never at the name: a zip archive
// (torch.save's default format) holding data.pkl or */data.pkl, or a legacy
// pickle stream (a PROTO opcode 0x80 with protocol 2 to 5, or torch's legacy
// magic number). A file that reads as a plausible safetensors file is never
// taken for a pickle. Errors opening or reading the file are returned as they
// are.
func CheckNotPickle(path string) error {
	fd, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil
	}
	return checkPickle(path, fd, st.Size())
}

// pickleError is the error for a pickle at path.
func pickleError(path string) error {
	return fmt.Errorf("%q is a %w, where a .safetensors file is needed: vsr reads .pth files only as state dicts of the super-resolution architectures it knows (vsr models FILE); convert this one with safetensors.torch.save_file and pass the .safetensors file", path, ErrPickle)
}

// checkPickle is CheckNotPickle on an open file of the given size.
func checkPickle(path string, r io.ReaderAt, size int64) error {
	var buf [512]byte
	n, err := r.ReadAt(buf[:min(size, int64(len(buf)))], 0)
	if err != nil && err != io.EOF {
		return fmt.Errorf("safetensors: %q: %v", path, err)
	}
	head := buf[:n]
	if plausibleSafetensors(head, size) {
		return nil
	}
	switch {
	case bytes.HasPrefix(head, zipMagic):
		if zipHasDataPkl(head, r, size) {
			return pickleError(path)
		}
		return nil
	case len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		return pickleError(path)
	case bytes.Contains(head[:min(len(head), 32)], legacyMagicLE),
		bytes.HasPrefix(head, legacyMagicText):
		return pickleError(path)
	}
	return nil
}

// plausibleSafetensors reports whether head, the start of a file of the
// given size, has a usable header length followed by '{'.
func plausibleSafetensors(head []byte, size int64) bool {
	if len(head) < 9 {
		return false
	}
	n := binary.LittleEndian.Uint64(head)
	return n > 0 && n <= MaxHeaderSize && n <= uint64(size-8) && head[8] == '{'
}

// isDataPkl matches torch.save's pickle entry: data.pkl at the top or one
// directory down (archive/data.pkl, or <name>/data.pkl in older versions).
func isDataPkl(name string) bool {
	if name == "data.pkl" {
		return true
	}
	ok, _ := path.Match("*/data.pkl", name)
	return ok
}

// zipHasDataPkl looks for data.pkl in a zip archive: first in the local
// header of the first entry (where torch.save puts it; this works even on a
// truncated file), then in the central directory.
func zipHasDataPkl(head []byte, r io.ReaderAt, size int64) bool {
	if len(head) >= 30 {
		nameLen := int(binary.LittleEndian.Uint16(head[26:]))
		if 30+nameLen <= len(head) && isDataPkl(string(head[30:30+nameLen])) {
			return true
		}
	}
	zr, err := zip.NewReader(io.NewSectionReader(r, 0, size), size)
	if zr == nil || err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return false
	}
	for _, f := range zr.File {
		if isDataPkl(f.Name) {
			return true
		}
	}
	return false
}
