package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// rawFile writes an 8-byte length, header and data to a new file in a temp
// dir and returns its path.
func rawFile(t testing.TB, header string, data []byte) string {
	t.Helper()
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	b = append(b, data...)
	return bytesFile(t, "model.safetensors", b)
}

// bytesFile writes b as name in a new temp dir.
func bytesFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// mustOpen opens path or fails.
func mustOpen(t testing.TB, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
