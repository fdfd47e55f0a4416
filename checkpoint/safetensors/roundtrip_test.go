package safetensors

import (
	"github.com/vsr-dev/vsr/internal/pthtest"
	"github.com/vsr-dev/vsr/tensor/half"

	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

var allDTypes = []DType{BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL, F8E4M3}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestDTypeSize(t *testing.T) {
	want := map[DType]int{BF16: 2, F16: 2, F32: 4, F64: 8, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1, F8E4M3: 1}
	for d, n := range want {
		if d.Size() != n {
			t.Errorf("%s.Size() = %d, want %d", d, d.Size(), n)
		}
	}
	for _, d := range []DType{"", "bf16", "F8_E5M2", "U16", "C64"} {
		if d.Size() != 0 {
			t.Errorf("%q.Size() = %d, want 0", d, d.Size())
		}
	}
}

func TestRoundTripEveryDType(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][]int{{}, {0}, {2, 0, 3}, {5}, {2, 3}, {1, 2, 3, 1}}
	var in []WriteTensor
	for _, d := range allDTypes {
		for _, s := range shapes {
			n := d.Size()
			for _, x := range s {
				n *= x
			}
			in = append(in, WriteTensor{Name: fmt.Sprintf("%s.%v", strings.ToLower(string(d)), s), DType: d, Shape: s, Data: randBytes(r, n)})
		}
	}
	// Unusual but legal names.
	in = append(in, WriteTensor{Name: "é/\"quoted\"\n<&>", DType: U8, Shape: []int{3}, Data: []byte{1, 2, 3}})
	meta := map[string]string{"format": "pt", "b": "x\ny<>&\"", "empty": ""}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Write(path, in, meta); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if n := binary.LittleEndian.Uint64(raw); n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	f := mustOpen(t, path)
	if f.Path() != path {
		t.Errorf("Path = %q", f.Path())
	}
	if !reflect.DeepEqual(f.Metadata(), meta) {
		t.Errorf("Metadata = %v, want %v", f.Metadata(), meta)
	}
	var want []string
	for _, w := range in {
		want = append(want, w.Name)
	}
	sort.Strings(want)
	if !slices.Equal(f.Names(), want) {
		t.Errorf("Names = %q, want %q", f.Names(), want)
	}
	var off int64
	for _, w := range in {
		info, ok := f.Info(w.Name)
		if !ok {
			t.Fatalf("no %q", w.Name)
		}
		if info.Name != w.Name || info.DType != w.DType || !slices.Equal(info.Shape, w.Shape) || info.Shape == nil {
			t.Errorf("%q: info %+v", w.Name, info)
		}
		if info.Begin != off || info.End != off+int64(len(w.Data)) {
			t.Errorf("%q: offsets [%d, %d], want laid out in order from %d", w.Name, info.Begin, info.End, off)
		}
		off = info.End
		elems := 1
		for _, x := range w.Shape {
			elems *= x
		}
		if info.Elems() != elems {
			t.Errorf("%q: Elems %d, want %d", w.Name, info.Elems(), elems)
		}
		b, err := f.Bytes(w.Name)
		if err != nil || !bytes.Equal(b, w.Data) {
			t.Errorf("%q: Bytes = %v, %v", w.Name, b, err)
		}
		if cap(b) != len(b) {
			t.Errorf("%q: view capacity %d beyond its length %d", w.Name, cap(b), len(b))
		}
		_, err = f.Float32(w.Name)
		isFloat := w.DType == BF16 || w.DType == F16 || w.DType == F32 || w.DType == F8E4M3
		if isFloat != (err == nil) {
			t.Errorf("%q: Float32 error %v", w.Name, err)
		}
		if err != nil {
			pthtest.CheckOneLine(t, err, path, "is "+string(w.DType)+", not BF16, F16, F32 or F8_E4M3")
		}
	}
	// Info is a copy.
	info, _ := f.Info("f32.[2 3]")
	info.Shape[0] = 99
	if info2, _ := f.Info("f32.[2 3]"); info2.Shape[0] != 2 {
		t.Error("Info shares its shape with the File")
	}
	if _, ok := f.Info("nope"); ok {
		t.Error("Info of a missing tensor")
	}
	_, err := f.Bytes("nope")
	pthtest.CheckOneLine(t, err, path, `no tensor "nope"`)
}

