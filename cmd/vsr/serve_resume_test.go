package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/serve"
)

// journalOf waits until the journal of the service's output name in the
// output root out records a finished part, and returns its directory.
func journalOf(t *testing.T, out, name string) string {
	t.Helper()
	pattern := filepath.Join(out, ".*"+name+"*.vsr-journal")
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			var j struct {
				Body struct {
					Parts []json.RawMessage `json:"parts"`
				} `json:"body"`
			}
			if b, err := os.ReadFile(filepath.Join(d, "journal.json")); err == nil && json.Unmarshal(b, &j) == nil && len(j.Body.Parts) > 0 {
				return d
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no journal with a finished part matches %s", pattern)
	return ""
}

// metric reads the value of an unlabelled metric from the service's
// /metrics.
func (a api) metric(name string) float64 {
	a.t.Helper()
	resp, err := http.Get(a.base + "/metrics")
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				a.t.Fatalf("%s: %q", name, l)
			}
			return f
		}
	}
	a.t.Fatalf("/metrics has no %s", name)
	return 0
}

// resumed checks the status m of a task resumed once after an
// interruption, of frames frames, and returns where it resumed.
func resumed(t *testing.T, m map[string]any, frames int) int {
	t.Helper()
	from, _ := m["resumed_from_frame"].(float64)
	if m["attempts"] != 2.0 || from <= 0 || from >= float64(frames) || !strings.Contains(fmt.Sprint(m["resume_note"]), fmt.Sprintf("resuming at frame %d of %d", int(from), frames)) {
		t.Errorf("resumed task: attempts %v, resumed_from_frame %v, resume_note %q; want 2, 0 < frame < %d, \"resuming at frame\"", m["attempts"], m["resumed_from_frame"], m["resume_note"], frames)
	}
	return int(from)
}

// gone fails unless path is gone.
func gone(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left: %s (%v)", what, path, err)
	}
}

// TestServeResumeAfterKill: a task of vsr serve in segments, its server
// SIGKILLed once its journal records a finished segment, resumes after a
// restart: its status says where and that it is its second attempt, its
// frames equal those of the same request run uninterrupted, /metrics
// counts the frames resumed, and its journal is gone. A task cancelled
// while it runs leaves no journal.
func TestServeResumeAfterKill(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	data, in, out := serveRoots(dir)
	const frames = 96
	sizedClip(t, filepath.Join(in, "long.mp4"), 64, 48, frames)
	req := func(name string) map[string]any {
		return map[string]any{"video_path": "long.mp4", "save_result_path": name, "segments": 4}
	}

	srv := startServe(t, bin, data)
	a := api{t, srv.url}
	id := a.submit(req("long.mkv"))
	jdir := journalOf(t, out, "long.mkv")
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()

	srv = startServe(t, bin, data)
	defer srv.stop()
	a = api{t, srv.url}
	from := resumed(t, a.wait(id, serve.Completed, 120*time.Second), frames)
	gone(t, jdir, "the journal of a completed task")
	if got := a.metric("vsr_resumed_frames_total"); got != float64(from) {
		t.Errorf("vsr_resumed_frames_total %v, want %d", got, from)
	}
	if got := a.metric("vsr_frames_processed_total"); got != float64(frames-from) {
		t.Errorf("vsr_frames_processed_total %v, want the %d frames restored after the resume", got, frames-from)
	}
	ref := a.submit(req("ref.mkv"))
	if m := a.wait(ref, serve.Completed, 120*time.Second); m["resumed_from_frame"] != nil || m["attempts"] != 1.0 {
		t.Errorf("uninterrupted task: %v", m)
	}
	if framemd5(t, filepath.Join(out, "long.mkv")) != framemd5(t, filepath.Join(out, "ref.mkv")) {
		t.Error("the resumed task's frames differ from an uninterrupted run's")
	}

	c := a.submit(req("cancel.mkv"))
	cj := journalOf(t, out, "cancel.mkv")
	if code, m := a.call("DELETE", "/v1/tasks/"+c, nil); code != 200 || m["status"] != "cancelled" {
		t.Fatalf("cancel: %d %v", code, m)
	}
	gone(t, cj, "the journal of a cancelled task")
	noTemporaries(t, out)
}

