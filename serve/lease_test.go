package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// plant records task t as pending, signed, and queues it, as the API
// would have accepted it: the API's own connection and signing key.
func plant(t *testing.T, api *Service, tk *Task) {
	t.Helper()
	j := jsOf(api)
	tk.Status, tk.Created = Pending, time.Now()
	api.seal(tk)
	if err := j.Put(tk); err != nil {
		t.Fatal(err)
	}
	if err := j.Enqueue(tk.ID, tk.ModelName); err != nil {
		t.Fatal(err)
	}
	// The API learns of the record through its watch.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := api.get(tk.ID); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API never saw the planted task %s", tk.ID)
		}
	}
}

// TestRemoteRecordTraversal: task records whose paths lead out of the
// worker's roots (an upload named "../../victim", with or without the
// object store; an output beyond the root; a NUL byte) are refused with
// a task error, and the file outside the roots is neither deleted nor
// overwritten (a worker deleted it, or overwrote it with the object,
// before it checked the paths).
func TestRemoteRecordTraversal(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1", Files: true}}, newFake(false))
	f := newFake(false)
	w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
		InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	up, _ := filepath.Rel(e.svc.InputRoot(), victim)
	down, _ := filepath.Rel(e.svc.OutputRoot(), victim)
	e.input("a.mp4")
	obj := filepath.Join(t.TempDir(), "obj")
	os.WriteFile(obj, []byte("attacker's bytes"), 0o644)
	for i, tk := range []*Task{
		{InputRel: up, OutputRel: "o0.mp4", Upload: true},
		{InputRel: up, OutputRel: "o1.mp4", Upload: true, Files: true},
		{InputRel: "a.mp4", OutputRel: down + ".mp4"},
		{InputRel: "/" + up, OutputRel: "o3.mp4", Upload: true},
		{InputRel: "a.mp4\x00", OutputRel: "o4.mp4"},
		{InputRel: "x/../a.mp4", OutputRel: "o5.mp4"},
	} {
		tk.ID = fmt.Sprintf("evil-%d", i)
		if tk.Files {
			if err := jsOf(e.svc).PutUpload(uploadObject(tk), obj); err != nil {
				t.Fatal(err)
			}
		}
		plant(t, e.svc, tk)
		m := e.wait(tk.ID, Failed)
		if m["error_type"] != "InvalidRecord" || !strings.Contains(m["error"].(string), "not a clean relative path") {
			t.Errorf("%+v: %v", tk, m)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Errorf("the file outside the roots: %q, %v", b, err)
	}
	if _, err := os.Stat(victim + ".mp4"); err == nil {
		t.Error("a file was written outside the output root")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ran) != 0 {
		t.Errorf("the worker ran %v", f.ran)
	}
}

// hashedFake is a namedFake whose models have content hashes.
type hashedFake struct {
	namedFake
	hashes map[string]string
}

func (f hashedFake) ModelHash(name string) (string, error) { return f.hashes[name], nil }

// TestRemoteModelHash: a worker whose model has other weights than the
// API's under the same name refuses its tasks (the task fails saying so)
// and runs none; a worker with the same weights runs them.
func TestRemoteModelHash(t *testing.T) {
	api := hashedFake{namedFake{newFake(false), []string{"m"}}, map[string]string{"m": "aaaa"}}
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1"}}, api)
	worker := func(hash string) (*Service, *fakeRunner) {
		f := newFake(false)
		w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
			InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()},
			hashedFake{namedFake{f, []string{"m"}}, map[string]string{"m": hash}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w, f
	}
	e.input("a.mp4")
	ow, other := worker("bbbb")
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
	m := e.wait(id, Failed)
	if m["error_type"] != "InvalidRecord" || !strings.Contains(m["error"].(string), "content hash") {
		t.Errorf("a task for other weights: %v", m)
	}
	if len(other.ran) != 0 {
		t.Errorf("the worker with other weights ran %v", other.ran)
	}
	// A record that names no hash (or a forged one) is refused too.
	plant(t, e.svc, &Task{ID: "nohash", InputRel: "a.mp4", OutputRel: "n.mp4", ModelName: "m"})
	e.wait("nohash", Failed)
	ow.Close()
	_, same := worker("aaaa")
	id = e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "p.mp4"})
	e.wait(id, Completed)
	same.mu.Lock()
	defer same.mu.Unlock()
	if len(same.ran) != 1 {
		t.Errorf("the worker with the same weights ran %v", same.ran)
	}
}

// freezeProxy forwards TCP connections to addr; freeze stops forwarding
// without closing anything, as a worker or a network stopped with
// SIGSTOP would.
type freezeProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	thaw   *sync.Cond
	open   []net.Conn
}

func newFreezeProxy(t *testing.T, addr string) *freezeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln}
	p.thaw = sync.NewCond(&p.mu)
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.open = append(p.open, c, u)
			p.mu.Unlock()
			go p.pipe(u, c)
			go p.pipe(c, u)
		}
	}()
	return p
}

// pipe copies src to dst, holding what it read while frozen.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen {
			p.thaw.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.thaw.Broadcast()
	p.mu.Unlock()
}

