package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// remote starts the API alone (tasks on an embedded NATS server) and n
// workers with their own roots (another mount of the same files) and
// fake runners.
func remote(t *testing.T, n int, block bool, cfg Config) (*env, []*Service, []*fakeRunner) {
	t.Helper()
	cfg.NATS = &NATS{Listen: "127.0.0.1:-1"}
	e := newRemoteEnv(t, cfg, newFake(false))
	var ws []*Service
	var fs []*fakeRunner
	for range n {
		f := newFake(block)
		w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
			InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot(), MaxAttempts: cfg.MaxAttempts}, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws, fs = append(ws, w), append(fs, f)
	}
	return e, ws, fs
}

// TestRemoteWorkers: the API alone queues 12 tasks on NATS; two workers
// run each exactly once (one output each); the API reports what the
// workers wrote.
func TestRemoteWorkers(t *testing.T) {
	e, _, fs := remote(t, 2, false, Config{})
	e.input("a.mp4")
	var ids []string
	for i := range 12 {
		ids = append(ids, e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": fmt.Sprintf("o%d.mp4", i)}))
	}
	for i, id := range ids {
		m := e.wait(id, Completed)
		if m["devices"] != "fake:0" {
			t.Errorf("task %s: %v", id, m)
		}
		b, err := os.ReadFile(filepath.Join(e.svc.OutputRoot(), fmt.Sprintf("o%d.mp4", i)))
		if err != nil || string(b) != "video of "+id+" from video" {
			t.Errorf("output of %s: %q %v", id, b, err)
		}
	}
	var ran []string
	for _, f := range fs {
		f.mu.Lock()
		ran = append(ran, f.ran...)
		f.mu.Unlock()
	}
	slices.Sort(ran)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(ran, want) {
		t.Errorf("runs %v, want each of %v once", ran, want)
	}
	if len(fs[0].ran) == 0 || len(fs[1].ran) == 0 {
		t.Logf("one worker ran every task (%d and %d)", len(fs[0].ran), len(fs[1].ran))
	}
	noTemporaries(t, e.svc.OutputRoot())
}

// TestRemoteCancel: cancelling a task running on a worker stops it there
// and leaves no output; a pending task is cancelled by the API alone.
func TestRemoteCancel(t *testing.T) {
	e, _, fs := remote(t, 1, true, Config{})
	e.input("a.mp4")
	run := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "run.mp4"})
	<-fs[0].started
	wait := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "wait.mp4"})
	code, m, _ := e.do("DELETE", "/v1/tasks/"+wait, nil)
	if code != 200 || m["status"] != "cancelled" {
		t.Fatalf("cancel pending: %d %v", code, m)
	}
	e.wait(run, Processing)
	code, m, _ = e.do("DELETE", "/v1/tasks/"+run, nil)
	if code != 200 || m["status"] != "cancelled" {
		t.Fatalf("cancel running: %d %v", code, m)
	}
	for _, n := range []string{"run.mp4", "wait.mp4"} {
		if _, err := os.Stat(filepath.Join(e.svc.OutputRoot(), n)); err == nil {
			t.Errorf("%s was written", n)
		}
	}
	// The worker goes on with the next task.
	next := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "next.mp4"})
	<-fs[0].started
	fs[0].release <- struct{}{}
	e.wait(next, Completed)
	if slices.Contains(fs[0].ran, wait) {
		t.Error("the worker ran a task cancelled while it was pending")
	}
	noTemporaries(t, e.svc.OutputRoot())
}

