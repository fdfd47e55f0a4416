package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkQueue runs the WorkQueue conformance suite (testWorkQueue) on
// every WorkQueue: JetStream's, as the API (its own embedded server) and
// as a worker (another process, with the worker token of the machine).
// One added beside it is added here.
func TestWorkQueue(t *testing.T) {
	t.Run("jetstream", func(t *testing.T) {
		testWorkQueue(t, func(t *testing.T) (WorkQueue, func(t *testing.T) WorkQueue) {
			dir := t.TempDir()
			api, err := openJetStream(dir, NATS{Listen: "127.0.0.1:-1"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { api.Close() })
			return api, func(t *testing.T) WorkQueue {
				tok, err := os.ReadFile(WorkerTokenFile(dir))
				if err != nil {
					t.Fatal(err)
				}
				w, err := openJetStream(t.TempDir(), NATS{URLs: api.URL(), Token: strings.TrimSpace(string(tok))})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Close() })
				return w
			}
		})
	})
}

// testWorkQueue checks the WorkQueue contract (store.go) on the queues
// open opens, new and empty for each case: the API's, and a function that
// opens a worker's on the same records, queue and files (another
// process). Its cases hold to what the contract states: Put's refusal to
// replace a record another writer changed (errChanged) until the store
// reads it again, Get, Watch, the queue (Enqueue, Consume, Next, Ack, Nak,
// Term, the lease), cancellations, the list of workers, the signers, and
// the files.
func testWorkQueue(t *testing.T, open func(t *testing.T) (WorkQueue, func(t *testing.T) WorkQueue)) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue)
	}{
		{"Get", func(t *testing.T, api WorkQueue, _ func(t *testing.T) WorkQueue) {
			if got, err := api.Get("none"); got != nil || err != nil {
				t.Errorf("Get of a task not recorded: %v, %v", got, err)
			}
			tk := storeTask("t1")
			put(t, api, tk)
			getEqual(t, api, tk)
		}},
		{"Changed", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			// The other writer changes the record after a Get, Load or
			// Watch delivery; api's Put, from the record it wrote, is
			// refused, and succeeds once api has read the record again
			// the same way.
			w := worker(t)
			for _, read := range []struct {
				name string
				read func(t *testing.T, s WorkQueue, id string)
			}{
				{"Get", func(t *testing.T, s WorkQueue, id string) {
					if tk, err := s.Get(id); err != nil || tk == nil {
						t.Fatalf("get %s: %v, %v", id, tk, err)
					}
				}},
				{"Load", func(t *testing.T, s WorkQueue, id string) {
					if _, err := s.Load(); err != nil {
						t.Fatal(err)
					}
				}},
				{"Watch", func(t *testing.T, s WorkQueue, id string) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					got := make(chan *Task, 16)
					go s.Watch(ctx, func(tk *Task) { got <- tk })
					for tk := range recv(t, got, 10*time.Second) {
						if tk.ID == id && tk.Worker == "w" {
							return
						}
					}
					t.Fatalf("watch: no record of %s by the other writer", id)
				}},
			} {
				t.Run(read.name, func(t *testing.T) {
					tk := storeTask("t-" + read.name)
					tk.Worker = ""
					put(t, api, tk)
					wt := getEqual(t, w, tk)
					wt.Worker, wt.Status = "w", Processing
					put(t, w, wt)
					stale := tk.clone()
					stale.Status = Cancelled
					if err := api.Put(stale); !errors.Is(err, errChanged) {
						t.Errorf("a write over another writer's change: %v, want errChanged", err)
					}
					getEqual(t, w, wt) // not overwritten
					read.read(t, api, tk.ID)
					wt.Status = Cancelled
					if err := api.Put(wt); err != nil {
						t.Errorf("a write after reading the change: %v", err)
					}
					getEqual(t, w, wt)
				})
			}
			// A store that has read no record of a task does not replace
			// the one there.
			tk := storeTask("t-new")
			put(t, api, tk)
			other := tk.clone()
			other.Worker = "w2"
			if err := w.Put(other); err == nil {
				t.Error("a writer that never read the task replaced its record")
			}
			getEqual(t, api, tk)
		}},
		{"Watch", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			// The records there first, then every change, by any
			// process (here a worker's), until ctx ends.
			w := worker(t)
			t1, t2 := storeTask("t1"), storeTask("t2")
			put(t, api, t1)
			put(t, api, t2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got, ended := make(chan *Task, 16), make(chan error, 1)
			go func() { ended <- api.Watch(ctx, func(tk *Task) { got <- tk }) }()
			first := map[string]*Task{}
			for tk := range recv(t, got, 10*time.Second) {
				first[tk.ID] = tk
				if len(first) == 2 {
					break
				}
			}
			if len(first) != 2 {
				select {
				case err := <-ended:
					t.Fatalf("watch: %d records there first, want 2; it ended: %v", len(first), err)
				default:
					t.Fatalf("watch: %d records there first, want 2", len(first))
				}
			}
			jsonEqual(t, first["t1"], t1)
			jsonEqual(t, first["t2"], t2)
			t3 := storeTask("t3")
			put(t, w, t3)
			t1 = getEqual(t, w, t1)
			t1.Status, t1.FramesDone = Processing, 50
			put(t, w, t1)
			want := []*Task{t3, t1}
			for tk := range recv(t, got, 10*time.Second) {
				jsonEqual(t, tk, want[0])
				if want = want[1:]; len(want) == 0 {
					break
				}
			}
			if len(want) > 0 {
				t.Fatalf("watch: %d changes not seen", len(want))
			}
			cancel()
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("Watch did not return after its context ended")
			}
		}},
		{"Queue", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			w := worker(t)
			var arrived atomic.Int32
			src, err := w.Consume("m", time.Minute, func() { arrived.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			if wk, err := src.Next(); wk != nil || err != nil {
				t.Fatalf("Next of an empty queue: %s, %v", workID(wk), err)
			}
			for _, id := range []string{"t1", "t2"} {
				if err := api.Enqueue(id, "m"); err != nil {
					t.Fatal(err)
				}
			}
			if err := api.Enqueue("other", "m2"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "arrived called for a task queued", func() bool { return arrived.Load() > 0 })
			wk1 := next(t, src, "t1", "m", 1)
			wk2 := next(t, src, "t2", "m", 1)
			if wk, err := src.Next(); wk != nil || err != nil {
				t.Fatalf("Next with the queue's tasks taken: %s, %v (another model's task?)", workID(wk), err)
			}
			// Nak hands the task back now; Ack and Term settle it.
			if err := wk1.Nak(); err != nil {
				t.Fatal(err)
			}
			wk1 = next(t, src, "t1", "m", 2)
			if err := wk1.Ack(); err != nil {
				t.Fatal(err)
			}
			if err := wk2.Term(); err != nil {
				t.Fatal(err)
			}
			// The other model's task waits for its own workers.
			src2, err := w.Consume("m2", time.Minute, func() {})
			if err != nil {
				t.Fatal(err)
			}
			if err := next(t, src2, "other", "m2", 1).Ack(); err != nil {
				t.Fatal(err)
			}
		}},
		{"Lease", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			// A task taken and neither settled nor renewed within ackWait
			// goes to another worker; one renewed stays; one settled
			// (Ack, Term) does not come back.
			const ackWait = 500 * time.Millisecond
			w1, w2 := worker(t), worker(t)
			src1, err := w1.Consume("m", ackWait, func() {})
			if err != nil {
				t.Fatal(err)
			}
			src2, err := w2.Consume("m", ackWait, func() {})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"lapsed", "renewed", "inprogress", "acked", "termed"} {
				if err := api.Enqueue(id, "m"); err != nil {
					t.Fatal(err)
				}
			}
			next(t, src1, "lapsed", "m", 1)
			renewed := next(t, src1, "renewed", "m", 1)
			inProgress := next(t, src1, "inprogress", "m", 1)
			acked := next(t, src1, "acked", "m", 1)
			termed := next(t, src1, "termed", "m", 1)
			if err := acked.Ack(); err != nil {
				t.Fatal(err)
			}
			if err := termed.Term(); err != nil {
				t.Fatal(err)
			}
			for stop := time.Now().Add(4 * ackWait); time.Now().Before(stop); time.Sleep(ackWait / 5) {
				if err := renewed.Renew(time.Second); err != nil {
					t.Fatal(err)
				}
				if err := inProgress.InProgress(); err != nil {
					t.Fatal(err)
				}
			}
			lapsed := next(t, src2, "lapsed", "m", 2)
			if err := lapsed.Ack(); err != nil {
				t.Fatal(err)
			}
			if wk, err := src2.Next(); wk != nil || err != nil {
				t.Errorf("after the lease of the lapsed task ran out: %s, %v; want only that task", workID(wk), err)
			}
			for _, wk := range []Work{renewed, inProgress} {
				if err := wk.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(2 * ackWait)
			for _, src := range []WorkSource{src1, src2} {
				if wk, err := src.Next(); wk != nil || err != nil {
					t.Errorf("a settled task came back: %s, %v", workID(wk), err)
				}
			}
		}},
		{"Cancel", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			// OnCancel calls f each time that Cancel asks, for its task
			// only, until stop.
			w := worker(t)
			var n, others atomic.Int32
			stop, err := w.OnCancel("t1", func() { n.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			stop2, err := w.OnCancel("t2", func() { others.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer stop2()
			// OnCancel returns once the server has the subscription:
			// every Cancel after it reaches f.
			for range 3 {
				if err := api.Cancel("t1"); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "f called for each Cancel", func() bool { return n.Load() == 3 })
			stop()
			time.Sleep(100 * time.Millisecond) // the stop reaches the server
			if err := api.Cancel("t1"); err != nil {
				t.Fatal(err)
			}
			if err := api.Cancel("t2"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the other task's f called", func() bool { return others.Load() > 0 })
			time.Sleep(200 * time.Millisecond)
			if n.Load() != 3 {
				t.Errorf("f called %d times, want 3: after stop, or for another task", n.Load())
			}
		}},
		{"Workers", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			w := worker(t)
			if ws, err := api.Workers(); err != nil || len(ws) != 0 {
				t.Fatalf("workers of a new queue: %v, %v", ws, err)
			}
			in := WorkerInfo{Name: "w1", Models: []string{"m"}, Devices: "cuda:0", Running: []string{"t1"}, Started: time.Now().Round(0)}
			if err := w.Announce(in); err != nil {
				t.Fatal(err)
			}
			ws, err := api.Workers()
			if err != nil || len(ws) != 1 {
				t.Fatalf("workers: %v, %v; want w1", ws, err)
			}
			jsonEqual(t, ws[0], in)
			w.Leave("w1")
			if ws, err := api.Workers(); err != nil || len(ws) != 0 {
				t.Errorf("workers after w1 left: %v, %v", ws, err)
			}
		}},
		{"Trust", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			w := worker(t)
			if ok, err := w.Trusted("0a1b"); ok || err != nil {
				t.Fatalf("a key never trusted: %v, %v", ok, err)
			}
			if err := api.Trust("0a1b"); err != nil {
				t.Fatal(err)
			}
			for _, s := range []WorkQueue{api, w} {
				if ok, err := s.Trusted("0a1b"); !ok || err != nil {
					t.Errorf("a trusted key: %v, %v", ok, err)
				}
			}
			if ok, err := w.Trusted("0c1d"); ok || err != nil {
				t.Errorf("another key: %v, %v", ok, err)
			}
		}},
		{"Protect", func(t *testing.T, api WorkQueue, _ func(t *testing.T) WorkQueue) {
			// Protected, the records are written, read and deleted as
			// before (Protect may be called at each start).
			for range 2 {
				if err := api.Protect(); err != nil {
					t.Fatal(err)
				}
			}
			tk := storeTask("t1")
			put(t, api, tk)
			tk.Status = Completed
			put(t, api, tk)
			if err := api.Delete("t1"); err != nil {
				t.Fatal(err)
			}
			loadEqual(t, api, map[string]*Task{})
		}},
		{"Files", func(t *testing.T, api WorkQueue, worker func(t *testing.T) WorkQueue) {
			w := worker(t)
			src := filepath.Join(t.TempDir(), "in.mp4")
			upload := []byte(strings.Repeat("upload ", 100000))
			if err := os.WriteFile(src, upload, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := api.PutUpload("in/a", src); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			ctx := context.Background()
			if err := w.GetUpload(ctx, root, "in/a", "a.mp4"); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "a.mp4")); err != nil || string(b) != string(upload) {
				t.Errorf("the upload fetched: %d bytes, %v; want %d", len(b), err, len(upload))
			}
			// GetUpload refuses to replace a file, and leaves none when it
			// fails.
			os.WriteFile(filepath.Join(dir, "b.mp4"), []byte("mine"), 0o644)
			if err := w.GetUpload(ctx, root, "in/a", "b.mp4"); err == nil {
				t.Error("GetUpload replaced a file")
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "b.mp4")); string(b) != "mine" {
				t.Errorf("the file GetUpload was refused: %q", b)
			}
			if err := w.GetUpload(ctx, root, "in/none", "c.mp4"); err == nil {
				t.Error("GetUpload of no upload")
			}
			if _, err := os.Stat(filepath.Join(dir, "c.mp4")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed GetUpload left a file: %v", err)
			}
			ended, cancel := context.WithCancel(ctx)
			cancel()
			if err := w.GetUpload(ended, root, "in/a", "d.mp4"); err == nil {
				t.Error("GetUpload after its context ended")
			}
			if _, err := os.Stat(filepath.Join(dir, "d.mp4")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a cancelled GetUpload left a file: %v", err)
			}
			// A GetUpload whose context ends partway returns soon (not at
			// a deadline of its own) and leaves no file. It is tried until
			// one ends before its copy is done.
			big := filepath.Join(t.TempDir(), "big.mp4")
			if err := os.WriteFile(big, make([]byte, 32<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := api.PutUpload("in/big", big); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 10; i++ {
				name := fmt.Sprint("big", i, ".mp4")
				part, cancel := context.WithCancel(ctx)
				go func() {
					defer cancel()
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
						if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
							return // the copy has begun
						}
					}
				}()
				start := time.Now()
				err := w.GetUpload(part, root, "in/big", name)
				cancel()
				if err == nil {
					continue
				}
				if d := time.Since(start); d > 20*time.Second {
					t.Errorf("a cancelled GetUpload returned after %v", d)
				}
				if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a GetUpload that failed partway left a file: %v", err)
				}
				break
			}
			api.RemoveUpload("in/a")
			if err := w.GetUpload(ctx, root, "in/a", "e.mp4"); err == nil {
				t.Error("GetUpload of a removed upload")
			}
			// A worker stores a result; the API opens it.
			res := filepath.Join(t.TempDir(), "out.mkv")
			result := []byte(strings.Repeat("result ", 50000))
			if err := os.WriteFile(res, result, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := w.PutResult("out/t1", res); err != nil {
				t.Fatal(err)
			}
			r, size, err := api.OpenResult(ctx, "out/t1")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil || string(b) != string(result) || size != uint64(len(result)) {
				t.Errorf("the result opened: %d bytes (size %d), %v; want %d", len(b), size, err, len(result))
			}
			if r, _, err := api.OpenResult(ctx, "out/none"); err == nil {
				r.Close()
				t.Error("OpenResult of no result")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			api, worker := open(t)
			c.run(t, api, worker)
		})
	}
}

