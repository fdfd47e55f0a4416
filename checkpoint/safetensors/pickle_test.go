package safetensors

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/vsr-dev/vsr/internal/pthtest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// torchZip builds a zip laid out as torch.save writes one; the pickle bytes
// are inert filler (nothing here ever reads them).
func torchZip(t *testing.T, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("\x80\x02}q\x00.")) // PROTO 2, EMPTY_DICT, BINPUT 0, STOP
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// legacyTorch is the start of a legacy (pre-1.6) torch.save file: PROTO 2
// then the magic number as LONG1.
var legacyTorch = append([]byte{0x80, 0x02, 0x8a, 0x0a}, append(legacyMagicLE, "q\x00.\x80\x02M\xe9\x03."...)...)

func wantPickle(t *testing.T, err error, path string) {
	t.Helper()
	if !errors.Is(err, ErrPickle) {
		t.Fatalf("%s: error %v does not wrap ErrPickle", path, err)
	}
	want := `"` + path + `" is a PyTorch pickle (torch.save), where a .safetensors file is needed: vsr reads .pth files only as state dicts of the super-resolution architectures it knows (vsr models FILE); convert this one with safetensors.torch.save_file and pass the .safetensors file`
	if err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}
}

func TestPickles(t *testing.T) {
	cases := map[string][]byte{
		"zip archive/data.pkl":   torchZip(t, "archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/version"),
		"zip data.pkl last":      torchZip(t, "archive/version", "archive/data/0", "my_model_with_a_long_name/data.pkl"),
		"zip top-level data.pkl": torchZip(t, "data.pkl"),
		"legacy protocol 2":      legacyTorch,
		"protocol 2 bytes":       {0x80, 0x02},
		"protocol 4":             append([]byte{0x80, 0x04, 0x95, 0x20, 0, 0, 0, 0, 0, 0, 0}, "}\x94."...),
		"protocol 5":             {0x80, 0x05, 0x95, 0x01, 0, 0, 0, 0, 0, 0, 0, '.'},
		"legacy protocol 1":      append([]byte{0x8a, 0x0a}, legacyMagicLE...),
		"legacy protocol 0":      []byte("L119547037146038801333356L\np0\n."),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, file := range []string{"x.pth", "model.safetensors"} {
				p := filepath.Join(dir, file)
				if err := os.WriteFile(p, content, 0o644); err != nil {
					t.Fatal(err)
				}
				wantPickle(t, CheckNotPickle(p), p)
				f, err := Open(p)
				if err == nil {
					f.Close()
				}
				wantPickle(t, err, p)
				s, err := OpenSet(p)
				if err == nil {
					s.Close()
				}
				wantPickle(t, err, p)
			}
		})
	}
}

func TestPickleShardInIndex(t *testing.T) {
	dir := t.TempDir()
	shard := filepath.Join(dir, "s1.safetensors")
	if err := os.WriteFile(shard, legacyTorch, 0o644); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, "m.safetensors.index.json")
	if err := WriteIndex(idx, map[string]string{"a": "s1.safetensors"}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := OpenSet(idx)
	wantPickle(t, err, shard)
}

func TestNotPickles(t *testing.T) {
	dir := t.TempDir()
	// A real safetensors file whose header length is 0x280 = 640, so it
	// starts 0x80 0x02 like a protocol-2 pickle.
	hdr := `{"__metadata__":{"k":"` + strings.Repeat("x", 100) + `"},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`
	hdr += strings.Repeat(" ", 640-len(hdr))
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(append(b, hdr...), 7)
	if b[0] != 0x80 || b[1] != 0x02 {
		t.Fatalf("test file starts % x", b[:2])
	}
	tricky := filepath.Join(dir, "tricky.safetensors")
	os.WriteFile(tricky, b, 0o644)
	if err := CheckNotPickle(tricky); err != nil {
		t.Errorf("CheckNotPickle: %v", err)
	}
	f := mustOpen(t, tricky)
	if v, err := f.Bytes("w"); err != nil || len(v) != 1 || v[0] != 7 {
		t.Errorf("Bytes = %v, %v", v, err)
	}

	// A zip without data.pkl, a text file, an empty file: not pickles, and
	// Open says what is wrong with them instead.
	plainZip := filepath.Join(dir, "plain.safetensors")
	os.WriteFile(plainZip, torchZip(t, "readme.txt", "sub/dir/data.pkl"), 0o644)
	if err := CheckNotPickle(plainZip); err != nil {
		t.Errorf("plain zip: %v", err)
	}
	_, err := Open(plainZip)
	pthtest.CheckOneLine(t, err, plainZip, "header length", "zip archive, not safetensors")
	if errors.Is(err, ErrPickle) {
		t.Error("plain zip taken for a pickle")
	}
	for name, content := range map[string]string{"text.safetensors": "hello, this is text", "empty.safetensors": "", "one.safetensors": "\x80"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		if err := CheckNotPickle(p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		_, err := Open(p)
		if err == nil || errors.Is(err, ErrPickle) {
			t.Errorf("%s: Open error %v", name, err)
		}
	}
	// Written by Write: never a pickle.
	p := filepath.Join(dir, "w.safetensors")
	if err := Write(p, []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := CheckNotPickle(p); err != nil {
		t.Error(err)
	}
	// Missing file: the os error, not ErrPickle.
	err = CheckNotPickle(filepath.Join(dir, "missing"))
	if err == nil || errors.Is(err, ErrPickle) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
