// Package npy reads and writes NumPy .npy files of float32 (format 1.0,
// little-endian, C order): CDA-VSR's side data and the golden fixtures of
// testdata/ (their inputs and reference outputs).
package npy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var npyMagic = []byte("\x93NUMPY")

// Write writes a C-order little-endian float32 array (NumPy format 1.0)
// atomically.
func Write(path string, shape []int, data []float32) error {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", strings.Join(dims, ", "))
	pad := 64 - (len(npyMagic)+4+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var b bytes.Buffer
	b.Write(npyMagic)
	b.Write([]byte{1, 0})
	binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	for _, v := range data {
		binary.Write(&b, binary.LittleEndian, math.Float32bits(v))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

var (
	npyDescr = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	npyOrder = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// Read reads a float32 array of the given shape from a .npy file,
// refusing any other dtype, order or shape with what it found.
func Read(path string, shape []int) ([]float32, error) {
	d, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(d) < 10 || !bytes.HasPrefix(d, npyMagic) {
		return nil, fmt.Errorf("%s is not a NumPy .npy file", path)
	}
	var hl, off int
	switch d[6] {
	case 1:
		hl, off = int(binary.LittleEndian.Uint16(d[8:])), 10
	case 2, 3:
		if len(d) < 12 {
			return nil, fmt.Errorf("%s: truncated .npy header", path)
		}
		hl, off = int(binary.LittleEndian.Uint32(d[8:])), 12
	default:
		return nil, fmt.Errorf("%s: .npy format version %d is not supported", path, d[6])
	}
	if off+hl > len(d) {
		return nil, fmt.Errorf("%s: truncated .npy header", path)
	}
	h := string(d[off : off+hl])
	descr, order, dims := npyDescr.FindStringSubmatch(h), npyOrder.FindStringSubmatch(h), npyShape.FindStringSubmatch(h)
	if descr == nil || order == nil || dims == nil {
		return nil, fmt.Errorf("%s: unreadable .npy header %q", path, strings.TrimSpace(h))
	}
	if descr[1] != "<f4" || order[1] != "False" {
		return nil, fmt.Errorf("%s holds %s data (fortran_order %s); want float32 ('<f4') in C order", path, descr[1], order[1])
	}
	var got []int
	for _, f := range strings.Split(dims[1], ",") {
		if f = strings.TrimSpace(f); f != "" {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%s: bad shape %q", path, dims[1])
			}
			got = append(got, n)
		}
	}
	if !slices.Equal(got, shape) {
		return nil, fmt.Errorf("%s has shape %v; want %v", path, got, shape)
	}
	data := d[off+hl:]
	n := 1
	for _, s := range shape {
		n *= s
	}
	if len(data) != 4*n {
		return nil, fmt.Errorf("%s holds %d bytes of data for %d float32 values", path, len(data), n)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return v, nil
}
