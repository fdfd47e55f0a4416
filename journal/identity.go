package journal

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"unicode/utf8"
)

// EdgeSize is how much of the input's start and of its end [IdentityOf]
// hashes: 1 MiB each (the whole file, twice, when it is smaller).
const EdgeSize = 1 << 20

// Identity tells one input from another without reading all of it. Two
// identities are equal when the input is, as far as a resume can tell: the
// same size, modification time, first and last MiB, and probe.
type Identity struct {
	// Size is the input's size in bytes.
	Size int64 `json:"size"`
	// ModTime is the input's modification time in nanoseconds since the
	// Unix epoch (exact, and free of time zones).
	ModTime int64 `json:"mtime_ns"`
	// Head and Tail are the SHA-256, in lower-case hex, of the input's first
	// and last min(EdgeSize, Size) bytes.
	Head string `json:"head_sha256"`
	Tail string `json:"tail_sha256"`
	// Probe is the caller's digest of what probing the input found (streams,
	// frame count, rate...): opaque here, compared as a string; valid UTF-8.
	Probe string `json:"probe"`
}

// IdentityOf computes the identity of the input open as f, with the caller's
// probe digest. It looks at the open file itself (f.Stat, f.ReadAt), never at
// a name, so what it describes is what the caller has open. f must be a
// regular file; its offset is not moved. If the file's size or modification
// time change while it is read, IdentityOf fails rather than describe a
// moving target.
func IdentityOf(f *os.File, probe string) (Identity, error) {
	if !utf8.ValidString(probe) {
		return Identity{}, errors.New("journal: identity: probe digest is not valid UTF-8")
	}
	st, err := f.Stat()
	if err != nil {
		return Identity{}, fmt.Errorf("journal: identity: %w", err)
	}
	if !st.Mode().IsRegular() {
		return Identity{}, fmt.Errorf("journal: identity: %s is not a regular file", f.Name())
	}
	id := Identity{Size: st.Size(), ModTime: st.ModTime().UnixNano(), Probe: probe}
	n := min(int64(EdgeSize), id.Size)
	if id.Head, err = hashRange(f, 0, n); err != nil {
		return Identity{}, err
	}
	if id.Tail, err = hashRange(f, id.Size-n, n); err != nil {
		return Identity{}, err
	}
	after, err := f.Stat()
	if err != nil {
		return Identity{}, fmt.Errorf("journal: identity: %w", err)
	}
	if after.Size() != id.Size || after.ModTime().UnixNano() != id.ModTime {
		return Identity{}, fmt.Errorf("journal: identity: %s changed while it was read", f.Name())
	}
	return id, nil
}

func hashRange(r io.ReaderAt, off, n int64) (string, error) {
	h := sha256.New()
	got, err := io.Copy(h, io.NewSectionReader(r, off, n))
	if err != nil {
		return "", fmt.Errorf("journal: identity: %w", err)
	}
	if got != n {
		return "", fmt.Errorf("journal: identity: read %d of %d bytes at %d", got, n, off)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Settings is what, besides the input, decides the output: the model (its
// hash) and every setting that changes the output, each a key and a canonical
// value chosen by the caller (say "scale" = "4", "tile" = "512"). Settings that
// do not change the output (a device list, a progress style) must be left out,
// or changing them would needlessly set a journal aside. Build it with
// [NewSettings].
type Settings struct {
	// Model is the caller's hash of the model (weights and code version).
	Model string `json:"model"`
	// Values are the settings, kept so that [Compare] can name the one that
	// differs. encoding/json writes a map's keys sorted.
	Values map[string]string `json:"values,omitempty"`
	// Digest is the SHA-256, in hex, of Model and Values in a canonical,
	// unambiguous encoding (keys sorted, every string length-prefixed).
	Digest string `json:"digest"`
}

// NewSettings returns the settings of a run with the model hash and values
// given. The digest does not depend on the map's order and changes with the
// model and with any key or value. Keys must be non-empty; keys and values
// must be valid UTF-8 (so that they survive JSON unchanged). values is copied.
func NewSettings(model string, values map[string]string) (Settings, error) {
	if !utf8.ValidString(model) {
		return Settings{}, errors.New("journal: settings: model hash is not valid UTF-8")
	}
	s := Settings{Model: model}
	if len(values) > 0 {
		s.Values = make(map[string]string, len(values))
	}
	for k, v := range values {
		if k == "" {
			return Settings{}, errors.New("journal: settings: empty key")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return Settings{}, fmt.Errorf("journal: settings: %q is not valid UTF-8", k)
		}
		s.Values[k] = v
	}
	s.Digest = settingsDigest(s.Model, s.Values)
	return s, nil
}

func settingsDigest(model string, values map[string]string) string {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	put := func(s string) {
		var b [binary.MaxVarintLen64]byte
		h.Write(b[:binary.PutUvarint(b[:], uint64(len(s)))])
		io.WriteString(h, s)
	}
	put("vsr-journal-settings-v1")
	put(model)
	var b [binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], uint64(len(keys)))])
	for _, k := range keys {
		put(k)
		put(values[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
