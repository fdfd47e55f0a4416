package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSpecHash: the hash of an ncnn graph covers its .param and .bin (a
// different .bin under the same names is another hash), that of a
// directory every file in it; the bundled model's is stable.
func TestSpecHash(t *testing.T) {
	hash := func(spec string) string {
		t.Helper()
		h, err := specHash(spec)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	for i, d := range dirs {
		os.WriteFile(filepath.Join(d, "m.param"), []byte("graph"), 0o644)
		os.WriteFile(filepath.Join(d, "m.bin"), []byte{byte(i)}, 0o644)
	}
	a, b := hash(filepath.Join(dirs[0], "m.param")), hash(filepath.Join(dirs[1], "m.param"))
	if a == b {
		t.Error("two .bin files of other weights hash the same")
	}
	if a == hash(dirs[0]) || hash(dirs[0]) == hash(dirs[1]) {
		t.Error("directories: want their files' hash, different weights apart")
	}
	if hash("") != hash("") || hash("") == a {
		t.Error("the bundled model's hash")
	}
	if _, err := specHash(filepath.Join(dirs[0], "none.param")); err == nil {
		t.Error("a missing file was hashed")
	}
}