// TestRemoteWorkerDies: a worker that stops answering (its connection to
// NATS gone) has its task delivered to another within the ack wait; the
// other removes the first attempt's temporaries and completes it. With
// --max-attempts 1 the second delivery fails the task instead.
func TestRemoteWorkerDies(t *testing.T) {
	for _, attempts := range []int{3, 1} {
		t.Run(fmt.Sprint("max attempts ", attempts), func(t *testing.T) {
			e, ws, fs := remote(t, 2, true, Config{MaxAttempts: attempts})
			e.input("a.mp4")
			id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
			var dead int
			select {
			case <-fs[0].started:
				dead = 0
			case <-fs[1].started:
				dead = 1
			case <-time.After(20 * time.Second):
				t.Fatal("no worker took the task")
			}
			killed := time.Now()
			jsOf(ws[dead]).nc.Close() // no more heartbeats, no ack
			alive := fs[1-dead]
			alive.release <- struct{}{}
			if attempts == 1 {
				m := e.wait(id, Failed)
				if !strings.Contains(m["error"].(string), "delivered 1 times") {
					t.Errorf("error %v", m["error"])
				}
				return
			}
			select {
			case <-alive.started:
				t.Logf("redelivered %v after the worker died (ack wait 1 s)", time.Since(killed).Round(10*time.Millisecond))
			case <-time.After(10 * time.Second):
				t.Fatal("the task was not delivered to the other worker")
			}
			m := e.wait(id, Completed)
			if m["attempts"] != 2.0 {
				t.Errorf("attempts %v", m["attempts"])
			}
			// The worker that lost NATS stopped its run: no task runs twice
			// at once.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				ws[dead].mu.Lock()
				n := len(ws[dead].running)
				ws[dead].mu.Unlock()
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the worker that lost NATS still runs its task")
				}
			}
			fs[dead].release <- struct{}{} // the dead worker's run ends; its output must not win
			b, _ := os.ReadFile(filepath.Join(e.svc.OutputRoot(), "o.mp4"))
			if string(b) != "video of "+id+" from video" {
				t.Errorf("output %q", b)
			}
		})
	}
}

// TestRemoteNeedsJetStream: the API alone or a worker without NATS is
// refused.
func TestRemoteNeedsJetStream(t *testing.T) {
	for name, open := range map[string]func(Config, Runner) (*Service, error){"NewRemote": NewRemote, "NewWorker": NewWorker} {
		if _, err := open(Config{Data: t.TempDir()}, newFake(false)); err != errNoJetStream {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// noTemporaries fails if a hidden temporary is left under root.
func noTemporaries(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != root && isTemporary(d.Name()) {
			t.Errorf("temporary left: %s", p)
		}
		return nil
	})
}

// namedFake is a fakeRunner that serves the named models (a request
// without one runs on the first).
type namedFake struct {
	*fakeRunner
	models []string
}

func (f namedFake) ModelOf(r *Request) (string, error) {
	if r.Model == "" {
		return f.models[0], nil
	}
	if !slices.Contains(f.models, r.Model) {
		return "", fmt.Errorf("unknown model %q", r.Model)
	}
	return r.Model, nil
}

func (f namedFake) ModelNames() []string { return f.models }

// TestRemoteModels: a worker takes only the tasks of the models it
// serves; a task of a model no worker serves waits, and the queue status
// says for which model; the service status and the metrics list the
// workers; a worker that comes for that model runs it.
func TestRemoteModels(t *testing.T) {
	api := namedFake{newFake(false), []string{"a", "b"}}
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1"}}, api)
	start := func(models ...string) *fakeRunner {
		f := newFake(false)
		w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
			InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot(), Name: "w-" + strings.Join(models, ""), Devices: "fake:0"},
			namedFake{f, models})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return f
	}
	fa := start("a")
	e.input("v.mp4")
	ta := e.submit(map[string]any{"video_path": "v.mp4", "save_result_path": "a.mp4"})
	tb := e.submit(map[string]any{"video_path": "v.mp4", "save_result_path": "b.mp4", "model": "b"})
	e.wait(ta, Completed)
	_, q, _ := e.do("GET", "/v1/tasks/queue/status", nil)
	if w, _ := q["waiting_for_workers"].([]any); len(w) != 1 || w[0] != "b" || q["pending_count"] != 1.0 {
		t.Errorf("queue status with no worker for b: %v", q)
	}
	_, st, _ := e.do("GET", "/v1/service/status", nil)
	if ws, _ := st["workers"].([]any); len(ws) != 1 || ws[0].(map[string]any)["name"] != "w-a" {
		t.Errorf("service status: %v", st)
	}
	code, m, _ := e.do("GET", "/metrics", nil)
	if body, _ := m["_body"].(string); code != 200 || !strings.Contains(body, "vsr_workers_connected 1") ||
		!strings.Contains(body, `vsr_worker_running_tasks{devices="fake:0",worker="w-a"} 0`) {
		t.Errorf("metrics: %d %.2000s", code, m["_body"])
	}
	fb := start("b")
	e.wait(tb, Completed)
	if !slices.Equal(fa.ran, []string{ta}) || !slices.Equal(fb.ran, []string{tb}) {
		t.Errorf("worker a ran %v, worker b ran %v", fa.ran, fb.ran)
	}
}

