package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/vsr-dev/vsr/serve"
)

// natsCluster is a 3-node NATS cluster with JetStream on loopback ports,
// its files under dir (so that it can stop and start again).
type natsCluster struct {
	t       *testing.T
	dir     string
	ports   [3]int // clients
	routes  [3]int // cluster
	servers [3]*server.Server
}

// freePorts returns n free TCP ports on loopback.
func freePorts(t *testing.T, n int) []int {
	var ls []net.Listener
	var ps []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ps
}

func newNATSCluster(t *testing.T) *natsCluster {
	c := &natsCluster{t: t, dir: t.TempDir()}
	ps := freePorts(t, 6)
	copy(c.ports[:], ps[:3])
	copy(c.routes[:], ps[3:])
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(c.stopAll)
	return c
}

// start starts node i (again).
func (c *natsCluster) start(i int) {
	var routes []string
	for j, p := range c.routes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	s, err := server.NewServer(&server.Options{
		ServerName: fmt.Sprint("n", i), Host: "127.0.0.1", Port: c.ports[i],
		JetStream: true, StoreDir: filepath.Join(c.dir, fmt.Sprint("n", i)), NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "vsr-test", Host: "127.0.0.1", Port: c.routes[i]},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		c.t.Fatalf("NATS node %d did not start", i)
	}
	c.servers[i] = s
}

func (c *natsCluster) stop(i int) {
	if s := c.servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[i] = nil
	}
}

func (c *natsCluster) stopAll() {
	for i := range 3 {
		c.stop(i)
	}
}

