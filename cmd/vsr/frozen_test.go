package main

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/serve"
)

// TestServeWorkerFrozen: a vsr worker frozen (SIGSTOP) while it runs a
// task, past --ack-wait and past the few seconds another waited for an
// output's lock, then continued (SIGCONT): the task went to the other
// worker, which found the output locked by the frozen one and failed the
// task for good ("being written by another vsr process", naming a
// /proc/self/fd path). Now the other waits for the frozen worker, which
// sees it lost its lease and stops without publishing, and the task
// completes once, with one output and no temporaries left.
func TestServeWorkerFrozen(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	data, in, out := workerRoots(t, dir)
	const ackWait = 2 * time.Second
	_, got := startLogged(t, bin, []string{`url=(http://\S+)`, `nats=(nats://\S+)`}, "serve", "--workers", "0",
		"--nats-listen", "127.0.0.1:-1", "--listen", "127.0.0.1:0", "--data", data, "--device", "cpu")
	worker := func() *exec.Cmd {
		cmd, _ := startLogged(t, bin, []string{`(vsr worker taking tasks)`}, "worker", "--nats", got[1], "--input-root", in, "--output-root", out,
			"--nats-token-file", serve.WorkerTokenFile(data), "--device", "cpu", "--preset", "ultrafast", "--ack-wait", ackWait.String())
		return cmd
	}
	workers := []*exec.Cmd{worker(), worker()}
	a := api{t, got[0]}
	id := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "long.mkv"})
	m, pid := a.restoring(id)
	var frozen *exec.Cmd
	for _, w := range workers {
		if w.Process.Pid == pid {
			frozen = w
		}
	}
	if frozen == nil {
		t.Fatalf("the task runs on %q, not a worker of this test", m["worker"])
	}
	frozen.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	defer frozen.Process.Signal(syscall.SIGCONT) // whatever happens, it can then be killed
	for a.status(id)["attempts"] != 2.0 {
		if time.Since(stopped) > 5*ackWait {
			t.Fatalf("the frozen worker's task did not go to the other worker: %v", a.status(id))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Frozen past the ack wait and the 5 s the other worker waited.
	time.Sleep(time.Until(stopped.Add(ackWait + 7*time.Second)))
	if m := a.status(id); m["status"] != "processing" {
		t.Errorf("with the first worker frozen: %v, want the task processing (waiting)", m)
	}
	frozen.Process.Signal(syscall.SIGCONT)
	m = a.wait(id, serve.Completed, 120*time.Second)
	if m["attempts"] != 2.0 || m["error"] != nil {
		t.Errorf("completed after %v attempts, error %v: want 2, none", m["attempts"], m["error"])
	}
	t.Logf("completed after a freeze of %v; resumed from frame %v", ackWait+7*time.Second, m["resumed_from_frame"])
	checkOutput(t, filepath.Join(out, "long.mkv"), 150, 128, 96)
	noTemporaries(t, out)
	if n := names(out); n != "long.mkv" {
		t.Errorf("output root holds %s, want one output", n)
	}
}