// The bytes Write produces match the reference implementation's, e.g. from
// its Python tests: save({"test": np.zeros((2, 2), np.int32)}).
func TestWriteMatchesReference(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.safetensors")
	if err := Write(p, []WriteTensor{{Name: "test", DType: I32, Shape: []int{2, 2}, Data: make([]byte, 16)}}, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	want := "@\x00\x00\x00\x00\x00\x00\x00" + `{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}` + "    " + strings.Repeat("\x00", 16)
	if string(got) != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if err := Write(p, []WriteTensor{{Name: "test1", DType: I32, Shape: []int{2, 2}, Data: make([]byte, 16)}}, map[string]string{"framework": "pt"}); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(p)
	want = "`\x00\x00\x00\x00\x00\x00\x00" + `{"__metadata__":{"framework":"pt"},"test1":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}` + " " + strings.Repeat("\x00", 16)
	if string(got) != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	// No temp files left beside it.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(ents))
	}
}

func TestWriteEmptyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "empty.safetensors")
	if err := Write(p, nil, nil); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, p)
	if len(f.Names()) != 0 || len(f.Metadata()) != 0 || f.Metadata() == nil {
		t.Errorf("names %v metadata %v", f.Names(), f.Metadata())
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "w.safetensors")
	good := WriteTensor{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 8)}
	cases := []struct {
		name    string
		tensors []WriteTensor
		meta    map[string]string
		want    string
	}{
		{"size", []WriteTensor{{Name: "a", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}}, nil, `tensor "a": 8 bytes of data but F32 [3] needs 12`},
		{"dup", []WriteTensor{good, good}, nil, `tensor "a" given twice`},
		{"dtype", []WriteTensor{{Name: "a", DType: "F8_E5M2", Data: []byte{1}}}, nil, `unsupported dtype "F8_E5M2"`},
		{"negative", []WriteTensor{{Name: "a", DType: U8, Shape: []int{-1}}}, nil, "negative dimension"},
		{"overflow", []WriteTensor{{Name: "a", DType: F64, Shape: []int{math.MaxInt / 2, 4}}}, nil, "too large"},
		{"empty name", []WriteTensor{{Name: "", DType: U8}}, nil, "empty name"},
		{"reserved", []WriteTensor{{Name: "__metadata__", DType: U8, Data: []byte{0}}}, nil, "cannot be named"},
		{"utf8", []WriteTensor{{Name: "a\xff", DType: U8, Data: []byte{0}}}, nil, "not valid UTF-8"},
		{"meta utf8", nil, map[string]string{"k": "\xff"}, "not valid UTF-8"},
	}
	for _, c := range cases {
		err := Write(p, c.tensors, c.meta)
		pthtest.CheckOneLine(t, err, p, c.want)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed Write left %q behind: %v", p, err)
	}
	missing := filepath.Join(dir, "no", "such", "w.safetensors")
	err := Write(missing, []WriteTensor{good}, nil)
	pthtest.CheckOneLine(t, err, missing)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing directory: %v does not wrap ErrNotExist", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("failed writes left %d files", len(ents))
	}
}

func TestWriteReplacesAtomically(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.safetensors")
	if err := Write(p, []WriteTensor{{Name: "old", DType: U8, Shape: []int{1}, Data: []byte{7}}}, nil); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, p)
	if err := Write(p, []WriteTensor{{Name: "new", DType: U8, Shape: []int{2}, Data: []byte{1, 2}}}, nil); err != nil {
		t.Fatal(err)
	}
	// The mapping of the old file is untouched by the rename.
	if b, err := f.Bytes("old"); err != nil || !bytes.Equal(b, []byte{7}) {
		t.Errorf("old file's view: %v %v", b, err)
	}
	g := mustOpen(t, p)
	if !slices.Equal(g.Names(), []string{"new"}) {
		t.Errorf("names %v", g.Names())
	}
}

