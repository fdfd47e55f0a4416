package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startWorker starts a worker of the API e on its roots, with a fake
// runner (blocking with block set).
func startWorker(t *testing.T, e *env, block bool) (*Service, *fakeRunner) {
	t.Helper()
	f := newFake(block)
	w, err := New(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), Pull: true, AckWait: time.Second,
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
	wb.js().nc.Close() // no more heartbeats: the task goes to another worker

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
	if l, err := lockOutput(filepath.Join(out, "clip.mkv")); err == nil {
		l.release(false)
		t.Error("a second lock on clip.mkv was taken while its task ran")
	}

	fa.release <- struct{}{}
	e.wait(mkv, Completed)
}