// getEqual checks that s records tk, every recorded field equal (as
// JSON), and returns the record.
func getEqual(t *testing.T, s WorkQueue, tk *Task) *Task {
	t.Helper()
	got, err := s.Get(tk.ID)
	if err != nil || got == nil {
		t.Fatalf("get %s: %v, %v", tk.ID, got, err)
	}
	jsonEqual(t, got, tk)
	return got
}

// jsonEqual checks that got and want are equal as JSON.
func jsonEqual(t *testing.T, got, want any) {
	t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("\n got %s\nwant %s", gb, wb)
	}
}

// recv yields what arrives on c until timeout has passed since it began.
func recv[T any](t *testing.T, c <-chan T, timeout time.Duration) func(func(T) bool) {
	return func(yield func(T) bool) {
		deadline := time.After(timeout)
		for {
			select {
			case v := <-c:
				if !yield(v) {
					return
				}
			case <-deadline:
				return
			}
		}
	}
}

// next takes the next task of src, waiting for it a while, and checks its
// id, model and deliveries.
func next(t *testing.T, src WorkSource, id, model string, delivered int) Work {
	t.Helper()
	var wk Work
	waitFor(t, fmt.Sprintf("a delivery of %s", id), func() bool {
		var err error
		wk, err = src.Next()
		if err != nil {
			t.Fatal(err)
		}
		return wk != nil
	})
	if wk.ID() != id || wk.Model() != model {
		t.Fatalf("Next: task %s of %s, want %s of %s", wk.ID(), wk.Model(), id, model)
	}
	if n, err := wk.Delivered(); n != delivered || err != nil {
		t.Errorf("task %s delivered %d times (%v), want %d", id, n, err, delivered)
	}
	return wk
}

// workID names wk's task ("none": no work).
func workID(wk Work) string {
	if wk == nil {
		return "none"
	}
	return wk.ID()
}