func (c *natsCluster) urls() string {
	var us []string
	for _, p := range c.ports {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(us, ",")
}

// TestServeNATSCluster: vsr serve --workers 0 and two vsr worker
// processes on a 3-node NATS cluster with the tasks replicated 3 times:
// 12 tiny tasks and a longer one; the worker that runs the longer one is
// SIGKILLed and one NATS node stopped while the tasks run: every task
// completes exactly once with a valid output. Then everything stops with
// tasks still queued, starts again, and those tasks run.
func TestServeNATSCluster(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	data, in, out := workerRoots(t, dir)
	nc := newNATSCluster(t)
	api := func() (*exec.Cmd, api) {
		cmd, got := startLogged(t, bin, []string{`url=(http://\S+)`}, "serve", "--workers", "0", "--nats", nc.urls(),
			"--nats-replicas", "3", "--listen", "127.0.0.1:0", "--data", data, "--device", "cpu")
		return cmd, api{t, got[0]}
	}
	worker := func() *exec.Cmd {
		cmd, _ := startLogged(t, bin, []string{`(vsr worker taking tasks)`}, "worker", "--nats", nc.urls(), "--input-root", in,
			"--output-root", out, "--device", "cpu", "--preset", "ultrafast", "--ack-wait", "2s", "--max-attempts", "5")
		return cmd
	}
	srv, a := api()
	workers := []*exec.Cmd{worker(), worker()}
	// The work queue, its consumer and the task bucket are replicated 3
	// times, whatever the workers (started without --nats-replicas) ask.
	conn, err := nats.Connect(nc.urls())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	for _, name := range []string{"KV_vsr_tasks", "VSR_WORK"} {
		st, err := js.Stream(ctx, name)
		if err != nil || st.CachedInfo().Config.Replicas != 3 {
			t.Fatalf("stream %s: %v", name, err)
		}
		for ci := range st.ListConsumers(ctx).Info() {
			if ci.Config.Durable != "" && ci.Config.Replicas != 3 { // not the API's watch (ephemeral, remade on failure)
				t.Errorf("consumer %s has %d replicas", ci.Name, ci.Config.Replicas)
			}
		}
	}
	cancel()
	conn.Close()
	long := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "long.mkv"})
	var short []string
	for i := range 12 {
		short = append(short, a.submit(map[string]any{"video_path": "short.mp4", "sr_ratio": 2, "save_result_path": fmt.Sprintf("s%d.mp4", i)}))
	}
	m, pid := a.restoring(long)
	killed := false
	for i, w := range workers {
		if w.Process.Pid == pid {
			w.Process.Signal(syscall.SIGKILL)
			w.Wait()
			workers[i], killed = worker(), true
		}
	}
	if !killed {
		t.Fatalf("the long task runs on %q, not a worker of this test", m["worker"])
	}
	killedAt := time.Now()
	// Redelivered within the heartbeat window (--ack-wait 2s) once a
	// worker is free (the others run the short tasks one at a time).
	for {
		m = a.status(long)
		if m["attempts"] == 2.0 {
			t.Logf("the killed worker's task started again %v after the kill", time.Since(killedAt).Round(10*time.Millisecond))
			break
		}
		if time.Since(killedAt) > 10*time.Second {
			t.Fatalf("the killed worker's task was not redelivered within 10 s: %v", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	nc.stop(2) // one NATS node down while the tasks run
	m = a.wait(long, serve.Completed, 120*time.Second)
	// 3 when the node stopped led its consumer: the new leader may deliver
	// it once more, and the worker that ran it stops when its next write is
	// refused (the record names the revision it last saw).
	if a, _ := m["attempts"].(float64); a < 2 || a > 4 {
		t.Errorf("the killed worker's task: attempts %v, want 2 (3 or 4 after a consumer leader's change)", a)
	}
	t.Logf("the killed worker's task completed after %v attempts", m["attempts"])
	checkOutput(t, filepath.Join(out, "long.mkv"), 150, 128, 96)
	for i, id := range short {
		a.wait(id, serve.Completed, 60*time.Second)
		checkOutput(t, filepath.Join(out, fmt.Sprintf("s%d.mp4", i)), 5, 48, 32)
	}
	noTemporaries(t, out)
	nc.start(2)

	// Everything stops with tasks queued (no worker), and starts again.
	for _, w := range workers {
		w.Process.Signal(syscall.SIGTERM)
		w.Wait()
	}
	var queued []string
	for i := range 3 {
		queued = append(queued, a.submit(map[string]any{"video_path": "short.mp4", "save_result_path": fmt.Sprintf("q%d.mp4", i)}))
	}
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	nc.stopAll()
	for i := range 3 {
		nc.start(i)
	}
	_, a = api()
	if q := a.status(queued[0]); q["status"] != "pending" {
		t.Errorf("a queued task after the restart: %v", q)
	}
	worker()
	for i, id := range queued {
		a.wait(id, serve.Completed, 60*time.Second)
		checkOutput(t, filepath.Join(out, fmt.Sprintf("q%d.mp4", i)), 5, 48, 32)
	}
	if m := a.status(long); m["status"] != "completed" {
		t.Errorf("a finished task after the restart: %v", m)
	}
}

// BenchmarkServeWorkers measures the throughput of tiny restores (12 tasks
// of 64x48, 30 frames, x2, on the CPU): vsr serve alone (bbolt, its own
// worker), and vsr serve --workers 0 on its embedded NATS server with 1
// and 2 vsr worker processes on this machine:
//
//	go test ./cmd/vsr -run XXX -bench ServeWorkers -benchtime 1x
func BenchmarkServeWorkers(b *testing.B) {
	dir := b.TempDir()
	bin := buildVSR(b, dir)
	for _, workers := range []int{-1, 1, 2} {
		name := fmt.Sprintf("%d workers", workers)
		if workers < 0 {
			name = "serve alone"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				data, in, out := serveRoots(b.TempDir())
				sizedClip(b, filepath.Join(in, "clip.mp4"), 64, 48, 30)
				args := []string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--device", "cpu", "--preset", "ultrafast"}
				logged := []string{`url=(http://\S+)`}
				if workers >= 0 {
					args = append(args, "--workers", "0", "--nats-listen", "127.0.0.1:-1")
					logged = append(logged, `nats=(nats://\S+)`)
				}
				srv, got := startLogged(b, bin, logged, args...)
				var procs []*exec.Cmd
				for range max(workers, 0) {
					w, _ := startLogged(b, bin, []string{`(vsr worker taking tasks)`}, "worker", "--nats", got[1], "--nats-token-file", serve.WorkerTokenFile(data),
						"--input-root", in, "--output-root", out, "--device", "cpu", "--preset", "ultrafast")
					procs = append(procs, w)
				}
				a := api{b, got[0]}
				b.StartTimer()
				start := time.Now()
				var ids []string
				for i := range 12 {
					ids = append(ids, a.submit(map[string]any{"video_path": "clip.mp4", "save_result_path": fmt.Sprintf("o%d.mp4", i)}))
				}
				for _, id := range ids {
					a.wait(id, serve.Completed, 120*time.Second)
				}
				b.ReportMetric(12/time.Since(start).Seconds(), "tasks/s")
				b.StopTimer()
				for _, p := range append(procs, srv) {
					p.Process.Signal(syscall.SIGTERM)
					p.Wait()
				}
			}
		})
	}
}

// restoring waits until task id has restored a frame and returns its
// status and the process id of the worker running it (the id's last part).
func (a api) restoring(id string) (map[string]any, int) {
	for {
		m := a.wait(id, serve.Processing, 60*time.Second)
		if m["progress"].(map[string]any)["frames_done"].(float64) > 0 {
			name, _ := m["worker"].(string)
			pid, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
			return m, pid
		}
		time.Sleep(20 * time.Millisecond)
	}
}
