package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSharedInputRootUploads: a second instance with its own data
// directory on the input root of a first leaves the first's queued upload
// (it removed it as "an upload no task reads", and the task then failed
// with a PathError), which then runs; it removes its own orphan.
func TestSharedInputRootUploads(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	f := newFake(true)
	a := newEnv(t, Config{InputRoot: in, OutputRoot: out}, f)
	a.input("a.mp4")
	running := a.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "run.mp4"})
	<-f.started
	code, m := a.upload(map[string]string{"save_result_path": "up.mp4"}, "clip.mp4", []byte("uploaded"))
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	queued := m["task_id"].(string)
	upload := a.svc.get1(t, queued).Input
	if !strings.Contains(filepath.Base(upload), a.svc.owner) {
		t.Errorf("the upload %s does not name its instance %s", upload, a.svc.owner)
	}

	bData := t.TempDir()
	b := newEnv(t, Config{Data: bData, InputRoot: in, OutputRoot: out}, newFake(false))
	if b.svc.owner == a.svc.owner {
		t.Fatalf("two data directories, one instance id %s", a.svc.owner)
	}
	if _, err := os.Stat(upload); err != nil {
		t.Fatalf("the second instance's start removed the first's queued upload: %v", err)
	}
	// The second instance's own orphan (an upload whose task was never
	// stored) goes at its next start; the first's stays.
	orphan := b.svc.uploadPath(".mp4")
	os.WriteFile(orphan, []byte("orphan"), 0o644)
	b.srv.Close()
	b.svc.Close()
	newEnv(t, Config{Data: bData, InputRoot: in, OutputRoot: out}, newFake(false))
	if _, err := os.Stat(orphan); err == nil {
		t.Error("an instance's own orphan upload stayed after its restart")
	}
	if _, err := os.Stat(upload); err != nil {
		t.Fatalf("the second instance's restart removed the first's queued upload: %v", err)
	}

	f.release <- struct{}{}
	a.wait(running, Completed)
	f.release <- struct{}{}
	a.wait(queued, Completed)
}

// get1 returns a copy of task id, failing the test if there is none.
func (s *Service) get1(t *testing.T, id string) *Task {
	t.Helper()
	tk, ok := s.get(id)
	if !ok {
		t.Fatalf("no task %s", id)
	}
	return tk
}

// TestOwnerID: an instance's id is made once and kept; a damaged id file
// is refused with a line that names it.
func TestOwnerID(t *testing.T) {
	data := t.TempDir()
	id, err := openOwner(data)
	if err != nil || !ownerIDPattern.MatchString(id) {
		t.Fatalf("openOwner: %q, %v", id, err)
	}
	if again, err := openOwner(data); again != id || err != nil {
		t.Errorf("opened again: %q, %v; want %q", again, err, id)
	}
	if ents, _ := os.ReadDir(data); len(ents) != 1 {
		t.Errorf("the data directory holds %s, want only %s", names(data), ownerFile)
	}
	os.WriteFile(filepath.Join(data, ownerFile), []byte("half"), 0o644)
	if _, err := openOwner(data); err == nil || !strings.Contains(err.Error(), filepath.Join(data, ownerFile)) {
		t.Errorf("a damaged id file: %v", err)
	}
}

// holdOutput holds the lock of output, as another process writing it
// would (flock locks of two open files conflict within one process too),
// until the function it returns is called.
func holdOutput(t *testing.T, output string) func() {
	t.Helper()
	l, err := lockOutput(context.Background(), output, output, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sync.OnceFunc(func() { l.release(true) })
}

// TestOutputLockedMessage: a task whose output another process holds
// fails naming save_result_path as the client knows it, not the path
// through a descriptor the run opened (/proc/self/fd/N/NAME).
func TestOutputLockedMessage(t *testing.T) {
	defer func(w time.Duration) { outputLockWait = w }(outputLockWait)
	outputLockWait = 50 * time.Millisecond
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	output := filepath.Join(e.svc.OutputRoot(), "o.mp4")
	defer holdOutput(t, output)()
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
	m := e.wait(id, Failed)
	msg, _ := m["error"].(string)
	if !strings.Contains(msg, "save_result_path "+output+" is being written by another vsr process") || strings.Contains(msg, "/proc/") {
		t.Errorf("error %q: want the output's path as the client knows it", msg)
	}
}

// TestRemoteOutputLocked: a worker that finds a task's output locked by
// another process (a worker frozen past its lease, say) hands the task
// back to come again later rather than fail it (it failed at once): the
// task completes once the holder lets go; one whose output stays locked
// fails after --max-attempts deliveries, naming the output as the worker
// knows it.
func TestRemoteOutputLocked(t *testing.T) {
	defer func(w time.Duration) { leasedLockWait = w }(leasedLockWait)
	leasedLockWait = 200 * time.Millisecond
	e, _, fs := remote(t, 1, false, Config{MaxAttempts: 3})
	e.input("a.mp4")

	out := filepath.Join(e.svc.OutputRoot(), "freed.mp4")
	free := holdOutput(t, out)
	defer free()
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "freed.mp4"})
	waitFor(t, "a second delivery", func() bool {
		tk, _ := e.svc.get(id)
		return tk.Status == Failed || tk.Attempts >= 2
	})
	free()
	m := e.wait(id, Completed)
	if m["error"] != nil {
		t.Errorf("completed with error %v", m["error"])
	}
	if b, err := os.ReadFile(out); err != nil || !strings.HasPrefix(string(b), "video of "+id) {
		t.Errorf("the output: %q, %v", b, err)
	}

	held := filepath.Join(e.svc.OutputRoot(), "held.mp4")
	defer holdOutput(t, held)()
	id = e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "held.mp4"})
	m = e.wait(id, Failed)
	msg, _ := m["error"].(string)
	if !strings.Contains(msg, "save_result_path "+held+" is being written by another vsr process") || strings.Contains(msg, "/proc/") || m["attempts"] != 3.0 {
		t.Errorf("a task whose output stays locked: %v", m)
	}
	fs[0].mu.Lock()
	defer fs[0].mu.Unlock()
	if n := len(fs[0].ran); n != 1 {
		t.Errorf("the runner ran %d times, want once", n)
	}
}