// TestRemoteFiles: with the files in the NATS object store, a worker
// whose roots share nothing with the API's runs an uploaded video: it
// takes the upload from the store and puts its result there, and GET
// result streams it from there; neither root keeps a copy.
func TestRemoteFiles(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1", Files: true}}, newFake(false))
	f := newFake(false)
	w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
		InputRoot: t.TempDir(), OutputRoot: t.TempDir()}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	code, m := e.upload(map[string]string{"save_result_path": "up.mp4"}, "clip.mp4", []byte("uploaded bytes"))
	id, _ := m["task_id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("upload: %d %v", code, m)
	}
	e.wait(id, Completed)
	resp, err := http.Get(e.srv.URL + "/v1/tasks/" + id + "/result")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "video of "+id+" from uploaded bytes" {
		t.Errorf("result: %d %q", resp.StatusCode, body)
	}
	for _, root := range []string{e.svc.InputRoot(), e.svc.OutputRoot(), w.InputRoot(), w.OutputRoot()} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				t.Errorf("a copy was kept: %s", p)
			}
			return nil
		})
	} // The API removes the upload's object once the task has ended.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ls, err := jsOf(e.svc).uploads.List(context.Background())
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upload's object was kept: %v %v", ls, err)
		}
	}
}

// cutProxy forwards TCP connections to addr until cut, which closes them
// all and refuses new ones until heal.
type cutProxy struct {
	ln   net.Listener
	addr string
	mu   sync.Mutex
	cut  bool
	open []net.Conn
}

