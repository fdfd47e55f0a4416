package journal

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testSettings returns settings with a few values.
func testSettings(t testing.TB) Settings {
	st, err := NewSettings("modelhash0123456789", map[string]string{"scale": "4", "tile": "512", "codec": "ffv1"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func testIdentity() Identity {
	h := strings.Repeat("ab", 32)
	return Identity{Size: 1234, ModTime: 1_700_000_000_123_456_789, Head: h, Tail: h, Probe: "probe-v1"}
}

func openStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// addPart writes a part file of the given frames and appends it to j.
func addPart(t *testing.T, s *Store, j *Journal, frames int64) {
	t.Helper()
	i := len(j.Parts)
	name := fmt.Sprintf("part-%04d.mkv", i)
	if err := s.Root().WriteFile(name, bytes.Repeat([]byte{byte('a' + i)}, 1000+i), 0o600); err != nil {
		t.Fatal(err)
	}
	size, sum, err := s.FileSum(name)
	if err != nil {
		t.Fatal(err)
	}
	j.Parts = append(j.Parts, Part{Index: i, FirstFrame: j.Done(), Frames: frames, File: name, Size: size, SHA256: sum})
}

func setState(t *testing.T, s *Store, j *Journal, frame int64) {
	t.Helper()
	name := fmt.Sprintf("state-%d.bin", frame)
	if err := s.Root().WriteFile(name, []byte("state at "+fmt.Sprint(frame)), 0o600); err != nil {
		t.Fatal(err)
	}
	size, sum, err := s.FileSum(name)
	if err != nil {
		t.Fatal(err)
	}
	j.State = &State{File: name, Size: size, SHA256: sum, Frame: frame}
}

func newJournal(t testing.TB) *Journal {
	return &Journal{Input: testIdentity(), Settings: testSettings(t), TotalFrames: 100}
}

func mustLoad(t *testing.T, s *Store, opt LoadOptions) *Loaded {
	t.Helper()
	l, err := s.Load(opt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRoundTrip(t *testing.T) {
	s, dir := openStore(t)
	if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("empty store: %v, want ErrNoJournal", err)
	}
	j := newJournal(t)
	addPart(t, s, j, 30)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	if j.Seq != 1 || j.Version != Version {
		t.Fatalf("seq %d version %d", j.Seq, j.Version)
	}
	addPart(t, s, j, 30)
	setState(t, s, j, 60)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	if j.Seq != 2 {
		t.Fatalf("seq %d, want 2", j.Seq)
	}
	for _, verify := range []bool{false, true} {
		l := mustLoad(t, s, LoadOptions{VerifyHashes: verify})
		if l.FromPrevious || len(l.Notes) != 0 {
			t.Fatalf("notes %q", l.Notes)
		}
		if !reflect.DeepEqual(l.Journal, j) {
			t.Fatalf("loaded %+v\nsaved %+v", l.Journal, j)
		}
		if l.Journal.Done() != 60 {
			t.Fatalf("done %d", l.Journal.Done())
		}
	}
	prev, err := s.readFile(PrevName)
	if err != nil || prev.Seq != 1 || len(prev.Parts) != 1 {
		t.Fatalf("prev %+v, %v", prev, err)
	}
	// A new store on the same directory continues the sequence.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	j2 := *j
	if err := s2.Save(&j2); err != nil || j2.Seq != 3 {
		t.Fatalf("seq %d, %v", j2.Seq, err)
	}
	if err := s2.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Load(LoadOptions{}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("after Remove: %v", err)
	}
}

// twoCheckpoints saves a journal with one part, then one with two, and
// returns the bytes of journal.json.
func twoCheckpoints(t *testing.T, s *Store) []byte {
	t.Helper()
	j := newJournal(t)
	addPart(t, s, j, 40)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	addPart(t, s, j, 40)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	data, err := s.Root().ReadFile(FileName)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func expectPrevious(t *testing.T, s *Store, what string) {
	t.Helper()
	l, err := s.Load(LoadOptions{VerifyHashes: true})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !l.FromPrevious || l.Journal.Seq != 1 || len(l.Journal.Parts) != 1 || len(l.Notes) == 0 {
		t.Fatalf("%s: from previous %v, seq %d, %d parts, notes %q", what, l.FromPrevious, l.Journal.Seq, len(l.Journal.Parts), l.Notes)
	}
}

func TestTornJournalFallsBack(t *testing.T) {
	s, _ := openStore(t)
	good := twoCheckpoints(t, s)
	offsets := []int{0, 1, 2, 10, len(good) / 3, len(good) / 2, len(good) - 3, len(good) - 2}
	// (Cut at len-1, only the final newline is lost: the journal is intact.)
	for _, n := range offsets {
		if err := s.Root().WriteFile(FileName, good[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		expectPrevious(t, s, fmt.Sprintf("truncated at %d", n))
	}
	// Every single flipped bit, at every offset, is caught.
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x01
		if err := s.Root().WriteFile(FileName, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		expectPrevious(t, s, fmt.Sprintf("byte %d flipped (%q)", i, good[i]))
	}
	// Zeroed tail, as a crash may leave on some file systems.
	bad := bytes.Clone(good)
	clear(bad[len(bad)/2:])
	s.Root().WriteFile(FileName, bad, 0o600)
	expectPrevious(t, s, "zeroed tail")
	// Missing current (a crash between Save's renames).
	s.Root().Remove(FileName)
	expectPrevious(t, s, "missing journal.json")

	// The next Save leaves the good previous checkpoint in place and
	// continues the sequence.
	s.Root().WriteFile(FileName, good[:20], 0o600)
	j := newJournal(t)
	addPart(t, s, j, 10)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	if j.Seq != 3 {
		t.Fatalf("seq %d, want 3 (the damaged current is not counted, the good prev is)", j.Seq)
	}
	if prev, err := s.readFile(PrevName); err != nil || prev.Seq != 1 {
		t.Fatalf("prev %+v, %v: a damaged current must not displace it", prev, err)
	}
}

func TestBothDamaged(t *testing.T) {
	s, _ := openStore(t)
	good := twoCheckpoints(t, s)
	s.Root().WriteFile(FileName, good[:len(good)/2], 0o600)
	s.Root().WriteFile(PrevName, []byte("{}"), 0o600)
	_, err := s.Load(LoadOptions{})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), FileName) || !strings.Contains(err.Error(), PrevName) {
		t.Fatalf("both damaged: %v", err)
	}
	s.Root().Remove(FileName)
	if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("prev damaged, no current: %v", err)
	}
	s.Root().Remove(PrevName)
	if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("neither: %v", err)
	}
	// Another version reads as unusable.
	j := newJournal(t)
	j.Version = Version + 1
	data, err := encode(j)
	if err != nil {
		t.Fatal(err)
	}
	s.Root().WriteFile(FileName, data, 0o600)
	if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "version") {
		t.Fatalf("other version: %v", err)
	}
}

func TestDamagedPartTruncates(t *testing.T) {
	s, _ := openStore(t)
	j := newJournal(t)
	for range 4 {
		addPart(t, s, j, 20)
	}
	setState(t, s, j, 80)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}

	// Same size, other content: only VerifyHashes sees it.
	s.Root().WriteFile(j.Parts[3].File, bytes.Repeat([]byte{'z'}, int(j.Parts[3].Size)), 0o600)
	if l := mustLoad(t, s, LoadOptions{}); len(l.Journal.Parts) != 4 || l.Journal.State == nil {
		t.Fatalf("without hashes: %d parts, notes %q", len(l.Journal.Parts), l.Notes)
	}
	l := mustLoad(t, s, LoadOptions{VerifyHashes: true})
	if len(l.Journal.Parts) != 3 || l.Journal.Done() != 60 || l.Journal.State != nil || len(l.Notes) != 2 {
		t.Fatalf("hash: %d parts, state %v, notes %q", len(l.Journal.Parts), l.Journal.State, l.Notes)
	}

	// Another size.
	s.Root().WriteFile(j.Parts[2].File, []byte("short"), 0o600)
	if l := mustLoad(t, s, LoadOptions{}); len(l.Journal.Parts) != 2 || l.Journal.State != nil {
		t.Fatalf("size: %d parts, notes %q", len(l.Journal.Parts), l.Notes)
	}

	// Missing: the parts after it are cut off too.
	s.Root().Remove(j.Parts[1].File)
	l = mustLoad(t, s, LoadOptions{})
	if len(l.Journal.Parts) != 1 || l.Journal.Done() != 20 || !strings.Contains(l.Notes[0], "missing") {
		t.Fatalf("missing: %d parts, notes %q", len(l.Journal.Parts), l.Notes)
	}
	if l.FromPrevious {
		t.Fatal("a damaged part is not a damaged journal")
	}
}

func TestStateChecked(t *testing.T) {
	s, _ := openStore(t)
	j := newJournal(t)
	addPart(t, s, j, 50)
	setState(t, s, j, 50)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	if l := mustLoad(t, s, LoadOptions{VerifyHashes: true}); l.Journal.State == nil || *l.Journal.State != *j.State {
		t.Fatalf("state %v, notes %q", l.Journal.State, l.Notes)
	}
	s.Root().WriteFile(j.State.File, []byte("state at 5X"), 0o600) // same size
	if l := mustLoad(t, s, LoadOptions{VerifyHashes: true}); l.Journal.State != nil || len(l.Journal.Parts) != 1 {
		t.Fatalf("damaged state kept: notes %q", l.Notes)
	}
	s.Root().Remove(j.State.File)
	if l := mustLoad(t, s, LoadOptions{}); l.Journal.State != nil || len(l.Notes) != 1 {
		t.Fatalf("missing state kept: notes %q", l.Notes)
	}
}

func TestSaveRejectsBadRecords(t *testing.T) {
	s, _ := openStore(t)
	base := func() *Journal {
		j := newJournal(t)
		addPart(t, s, j, 10)
		return j
	}
	for name, mod := range map[string]func(*Journal){
		"parent name":    func(j *Journal) { j.Parts[0].File = "../x" },
		"absolute name":  func(j *Journal) { j.Parts[0].File = "/etc/passwd" },
		"subdir name":    func(j *Journal) { j.Parts[0].File = "a/b" },
		"own name":       func(j *Journal) { j.Parts[0].File = FileName },
		"prev name":      func(j *Journal) { j.Parts[0].File = PrevName },
		"gap":            func(j *Journal) { j.Parts[0].FirstFrame = 1 },
		"index":          func(j *Journal) { j.Parts[0].Index = 1 },
		"too many":       func(j *Journal) { j.Parts[0].Frames = 101 },
		"no frames":      func(j *Journal) { j.Parts[0].Frames = 0 },
		"bad hash":       func(j *Journal) { j.Parts[0].SHA256 = "x" },
		"settings":       func(j *Journal) { j.Settings.Values["scale"] = "2" },
		"identity":       func(j *Journal) { j.Input.Head = "" },
		"state name":     func(j *Journal) { j.State = &State{File: "..", SHA256: j.Parts[0].SHA256} },
		"state frame":    func(j *Journal) { j.State = &State{File: "s", SHA256: j.Parts[0].SHA256, Frame: 101} },
		"version":        func(j *Journal) { j.Version = 7 },
		"negative total": func(j *Journal) { j.TotalFrames = -1; j.Parts = nil },
	} {
		j := base()
		mod(j)
		if err := s.Save(j); err == nil {
			t.Errorf("%s: saved", name)
		}
	}
	if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("a rejected record was written: %v", err)
	}
	if leftovers(t, s) != nil {
		t.Fatalf("left %q", leftovers(t, s))
	}
}