// TestServeWorkerResume: vsr serve --workers 0 with an embedded NATS
// server; a vsr worker SIGKILLed once the journal of its task records a
// finished segment has the task taken by another worker that shares the
// output root, which resumes it: second attempt, where it resumed, frames
// equal to an uninterrupted run's. A worker whose output root is another
// (a machine that does not share it) restarts such a task from frame 0
// and says why.
func TestServeWorkerResume(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	data, in, out := workerRoots(t, dir)
	const frames = 96
	sizedClip(t, filepath.Join(in, "mid.mp4"), 64, 48, frames)
	_, got := startLogged(t, bin, []string{`url=(http://\S+)`, `nats=(nats://\S+)`}, "serve", "--workers", "0",
		"--nats-listen", "127.0.0.1:-1", "--listen", "127.0.0.1:0", "--data", data, "--device", "cpu")
	worker := func(out string) *exec.Cmd {
		cmd, _ := startLogged(t, bin, []string{`(vsr worker taking tasks)`}, "worker", "--nats", got[1], "--input-root", in, "--output-root", out,
			"--nats-token-file", serve.WorkerTokenFile(data), "--device", "cpu", "--preset", "ultrafast", "--ack-wait", "1s")
		return cmd
	}
	req := func(name string) map[string]any {
		return map[string]any{"video_path": "mid.mp4", "save_result_path": name, "segments": 4}
	}
	a := api{t, got[0]}
	first := worker(out)
	id := a.submit(req("long.mkv"))
	jdir := journalOf(t, out, "long.mkv")
	second := worker(out)
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	resumed(t, a.wait(id, serve.Completed, 120*time.Second), frames)
	gone(t, jdir, "the journal of a completed task")
	ref := a.submit(req("ref.mkv"))
	a.wait(ref, serve.Completed, 120*time.Second)
	if framemd5(t, filepath.Join(out, "long.mkv")) != framemd5(t, filepath.Join(out, "ref.mkv")) {
		t.Error("the resumed task's frames differ from an uninterrupted run's")
	}

	// Another machine's output root.
	far := a.submit(req("far.mkv"))
	fj := journalOf(t, out, "far.mkv")
	other := filepath.Join(dir, "other")
	os.MkdirAll(other, 0o755)
	third := worker(other)
	defer third.Process.Signal(syscall.SIGTERM)
	second.Process.Signal(syscall.SIGKILL)
	second.Wait()
	m := a.wait(far, serve.Completed, 120*time.Second)
	if m["attempts"] != 2.0 || m["resumed_from_frame"] != nil || !strings.HasPrefix(fmt.Sprint(m["resume_note"]), "restarted from frame 0: no journal") {
		t.Errorf("task restarted on a worker that does not share the output root: attempts %v, resumed_from_frame %v, resume_note %q", m["attempts"], m["resumed_from_frame"], m["resume_note"])
	}
	checkOutput(t, filepath.Join(other, "far.mkv"), frames, 128, 96)
	if _, err := os.Stat(fj); err != nil {
		t.Errorf("the first worker's journal, which the third does not see: %v", err)
	}
}

// TestServeJournalLink: a link put at the name of a task's journal (to a
// directory outside the output root) does not lead the journal there: the
// task fails saying what to remove, with its paths named as the client
// knows them, and nothing is written through the link.
func TestServeJournalLink(t *testing.T) {
	needFFmpeg(t)
	a, svc, stop := serveWith(t, serveFlags{maxQueue: 100, base: cpuRestore})
	defer stop()
	sizedClip(t, filepath.Join(svc.InputRoot(), "in.mp4"), 24, 16, 8)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(svc.OutputRoot(), "..out.mkv.vsr-result.vsr-journal")); err != nil {
		t.Skip("no symbolic links here: ", err)
	}
	id := a.submit(map[string]any{"video_path": "in.mp4", "save_result_path": "out.mkv", "segments": 2})
	m := a.wait(id, serve.Failed, 2*time.Minute)
	msg := fmt.Sprint(m["error"])
	t.Logf("error: %s", msg)
	if !strings.Contains(msg, "is not a private directory: remove it") || strings.Contains(msg, "/proc/") || !strings.Contains(msg, svc.OutputRoot()) {
		t.Errorf("error %q: want the journal's path as the client knows it and what to do", msg)
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("written through the link: %v", ents)
	}
}
