package journal_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vsr-dev/vsr/journal"
)

// A run opens the journal beside its output, resumes if the journal matches
// its input and settings, and saves a checkpoint after each finished part.
func Example() {
	tmp, _ := os.MkdirTemp("", "journal-example")
	defer os.RemoveAll(tmp)
	input := filepath.Join(tmp, "in.mkv")
	os.WriteFile(input, []byte("not really a video"), 0o600)
	private := filepath.Join(tmp, ".out.mkv.vsr-journal") // the caller's private directory
	os.Mkdir(private, 0o700)

	in, _ := os.Open(input)
	defer in.Close()
	id, _ := journal.IdentityOf(in, "probe digest")
	st, _ := journal.NewSettings("model sha256", map[string]string{"scale": "4"})

	s, _ := journal.Open(private)
	defer s.Close()
	j := &journal.Journal{Input: id, Settings: st, TotalFrames: 100}
	if l, err := s.Load(journal.LoadOptions{}); err == nil {
		if ok, why := journal.Compare(l.Journal, id, st); ok {
			j = l.Journal
		} else {
			fmt.Println("journal set aside:", why)
		}
	} else if !errors.Is(err, journal.ErrNoJournal) {
		fmt.Println("journal set aside:", err)
	}
	fmt.Printf("resuming at frame %d of %d\n", j.Done(), j.TotalFrames)

	// A part is written, synced and closed in the private directory...
	f, _ := s.Root().Create("part-0000.mkv")
	f.Write([]byte("frames 0 to 49"))
	f.Sync()
	f.Close()
	// ... and then recorded.
	size, sum, _ := s.FileSum("part-0000.mkv")
	j.Parts = append(j.Parts, journal.Part{Index: 0, FirstFrame: 0, Frames: 50, File: "part-0000.mkv", Size: size, SHA256: sum})
	if err := s.Save(j); err != nil {
		fmt.Println(err)
	}

	l, _ := s.Load(journal.LoadOptions{VerifyHashes: true})
	fmt.Printf("resuming at frame %d of %d\n", l.Journal.Done(), l.Journal.TotalFrames)

	st2, _ := journal.NewSettings("model sha256", map[string]string{"scale": "2"})
	_, why := journal.Compare(l.Journal, id, st2)
	fmt.Println("journal set aside:", why)
	// Output:
	// resuming at frame 0 of 100
	// resuming at frame 50 of 100
	// journal set aside: the settings changed (scale "4" -> "2")
}
