package serve

import (
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSharedRoots: a second service starting on the same roots (the
// two-API layout) leaves a running task's temporaries and an upload in
// progress alone, and removes what a dead process left.
func TestSharedRoots(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	f := newFake(true)
	a := newEnv(t, Config{InputRoot: in, OutputRoot: out}, f)
	a.input("a.mp4")
	id := a.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "run.mp4"})
	<-f.started

	// An upload in progress: its video part has arrived, the form has not.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	codec := make(chan int, 1)
	go func() {
		resp, err := http.Post(a.srv.URL+"/v1/tasks/video/upload", mw.FormDataContentType(), pr)
		if err != nil {
			codec <- 0
			return
		}
		resp.Body.Close()
		codec <- resp.StatusCode
	}()
	fw, _ := mw.CreateFormFile("video", "clip.mp4")
	fw.Write([]byte("a whole video"))
	mw.WriteField("sr_ratio", "2")
	waitFor(t, "the upload", func() bool { return strings.Contains(names(in), ".upload-") })

	// A dead process's leftovers: an encoder's directory, its released
	// lock, an upload's temporary.
	os.Mkdir(filepath.Join(out, ".dead.vsr-123"), 0o755)
	os.WriteFile(filepath.Join(out, ".dead.mp4.vsr-lock"), nil, 0o600)
	os.WriteFile(filepath.Join(in, ".upload-999.mp4"), []byte("half"), 0o600)
	live := names(out)
	if !strings.Contains(live, ".run.mp4.vsr-lock") || !strings.Contains(live, ".run.mp4.vsr-result.mp4.vsr-fake") {
		t.Fatalf("the running task's files: %s", live)
	}

	newEnv(t, Config{InputRoot: in, OutputRoot: out}, newFake(false))
	for _, n := range []string{".run.mp4.vsr-lock", ".run.mp4.vsr-result.mp4.vsr-fake"} {
		if !strings.Contains(names(out), n) {
			t.Errorf("the second instance removed the running task's %s: %s", n, names(out))
		}
	}
	for _, n := range []string{".dead"} {
		if strings.Contains(names(out), n) {
			t.Errorf("a dead process's %s* stayed: %s", n, names(out))
		}
	}
	if n := names(in); strings.Contains(n, "upload-999") || !strings.Contains(n, ".upload-") {
		t.Errorf("input root after the second start: %s (want the live upload only)", n)
	}

	mw.Close()
	pw.Close()
	if c := <-codec; c != 200 {
		t.Errorf("the upload in progress was answered %d", c)
	}
	f.release <- struct{}{}
	a.wait(id, Completed)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never came", what)
		}
	}
}

// TestUploadBudget: uploads waiting for their tasks count against
// MaxUploadTotal; one that would pass it is refused with 507 and leaves
// nothing behind; the budget comes back as tasks end.
func TestUploadBudget(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{MaxUploadTotal: 20}, f)
	video := []byte("a whole video") // 13 bytes
	code, m := e.upload(nil, "a.mp4", video)
	if code != 200 {
		t.Fatalf("first upload: %d %v", code, m)
	}
	first := m["task_id"].(string)
	code, m = e.upload(nil, "b.mp4", video)
	wantError(t, "upload past the budget", code, m, http.StatusInsufficientStorage, "--max-upload-bytes-total")
	if n := names(e.svc.InputRoot()); strings.Count(n, "upload-") != 1 {
		t.Errorf("input root after the refusal: %s", n)
	}
	<-f.started
	f.release <- struct{}{}
	e.wait(first, Completed)
	if code, m = e.upload(nil, "c.mp4", video); code != 200 {
		t.Errorf("an upload once the first task ended: %d %v", code, m)
	}
}

// TestRetention: finished tasks past KeepFinishedCount or KeepFinished are
// deleted from the store and the list, pending ones never, and the index
// of outputs that submit reads holds the listed tasks only; a retained
// history survives a restart.
func TestRetention(t *testing.T) {
	data := t.TempDir()
	f := newFake(true)
	e := newEnv(t, Config{Data: data, KeepFinishedCount: 2, KeepFinished: time.Hour}, f)
	e.input("a.mp4")
	var ids []string
	for i := range 4 {
		ids = append(ids, e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": fmt.Sprint(i, ".mp4")}))
		<-f.started
		f.release <- struct{}{}
		e.wait(ids[i], Completed)
	}
	pending := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "0.mp4", "overwrite": true})
	e.svc.prune(time.Now())
	stored := func() int {
		e.svc.mu.Lock()
		defer e.svc.mu.Unlock()
		ts, err := e.svc.st.Load()
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	if n := stored(); n != 3 {
		t.Errorf("%d tasks stored after pruning to 2 finished and 1 pending, want 3", n)
	}
	for i, id := range ids {
		code, _, _ := e.do("GET", "/v1/tasks/"+id+"/status", nil)
		if want := map[bool]int{true: 404, false: 200}[i < 2]; code != want {
			t.Errorf("task %d: status %d, want %d", i, code, want)
		}
	}
	e.svc.mu.Lock()
	index := fmt.Sprint(e.svc.outputs)
	e.svc.mu.Unlock()
	if strings.Contains(index, ids[0]) || strings.Contains(index, ids[1]) || !strings.Contains(index, pending) {
		t.Errorf("the output index after pruning: %s", index)
	}
	// An hour later, every finished task goes; the pending one stays.
	e.svc.prune(time.Now().Add(2 * time.Hour))
	if n := stored(); n != 1 {
		t.Errorf("%d tasks stored after pruning every finished one, want 1", n)
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": "0.mp4", "overwrite": true})
	wantError(t, "a pruned history still sees the pending task", code, m, 409, pending)
}

// TestSubmitIndex: submit finds the tasks of an output through the index
// (not by reading every task): a long history of other outputs is not in
// the entry it reads, and the index is rebuilt at restart.
func TestSubmitIndex(t *testing.T) {
	data := t.TempDir()
	st, err := OpenBoltStore(data)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for i := range 500 {
		st.Put(&Task{ID: fmt.Sprint("old", i), Seq: uint64(i + 1), Status: Completed, Output: filepath.Join(out, fmt.Sprint(i, ".mp4"))})
	}
	in := filepath.Join(data, "input", "a.mp4")
	os.MkdirAll(filepath.Dir(in), 0o755)
	os.WriteFile(in, []byte("video"), 0o644)
	st.Put(&Task{ID: "waiting", Seq: 501, Status: Pending, Input: in, Output: filepath.Join(out, "x.mp4")})
	st.Close()
	f := newFake(true)
	e := newEnv(t, Config{Data: data, OutputRoot: out}, f)
	e.svc.mu.Lock()
	n, x := len(e.svc.outputs), e.svc.outputs[filepath.Join(out, "x.mp4")]
	e.svc.mu.Unlock()
	if n != 501 || len(x) != 1 || x[0] != "waiting" {
		t.Errorf("index of %d outputs, x.mp4's %v", n, x)
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": "x.mp4"})
	wantError(t, "the output of a stored pending task", code, m, 409, "waiting")
}

// TestHalfOpenConnections: 300 connections opened and left silent (more
// than MaxConns) do not keep /healthz from answering.
func TestHalfOpenConnections(t *testing.T) {
	_, addr, _, _ := serveEnv(t, Config{}, newFake(false))
	for range 300 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 3 {
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz %d with 300 silent connections open: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || time.Since(start) > 2*time.Second {
			t.Errorf("/healthz %d: %d after %v", i, resp.StatusCode, time.Since(start))
		}
	}
}