// leftovers lists temporary files in the store.
func leftovers(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(s.Root().Name())
	if err != nil {
		t.Fatal(err)
	}
	var tmp []string
	for _, e := range ents {
		if strings.Contains(e.Name(), tmpInfix) {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

// fullDisk is a tmpFile that takes room bytes and then fails as a full disk
// does; syncErr fails Sync.
type fullDisk struct {
	f       *os.File
	room    int
	syncErr bool
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) > d.room {
		n, _ := d.f.Write(p[:d.room])
		d.room = 0
		return n, &os.PathError{Op: "write", Path: d.f.Name(), Err: syscall.ENOSPC}
	}
	d.room -= len(p)
	return d.f.Write(p)
}

func (d *fullDisk) Sync() error {
	if d.syncErr {
		return &os.PathError{Op: "sync", Path: d.f.Name(), Err: syscall.EIO}
	}
	return d.f.Sync()
}

func (d *fullDisk) Close() error { return d.f.Close() }

func TestSaveFailureKeepsLastGood(t *testing.T) {
	s, _ := openStore(t)
	twoCheckpoints(t, s)
	want := mustLoad(t, s, LoadOptions{}).Journal
	good := s.create
	next := newJournal(t)
	for range 3 {
		addPart(t, s, next, 10)
	}
	cases := map[string]func(string) (tmpFile, error){
		"create fails": func(string) (tmpFile, error) {
			return nil, &os.PathError{Op: "open", Path: "x", Err: syscall.ENOSPC}
		},
		"no room":   func(n string) (tmpFile, error) { f, err := good(n); return &fullDisk{f: f.(*os.File)}, err },
		"some room": func(n string) (tmpFile, error) { f, err := good(n); return &fullDisk{f: f.(*os.File), room: 100}, err },
		"sync fails": func(n string) (tmpFile, error) {
			f, err := good(n)
			return &fullDisk{f: f.(*os.File), room: 1 << 20, syncErr: true}, err
		},
	}
	data, _ := encode(next) // as long as what Save writes (Seq 3 has one digit, as 0)
	cases["all but one"] = func(n string) (tmpFile, error) {
		f, err := good(n)
		return &fullDisk{f: f.(*os.File), room: len(data) - 1}, err
	}
	for name, create := range cases {
		s.create = create
		err := s.Save(next)
		if err == nil {
			t.Fatalf("%s: saved", name)
		}
		if name != "sync fails" && !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%s: %v, want ENOSPC", name, err)
		}
		l := mustLoad(t, s, LoadOptions{VerifyHashes: true})
		if l.FromPrevious || !reflect.DeepEqual(l.Journal, want) {
			t.Fatalf("%s: loaded seq %d, from previous %v", name, l.Journal.Seq, l.FromPrevious)
		}
		if tmp := leftovers(t, s); tmp != nil {
			t.Fatalf("%s: left %q", name, tmp)
		}
	}
	s.create = good
	if err := s.Save(next); err != nil {
		t.Fatal(err)
	}
	if l := mustLoad(t, s, LoadOptions{}); l.Journal.Seq != want.Seq+1 || len(l.Journal.Parts) != 3 {
		t.Fatalf("after recovery: seq %d, %d parts", l.Journal.Seq, len(l.Journal.Parts))
	}
}

func TestSymlinksNotFollowed(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges on Windows")
	}
	s, dir := openStore(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")

	// A valid journal outside, linked in place of journal.json, absolute and
	// relative: Load does not read it, Save does not write through it.
	other, _ := openStore(t)
	j := newJournal(t)
	addPart(t, other, j, 10)
	if err := other.Save(j); err != nil {
		t.Fatal(err)
	}
	victimData, _ := other.Root().ReadFile(FileName)
	for _, target := range []string{victim, filepath.Join("..", filepath.Base(outside), "victim")} {
		os.WriteFile(victim, victimData, 0o600)
		for _, name := range []string{FileName, PrevName} {
			os.Remove(filepath.Join(dir, name))
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrDamaged) {
			t.Fatalf("link %s: %v, want ErrDamaged", target, err)
		}
		mine := newJournal(t)
		addPart(t, s, mine, 20)
		for range 3 {
			if err := s.Save(mine); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := os.ReadFile(victim); !bytes.Equal(got, victimData) {
			t.Fatal("the file outside was written")
		}
		for _, name := range []string{FileName, PrevName} {
			if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("%s: %v, %v", name, fi, err)
			}
		}
	}

	// A part replaced by a link, to a copy outside or inside the directory,
	// reads as missing.
	mine := newJournal(t)
	addPart(t, s, mine, 20)
	addPart(t, s, mine, 20)
	if err := s.Save(mine); err != nil {
		t.Fatal(err)
	}
	p := mine.Parts[1]
	data, _ := s.Root().ReadFile(p.File)
	os.WriteFile(victim, data, 0o600)
	s.Root().WriteFile("copy", data, 0o600)
	for _, target := range []string{victim, "copy"} {
		os.Remove(filepath.Join(dir, p.File))
		os.Symlink(target, filepath.Join(dir, p.File))
		l := mustLoad(t, s, LoadOptions{})
		if len(l.Journal.Parts) != 1 || !strings.Contains(l.Notes[0], "not a regular file") {
			t.Fatalf("link to %s: %d parts, notes %q", target, len(l.Journal.Parts), l.Notes)
		}
		if _, _, err := s.FileSum(p.File); err == nil {
			t.Fatalf("FileSum followed a link to %s", target)
		}
	}
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "in.mkv")
	data := make([]byte, 3*EdgeSize+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(name, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	ident := func(probe string) Identity {
		t.Helper()
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		id, err := IdentityOf(f, probe)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	st := testSettings(t)
	write(data)
	base := ident("p")
	if base.Size != int64(len(data)) || base.ModTime != mtime.UnixNano() || base.Head == base.Tail {
		t.Fatalf("identity %+v", base)
	}
	old := &Journal{Version: Version, Input: base, Settings: st}
	if ok, why := Compare(old, ident("p"), st); !ok {
		t.Fatalf("same input: %s", why)
	}
	check := func(what string, id Identity, want string) {
		t.Helper()
		ok, why := Compare(old, id, st)
		if ok || !strings.Contains(why, want) || strings.Contains(why, "\n") {
			t.Errorf("%s: ok %v, why %q, want %q", what, ok, why, want)
		}
	}
	check("probe", ident("q"), "probing")

	write(append(bytes.Clone(data), 1))
	check("size", ident("p"), fmt.Sprintf("the input changed (size %d -> %d)", len(data), len(data)+1))

	write(data)
	os.Chtimes(name, mtime, mtime.Add(time.Nanosecond))
	check("mtime", ident("p"), "the input changed (modified 2026-01-02T03:04:05.000000006Z -> 2026-01-02T03:04:05.000000007Z)")

	first := bytes.Clone(data)
	first[EdgeSize-1] ^= 1
	write(first)
	check("first MiB", ident("p"), "first MiB")

	last := bytes.Clone(data)
	last[len(last)-EdgeSize] ^= 1
	write(last)
	check("last MiB", ident("p"), "last MiB")

	// A file smaller than a MiB: both edges are all of it.
	write([]byte("tiny"))
	if id := ident("p"); id.Head != id.Tail || id.Size != 4 {
		t.Fatalf("tiny %+v", id)
	}
	write(nil)
	if id := ident("p"); id.Head != id.Tail || id.Size != 0 {
		t.Fatalf("empty %+v", id)
	}

	// Not a regular file.
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := IdentityOf(d, "p"); err == nil {
		t.Fatal("identity of a directory")
	}
	// The identity is that of the file open, even after its name moves on.
	write(data)
	f, _ := os.Open(name)
	defer f.Close()
	os.Remove(name)
	write([]byte("another file"))
	if id, err := IdentityOf(f, "p"); err != nil || id != base {
		t.Fatalf("open file: %+v, %v", id, err)
	}
}

func TestSettingsDigest(t *testing.T) {
	values := map[string]string{}
	for i := range 40 {
		values[fmt.Sprintf("key%02d", i)] = fmt.Sprint(i * i)
	}
	a, err := NewSettings("m", values)
	if err != nil {
		t.Fatal(err)
	}
	// The same settings inserted in another order, many times (map order
	// varies from one range to the next).
	for range 20 {
		rev := map[string]string{}
		for i := 39; i >= 0; i-- {
			k := fmt.Sprintf("key%02d", i)
			rev[k] = values[k]
		}
		b, _ := NewSettings("m", rev)
		if b.Digest != a.Digest {
			t.Fatal("digest depends on order")
		}
	}
	old := &Journal{Input: testIdentity(), Settings: a}
	seen := map[string]string{a.Digest: "base"}
	differs := func(what string, b Settings, want string) {
		t.Helper()
		if prev, dup := seen[b.Digest]; dup {
			t.Errorf("%s: same digest as %s", what, prev)
		}
		seen[b.Digest] = what
		ok, why := Compare(old, testIdentity(), b)
		if ok || !strings.Contains(why, want) {
			t.Errorf("%s: ok %v, why %q, want %q", what, ok, why, want)
		}
	}
	for k := range values {
		c := maps.Clone(values)
		c[k] += "x"
		b, _ := NewSettings("m", c)
		differs("value of "+k, b, fmt.Sprintf("the settings changed (%s %q -> %q)", k, values[k], c[k]))
		c = maps.Clone(values)
		delete(c, k)
		b, _ = NewSettings("m", c)
		differs("without "+k, b, fmt.Sprintf("%s %q removed", k, values[k]))
	}
	c := maps.Clone(values)
	c["new"] = ""
	b, _ := NewSettings("m", c)
	differs("added", b, `new "" added`)
	b, _ = NewSettings("m2", values)
	differs("model", b, "the model changed (m -> m2)")
	b, _ = NewSettings("m", nil)
	differs("none", b, "removed")

	// Length prefixes keep key and value apart.
	x, _ := NewSettings("m", map[string]string{"a": "bc"})
	y, _ := NewSettings("m", map[string]string{"ab": "c"})
	z, _ := NewSettings("ma", nil)
	w, _ := NewSettings("m", map[string]string{"a": ""})
	if x.Digest == y.Digest || z.Digest == w.Digest {
		t.Fatal("ambiguous encoding")
	}
	if _, err := NewSettings("m", map[string]string{"": "1"}); err == nil {
		t.Fatal("empty key accepted")
	}
	if _, err := NewSettings("m", map[string]string{"k": "\xff"}); err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	// NewSettings copies the map.
	c = maps.Clone(values)
	d, _ := NewSettings("m", c)
	c["key00"] = "changed"
	if d.Values["key00"] != values["key00"] {
		t.Fatal("values not copied")
	}
	if ok, why := Compare(nil, testIdentity(), a); ok || why == "" {
		t.Fatal("nil journal")
	}
}

func TestStaleTempRemoved(t *testing.T) {
	s, _ := openStore(t)
	stale := FileName + tmpInfix + "crashed"
	s.Root().WriteFile(stale, []byte("half a jour"), 0o600)
	if _, err := s.Load(LoadOptions{}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("a temporary file read as a journal: %v", err)
	}
	j := newJournal(t)
	if err := s.Save(j); err != nil {
		t.Fatal(err)
	}
	if tmp := leftovers(t, s); tmp != nil {
		t.Fatalf("left %q", tmp)
	}
	s.Root().WriteFile(stale, nil, 0o600)
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(s.Root().Name()); len(ents) != 0 {
		t.Fatalf("Remove left %v", ents)
	}
}

func TestNewLeavesRootToCaller(t *testing.T) {
	r, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := New(r)
	if err := s.Save(newJournal(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stat(FileName); err != nil {
		t.Fatalf("Close closed the caller's root: %v", err)
	}
}
