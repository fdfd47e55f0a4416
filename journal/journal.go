package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Version is the version of the record this package writes and reads. A
// journal of another version is not used (it reads as damaged).
const Version = 1

// Journal is the record of one output's progress. The zero value is not
// valid; fill Version (or leave it 0: Save sets it), Input, Settings and
// TotalFrames, then append parts as they finish.
type Journal struct {
	// Version is the record's version, [Version].
	Version int `json:"version"`
	// Seq numbers the checkpoints of a store: Save sets it to one more than
	// the highest it has seen in the store.
	Seq uint64 `json:"seq"`
	// Input is the identity of the input the output is made from.
	Input Identity `json:"input"`
	// Settings are the model and the settings the output is made with.
	Settings Settings `json:"settings"`
	// TotalFrames is the number of frames of the whole output.
	TotalFrames int64 `json:"total_frames"`
	// Parts are the finished parts, in order: part i has Index i, the first
	// starts at frame 0 and each starts where the one before it ends.
	Parts []Part `json:"parts"`
	// State, for a model that carries state across frames, is the state
	// saved at a checkpoint; nil for a model without state.
	State *State `json:"state,omitempty"`
}

// Part is one finished part of the output: a file in the store's directory
// holding frames [FirstFrame, FirstFrame+Frames).
type Part struct {
	Index      int    `json:"index"`
	FirstFrame int64  `json:"first_frame"`
	Frames     int64  `json:"frames"`
	File       string `json:"file"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
}

// State refers to an opaque blob, a file in the store's directory, holding a
// stateful model's state as it is before frame Frame is processed.
type State struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Frame  int64  `json:"frame"`
}

// Done returns the number of frames the finished parts hold: the frame a
// resume continues at, when the model has no state.
func (j *Journal) Done() int64 {
	if len(j.Parts) == 0 {
		return 0
	}
	p := j.Parts[len(j.Parts)-1]
	return p.FirstFrame + p.Frames
}

// Validate checks that the record is consistent: its version, hex digests,
// parts numbered and contiguous from frame 0 within TotalFrames, file names
// that are plain base names other than the store's own, and a state frame
// within the output.
func (j *Journal) Validate() error {
	if j.Version != Version {
		return fmt.Errorf("journal: version %d, want %d", j.Version, Version)
	}
	if j.TotalFrames < 0 {
		return fmt.Errorf("journal: %d frames", j.TotalFrames)
	}
	if j.Input.Size < 0 || !isHash(j.Input.Head) || !isHash(j.Input.Tail) || !utf8.ValidString(j.Input.Probe) {
		return errors.New("journal: malformed input identity")
	}
	if !isHash(j.Settings.Digest) {
		return errors.New("journal: malformed settings digest")
	}
	if settingsDigest(j.Settings.Model, j.Settings.Values) != j.Settings.Digest {
		return errors.New("journal: settings digest does not match the settings")
	}
	next := int64(0)
	for i, p := range j.Parts {
		switch {
		case p.Index != i:
			return fmt.Errorf("journal: part %d has index %d", i, p.Index)
		case p.FirstFrame != next:
			return fmt.Errorf("journal: part %d starts at frame %d, want %d", i, p.FirstFrame, next)
		case p.Frames <= 0 || p.Frames > j.TotalFrames-next:
			return fmt.Errorf("journal: part %d has %d frames (at %d of %d)", i, p.Frames, next, j.TotalFrames)
		case p.Size < 0 || !isHash(p.SHA256):
			return fmt.Errorf("journal: part %d: malformed size or hash", i)
		}
		if err := checkName(p.File); err != nil {
			return fmt.Errorf("journal: part %d: %w", i, err)
		}
		next += p.Frames
	}
	if s := j.State; s != nil {
		if s.Frame < 0 || s.Frame > j.TotalFrames || s.Size < 0 || !isHash(s.SHA256) {
			return errors.New("journal: malformed state")
		}
		if err := checkName(s.File); err != nil {
			return fmt.Errorf("journal: state: %w", err)
		}
	}
	return nil
}

// checkName accepts a plain file name in the store's directory that is not
// one of the store's own files.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\:`) || !utf8.ValidString(name) ||
		strings.ContainsRune(name, 0) || !filepath.IsLocal(name) {
		return fmt.Errorf("file name %q is not a plain name", name)
	}
	if name == FileName || name == PrevName || strings.HasPrefix(name, FileName+tmpInfix) {
		return fmt.Errorf("file name %q is the journal's own", name)
	}
	return nil
}

func isHash(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

const formatTag = "vsr-journal"

// envelope is the on-disk form: the body's exact bytes and their SHA-256.
type envelope struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Body   json.RawMessage `json:"body"`
}

// encode returns the file contents of j: the envelope, one line.
func encode(j *Journal) ([]byte, error) {
	body, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	sum := sha256.Sum256(body)
	var b bytes.Buffer
	b.WriteString(`{"format":"` + formatTag + `","sha256":"`)
	b.WriteString(hex.EncodeToString(sum[:]))
	b.WriteString(`","body":`)
	b.Write(body)
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// decode parses and checks file contents: envelope, checksum, version and
// the record's consistency. It never panics, whatever data holds.
func decode(data []byte) (*Journal, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("journal: not a journal: %w", err)
	}
	if env.Format != formatTag {
		return nil, fmt.Errorf("journal: format %q, want %q", env.Format, formatTag)
	}
	sum := sha256.Sum256(env.Body)
	if env.SHA256 != hex.EncodeToString(sum[:]) {
		return nil, errors.New("journal: checksum mismatch (torn or damaged)")
	}
	var j Journal
	if err := json.Unmarshal(env.Body, &j); err != nil {
		return nil, fmt.Errorf("journal: body: %w", err)
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return &j, nil
}
