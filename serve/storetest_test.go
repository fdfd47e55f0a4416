package serve

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// TestTaskStores runs the TaskStore conformance suite (testTaskStore) on
// every TaskStore: bbolt, memory and JetStream. A store added beside them
// is added here. It also runs a service on the memory store end to end.
func TestTaskStores(t *testing.T) {
	for _, c := range []struct {
		name    string
		open    func(t *testing.T, dir string) TaskStore
		durable bool
	}{
		{"bolt", func(t *testing.T, dir string) TaskStore {
			s, err := OpenBoltStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, true},
		{"mem", func(*testing.T, string) TaskStore { return NewMemStore() }, false},
		{"jetstream", func(t *testing.T, dir string) TaskStore {
			s, err := openJetStream(dir, NATS{Listen: "127.0.0.1:-1"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) { testTaskStore(t, c.open, c.durable) })
	}
	e := newEnv(t, Config{Store: NewMemStore()}, newFake(false))
	e.input("a.mp4")
	e.wait(e.submit(map[string]any{"video_path": "a.mp4"}), Completed)
}

// testTaskStore checks the TaskStore contract on the stores open opens
// on a directory, a new empty one for each case (closed at its end): Put
// records a task or its change, Load returns every task recorded with all
// its fields, in any order, the store keeps its own copies, Delete forgets
// a task (one that is not there is no error), and the methods may be
// called from several goroutines at once, one task from one at a time. A
// durable store, closed and opened again on its directory, holds what it
// held (Reopen; skipped for the others).
func testTaskStore(t *testing.T, open func(t *testing.T, dir string) TaskStore, durable bool) {
	// storeTask sets every recorded field, so that a store that drops one
	// fails PutLoad: a field added to Task later must be set there too.
	if z := zeroFields(reflect.ValueOf(*storeTask("t1")), "Task"); len(z) > 0 {
		t.Fatalf("storeTask leaves recorded fields unset: %v", z)
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s TaskStore)
	}{
		{"Empty", func(t *testing.T, s TaskStore) {
			if ts, err := s.Load(); err != nil || len(ts) != 0 {
				t.Errorf("a new store: %d tasks, %v", len(ts), err)
			}
		}},
		{"PutLoad", func(t *testing.T, s TaskStore) {
			want := map[string]*Task{}
			for i := range 3 {
				tk := storeTask(fmt.Sprint("t", i))
				put(t, s, tk)
				want[tk.ID] = tk
			}
			loadEqual(t, s, want)
		}},
		{"Update", func(t *testing.T, s TaskStore) {
			tk := storeTask("t1")
			put(t, s, tk)
			now := time.Now()
			tk.Status, tk.Started, tk.Ended, tk.FramesDone, tk.Attempts = Completed, &now, &now, 48, 1
			tk.Wrote = append(tk.Wrote, FileID{Dev: 1, Ino: 1234})
			put(t, s, tk)
			loadEqual(t, s, map[string]*Task{"t1": tk})
		}},
		{"OwnCopy", func(t *testing.T, s TaskStore) {
			tk := storeTask("t1")
			put(t, s, tk)
			want := tk.clone()
			tk.Request.Size[0], tk.Status = 99, Failed // after Put: the store holds its own copy
			ts := loadEqual(t, s, map[string]*Task{"t1": want})
			ts[0].Request.Size[0], ts[0].Status = 77, Cancelled // a loaded copy is the caller's
			loadEqual(t, s, map[string]*Task{"t1": want})
		}},
		{"Delete", func(t *testing.T, s TaskStore) {
			keep, gone := storeTask("keep"), storeTask("gone")
			put(t, s, keep)
			put(t, s, gone)
			if err := s.Delete("gone"); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete("never"); err != nil {
				t.Errorf("deleting a task that is not there: %v", err)
			}
			loadEqual(t, s, map[string]*Task{"keep": keep})
		}},
		{"Concurrent", func(t *testing.T, s TaskStore) {
			want := map[string]*Task{}
			for i := range 8 {
				tk := storeTask(fmt.Sprint("t", i))
				want[tk.ID] = tk
			}
			var wg sync.WaitGroup
			for _, tk := range want {
				wg.Go(func() {
					for _, st := range []Status{Pending, Processing, Completed} {
						tk.Status = st
						if err := s.Put(tk); err != nil {
							t.Error(err)
						}
					}
				})
				wg.Go(func() {
					if _, err := s.Load(); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			loadEqual(t, s, want)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			defer s.Close()
			c.run(t, s)
		})
	}
	t.Run("Reopen", func(t *testing.T) {
		if !durable {
			t.Skip("not a durable store")
		}
		dir := t.TempDir()
		s := open(t, dir)
		defer func() { s.Close() }()
		reopen := func() {
			t.Helper()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, dir)
		}
		want := map[string]*Task{}
		for i := range 3 {
			tk := storeTask(fmt.Sprint("t", i))
			put(t, s, tk)
			want[tk.ID] = tk
		}
		reopen()
		loadEqual(t, s, want)
		// After a reopen and a Load, a change and a deletion last too.
		now := time.Now()
		want["t0"].Status, want["t0"].Ended, want["t0"].Attempts = Completed, &now, 2
		put(t, s, want["t0"])
		if err := s.Delete("t1"); err != nil {
			t.Fatal(err)
		}
		delete(want, "t1")
		reopen()
		loadEqual(t, s, want)
	})
}

// storeTask is a task with every recorded field set (every exported
// field but those JSON leaves out, and theirs, down to the leaves;
// testTaskStore checks it).
func storeTask(id string) *Task {
	crf := 18
	started, ended := time.Now().Add(-time.Minute).Round(0), time.Now().Round(0)
	return &Task{
		ID: id, Seq: 7, Status: Pending, ModelName: "m", ModelHash: "abc",
		Request: Request{TaskID: id, VideoPath: "in/" + id + ".mp4", SRRatio: 2, TargetShape: []int{4, 8}, Size: []int{2, 4},
			SaveResultPath: id + ".mkv", Overwrite: true, Model: "m", Codec: "libx264", CRF: &crf, Preset: "slow",
			PixFmt: "yuv420p", ClipLen: 5, DiT: "off", MaxFrames: 90, Tile: 64, Batch: 2, Segments: 3,
			Deinterlace: "bwdif", NoSubtitles: true, NoMetadata: true, Params: map[string]any{"steps": 4.0}},
		Input: "/in/" + id + ".mp4", Output: "/out/" + id + ".mkv", Worker: "w1",
		InputRel: id + ".mp4", OutputRel: id + ".mkv", Files: true, Result: "out/" + id,
		Upload: true, Signer: "0a1b", Signature: []byte{1, 2, 3}, Rerun: true, Wrote: []FileID{{Dev: 1, Ino: 99}},
		FramesDone: 12, FramesTotal: 96, Created: time.Now().Add(-time.Hour).Round(0), Started: &started, Ended: &ended,
		Error: "it broke", ErrorType: "input", Attempts: 1, HandedBack: 1, ResumedFrom: 24, ResumeNote: "resuming at frame 24 of 96", Width: 1920, Height: 1080, FPS: 23.976,
		Devices: "cuda:0", Carried: []string{"audio"}, Dropped: []video.Drop{{What: "subtitles", Why: "mp4"}},
	}
}

// zeroFields returns the paths of the leaves of v that are zero (empty
// slices and maps, nil pointers included): the exported fields of
// structs, but those JSON leaves out ("-"), and the elements of slices.
func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	case reflect.Map:
		if v.Len() == 0 {
			return []string{path}
		}
		return nil
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		var z []string
		for i := range v.Len() {
			z = append(z, zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return z
	case reflect.Struct:
		if v.IsZero() {
			return []string{path} // time.Time too, whose fields are unexported
		}
		var z []string
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			z = append(z, zeroFields(v.Field(i), path+"."+f.Name)...)
		}
		return z
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

func put(t *testing.T, s TaskStore, tk *Task) {
	t.Helper()
	if err := s.Put(tk); err != nil {
		t.Fatal(err)
	}
}

// loadEqual checks that s holds exactly the tasks of want, every recorded
// field equal (as JSON), and returns them in id order.
func loadEqual(t *testing.T, s TaskStore, want map[string]*Task) []*Task {
	t.Helper()
	ts, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ts, func(a, b *Task) int { return cmp.Compare(a.ID, b.ID) })
	if len(ts) != len(want) {
		t.Fatalf("load: %d tasks, want %d", len(ts), len(want))
	}
	for _, got := range ts {
		w, ok := want[got.ID]
		if !ok {
			t.Errorf("load: task %s, not stored", got.ID)
			continue
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			t.Errorf("task %s:\n got %s\nwant %s", got.ID, gb, wb)
		}
	}
	return ts
}
