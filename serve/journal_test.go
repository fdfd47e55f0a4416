package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/internal/flock"
	"github.com/vsr-dev/vsr/pipeline"
)

// journalRunner stands for the pipeline's resume (Task.Resume): it finds
// or makes the journal beside its output, says where it resumes when it
// found one, and removes the journal once the output is written. With
// block it runs until cancelled; the model "fail" fails.
type journalRunner struct {
	block   bool
	started chan string
}

func (r *journalRunner) Run(ctx context.Context, t *Task, progress func(int, int)) error {
	if !t.Resume {
		return errors.New("the service asked for no journal")
	}
	dir := pipeline.JournalDir(t.Output)
	from := 0
	if _, err := os.Lstat(dir); err == nil {
		from = 5
		t.Resumed(from)
		t.Notice(fmt.Sprintf("resuming at frame %d of 10", from))
	} else if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	progress(from+1, 10)
	r.started <- t.ID
	if t.Request.Model == "fail" {
		return errors.New("broken")
	}
	if r.block {
		<-ctx.Done()
		return ctx.Err()
	}
	progress(10, 10)
	if err := os.WriteFile(t.Output, []byte("video"), 0o644); err != nil {
		return err
	}
	t.ResumedFrom = from
	return os.RemoveAll(dir)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestJournalAcrossCrash: the journal of a task running when the service
// crashed is kept by the sweep at the next start, and the task resumes
// from it (resumed_from_frame, resume_note, vsr_resumed_frames_total;
// the journal is gone once it completes); a failed task's journal is
// removed when it fails, and one whose task is over is swept at start.
func TestJournalAcrossCrash(t *testing.T) {
	data := t.TempDir()
	r := &journalRunner{block: true, started: make(chan string, 10)}
	svc, err := New(withStore(Config{Data: data}), r)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(svc.InputRoot(), "a.mp4"), []byte("v"), 0o644)
	journal := func(id string) string { return filepath.Join(svc.OutputRoot(), journalName(id+".mp4")) }
	mk := func(model string) string {
		t := &Task{ID: newID(), Input: filepath.Join(svc.InputRoot(), "a.mp4"), Request: Request{Model: model}}
		t.Output = filepath.Join(svc.OutputRoot(), t.ID+".mp4")
		if err := svc.submit(t, ""); err != nil {
			panic(err)
		}
		return t.ID
	}
	failed := mk("fail")
	<-r.started
	for {
		if tk, _ := svc.get(failed); tk.Status == Failed {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if exists(journal(failed)) {
		t.Error("a failed task's journal is kept")
	}
	running := mk("")
	<-r.started
	if !exists(journal(running)) {
		t.Fatal("the runner made no journal")
	}
	// A crash, as in TestRestart; and the journal of a task over.
	svc.mu.Lock()
	svc.closing = true
	svc.mu.Unlock()
	svc.st.Close()
	svc.stop()
	svc.workers.Wait()
	os.Mkdir(journal("over"), 0o700)

	e := newEnv(t, Config{Data: data}, &journalRunner{started: make(chan string, 10)})
	m := e.wait(running, Completed)
	if m["attempts"] != 2.0 || m["resumed_from_frame"] != 5.0 || m["resume_note"] != "resuming at frame 5 of 10" {
		t.Errorf("resumed task: attempts %v, resumed_from_frame %v, resume_note %v", m["attempts"], m["resumed_from_frame"], m["resume_note"])
	}
	if m["progress"].(map[string]any)["frames_done"] != 10.0 {
		t.Errorf("progress %v", m["progress"])
	}
	if exists(journal(running)) || exists(journal("over")) {
		t.Errorf("journals kept: the completed task's %v, that of no task %v", exists(journal(running)), exists(journal("over")))
	}
	resp, err := http.Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"\nvsr_resumed_frames_total 5\n", "\nvsr_frames_processed_total 5\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics has no %q", strings.TrimSpace(want))
		}
	}
}

// TestCancelRemovesJournal: cancelling a running task removes its
// journal, and so does cancelling a pending one (an interrupted run's),
// but not while a run holds the journal's lock.
func TestCancelRemovesJournal(t *testing.T) {
	r := &journalRunner{block: true, started: make(chan string, 10)}
	e := newEnv(t, Config{}, r)
	e.input("a.mp4")
	journal := func(name string) string { return filepath.Join(e.svc.OutputRoot(), journalName(name)) }
	running := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "run.mp4"})
	<-r.started
	pending := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "wait.mp4"})
	locked := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "held.mp4"})
	for _, n := range []string{"wait.mp4", "held.mp4"} {
		if err := os.Mkdir(journal(n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(journal("held.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := flock.TryLock(f); err != nil {
		t.Skip("no flock here: ", err)
	}
	for _, id := range []string{running, pending, locked} {
		if code, m, _ := e.do("DELETE", "/v1/tasks/"+id, nil); code != 200 || m["status"] != "cancelled" {
			t.Fatalf("cancel %s: %d %v", id, code, m)
		}
	}
	if exists(journal("run.mp4")) || exists(journal("wait.mp4")) {
		t.Errorf("journals of cancelled tasks kept: running %v, pending %v", exists(journal("run.mp4")), exists(journal("wait.mp4")))
	}
	if !exists(journal("held.mp4")) {
		t.Error("a journal another run holds was removed")
	}
}
