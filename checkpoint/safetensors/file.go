package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
)

// MaxHeaderSize is the largest JSON header Open accepts (100 MiB), as in the
// reference implementation.
const MaxHeaderSize = 100 << 20

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	// Name is the tensor's key in the header.
	Name string
	// DType is its element type.
	DType DType
	// Shape is its dimensions, outermost first; empty for a 0-d scalar.
	Shape []int
	// Begin and End are its [Begin, End) byte range relative to the start of
	// the data section (the byte after the header), as in data_offsets.
	Begin, End int64
}

// Elems is the number of elements: the product of Shape (1 for a scalar, 0
// if any dimension is 0).
func (t *TensorInfo) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t *TensorInfo) clone() *TensorInfo {
	c := *t
	c.Shape = slices.Clone(t.Shape)
	if c.Shape == nil {
		c.Shape = []int{}
	}
	return &c
}

// File is an open, validated safetensors file whose contents are memory
// mapped read-only (or, where mapping fails, read into memory). Its methods
// may be called from several goroutines at once, except Close, which must not
// run concurrently with the others.
type File struct {
	path     string
	data     []byte // the whole file
	unmap    func([]byte) error
	dataOff  int64 // start of the data section in data
	tensors  map[string]*TensorInfo
	names    []string
	metadata map[string]string
}

// Open validates the safetensors file at path and maps it into memory
// read-only. Every tensor is checked before Open returns: a known dtype,
// non-negative integer dimensions, exactly elems*dtype-size bytes, inside the
// data section and overlapping no other tensor; no key appears twice and
// __metadata__ holds only strings. A PyTorch pickle (whatever its name) is
// reported with an error wrapping [ErrPickle]. If the file cannot be mapped it
// is read into memory instead.
//
// Views returned by [File.Bytes] point into the mapping: if another process
// truncates the file while it is open, touching them may crash the program,
// as with any memory-mapped file.
func Open(path string) (*File, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: %q: %s", path, fmt.Sprintf(format, args...))
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fail("not a regular file")
	}
	size := st.Size()
	if size < 8 {
		if err := checkPickle(path, fd, size); err != nil {
			return nil, err
		}
		return nil, fail("file is %d bytes, shorter than the 8-byte header length", size)
	}
	if size > math.MaxInt {
		return nil, fail("file is %d bytes, too large to map on this platform", size)
	}
	var lenBuf [8]byte
	if _, err := fd.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fail("reading header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	var lenProblem string
	switch {
	case n == 0:
		lenProblem = "header length is 0"
	case n > MaxHeaderSize:
		lenProblem = fmt.Sprintf("header length %d exceeds the %d MiB limit", n, MaxHeaderSize>>20)
	case n > uint64(size-8):
		lenProblem = fmt.Sprintf("header length %d is larger than the %d bytes after it", n, size-8)
	}
	if lenProblem == "" {
		// A plausible length; still, a pickle whose first bytes happen to
		// read as one would not start its "header" with '{'.
		var first [1]byte
		if _, err := fd.ReadAt(first[:], 8); err != nil {
			return nil, fail("reading header: %v", err)
		}
		if first[0] != '{' {
			if err := checkPickle(path, fd, size); err != nil {
				return nil, err
			}
		}
	} else {
		if err := checkPickle(path, fd, size); err != nil {
			return nil, err
		}
		if bytes.HasPrefix(lenBuf[:], zipMagic) {
			lenProblem += " (the file is a zip archive, not safetensors)"
		}
		return nil, fail("%s", lenProblem)
	}

	data, unmap, err := mapper(fd, int(size))
	if err != nil {
		data = make([]byte, size)
		if _, err := io.ReadFull(io.NewSectionReader(fd, 0, size), data); err != nil {
			return nil, fail("reading: %v", err)
		}
		unmap = nil
	}
	f := &File{path: path, data: data, unmap: unmap, dataOff: 8 + int64(n)}
	if err := f.load(data[8 : 8+n]); err != nil {
		f.Close()
		return nil, fail("%v", err)
	}
	return f, nil
}

// load parses the header and checks every tensor against the data section.
func (f *File) load(hdr []byte) error {
	h, err := parseHeader(hdr)
	if err != nil {
		return err
	}
	dataLen := int64(len(f.data)) - f.dataOff
	f.tensors = make(map[string]*TensorInfo, len(h.tensors))
	f.names = make([]string, 0, len(h.tensors))
	for _, t := range h.tensors {
		if t.End > dataLen {
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the end of the %d-byte data section", t.Name, t.Begin, t.End, dataLen)
		}
		f.tensors[t.Name] = t
		f.names = append(f.names, t.Name)
	}
	sort.Strings(f.names)

	// Overlap: sort the non-empty ranges by start; each must begin at or
	// after the furthest end so far. Empty tensors hold no bytes.
	byOff := make([]*TensorInfo, 0, len(h.tensors))
	for _, t := range h.tensors {
		if t.End > t.Begin {
			byOff = append(byOff, t)
		}
	}
	sort.Slice(byOff, func(a, b int) bool {
		if byOff[a].Begin != byOff[b].Begin {
			return byOff[a].Begin < byOff[b].Begin
		}
		return byOff[a].Name < byOff[b].Name
	})
	for i := 1; i < len(byOff); i++ {
		p, t := byOff[i-1], byOff[i]
		if t.Begin < p.End {
			return fmt.Errorf("tensors %q [%d, %d] and %q [%d, %d] overlap", p.Name, p.Begin, p.End, t.Name, t.Begin, t.End)
		}
	}
	if h.metadata == nil {
		h.metadata = map[string]string{}
	}
	f.metadata = h.metadata
	return nil
}

// Close releases the mapping. Views from [File.Bytes] must not be used
// afterwards. Close is idempotent.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	data, unmap := f.data, f.unmap
	f.data, f.unmap = nil, nil
	if unmap != nil {
		if err := unmap(data); err != nil {
			return fmt.Errorf("safetensors: %q: unmapping: %v", f.path, err)
		}
	}
	return nil
}

// Path is the path the file was opened with.
func (f *File) Path() string { return f.path }

// Names lists the tensor names, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Info describes the named tensor; false if the file has none of that name.
// The result is a copy the caller may modify.
func (f *File) Info(name string) (*TensorInfo, bool) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return t.clone(), true
}

// Metadata is a copy of the header's __metadata__ (empty if it has none).
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

// mapper maps a file; a variable so tests can exercise the read fallback.
var mapper = mapFile

// errClosed is returned for reads after Close.
var errClosed = errors.New("file is closed")

// Bytes is the named tensor's raw little-endian data: a read-only view into
// the mapping, valid until Close. Writing to it may crash the program. Its
// capacity ends with the tensor, so appending copies.
func (f *File) Bytes(name string) ([]byte, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: %q: no tensor %q", f.path, name)
	}
	if f.data == nil {
		return nil, fmt.Errorf("safetensors: %q: %v", f.path, errClosed)
	}
	b, e := f.dataOff+t.Begin, f.dataOff+t.End
	return f.data[b:e:e], nil
}

// Float32 is the named tensor converted to float32 in a new slice: exact for
// BF16, F16, F32 and F8_E4M3 (unscaled); an error for any other dtype.
func (f *File) Float32(name string) ([]float32, error) {
	b, err := f.Bytes(name)
	if err != nil {
		return nil, err
	}
	t := f.tensors[name]
	out, ok := toFloat32(t.DType, b)
	if !ok {
		return nil, fmt.Errorf("safetensors: %q: tensor %q is %s, not BF16, F16, F32 or F8_E4M3", f.path, name, t.DType)
	}
	return out, nil
}
