package statedict

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/internal/pthtest"
)

// fixture is a file of testdata/pth, made by scripts/handmade_pth.py.
func fixture(name string) string { return filepath.Join("..", "..", "testdata", "pth", name) }

// equalDicts fails unless a and b hold the same keys in the same order
// with equal shapes, dtypes and bytes.
func equalDicts(t *testing.T, a, b *Dict) {
	t.Helper()
	if !slices.Equal(a.Keys, b.Keys) {
		t.Fatalf("keys %q, want %q", a.Keys, b.Keys)
	}
	for _, k := range a.Keys {
		x, y := a.Tensors[k], b.Tensors[k]
		if x.DType != y.DType || !slices.Equal(x.Shape, y.Shape) || !bytes.Equal(x.Data, y.Data) {
			t.Errorf("%s: %s %v % x, want %s %v % x", k, x.DType, x.Shape, x.Data, y.DType, y.Shape, y.Data)
		}
	}
}

// TestOpenRoundTrip: the hand-made zip, legacy and big-endian torch.save
// files (with params_ema and module. wrapping, shared storages, a
// transposed view, a parameter and an int64 buffer) give the same Dict as
// the safetensors file of the same tensors.
func TestOpenRoundTrip(t *testing.T) {
	want, err := Open(fixture("handmade-expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"handmade-zip.pth", "handmade-legacy.pth", "handmade-big.pth"} {
		t.Run(name, func(t *testing.T) {
			got, skipped, err := OpenWithSkipped(fixture(name))
			if err != nil {
				t.Fatal(err)
			}
			equalDicts(t, got, want)
			if want := []Skipped{{"bn.num_batches_tracked", "a I64 tensor"}}; !slices.Equal(skipped, want) {
				t.Errorf("skipped %v, want %v", skipped, want)
			}
			if got.Metadata != nil {
				t.Errorf("metadata %v, want none for a pickle", got.Metadata)
			}
		})
	}
}

// TestOpenErrors: files that are not state dicts give one line naming the
// file.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zipBytes, err := os.ReadFile(fixture("handmade-zip.pth"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want []string
	}{
		{"truncated.pth", zipBytes[:len(zipBytes)/2], []string{"truncated or corrupt"}},
		{"corrupt.pth", corruptStorage(t, zipBytes), []string{"checksum"}},
		{"list.pth", []byte("\x80\x02]q\x00(K\x01K\x02e."), []string{"not a torch.save file"}},
		{"text.pth", []byte("hello"), []string{"safetensors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(tc.name, tc.data)
			_, err := Open(p)
			pthtest.CheckOneLine(t, err, p, tc.want...)
		})
	}
}

// corruptStorage flips a byte of the first tensor storage of a hand-made
// zip, so its CRC no longer matches.
func corruptStorage(t *testing.T, b []byte) []byte {
	t.Helper()
	i := bytes.Index(b, []byte("archive/data/0"))
	if i < 0 {
		t.Fatal("no archive/data/0 in the fixture")
	}
	c := bytes.Clone(b)
	// the record's data starts at the next 64-byte boundary after its name
	// and the padding field; flip the first data byte.
	at := (i + len("archive/data/0") + 4 + 63) / 64 * 64
	c[at] ^= 0xff
	return c
}

// TestRealTorchFiles: every NAME.pth written by PyTorch itself
// (scripts/real_pth.py: testdata/pth/torch2.11, and the folder VSR_PTH_DIR
// names, if set) reads as NAME.expected.safetensors, which PyTorch wrote
// from the same tensors.
func TestRealTorchFiles(t *testing.T) {
	dirs := []string{fixture("torch2.11")}
	if dir := os.Getenv("VSR_PTH_DIR"); dir != "" {
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.pth"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no .pth files in %s: %v", dir, err)
		}
		for _, p := range paths {
			t.Run(filepath.Base(p), func(t *testing.T) {
				want, err := Open(strings.TrimSuffix(p, ".pth") + ".expected.safetensors")
				if err != nil {
					t.Fatal(err)
				}
				got, err := Open(p)
				if err != nil {
					t.Fatal(err)
				}
				// safetensors orders its tensors by dtype and name
				slices.Sort(got.Keys)
				slices.Sort(want.Keys)
				equalDicts(t, got, want)
			})
		}
	}
}
