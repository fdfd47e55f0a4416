package serve

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// startWorker starts a worker of the API e on its roots, with a fake
// runner (blocking with block set).
func startWorker(t *testing.T, e *env, block bool) (*Service, *fakeRunner) {
	t.Helper()
	f := newFake(block)
	w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
		InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()}, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, f
}

// started waits for f's next run.
func started(t *testing.T, f *fakeRunner, what string) {
	t.Helper()
	select {
	case <-f.started:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not start", what)
	}
}

// TestRerunKeepsOthersTemporaries: a redelivered task on clip.mp4 removes
// what its interrupted run left (its exact temporaries), and leaves alone
// the lock and temporaries of a live task on clip.mkv (the same stem), so
// that the output stays locked: the redelivery removed them, and a second
// lock on clip.mkv then succeeded while the first was held.
func TestRerunKeepsOthersTemporaries(t *testing.T) {
	e, _, _ := remote(t, 0, false, Config{})
	out := e.svc.OutputRoot()
	e.input("a.mp4")
	_, fa := startWorker(t, e, true)
	mkv := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "clip.mkv"})
	started(t, fa, "the clip.mkv task")

	wb, fb := startWorker(t, e, true)
	mp4 := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "clip.mp4"})
	started(t, fb, "the clip.mp4 task")
	mkdir := func(n string) {
		if err := os.Mkdir(filepath.Join(out, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The live task's encoder directory, and what an interrupted run of
	// clip.mp4 left: its encoder's directory and its hidden result.
	mkdir("..clip.mkv.vsr-result.vsr-111")
	mkdir("..clip.mp4.vsr-result.vsr-222")
	os.WriteFile(filepath.Join(out, ".clip.mp4.vsr-result.mp4"), []byte("stale"), 0o644)
	// Another output's: clip.mp4.mp4.
	os.WriteFile(filepath.Join(out, ".clip.mp4.mp4.vsr-result.mp4"), []byte("other"), 0o644)
	jsOf(wb).nc.Close() // no more heartbeats: the task goes to another worker

	_, fc := startWorker(t, e, false)
	started(t, fc, "the redelivered clip.mp4 task")
	e.wait(mp4, Completed)
	got := names(out)
	for _, n := range []string{".clip.mkv.vsr-lock", ".clip.mkv.vsr-result.mkv.vsr-fake", "..clip.mkv.vsr-result.vsr-111", ".clip.mp4.mp4.vsr-result.mp4"} {
		if !strings.Contains(got, n) {
			t.Errorf("the redelivered clip.mp4 task removed %s: %s", n, got)
		}
	}
	for _, n := range []string{"..clip.mp4.vsr-result.vsr-222", ".clip.mp4.vsr-result.mp4"} {
		if strings.Contains(got, n) {
			t.Errorf("the interrupted run's %s stayed: %s", n, got)
		}
	}
	if l, err := lockOutput(context.Background(), filepath.Join(out, "clip.mkv"), "clip.mkv", 0); err == nil {
		l.release(false)
		t.Error("a second lock on clip.mkv was taken while its task ran")
	}

	fa.release <- struct{}{}
	e.wait(mkv, Completed)
}

// slowStore delays the writes of a running task's progress (no Wrote
// yet), and records, in the order they land, whether each write of a
// task held its Wrote.
type slowStore struct {
	TaskStore
	mu    sync.Mutex
	wrote []bool
}

func (s *slowStore) Put(t *Task) error {
	if t.Status == Processing && t.FramesDone > 0 && len(t.Wrote) == 0 {
		time.Sleep(300 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote = append(s.wrote, len(t.Wrote) > 0)
	return s.TaskStore.Put(t)
}

// progressRunner reports progress once, after the first second (a save
// then starts), and succeeds at once.
type progressRunner struct{}

func (progressRunner) Run(ctx context.Context, t *Task, progress func(int, int)) error {
	time.Sleep(1100 * time.Millisecond)
	progress(1, 1)
	return os.WriteFile(t.Output, []byte("result"), 0o644)
}

// TestWroteNotOverwritten: a progress save under way as the run ends
// lands before the record of the result's identity (Task.Wrote), never
// after it (a crash then made the rerun refuse its own output).
func TestWroteNotOverwritten(t *testing.T) {
	st := &slowStore{TaskStore: NewMemStore()}
	e := newEnv(t, Config{Store: st}, progressRunner{})
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
	e.wait(id, Completed)
	st.mu.Lock()
	defer st.mu.Unlock()
	if i := slices.Index(st.wrote, true); i < 0 || slices.Contains(st.wrote[i:], false) {
		t.Errorf("writes of the task (with Wrote or not), in the order they landed: %v", st.wrote)
	}
}

// TestPlaceAfterLostLease: a worker's run that lost its lease (or was
// cancelled) as it ended puts nothing at the output, and leaves no result.
func TestPlaceAfterLostLease(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	out := e.svc.OutputRoot()
	for _, lost := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		task := &Task{ID: "t", lost: lost}
		if !lost {
			cancel()
		}
		tmp, output := filepath.Join(out, ".o.mp4.vsr-result.mp4"), filepath.Join(out, "o.mp4")
		os.WriteFile(tmp, []byte("result"), 0o644)
		if _, err := e.svc.place(ctx, task, tmp, output, task.clone()); err == nil {
			t.Errorf("lost %v: placed", lost)
		}
		cancel()
		if n := names(out); n != "" {
			t.Errorf("lost %v: the output root holds %s", lost, n)
		}
	}
}

// TestStopDuringUploadDownload: a worker stopped gracefully while it
// takes a task's upload from the object store hands the task back without
// using an attempt: with --max-attempts 1 the next worker runs it (it
// failed as "delivered 1 times").
func TestStopDuringUploadDownload(t *testing.T) {
	taking := make(chan struct{}, 1)
	get := getUpload
	getUpload = func(j WorkQueue, ctx context.Context, root *os.Root, object, name string) error {
		select {
		case taking <- struct{}{}: // the first download waits for the stop
			<-ctx.Done()
			return ctx.Err()
		default:
			return get(j, ctx, root, object, name)
		}
	}
	t.Cleanup(func() { getUpload = get })
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1", Files: true}, MaxAttempts: 1}, newFake(false))
	worker := func() *Service {
		w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
			InputRoot: t.TempDir(), OutputRoot: t.TempDir(), MaxAttempts: 1}, newFake(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	w := worker()
	code, m := e.upload(map[string]string{"save_result_path": "up.mp4"}, "clip.mp4", []byte("uploaded bytes"))
	id, _ := m["task_id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("upload: %d %v", code, m)
	}
	select {
	case <-taking:
	case <-time.After(20 * time.Second):
		t.Fatal("no worker took the task")
	}
	taking <- struct{}{} // the next download goes through
	w.Close()
	worker()
	if m := e.wait(id, Completed); m["attempts"] != 1.0 {
		t.Errorf("attempts %v after a stop during the download", m["attempts"])
	}
}

// TestWorkerUploadCopies: a worker with the files in the object store
// takes an upload into a directory of its own, and never removes a file
// of the same name in its input root (it removed "upload-ID.EXT" there
// before taking its copy); it removes the directory when it stops, and a
// dead worker's when it starts.
func TestWorkerUploadCopies(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1", Files: true}}, newFake(false))
	code, m := e.upload(map[string]string{"save_result_path": "up.mp4"}, "clip.mp4", []byte("uploaded bytes"))
	id, _ := m["task_id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("upload: %d %v", code, m)
	}
	in, data := t.TempDir(), t.TempDir()
	mine := filepath.Join(in, "upload-"+id+".mp4")
	os.WriteFile(mine, []byte("a file of the input root"), 0o644)
	dead := filepath.Join(data, workerUploads, "999")
	os.MkdirAll(dead, 0o700)
	os.WriteFile(filepath.Join(dead, "upload-x.mp4"), []byte("left"), 0o644)

	w, err := NewWorker(Config{Data: data, NATS: workerNATS(t, e.svc), AckWait: time.Second,
		InputRoot: in, OutputRoot: t.TempDir()}, newFake(false))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := os.Stat(dead); err == nil {
		t.Error("a dead worker's uploads stayed")
	}
	e.wait(id, Completed)
	resp, err := http.Get(e.srv.URL + "/v1/tasks/" + id + "/result")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "video of "+id+" from uploaded bytes" {
		t.Errorf("result %q", body)
	}
	if b, _ := os.ReadFile(mine); string(b) != "a file of the input root" {
		t.Errorf("the input root's %s holds %q", filepath.Base(mine), b)
	}
	w.Close()
	if n := names(filepath.Join(data, workerUploads)); n != "" {
		t.Errorf("the stopped worker left %s", n)
	}
}
