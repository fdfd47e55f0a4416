package nvrtc

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Cache is an on-disk store of compiled kernels, one file per key.
// Entries carry a checksum; a damaged entry reads as missing and is
// replaced by the next Put. Writes go to a temporary file that is renamed
// into place, so readers never see half an entry and concurrent writers of
// one key do not corrupt it.
type Cache struct {
	// Dir is the directory holding the entries.
	Dir string
}

// DefaultCacheDir returns $XDG_CACHE_HOME/vsr/kernels, or
// ~/.cache/vsr/kernels when XDG_CACHE_HOME is unset.
func DefaultCacheDir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "vsr", "kernels"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("nvrtc: no kernel cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "vsr", "kernels"), nil
}

// CacheKey returns the hex SHA-256 that identifies a compilation: the
// source, its name, the options in order, the target architecture flag
// and the NVRTC version. Each field is length-prefixed so that no two
// different inputs share a key.
func CacheKey(source, name string, options []string, arch, nvrtcVersion string) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("vsr-nvrtc-cache-1")
	field(source)
	field(name)
	field(fmt.Sprint(len(options)))
	for _, o := range options {
		field(o)
	}
	field(arch)
	field(nvrtcVersion)
	return hex.EncodeToString(h.Sum(nil))
}

const cacheMagic = "VSRKERN1"

func (c *Cache) path(key string) string { return filepath.Join(c.Dir, key+".bin") }

// encode lays an entry out as magic, kind, arch, payload length, the
// payload's SHA-256 and the payload.
func encode(o *Output) []byte {
	var b bytes.Buffer
	b.WriteString(cacheMagic)
	b.WriteByte(byte(len(o.Kind)))
	b.WriteString(string(o.Kind))
	b.WriteByte(byte(len(o.Arch)))
	b.WriteString(o.Arch)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(o.Image)))
	b.Write(n[:])
	sum := sha256.Sum256(o.Image)
	b.Write(sum[:])
	b.Write(o.Image)
	return b.Bytes()
}

var errCorrupt = errors.New("corrupt kernel cache entry")

func decode(data []byte) (*Output, error) {
	if !bytes.HasPrefix(data, []byte(cacheMagic)) {
		return nil, errCorrupt
	}
	data = data[len(cacheMagic):]
	str := func() (string, bool) {
		if len(data) < 1 || len(data) < 1+int(data[0]) {
			return "", false
		}
		s := string(data[1 : 1+int(data[0])])
		data = data[1+int(data[0]):]
		return s, true
	}
	kind, ok1 := str()
	arch, ok2 := str()
	if !ok1 || !ok2 || (Kind(kind) != CUBIN && Kind(kind) != PTX) || len(data) < 8+32 {
		return nil, errCorrupt
	}
	n := binary.LittleEndian.Uint64(data[:8])
	sum := data[8:40]
	img := data[40:]
	if uint64(len(img)) != n {
		return nil, errCorrupt
	}
	if got := sha256.Sum256(img); !bytes.Equal(got[:], sum) {
		return nil, errCorrupt
	}
	return &Output{Kind: Kind(kind), Arch: arch, Image: img}, nil
}

// Get returns the entry for key. A missing, unreadable or damaged entry
// gives ok == false; a damaged one is also removed.
func (c *Cache) Get(key string) (out *Output, ok bool) {
	data, err := os.ReadFile(c.path(key))
	if err != nil {
		return nil, false
	}
	o, err := decode(data)
	if err != nil {
		os.Remove(c.path(key))
		return nil, false
	}
	o.Cached = true
	return o, true
}

// Put stores o under key atomically: it writes a temporary file in Dir,
// syncs it and renames it over the entry.
func (c *Cache) Put(key string, o *Output) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("nvrtc: kernel cache: %w", err)
	}
	f, err := os.CreateTemp(c.Dir, ".tmp-"+key[:min(16, len(key))]+"-*")
	if err != nil {
		return fmt.Errorf("nvrtc: kernel cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(encode(o))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, c.path(key))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("nvrtc: kernel cache: %w", err)
	}
	return nil
}

// GetOrCompile returns the cached entry for key, or calls compile, stores
// its output and returns it. A failure to store is not an error: the
// compiled output is still returned (with the store error in putErr).
func (c *Cache) GetOrCompile(key string, compile func() (*Output, error)) (out *Output, putErr, err error) {
	if o, ok := c.Get(key); ok {
		return o, nil, nil
	}
	o, err := compile()
	if err != nil {
		return nil, nil, err
	}
	return o, c.Put(key, o), nil
}

// Entries returns the number of entries in the cache (for tests and
// diagnostics).
func (c *Cache) Entries() int {
	ents, _ := os.ReadDir(c.Dir)
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".bin") && !strings.HasPrefix(e.Name(), ".tmp-") {
			n++
		}
	}
	return n
}
