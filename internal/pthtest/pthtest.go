// Package pthtest builds torch.save pickles and files for the tests of
// the packages that read them (checkpoint/torch, checkpoint/statedict, the
// model folder's listing), opcode by opcode, in the layout
// torch/serialization.py writes.
package pthtest

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Uni is a BINUNICODE opcode pushing s.
func Uni(s string) string {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	return "X" + string(n[:]) + s
}

// Glob is a GLOBAL opcode naming module.name.
func Glob(module, name string) string { return "c" + module + "\n" + name + "\n" }

// Int is a BININT opcode pushing i.
func Int(i int) string {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(int32(i)))
	return "J" + string(n[:])
}

// Ints is a tuple of ints.
func Ints(v ...int) string {
	s := "("
	for _, x := range v {
		s += Int(x)
	}
	return s + "t"
}

// OrderedDict is an empty collections.OrderedDict, as torch pickles one.
const OrderedDict = "ccollections\nOrderedDict\n)R"

// Pid is a zip-format persistent id ('storage', torch.<class>, key, 'cpu',
// numel) and its BINPERSID.
func Pid(class, key string, numel int) string {
	return "(" + Uni("storage") + Glob("torch", class) + Uni(key) + Uni("cpu") + Int(numel) + "tQ"
}

// Tensor is _rebuild_tensor_v2 of storage key (a class storage of numel
// elements) at offset with the given size and stride.
func Tensor(class, key string, numel, offset int, size, stride []int) string {
	return Glob("torch._utils", "_rebuild_tensor_v2") + "(" + Pid(class, key, numel) + Int(offset) +
		Ints(size...) + Ints(stride...) + "\x89" + OrderedDict + "tR"
}

// Dict is a dict of the given keys and pickled values (alternating).
func Dict(kv ...string) string {
	s := "}("
	for i := 0; i < len(kv); i += 2 {
		s += Uni(kv[i]) + kv[i+1]
	}
	return s + "u"
}

// Proto2 starts a pickle as torch.save does.
const Proto2 = "\x80\x02"

// WriteZip writes a torch.save zip file holding the pickle pkl (without a
// trailing STOP) and the storages by key, under the folder top, and returns
// its path; method is zip.Store as torch writes, or zip.Deflate.
func WriteZip(t testing.TB, dir, name, top, pkl string, storages map[string][]byte, method uint16) string {
	t.Helper()
	path := dir + "/" + name
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	add := func(n string, b []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: top + "/" + n, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	add("data.pkl", []byte(Proto2+pkl+"."))
	add("byteorder", []byte("little"))
	keys := make([]string, 0, len(storages))
	for k := range storages {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		add("data/"+k, storages[k])
	}
	add("version", []byte("3\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// ZeroChunk is the step, in bytes, of the zero runs WriteZeros writes.
const ZeroChunk = 1 << 20

// WriteZeros writes at path a torch.save zip holding the pickle pkl
// (without a trailing STOP) and one storage, archive/data/<key>, of n zero
// bytes (n a multiple of ZeroChunk) deflated about 1000 to 1 (a zip bomb,
// when n is large). It holds a few MB at most and takes about a second
// for 4 GiB: the deflate stream of a long zero run is one compressed
// chunk repeated, so a chunk is compressed once and written n/ZeroChunk
// times.
func WriteZeros(t testing.TB, path, pkl, key string, n int64) {
	t.Helper()
	if n <= 0 || n%ZeroChunk != 0 {
		t.Fatalf("WriteZeros: %d bytes is not a multiple of %d", n, ZeroChunk)
	}
	first, repeat, tail := zeroStream(t)
	chunks := n / ZeroChunk
	zero := make([]byte, ZeroChunk)
	sum := crc32.NewIEEE()
	for range chunks {
		sum.Write(zero)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, r := range []struct{ name, data string }{{"data.pkl", Proto2 + pkl + "."}, {"byteorder", "little"}, {"version", "3\n"}} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/" + r.name, Method: zip.Store})
		if err == nil {
			_, err = w.Write([]byte(r.data))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "archive/data/" + key, Method: zip.Deflate, CRC32: sum.Sum32(),
		CompressedSize64: uint64(len(first) + int(chunks-1)*len(repeat) + len(tail)), UncompressedSize64: uint64(n)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Write(first)
	for i := int64(1); i < chunks && err == nil; i++ {
		_, err = w.Write(repeat)
	}
	if err == nil {
		_, err = w.Write(tail)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// zeroStream compresses zero chunks, each ended by a sync flush so that
// each is whole bytes: first is the first chunk's stream, repeat that of
// every later one (the test fails unless the second and third agree),
// tail the stream's end.
func zeroStream(t testing.TB) (first, repeat, tail []byte) {
	var buf bytes.Buffer
	fw, err := flate.NewWriter(&buf, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, ZeroChunk)
	var parts [][]byte
	for range 3 {
		fw.Write(zero)
		fw.Flush()
		parts = append(parts, bytes.Clone(buf.Bytes()))
		buf.Reset()
	}
	fw.Close()
	if !bytes.Equal(parts[1], parts[2]) {
		t.Fatal("WriteZeros: the deflate streams of two zero chunks differ; compress the zeros instead")
	}
	return parts[0], parts[1], bytes.Clone(buf.Bytes())
}

// F32 is the little-endian float32 bytes of n values 1, 2, ..., n.
func F32(n int) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i+1)))
	}
	return b
}

// CheckOneLine fails unless err is non-nil, one line, names path (quoted,
// unless path is "") and contains every want.
func CheckOneLine(t testing.TB, err error, path string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if path != "" && !strings.Contains(msg, strconv.Quote(path)) {
		t.Errorf("error does not name %q: %s", path, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not contain %q", msg, w)
		}
	}
}
