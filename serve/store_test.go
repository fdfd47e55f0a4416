package serve

import (
	"fmt"
	"testing"
)

// TestTaskStores runs the same checks on every TaskStore, and a service on
// the memory store end to end.
func TestTaskStores(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) TaskStore{
		"bolt": func(t *testing.T) TaskStore {
			s, err := OpenBoltStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"mem": func(*testing.T) TaskStore { return NewMemStore() },
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			for i := range 3 {
				if err := s.Put(&Task{ID: fmt.Sprint("t", i), Status: Pending, Request: Request{Size: []int{2, 4}}}); err != nil {
					t.Fatal(err)
				}
			}
			tk := &Task{ID: "t1", Status: Completed, Request: Request{Size: []int{2, 4}}}
			s.Put(tk)
			tk.Request.Size[0] = 99 // the store holds its own copy
			ts, err := s.Load()
			if err != nil || len(ts) != 3 {
				t.Fatalf("load: %d tasks, %v", len(ts), err)
			}
			for _, x := range ts {
				want := Pending
				if x.ID == "t1" {
					want = Completed
				}
				if x.Status != want || x.Request.Size[0] != 2 {
					t.Errorf("task %s: %s %v", x.ID, x.Status, x.Request.Size)
				}
			}
		})
	}
	e := newEnv(t, Config{Store: NewMemStore()}, newFake(false))
	e.input("a.mp4")
	e.wait(e.submit(map[string]any{"video_path": "a.mp4"}), Completed)
}
