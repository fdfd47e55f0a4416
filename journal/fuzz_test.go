package journal

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load as journal.json, with or without a
// good previous checkpoint: Load never panics, and what it returns is either
// an error or a journal that validates and whose parts all exist.
func FuzzLoad(f *testing.F) {
	j := newJournal(f)
	h := j.Input.Head
	j.Version = Version
	j.Seq = 1
	j.Parts = []Part{{Index: 0, FirstFrame: 0, Frames: 10, File: "p0", Size: 3, SHA256: h}}
	j.State = &State{File: "s", Size: 1, SHA256: h, Frame: 10}
	good, err := encode(j)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)/2], true)
	f.Add(bytes.Replace(good, []byte(`"frames":10`), []byte(`"frames":-1`), 1), false)
	f.Add([]byte{}, false)
	f.Add([]byte("{}"), true)
	f.Add([]byte("null"), false)
	f.Add([]byte(`{"format":"vsr-journal","sha256":"","body":null}`), false)
	f.Add([]byte(`{"format":"vsr-journal","sha256":"74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b","body":null}`), false)
	f.Add([]byte("\x00\xff{\"body\":[1,2,3]}"), true)
	f.Fuzz(func(t *testing.T, data []byte, withPrev bool) {
		s, _ := openStore(t)
		s.Root().WriteFile("p0", []byte("abc"), 0o600)
		s.Root().WriteFile("s", []byte("x"), 0o600)
		if withPrev {
			s.Root().WriteFile(PrevName, good, 0o600)
		}
		s.Root().WriteFile(FileName, data, 0o600)
		for _, verify := range []bool{false, true} {
			l, err := s.Load(LoadOptions{VerifyHashes: verify})
			if err != nil {
				if withPrev || !errors.Is(err, ErrDamaged) {
					t.Fatalf("with prev %v: %v", withPrev, err)
				}
				continue
			}
			if err := l.Journal.Validate(); err != nil {
				t.Fatalf("loaded an invalid journal: %v", err)
			}
			for _, p := range l.Journal.Parts {
				if p.File != "p0" || p.Size != 3 {
					t.Fatalf("kept part %+v", p)
				}
			}
			if st := l.Journal.State; st != nil && (st.Frame > l.Journal.Done() || st.File != "s") {
				t.Fatalf("kept state %+v", st)
			}
		}
	})
}

// FuzzDecode feeds arbitrary bytes to the parser alone, much faster than
// FuzzLoad: what it accepts validates.
func FuzzDecode(f *testing.F) {
	j := newJournal(f)
	j.Version = Version
	good, err := encode(j)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("{}"))
	f.Add([]byte(`{"format":"vsr-journal","sha256":"","body":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if j, err := decode(data); err == nil {
			if err := j.Validate(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
