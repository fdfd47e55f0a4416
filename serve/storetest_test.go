package serve

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTaskStores runs the TaskStore conformance suite (testTaskStore) on
// every TaskStore: bbolt, memory and JetStream. A store added beside them
// is added here. It also runs a service on the memory store end to end.
func TestTaskStores(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T) TaskStore
	}{
		{"bolt", func(t *testing.T) TaskStore {
			s, err := OpenBoltStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"mem", func(*testing.T) TaskStore { return NewMemStore() }},
		{"jetstream", func(t *testing.T) TaskStore {
			s, err := openJetStream(t.TempDir(), NATS{Listen: "127.0.0.1:-1"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(c.name, func(t *testing.T) { testTaskStore(t, c.open) })
	}
	e := newEnv(t, Config{Store: NewMemStore()}, newFake(false))
	e.input("a.mp4")
	e.wait(e.submit(map[string]any{"video_path": "a.mp4"}), Completed)
}

// testTaskStore checks the TaskStore contract on the stores newStore
// opens, a new empty one for each case (closed at its end): Put records
// a task or its change, Load returns every task recorded with all its
// fields, in any order, the store keeps its own copies, Delete forgets a
// task (one that is not there is no error), and the methods may be
// called from several goroutines at once, one task from one at a time.
func testTaskStore(t *testing.T, newStore func(t *testing.T) TaskStore) {
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
			s := newStore(t)
			defer s.Close()
			c.run(t, s)
		})
	}
}

// storeTask is a task with most of its recorded fields set.
func storeTask(id string) *Task {
	crf := 18
	return &Task{
		ID: id, Seq: 7, Status: Pending, ModelName: "m", ModelHash: "abc",
		Request: Request{VideoPath: "in/" + id + ".mp4", SaveResultPath: id + ".mkv", Size: []int{2, 4},
			CRF: &crf, Params: map[string]any{"steps": 4.0}},
		Input: "/in/" + id + ".mp4", Output: "/out/" + id + ".mkv", InputRel: id + ".mp4", OutputRel: id + ".mkv",
		Upload: true, Signature: []byte{1, 2, 3}, Created: time.Now().Round(0), FramesTotal: 96,
		Carried: []string{"audio"},
	}
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