// close thaws and closes every connection.
func (p *freezeProxy) close() {
	p.ln.Close()
	p.freeze(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
}

// leaseRunner runs until its context ends and says when that was.
type leaseRunner struct {
	started chan string
	stopped chan time.Time
}

func (r *leaseRunner) Run(ctx context.Context, t *Task, progress func(int, int)) error {
	r.started <- t.ID
	<-ctx.Done()
	r.stopped <- time.Now()
	return ctx.Err()
}

// TestRemoteFrozenWorker: a worker whose connection to NATS stops
// forwarding (frozen, not closed) stops its task within the lease's
// bound, 2/3 of --ack-wait after its last renewal, before the task goes
// to another worker at the ack wait (it ran on for as long as the
// connection looked open: renewals were sent without waiting for an
// answer, and pings came every 2 minutes).
func TestRemoteFrozenWorker(t *testing.T) {
	const ackWait = 2 * time.Second
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1"}}, newFake(false))
	u, _ := url.Parse(e.svc.NATSURL())
	proxy := newFreezeProxy(t, u.Host)
	tok := workerNATS(t, e.svc).Token
	r := &leaseRunner{started: make(chan string, 10), stopped: make(chan time.Time, 10)}
	wa, err := NewWorker(Config{Data: t.TempDir(), NATS: &NATS{URLs: "nats://" + proxy.ln.Addr().String(), Token: tok},
		AckWait: ackWait, InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()}, r)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	defer proxy.freeze(false) // first: wa closes over a live connection
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
	select {
	case <-r.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not take the task")
	}
	time.Sleep(ackWait / 2) // a renewal or two go through
	fb := newFake(false)
	wb, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: ackWait,
		InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()}, fb)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	frozen := time.Now()
	proxy.freeze(true)
	var stopped time.Time
	select {
	case stopped = <-r.stopped:
	case <-time.After(3 * ackWait):
		t.Fatalf("the frozen worker still ran its task %v after the freeze", 3*ackWait)
	}
	t.Logf("the frozen worker stopped its task %v after the freeze (ack wait %v)", stopped.Sub(frozen).Round(10*time.Millisecond), ackWait)
	if d := stopped.Sub(frozen); d > ackWait {
		t.Errorf("stopped %v after the freeze, beyond the ack wait %v", d, ackWait)
	}
	select {
	case <-fb.started:
		if time.Now().Before(stopped) {
			t.Error("the task ran on two workers at once")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not go to the other worker")
	}
	e.wait(id, Completed)
}

// TestRemoteGracefulStops: three workers that take a task and stop
// gracefully (SIGTERM) hand it back without using its attempts: a fourth
// runs it (it failed as "delivered 3 times" while its status said 2
// attempts), and its status counts 1 attempt.
func TestRemoteGracefulStops(t *testing.T) {
	e, _, _ := remote(t, 0, false, Config{MaxAttempts: 3})
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "o.mp4"})
	start := func(block bool) (*Service, *fakeRunner) {
		f := newFake(block)
		w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
			InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot(), MaxAttempts: 3}, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w, f
	}
	for i := range 3 {
		w, f := start(true)
		select {
		case <-f.started:
		case <-time.After(20 * time.Second):
			t.Fatalf("stop %d: no worker took the task", i)
		}
		w.Close()
	}
	start(false)
	if m := e.wait(id, Completed); m["attempts"] != 1.0 {
		t.Errorf("attempts %v after three graceful stops", m["attempts"])
	}
}

// TestNATSCredentials: an embedded server on loopback given no
// credential refuses clients without one, and makes a token for the local
// workers, which sign in with the worker role: they may read and write
// task records but not queue work, cancel tasks or delete the queue.
func TestNATSCredentials(t *testing.T) {
	dir := t.TempDir()
	a, err := openJetStream(dir, NATS{Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if nc, err := Connect(NATS{URLs: a.URL()}); err == nil {
		nc.Close()
		t.Fatal("a client without a credential was let in on loopback")
	}
	b, err := os.ReadFile(WorkerTokenFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(WorkerTokenFile(dir)); st.Mode().Perm()&0o077 != 0 {
		t.Errorf("the token file's mode %v", st.Mode())
	}
	w, err := openJetStream(t.TempDir(), NATS{URLs: a.URL(), Token: strings.TrimSpace(string(b))})
	if err != nil {
		t.Fatalf("a worker with the token: %v", err)
	}
	defer w.Close()
	if err := w.Put(&Task{ID: "t1", Status: Pending}); err != nil {
		t.Errorf("a worker writes a record: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := w.js.Publish(ctx, workSubject(""), []byte("t1")); err == nil {
		t.Error("a worker queued work")
	}
	if err := w.nc.Publish(cancelSubject+"t1", nil); err == nil {
		w.nc.Flush()
		if !errors.Is(w.nc.LastError(), nats.ErrPermissionViolation) {
			t.Errorf("a worker's cancel: %v", w.nc.LastError())
		}
	}
	if err := w.js.DeleteStream(ctx, workStream); err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("a worker deleted the work queue: %v", err)
	}
	// The same token after a restart: configured workers keep working.
	a.Close()
	a, err = openJetStream(dir, NATS{Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if b2, _ := os.ReadFile(WorkerTokenFile(dir)); string(b2) != string(b) {
		t.Error("the local workers' token changed at a restart")
	}
}
