package torch

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// fixtureFiles are the contents of every hand-made fixture.
func fixtureFiles(f *testing.F) [][]byte {
	paths, err := filepath.Glob(fixture(f, "handmade-*"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no fixtures: %v", err)
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
// hand-made fixture (zip, legacy, big-endian, malicious, safetensors).
func FuzzRead(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		read(bytes.NewReader(data), int64(len(data)))
	})
}
