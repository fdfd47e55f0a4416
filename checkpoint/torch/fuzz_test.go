package torch

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// fixtureFiles are the contents of every hand-made fixture and of the
// files PyTorch wrote (testdata/pth/torch2.11).
func fixtureFiles(f *testing.F) [][]byte {
	hand, err1 := filepath.Glob(fixture(f, "handmade-*"))
	saved, err2 := filepath.Glob(fixture(f, "torch2.11/*.pth"))
	paths := append(hand, saved...)
	if err1 != nil || err2 != nil || len(hand) == 0 || len(saved) == 0 {
		f.Fatalf("no fixtures: %v %v", err1, err2)
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzPickle: the interpreter never panics, whatever the pickle. Seeds:
// the plain-value pickles of every protocol, each fixture's data.pkl
// (tensors, wrappers and the malicious payloads) and the tests' pickles.
func FuzzPickle(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			f.Add(b) // a plain pickle, or a legacy file (its first pickles)
			continue
		}
		for _, zf := range zr.File {
			if filepath.Base(zf.Name) == "data.pkl" {
				rc, _ := zf.Open()
				pkl, _ := io.ReadAll(rc)
				f.Add(pkl)
			}
		}
	}
	f.Add([]byte(tensorOp("0", 6, 0, []int{3, 2}, []int{1, 3}) + "."))
	f.Fuzz(func(t *testing.T, data []byte) {
		loads(data)
	})
}

// FuzzRead: reading a file never panics, whatever its bytes. Seeds: every
// hand-made fixture (zip, legacy, big-endian, malicious, safetensors) and
// the files PyTorch wrote. Whole and header only.
func FuzzRead(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, o := range []Options{{}, {Header: true}} {
			o.read(bytes.NewReader(data), int64(len(data)))
		}
	})
}