func newCutProxy(t *testing.T, addr string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, addr: addr}
	t.Cleanup(func() { ln.Close(); p.sever(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.open = append(p.open, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// sever closes every connection; with cut set, new ones are refused.
func (p *cutProxy) sever(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

// TestRemoteReconnect: a worker cut off from NATS while it runs a task
// stops it (its lease is gone), the task runs on another worker, and once
// the network is back the first worker reconnects and takes new tasks
// without running the first one again.
func TestRemoteReconnect(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1"}}, newFake(false))
	u, _ := url.Parse(e.svc.NATSURL())
	proxy := newCutProxy(t, u.Host)
	worker := func(addr string) (*Service, *fakeRunner) {
		f := newFake(true)
		w, err := NewWorker(Config{Data: t.TempDir(), NATS: &NATS{URLs: addr, Token: workerNATS(t, e.svc).Token}, AckWait: time.Second,
			InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()}, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w, f
	}
	wa, fa := worker("nats://" + proxy.ln.Addr().String())
	e.input("a.mp4")
	first := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "first.mp4"})
	<-fa.started
	_, fb := worker(e.svc.NATSURL())
	proxy.sever(true)
	select {
	case <-fb.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut-off worker's task did not go to the other worker")
	}
	fb.release <- struct{}{}
	if m := e.wait(first, Completed); m["attempts"] != 2.0 {
		t.Errorf("attempts %v", m["attempts"])
	}
	proxy.sever(false) // the network is back: the first worker reconnects
	for deadline := time.Now().Add(10 * time.Second); !jsOf(wa).nc.IsConnected(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off worker did not reconnect")
		}
	}
	fb.release <- struct{}{} // the second worker's next task, if it takes it
	fa.release <- struct{}{} // the first worker's stopped run, if it still waits
	second := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "second.mp4"})
	fa.release <- struct{}{}
	e.wait(second, Completed)
	fa.mu.Lock()
	defer fa.mu.Unlock()
	if n := slices.Index(fa.ran, first); n < 0 || slices.Contains(fa.ran[n+1:], first) {
		t.Errorf("the cut-off worker ran %v (first %s)", fa.ran, first)
	}
	b, _ := os.ReadFile(filepath.Join(e.svc.OutputRoot(), "first.mp4"))
	if string(b) != "video of "+first+" from video" {
		t.Errorf("first output %q", b)
	}
}

// TestRemoteTakeover: a worker whose running task's record another
// writer changed (another worker took the task over after a redelivery)
// stops its run at its next write.
func TestRemoteTakeover(t *testing.T) {
	e, ws, fs := remote(t, 1, false, Config{})
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4", "model": "ticking"})
	<-fs[0].started
	other, err := openJetStream(t.TempDir(), *workerNATS(t, e.svc))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tk, err := other.Get(id)
	if err != nil || tk == nil {
		t.Fatalf("%v %v", tk, err)
	}
	tk.Worker = "another"
	if err := other.Put(tk); err != nil {
		t.Fatal(err)
	}
	took := time.Now()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ws[0].mu.Lock()
		lost := len(ws[0].running) == 0 || ws[0].running[0].lost
		ws[0].mu.Unlock()
		if lost {
			t.Logf("the worker stopped %v after the takeover", time.Since(took).Round(10*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker went on with a task another worker took over")
		}
	}
}

// failFinal is a worker's task store whose first write of a finished task
// fails, as a write does while a NATS cluster elects a leader.
type failFinal struct {
	*jsStore
	mu     sync.Mutex
	failed bool
}

func (f *failFinal) Put(t *Task) error {
	f.mu.Lock()
	fail := t.Status.Final() && !f.failed
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("NATS task bucket: context deadline exceeded (test)")
	}
	return f.jsStore.Put(t)
}

// TestRemoteFinalWriteFails: when a worker cannot write a finished task's
// record at once, it writes it again before acknowledging the message: the
// API reports the task completed, run once (it stayed "processing" for
// ever when the message was acknowledged anyway).
func TestRemoteFinalWriteFails(t *testing.T) {
	e, ws, fs := remote(t, 1, false, Config{})
	ff := &failFinal{jsStore: jsOf(ws[0])}
	ws[0].mu.Lock()
	ws[0].st = ff
	ws[0].mu.Unlock()
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
	if m := e.wait(id, Completed); m["attempts"] != 1.0 {
		t.Errorf("attempts %v", m["attempts"])
	}
	ff.mu.Lock()
	failed := ff.failed
	ff.mu.Unlock()
	fs[0].mu.Lock()
	ran := slices.Clone(fs[0].ran)
	fs[0].mu.Unlock()
	if !failed || !slices.Equal(ran, []string{id}) {
		t.Errorf("final write failed %v; runs %v, want %s once", failed, ran, id)
	}
}

// workerNATS is the NATS configuration of a worker of api, whose
// embedded server made a token for local workers.
func workerNATS(t testing.TB, api *Service) *NATS {
	t.Helper()
	b, err := os.ReadFile(WorkerTokenFile(api.cfg.Data))
	if err != nil {
		t.Fatal(err)
	}
	return &NATS{URLs: api.NATSURL(), Token: strings.TrimSpace(string(b))}
}

// jsOf is the JetStream store of s (an API of remote workers, or a worker).
func jsOf(s *Service) *jsStore { return s.wq.(*jsStore) }

// TestRemoteRestartKeepsRunning: the API of remote workers, restarted
// while a worker runs a task, leaves the task's record as the worker
// wrote it (processing, not queued again by the API): the run and its
// journal stay the worker's.
func TestRemoteRestartKeepsRunning(t *testing.T) {
	cfg := Config{Data: t.TempDir(), NATS: &NATS{Listen: "127.0.0.1:-1"}}
	api, err := NewRemote(cfg, newFake(false))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(api.InputRoot(), "a.mp4"), []byte("v"), 0o644)
	tk := &Task{ID: "t1", Input: filepath.Join(api.InputRoot(), "a.mp4"), Output: filepath.Join(api.OutputRoot(), "t1.mp4")}
	if err := api.submit(tk, ""); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	tk.Status, tk.Attempts, tk.Worker = Processing, 1, "w1" // as a worker takes it
	err = api.st.Put(tk)
	api.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	api.Close()

	api, err = NewRemote(cfg, newFake(false))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	got, _ := api.get("t1")
	if got.Status != Processing || got.Rerun || got.Worker != "w1" {
		t.Errorf("after the API's restart: status %s, rerun %v, worker %q; want the worker's record", got.Status, got.Rerun, got.Worker)
	}
}