func TestCloseIdempotent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.safetensors")
	if err := Write(p, []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = f.Bytes("a")
	pthtest.CheckOneLine(t, err, p, "closed")
	_, err = f.Float32("a")
	pthtest.CheckOneLine(t, err, p, "closed")
}

// When mapping fails Open reads the file instead.
func TestOpenWithoutMmap(t *testing.T) {
	defer func(m func(*os.File, int) ([]byte, func([]byte) error, error)) { mapper = m }(mapper)
	mapper = func(*os.File, int) ([]byte, func([]byte) error, error) { return nil, nil, errors.New("no mmap") }
	p := filepath.Join(t.TempDir(), "c.safetensors")
	if err := Write(p, []WriteTensor{{Name: "a", DType: F32, Shape: []int{2}, Data: Float32Bytes([]float32{1.5, -2})}}, nil); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, p)
	if v, err := f.Float32("a"); err != nil || !slices.Equal(v, []float32{1.5, -2}) {
		t.Errorf("Float32 = %v, %v", v, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFloat32Exact(t *testing.T) {
	// Every bf16 and f16 bit pattern through a file.
	all := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(all[2*i:], uint16(i))
	}
	r := rand.New(rand.NewPCG(3, 4))
	f32 := make([]float32, 4096)
	for i := range f32 {
		f32[i] = math.Float32frombits(r.Uint32())
	}
	f32 = append(f32, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, math.SmallestNonzeroFloat32)
	p := filepath.Join(t.TempDir(), "f.safetensors")
	err := Write(p, []WriteTensor{
		{Name: "bf16", DType: BF16, Shape: []int{256, 256}, Data: all},
		{Name: "f16", DType: F16, Shape: []int{1 << 16}, Data: all},
		{Name: "f32", DType: F32, Shape: []int{len(f32)}, Data: Float32Bytes(f32)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bf, err := s.Float32("bf16")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range bf {
		if math.Float32bits(v) != uint32(i)<<16 {
			t.Fatalf("bf16 %#04x -> %#08x", i, math.Float32bits(v))
		}
	}
	hf, err := s.Float32("f16")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range hf {
		want := f16Reference(uint16(i))
		if math.IsNaN(want) {
			// Sign and payload are kept.
			b := math.Float32bits(v)
			if !math.IsNaN(float64(v)) || b>>31 != uint32(i)>>15 || b>>13&0x3ff != uint32(i)&0x3ff {
				t.Fatalf("f16 %#04x -> %#08x, want NaN with its payload", i, b)
			}
			continue
		}
		if float64(v) != want || math.Signbit(float64(v)) != math.Signbit(want) {
			t.Fatalf("f16 %#04x -> %g, want %g", i, v, want)
		}
		// And back: every half survives f32 -> f16.
		if h := half.ToF16(v); h != uint16(i) {
			t.Fatalf("f16 %#04x -> %g -> %#04x", i, v, h)
		}
	}
	got, err := s.Float32("f32")
	if err != nil {
		t.Fatal(err)
	}
	for i := range f32 {
		if math.Float32bits(got[i]) != math.Float32bits(f32[i]) {
			t.Fatalf("f32 %d: %#08x -> %#08x", i, math.Float32bits(f32[i]), math.Float32bits(got[i]))
		}
	}
}

// f16Reference decodes binary16 from its definition.
func f16Reference(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(m, -24)
	}
	return sign * math.Ldexp(1024+m, e-25)
}

// nearest rounds x (finite, >= 0) to the nearest of the sorted finite
// values, ties to the even index; limit is where rounding overflows to inf
// (returned as index len(values)).
func nearest(x float64, values []float64, limit float64) int {
	if x >= limit {
		return len(values)
	}
	i := sort.SearchFloat64s(values, x) // values[i] >= x
	if i < len(values) && values[i] == x {
		return i
	}
	if i == len(values) {
		return i - 1
	}
	lo, hi := values[i-1], values[i]
	switch dl, dh := x-lo, hi-x; {
	case dl < dh:
		return i - 1
	case dh < dl:
		return i
	}
	if (i-1)%2 == 0 {
		return i - 1
	}
	return i
}

func TestFloat32ToHalfRounding(t *testing.T) {
	var f16s, bf16s []float64
	for h := range 0x7c00 {
		f16s = append(f16s, f16Reference(uint16(h)))
	}
	for h := range 0x7f80 {
		bf16s = append(bf16s, float64(half.FromBF16(uint16(h))))
	}
	check := func(bits uint32) {
		x := math.Float32frombits(bits)
		if math.IsNaN(float64(x)) {
			if h := half.ToF16(x); h&0x7c00 != 0x7c00 || h&0x3ff == 0 || h>>15 != uint16(bits>>31) {
				t.Fatalf("f16 of NaN %#08x = %#04x", bits, h)
			}
			if h := half.ToBF16(x); h&0x7f80 != 0x7f80 || h&0x7f == 0 || h>>15 != uint16(bits>>31) {
				t.Fatalf("bf16 of NaN %#08x = %#04x", bits, h)
			}
			return
		}
		sign := uint16(bits>>31) << 15
		a := math.Abs(float64(x))
		want := uint16(nearest(a, f16s, 65520)) | sign // index len = 0x7c00 = inf
		if got := half.ToF16(x); got != want {
			t.Fatalf("f16(%g [%#08x]) = %#04x, want %#04x", x, bits, got, want)
		}
		wantB := uint16(nearest(a, bf16s, 0x1.ffp127)) | sign // max bf16 is 0x1.fep127, halfway to 2^128 is inf
		if got := half.ToBF16(x); got != wantB {
			t.Fatalf("bf16(%g [%#08x]) = %#04x, want %#04x", x, bits, got, wantB)
		}
	}
	// A stride through all float32s, plus the halfway points and their
	// neighbours around every half and bfloat16.
	for b := uint64(0); b < 1<<32; b += 997 {
		check(uint32(b))
	}
	for h := range 0x7c00 {
		mid := math.Float32bits(float32((f16Reference(uint16(h)) + f16Reference(uint16(h+1))) / 2))
		if h == 0x7bff {
			mid = math.Float32bits(65520)
		}
		for _, b := range []uint32{mid - 1, mid, mid + 1} {
			check(b)
			check(b | 1<<31)
		}
	}
	for h := range 0x7f80 {
		mid := uint32(h)<<16 | 0x8000
		for _, b := range []uint32{mid - 1, mid, mid + 1} {
			check(b)
			check(b | 1<<31)
		}
	}
	// Infinities.
	for _, v := range []float32{float32(math.Inf(1)), float32(math.Inf(-1))} {
		check(math.Float32bits(v))
	}
	// The exported encoders.
	v := []float32{1, -2.5, 65504, 1e-8}
	if got := Float32ToF16(v); !bytes.Equal(got, []byte{0x00, 0x3c, 0x00, 0xc1, 0xff, 0x7b, 0x00, 0x00}) {
		t.Errorf("Float32ToF16 = % x", got)
	}
	if got := Float32ToBF16(v); !bytes.Equal(got, []byte{0x80, 0x3f, 0x20, 0xc0, 0x80, 0x47, 0x2c, 0x32}) {
		t.Errorf("Float32ToBF16 = % x", got)
	}
	if got := Float32Bytes([]float32{1}); !bytes.Equal(got, []byte{0, 0, 0x80, 0x3f}) {
		t.Errorf("Float32Bytes = % x", got)
	}
}
