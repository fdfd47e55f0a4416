package serve

import (
	"io"
	"mime/multipart"
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
