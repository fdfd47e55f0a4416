package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/serve"
)

// sizedClip writes a w x h test clip of n frames at path.
func sizedClip(t testing.TB, path string, w, h, n int) {
	t.Helper()
	ffmpeg(t, "-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=25", w, h),
		"-frames:v", strconv.Itoa(n), "-c:v", "libx264", "-pix_fmt", "yuv420p", path)
}

// api is a small client of a vsr serve.
type api struct {
	t    testing.TB
	base string
}

func (a api) call(method, path string, body any) (int, map[string]any) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, a.base+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func (a api) submit(body map[string]any) string {
	a.t.Helper()
	code, m := a.call("POST", "/v1/tasks/video/", body)
	if code != 200 {
		a.t.Fatalf("submit %v: %d %v", body, code, m)
	}
	return m["task_id"].(string)
}

func (a api) status(id string) map[string]any {
	a.t.Helper()
	code, m := a.call("GET", "/v1/tasks/"+id+"/status", nil)
	if code != 200 {
		a.t.Fatalf("status %s: %d %v", id, code, m)
	}
	return m
}

// wait polls until the task reaches want (failing on another final status)
// or until cond, when given, holds.
func (a api) wait(id string, want serve.Status, timeout time.Duration) map[string]any {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m := a.status(id)
		st := serve.Status(m["status"].(string))
		if st == want {
			return m
		}
		if st.Final() || time.Now().After(deadline) {
			a.t.Fatalf("task %s: %s, want %s: %v", id, st, want, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOutput probes a result: its frame count and size.
func checkOutput(t *testing.T, path string, frames, w, h int) {
	t.Helper()
	info := probe(t, path)
	if info.Frames != frames || info.Width != w || info.Height != h {
		t.Errorf("%s: %d frames %dx%d, want %d frames %dx%d", path, info.Frames, info.Width, info.Height, frames, w, h)
	}
}

// noTemporaries fails if a hidden temporary lies under dir.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".") && p != dir {
			t.Errorf("temporary left: %s", p)
		}
		return nil
	})
}

// inProcess starts the real runner (bundled model on the CPU) and the
// service on an httptest server.
func inProcess(t *testing.T, warmup bool) (api, *serve.Service, func()) {
	t.Helper()
	return serveWith(t, serveFlags{warmup: warmup, maxQueue: 100, base: cpuRestore})
}

// cpuRestore are the restore flags of the in-process test services.
var cpuRestore = restoreFlags{device: "cpu", dtype: "f16", codec: "libx264", crf: 18, preset: "ultrafast", pixFmt: "yuv420p"}

// serveWith starts a service with flags f in this process; the function it
// returns stops it.
func serveWith(t *testing.T, f serveFlags) (api, *serve.Service, func()) {
	t.Helper()
	run, err := newServeRunner(newServe(), f, false)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := serve.New(serve.Config{Data: t.TempDir(), Workers: run.Workers()}, run)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	stop := func() {
		srv.Close()
		svc.Close()
		run.Close()
	}
	return api{t, srv.URL}, svc, stop
}

// TestServeCancelReal cancels a real restore mid-way: no output is left,
// and the next task completes.
func TestServeCancelReal(t *testing.T) {
	needFFmpeg(t)
	a, svc, stop := inProcess(t, false)
	defer stop()
	sizedClip(t, filepath.Join(svc.InputRoot(), "long.mp4"), 64, 48, 120)
	sizedClip(t, filepath.Join(svc.InputRoot(), "short.mp4"), 24, 16, 4)
	long := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "long.mp4"})
	next := a.submit(map[string]any{"video_path": "short.mp4", "sr_ratio": 4})
	for {
		m := a.wait(long, serve.Processing, 30*time.Second)
		if m["progress"].(map[string]any)["frames_done"].(float64) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, m := a.call("DELETE", "/v1/tasks/"+long, nil)
	if code != 200 || m["stop_status"] != "success" || m["status"] != "cancelled" {
		t.Fatalf("cancel: %d %v", code, m)
	}
	m = a.status(long)
	if done := m["progress"].(map[string]any)["frames_done"].(float64); m["status"] != "cancelled" || done >= 120 {
		t.Errorf("cancelled task %v", m)
	}
	if _, err := os.Stat(filepath.Join(svc.OutputRoot(), "long.mp4")); err == nil {
		t.Errorf("a cancelled task left its output")
	}
	m = a.wait(next, serve.Completed, 30*time.Second)
	checkOutput(t, m["save_result_path"].(string), 4, 96, 64)
	noTemporaries(t, svc.OutputRoot())
	// A file that is no video is refused at submit, in one line.
	os.WriteFile(filepath.Join(svc.InputRoot(), "bad.mp4"), []byte("not a video"), 0o644)
	code, m = a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "bad.mp4"})
	if e, _ := m["error"].(string); code != 400 || !strings.Contains(e, `"bad.mp4" is not a video file`) || strings.Contains(e, "\n") {
		t.Errorf("submit of a file that is no video: %d %v", code, m)
	}
	after := a.submit(map[string]any{"video_path": "short.mp4", "size": []int{48, 72}})
	m = a.wait(after, serve.Completed, 30*time.Second)
	checkOutput(t, m["save_result_path"].(string), 4, 72, 48)
	// A size that is no multiple of the input is the x2 output resized;
	// an odd one fails the task with a message saying why.
	resized := a.submit(map[string]any{"video_path": "short.mp4", "size": []int{20, 30}})
	m = a.wait(resized, serve.Completed, 30*time.Second)
	checkOutput(t, m["save_result_path"].(string), 4, 30, 20)
	odd := a.submit(map[string]any{"video_path": "short.mp4", "size": []int{21, 31}})
	m = a.wait(odd, serve.Failed, 30*time.Second)
	if !strings.Contains(m["error"].(string), "even") {
		t.Errorf("size error %v", m["error"])
	}
	code, m = a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "short.mp4", "sr_ratio": 2.5})
	if code != 400 || !strings.Contains(m["error"].(string), "sr_ratio") {
		t.Errorf("sr_ratio 2.5: %d %v", code, m)
	}
	code, m = a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "short.mp4", "model": "nope"})
	if code != 400 || !strings.Contains(m["error"].(string), "model") {
		t.Errorf("unknown model: %d %v", code, m)
	}
	code, m = a.call("GET", "/v1/service/metadata", nil)
	if ms, _ := m["models"].([]any); code != 200 || m["device"] != "cpu" || len(ms) != 1 {
		t.Errorf("metadata: %d %v", code, m)
	}
}

// TestServeSoak runs 56 tasks from 8 concurrent clients with mixed sizes,
// lengths and ratios; every output must be right, and goroutines and heap
// must come back near their baseline.
func TestServeSoak(t *testing.T) {
	needFFmpeg(t)
	if testing.Short() {
		t.Skip("soak test")
	}
	a, svc, stop := inProcess(t, true)
	defer stop()
	type clip struct {
		name    string
		w, h, n int
	}
	var clips []clip
	for i, s := range [][3]int{{24, 16, 3}, {32, 24, 4}, {40, 24, 5}, {16, 16, 3}} {
		c := clip{fmt.Sprintf("c%d.mp4", i), s[0], s[1], s[2]}
		sizedClip(t, filepath.Join(svc.InputRoot(), c.name), c.w, c.h, c.n)
		clips = append(clips, c)
	}
	// Warm up every graph and the connection pool, then take the baseline.
	for r := 2; r <= 4; r++ {
		a.wait(a.submit(map[string]any{"video_path": clips[0].name, "sr_ratio": r}), serve.Completed, 30*time.Second)
	}
	http.DefaultClient.CloseIdleConnections()
	baseG, baseHeap := settle()
	t.Logf("baseline: %d goroutines, heap %.1f MiB", baseG, float64(baseHeap)/(1<<20))

	const clients, per = 8, 7
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				k := c*per + i
				cl := clips[k%len(clips)]
				r := 2 + k%3
				id := a.submit(map[string]any{"video_path": cl.name, "sr_ratio": r, "save_result_path": fmt.Sprintf("soak%02d.mkv", k), "preset": "ultrafast"})
				m := a.wait(id, serve.Completed, 120*time.Second)
				checkOutput(t, m["save_result_path"].(string), cl.n, cl.w*r, cl.h*r)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d tasks in %.1f s", clients*per, time.Since(start).Seconds())
	code, m := a.call("GET", "/v1/service/status", nil)
	if code != 200 || m["completed_tasks"] != float64(clients*per+3) || m["failed_tasks"] != 0.0 {
		t.Errorf("service status %v", m)
	}
	noTemporaries(t, svc.OutputRoot())
	http.DefaultClient.CloseIdleConnections()
	g, heap := settle()
	t.Logf("after: %d goroutines, heap %.1f MiB", g, float64(heap)/(1<<20))
	if g > baseG+4 {
		t.Errorf("goroutines: %d after the soak, %d before", g, baseG)
	}
	if heap > baseHeap+baseHeap/2+16<<20 {
		t.Errorf("heap: %.1f MiB after the soak, %.1f MiB before", float64(heap)/(1<<20), float64(baseHeap)/(1<<20))
	}
}

// settle waits for goroutines to wind down and returns their count and
// the live heap after a GC.
func settle() (int, uint64) {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			break
		}
		n = m
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return n, ms.HeapAlloc
}

// TestServeRestart kills a real vsr serve (SIGKILL) with one task running
// and others queued: no ffmpeg outlives it, and after a restart on the same
// --data every task completes with a valid output and no temporaries. The
// same with the tasks on NATS JetStream (an embedded server, killed with
// the process).
func TestServeRestart(t *testing.T) {
	needFFmpeg(t)
	root := t.TempDir()
	bin := buildVSR(t, root)
	for _, store := range [][]string{nil, {"--nats-listen", "127.0.0.1:-1"}} {
		t.Run(fmt.Sprint("store", store), func(t *testing.T) { serveRestart(t, bin, store) })
	}
}

func serveRestart(t *testing.T, bin string, store []string) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	in := filepath.Join(data, "input")
	os.MkdirAll(in, 0o755)
	sizedClip(t, filepath.Join(in, "long.mp4"), 64, 48, 90)
	sizedClip(t, filepath.Join(in, "short.mp4"), 24, 16, 5)

	srv := startServe(t, bin, data, store...)
	a := api{t, srv.url}
	done := a.submit(map[string]any{"video_path": "short.mp4", "sr_ratio": 3, "save_result_path": "done.mp4"})
	a.wait(done, serve.Completed, 60*time.Second)
	long := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "long.mkv", "segments": 2})
	var queued []string
	for i := range 3 {
		queued = append(queued, a.submit(map[string]any{"video_path": "short.mp4", "sr_ratio": 2 + i, "save_result_path": fmt.Sprintf("q%d.mp4", i)}))
	}
	for {
		m := a.wait(long, serve.Processing, 60*time.Second)
		if m["progress"].(map[string]any)["frames_done"].(float64) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	kids := children(srv.cmd.Process.Pid)
	if len(kids) == 0 {
		t.Fatalf("no ffmpeg children while a task runs")
	}
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := alive(kids)
		left = append(left, mentioning(dir)...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes outlived the killed server: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}

	srv = startServe(t, bin, data, store...)
	defer srv.stop()
	a = api{t, srv.url}
	m := a.status(done)
	if m["status"] != "completed" {
		t.Errorf("finished task after restart: %v", m)
	}
	m = a.wait(long, serve.Completed, 60*time.Second)
	if m["attempts"] != 2.0 {
		t.Errorf("interrupted task attempts %v", m["attempts"])
	}
	checkOutput(t, filepath.Join(data, "output", "long.mkv"), 90, 128, 96)
	for i, id := range queued {
		a.wait(id, serve.Completed, 60*time.Second)
		checkOutput(t, filepath.Join(data, "output", fmt.Sprintf("q%d.mp4", i)), 5, 24*(2+i), 16*(2+i))
	}
	noTemporaries(t, filepath.Join(data, "output"))
	// Graceful stop.
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.cmd.Wait(); err != nil {
		t.Errorf("vsr serve after SIGTERM: %v", err)
	}
}

type served struct {
	cmd  *exec.Cmd
	url  string
	stop func()
}

// startServe starts `vsr serve` on a free port (with more flags) and
// waits for it to listen.
func startServe(t *testing.T, bin, data string, more ...string) *served {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--device", "cpu", "--preset", "ultrafast"}, more...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{cmd: cmd, stop: func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}}
	urlc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`url=(http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case s.url = <-urlc:
	case <-time.After(30 * time.Second):
		s.stop()
		t.Fatal("vsr serve did not start listening")
	}
	return s
}

// procStat returns /proc/PID/stat of process pid and its fields after the
// command name (state, ppid, ...), or nil when the process is gone.
func procStat(pid int) (stat []byte, fields []string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, nil
	}
	// pid (comm) state ppid ...
	return b, strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

// children returns the pids whose parent is pid.
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, f := procStat(p); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// alive returns the pids among ps that still exist and are not zombies.
func alive(ps []int) []string {
	var out []string
	for _, p := range ps {
		if b, f := procStat(p); len(f) > 0 && f[0] != "Z" {
			out = append(out, fmt.Sprintf("%d %s", p, b))
		}
	}
	return out
}

// mentioning returns the processes (other than this one) whose command
// line mentions s.
func mentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) && len(alive([]int{p})) > 0 {
			out = append(out, fmt.Sprintf("%d %s", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// TestServeSwiftVR serves a tiny synthetic SwiftVR checkpoint next to the
// bundled model: an autoencoder-only task ("dit": "off") completes with the
// right frame count and size, and so does a task with the DiT (the
// default), with the compact model served beside them; a server started
// with --dit off fails tasks that ask for the DiT and goes on. Both servers
// warm the SwiftVR model up at the tasks' output size first.
func TestServeSwiftVR(t *testing.T) {
	needFFmpeg(t)
	ck := filepath.Join(t.TempDir(), "ck")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	start := func(dit string) (api, *serve.Service) {
		f := serveFlags{maxQueue: 100, models: []string{ck, "realesr-animevideov3"}, warmupSize: "48x32", base: cpuRestore,
			params: model.Values{"dit": dit}}
		a, svc, stop := serveWith(t, f)
		t.Cleanup(stop)
		sizedClip(t, filepath.Join(svc.InputRoot(), "clip.mp4"), 24, 16, 30)
		return a, svc
	}
	bad := serveFlags{models: []string{ck}, warmupSize: "big", base: restoreFlags{device: "cpu", dtype: "f16", pixFmt: "yuv420p"}}
	if _, err := newServeRunner(newServe(), bad, false); err == nil || !strings.Contains(err.Error(), "--warmup-size") {
		t.Errorf("--warmup-size big: %v", err)
	}
	a, svc := start("on")
	off := a.submit(map[string]any{"video_path": "clip.mp4", "dit": "off", "clip_len": 8})
	on := a.submit(map[string]any{"video_path": "clip.mp4"})
	compact := a.submit(map[string]any{"video_path": "clip.mp4", "model": "realesr-animevideov3", "sr_ratio": 2})
	m := a.wait(off, serve.Completed, 60*time.Second)
	checkOutput(t, m["save_result_path"].(string), 30, 48, 32)
	m = a.wait(on, serve.Completed, 60*time.Second)
	checkOutput(t, m["save_result_path"].(string), 30, 48, 32)
	m = a.wait(compact, serve.Completed, 60*time.Second)
	checkOutput(t, m["save_result_path"].(string), 30, 48, 32)
	if code, m := a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "clip.mp4", "dit": "maybe"}); code != 400 || !strings.Contains(m["error"].(string), "dit") {
		t.Errorf("dit maybe: %d %v", code, m)
	}
	for g, want := range map[string]string{"off": "set when the model loads", "maybe": "want on or off"} {
		if code, m := a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "clip.mp4", "params": map[string]any{"graphs": g}}); code != 400 || !strings.Contains(m["error"].(string), want) {
			t.Errorf("graphs %s: %d %v", g, code, m)
		}
	}
	if code, m := a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "clip.mp4", "model": "realesr-animevideov3", "dit": "off"}); code != 400 || !strings.Contains(m["error"].(string), "swiftvr") {
		t.Errorf("dit on the compact model: %d %v", code, m)
	}
	noTemporaries(t, svc.OutputRoot())

	// A server started with --dit off has not loaded the DiT: a task asking
	// for it fails with a message saying so, and the next task runs.
	a, svc = start("off")
	on = a.submit(map[string]any{"video_path": "clip.mp4", "dit": "on"})
	off = a.submit(map[string]any{"video_path": "clip.mp4", "clip_len": 8})
	m = a.wait(on, serve.Failed, 60*time.Second)
	if !strings.Contains(m["error"].(string), "not loaded") {
		t.Errorf("dit on, not loaded: %v", m["error"])
	}
	m = a.wait(off, serve.Completed, 60*time.Second)
	checkOutput(t, m["save_result_path"].(string), 30, 48, 32)
	noTemporaries(t, svc.OutputRoot())
}

// TestServeSwiftVRRanks serves a tiny SwiftVR checkpoint on cpu,cpu: a
// task runs on both devices at once (one group, chunk and sequence
// parallelism) and gives the frames of one device; cancelling a task stops both ranks, leaves no output, and the
// next task completes.
func TestServeSwiftVRRanks(t *testing.T) {
	needFFmpeg(t)
	ck := filepath.Join(t.TempDir(), "ck")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	f := serveFlags{maxQueue: 100, models: []string{ck}, base: cpuRestore, warmupSize: "48x32"} // warms both ranks
	f.base.device = "cpu,cpu"
	a, svc, stop := serveWith(t, f)
	defer stop()
	sizedClip(t, filepath.Join(svc.InputRoot(), "clip.mp4"), 24, 16, 30)
	sizedClip(t, filepath.Join(svc.InputRoot(), "long.mp4"), 64, 48, 400)
	task := map[string]any{"video_path": "clip.mp4", "clip_len": 8, "codec": "ffv1", "pix_fmt": "gbrp", "save_result_path": "two.mkv"}
	id := a.submit(task)
	m := a.wait(id, serve.Completed, 60*time.Second)
	if m["devices"] != "cpu,cpu" {
		t.Errorf("the task ran on %v, want cpu,cpu", m["devices"])
	}
	two := decodeAll(t, probe(t, m["save_result_path"].(string)))
	one := filepath.Join(t.TempDir(), "one.mkv")
	in := filepath.Join(svc.InputRoot(), "clip.mp4")
	if _, err := vsr(t, "restore", in, "-o", one, "--model", ck, "--clip-len", "8", "--sr-ratio", "2", "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(decodeAll(t, probe(t, one)), two) {
		t.Error("two ranks through the service give other frames than one device")
	}
	// Both ranks on each chunk (sequence parallelism), asked by the task.
	task["params"], task["save_result_path"] = map[string]any{"parallel": "sequence"}, "seq.mkv"
	m = a.wait(a.submit(task), serve.Completed, 60*time.Second)
	if !bytes.Equal(decodeAll(t, probe(t, m["save_result_path"].(string))), two) {
		t.Error("sequence parallelism through the service gives other frames than one device")
	}
	long := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "long.mp4", "dit": "off"})
	next := a.submit(map[string]any{"video_path": "clip.mp4", "clip_len": 8})
	for {
		m := a.wait(long, serve.Processing, 60*time.Second)
		if m["progress"].(map[string]any)["frames_done"].(float64) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, m := a.call("DELETE", "/v1/tasks/"+long, nil); code != 200 || m["status"] != "cancelled" {
		t.Fatalf("cancel: %d %v", code, m)
	}
	if _, err := os.Stat(filepath.Join(svc.OutputRoot(), "long.mp4")); err == nil {
		t.Error("a cancelled task left its output")
	}
	m = a.wait(next, serve.Completed, 60*time.Second)
	checkOutput(t, m["save_result_path"].(string), 30, 48, 32)
	noTemporaries(t, svc.OutputRoot())
}

// TestServeRealPaths runs real restores through the service, which hands
// the pipeline its input and output directory as descriptors
// (/proc/self/fd): a segmented encode with audio is joined there, an
// output extension no muxer knows is refused at submit, and a file that
// appears at save_result_path after submit is not replaced.
func TestServeRealPaths(t *testing.T) {
	a, svc, stop := serveWith(t, serveFlags{maxQueue: 100, base: cpuRestore})
	defer stop()
	in := filepath.Join(svc.InputRoot(), "tone.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i", "sine=frequency=440:duration=1",
		"-frames:v", "10", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", in)
	id := a.submit(map[string]any{"video_path": "tone.mp4", "sr_ratio": 2, "segments": 2, "save_result_path": "seg.mkv"})
	m := a.wait(id, serve.Completed, 2*time.Minute)
	out := filepath.Join(svc.OutputRoot(), "seg.mkv")
	if m["save_result_path"] != out {
		t.Errorf("save_result_path %v", m["save_result_path"])
	}
	checkOutput(t, out, 10, 64, 48)
	if !probe(t, out).HasAudio {
		t.Errorf("%s lost its audio", out)
	}
	if c, ok := m["carried"].([]any); !ok || len(c) != 2 || c[0] != "colour chroma left" || c[1] != "audio #1 aac (default)" {
		t.Errorf("the task status says the output carries %v", m["carried"])
	}
	noTemporaries(t, svc.OutputRoot())

	code, r := a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "tone.mp4", "save_result_path": "x.notacontainer"})
	if msg, _ := r["error"].(string); code != 400 || !strings.Contains(msg, ".notacontainer") {
		t.Errorf("unknown extension: %d %v", code, r)
	}

	id = a.submit(map[string]any{"video_path": "tone.mp4", "sr_ratio": 2, "max_frames": 40, "save_result_path": "late.mp4"})
	late := filepath.Join(svc.OutputRoot(), "late.mp4")
	os.WriteFile(late, []byte("someone else's"), 0o644)
	m = a.wait(id, serve.Failed, 2*time.Minute)
	t.Logf("error: %v", m["error"])
	if m["error_type"] != "OutputExists" || strings.Contains(m["error"].(string), "/proc/") {
		t.Errorf("output created after submit: %v", m)
	}
	if got, _ := os.ReadFile(late); string(got) != "someone else's" {
		t.Errorf("replaced: %q", got)
	}
	noTemporaries(t, svc.OutputRoot())
}

// TestServeCDAVSR: the service restores with a CDA-VSR checkpoint, takes
// its request parameters, and refuses its host paths.
func TestServeCDAVSR(t *testing.T) {
	needFFmpeg(t)
	ck := filepath.Join(t.TempDir(), "cda.safetensors")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "cdavsr", "--scale", "2", "-o", ck); err != nil {
		t.Fatal(err)
	}
	a, svc, stop := serveWith(t, serveFlags{maxQueue: 100, models: []string{ck}, base: cpuRestore})
	defer stop()
	sizedClip(t, filepath.Join(svc.InputRoot(), "clip.mp4"), 24, 16, 6)
	id := a.submit(map[string]any{"video_path": "clip.mp4", "params": map[string]any{"reset_every": 3}})
	m := a.wait(id, serve.Completed, 60*time.Second)
	checkOutput(t, m["save_result_path"].(string), 6, 48, 32)
	if code, m := a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "clip.mp4", "params": map[string]any{"dump_side_data": "/tmp"}}); code != 400 || !strings.Contains(m["error"].(string), "path on the server") {
		t.Errorf("dump_side_data: %d %v", code, m)
	}
	noTemporaries(t, svc.OutputRoot())
}

// TestNATSFlags: the NATS flags' refusals, each one line.
func TestNATSFlags(t *testing.T) {
	dir := t.TempDir()
	spaced := filepath.Join(dir, "spaced")
	os.WriteFile(spaced, []byte("two words\n"), 0o600)
	good := filepath.Join(dir, "token")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	for _, c := range []struct {
		f    serveFlags
		want string
	}{
		{serveFlags{natsTokenFile: good}, "--nats-tls-* and --nats-files need --nats-listen or --nats"},
		{serveFlags{natsFiles: true}, "--nats-tls-* and --nats-files need --nats-listen or --nats"},
		{serveFlags{natsTLSCA: good}, "--nats-tls-* and --nats-files need --nats-listen or --nats"},
		{serveFlags{natsListen: "127.0.0.1:-1", natsTokenFile: spaced}, "want one token on one line"},
		{serveFlags{natsListen: "127.0.0.1:-1", natsTokenFile: dir}, "is not a regular file"},
		{serveFlags{natsListen: "127.0.0.1:-1", natsTokenFile: filepath.Join(dir, "none")}, "no such file"},
	} {
		if _, err := natsConfig(c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
	c, err := natsConfig(serveFlags{natsListen: "0.0.0.0:4222", natsTokenFile: good, natsReplicas: 1})
	if err != nil || c.Token != "s3cret" || c.Listen != "0.0.0.0:4222" {
		t.Errorf("%+v, %v", c, err)
	}
	// A token per worker on the server; a client gives one.
	several := filepath.Join(dir, "several")
	os.WriteFile(several, []byte("# worker tokens\na1\n\nb2\n"), 0o600)
	if c, err := natsConfig(serveFlags{natsListen: "0.0.0.0:4222", natsTokenFile: several}); err != nil || c.Token != "a1" || !slices.Equal(c.WorkerTokens, []string{"b2"}) {
		t.Errorf("worker tokens: %+v, %v", c, err)
	}
	if _, err := natsConfig(serveFlags{natsURLs: "nats://x:4222", natsTokenFile: several}); err == nil || !strings.Contains(err.Error(), "want one token") {
		t.Errorf("a client with several tokens: %v", err)
	}
	for _, c := range [][]string{
		{"give it a credential with --nats-token-file", "serve", "--data", dir, "--device", "cpu", "--nats-listen", "0.0.0.0:-1"},
		{"NATS at nats://127.0.0.1:1:", "worker", "--nats", "nats://127.0.0.1:1", "--input-root", dir, "--output-root", dir, "--device", "cpu"},
		{"vsr worker needs --nats", "worker", "--input-root", dir},
		{"needs both --nats-tls-cert and --nats-tls-key", "serve", "--data", dir, "--device", "cpu", "--nats-listen", "127.0.0.1:-1", "--nats-tls-cert", good},
		{"no such file", "worker", "--nats", "tls://127.0.0.1:1", "--nats-tls-ca", filepath.Join(dir, "none"), "--input-root", dir, "--output-root", dir, "--device", "cpu"},
		{"--workers 0 serves the API alone", "serve", "--data", dir, "--device", "cpu", "--workers", "0"},
		{"--token and --token-file: give one", "serve", "--data", dir, "--device", "cpu", "--token", "x", "--token-file", good},
		{"want one token on one line", "serve", "--data", dir, "--device", "cpu", "--token-file", spaced},
	} {
		_, stderr, err := vsrOutputs(c[1:]...)
		if err == nil || !strings.Contains(fmt.Sprint(err, stderr), c[0]) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: %v, want one line with %q:\n%s", c[1:], err, c[0], stderr)
		}
	}
}

// startLogged starts bin with args and returns it with the first match
// of each pattern's group in its log (stderr).
func startLogged(t testing.TB, bin string, patterns []string, args ...string) (*exec.Cmd, []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	found := make(chan []string, 1)
	var mu sync.Mutex
	var lines []string // the log so far, for a failure's message
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("log of %v:\n%s", args[:min(3, len(args))], strings.Join(lines, "\n"))
			mu.Unlock()
		}
	})
	go func() {
		got := make([]string, len(patterns))
		left := len(patterns)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			for i, p := range patterns {
				if m := regexp.MustCompile(p).FindStringSubmatch(sc.Text()); m != nil && got[i] == "" {
					got[i] = m[1]
					if left--; left == 0 {
						found <- got
					}
				}
			}
		}
	}()
	select {
	case v := <-found:
		return cmd, v
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s %v did not log %v:\n%s", bin, args, patterns, strings.Join(lines, "\n"))
		return nil, nil
	}
}

// TestServeWorkers: vsr serve --workers 0 with an embedded NATS server and
// vsr worker processes: tiny tasks each complete once; a worker SIGKILLed
// while it runs a task has it taken by another within the ack wait, which
// completes it (two attempts, a valid output, no temporaries).
func TestServeWorkers(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	data, in, out := workerRoots(t, dir)
	_, got := startLogged(t, bin, []string{`url=(http://\S+)`, `nats=(nats://\S+)`}, "serve", "--workers", "0",
		"--nats-listen", "127.0.0.1:-1", "--listen", "127.0.0.1:0", "--data", data, "--device", "cpu")
	worker := func() *exec.Cmd {
		cmd, _ := startLogged(t, bin, []string{`(vsr worker taking tasks)`}, "worker", "--nats", got[1], "--input-root", in, "--output-root", out,
			"--nats-token-file", serve.WorkerTokenFile(data), "--device", "cpu", "--preset", "ultrafast", "--ack-wait", "1s")
		return cmd
	}
	first := worker()
	a := api{t, got[0]}
	if code, m := a.call("POST", "/v1/streams", map[string]any{"input": "udp://127.0.0.1:9", "output": "udp://127.0.0.1:10"}); code != 503 {
		t.Errorf("a live session on the API alone: %d %v, want 503", code, m)
	}
	long := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "long.mkv"})
	for {
		m := a.wait(long, serve.Processing, 60*time.Second)
		if m["progress"].(map[string]any)["frames_done"].(float64) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := worker()
	defer second.Process.Signal(syscall.SIGTERM)
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	killed := time.Now()
	var short []string
	for i := range 4 {
		short = append(short, a.submit(map[string]any{"video_path": "short.mp4", "sr_ratio": 2 + i%3, "save_result_path": fmt.Sprintf("s%d.mp4", i)}))
	}
	m := a.wait(long, serve.Completed, 120*time.Second)
	t.Logf("the killed worker's task completed %v after the kill, attempts %v", time.Since(killed).Round(10*time.Millisecond), m["attempts"])
	if m["attempts"] != 2.0 {
		t.Errorf("attempts %v, want 2", m["attempts"])
	}
	checkOutput(t, filepath.Join(out, "long.mkv"), 150, 128, 96)
	for i, id := range short {
		a.wait(id, serve.Completed, 60*time.Second)
		checkOutput(t, filepath.Join(out, fmt.Sprintf("s%d.mp4", i)), 5, 24*(2+i%3), 16*(2+i%3))
	}
	// Cancelling a task running on the remote worker: the worker's CPU
	// use (with its ffmpeg children) drops within 2 s, and no output
	// remains.
	again := a.submit(map[string]any{"video_path": "long.mp4", "save_result_path": "again.mkv"})
	for {
		m := a.wait(again, serve.Processing, 60*time.Second)
		if m["progress"].(map[string]any)["frames_done"].(float64) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if code, m := a.call("DELETE", "/v1/tasks/"+again, nil); code != 200 || m["status"] != "cancelled" {
		t.Fatalf("cancel on a remote worker: %d %v", code, m)
	}
	for {
		ticks := cpuTicks(second.Process.Pid)
		time.Sleep(500 * time.Millisecond)
		if d := cpuTicks(second.Process.Pid) - ticks; d <= 10 { // at most 0.1 s of CPU in 0.5 s
			t.Logf("the worker's CPU use dropped %v after the cancel", time.Since(start).Round(10*time.Millisecond))
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("the worker still uses the CPU 2 s after the cancel")
		}
	}
	if _, err := os.Stat(filepath.Join(out, "again.mkv")); err == nil {
		t.Error("a cancelled task left its output")
	}
	noTemporaries(t, out)
}

// cpuTicks is the CPU time (user + system, in clock ticks) of process pid
// and its children now alive.
func cpuTicks(pid int) int {
	n := 0
	for _, p := range append(children(pid), pid) {
		if _, f := procStat(p); len(f) > 12 {
			u, _ := strconv.Atoi(f[11])
			s, _ := strconv.Atoi(f[12])
			n += u + s
		}
	}
	return n
}

// TestServeHeadersOnly: the API alone (--workers 0) opens a SwiftVR
// checkpoint without its weights: it names the model and checks requests
// against it, and runs nothing; --warmup-size is refused there.
func TestServeHeadersOnly(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	f := serveFlags{maxQueue: 10, base: cpuRestore, models: []string{ck}}
	f.base.dtype = "auto"
	run, err := newServeRunner(newServe(), f, true)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if names := run.ModelNames(); len(names) != 1 || names[0] != "swiftvr:ck" {
		t.Errorf("models %v", names)
	}
	ctx := context.Background()
	if err := run.Validate(ctx, &serve.Request{VideoPath: "a.mp4", SaveResultPath: "o.mp4", Params: map[string]any{"clip_len": 24.0}}); err != nil {
		t.Errorf("a good request: %v", err)
	}
	if err := run.Validate(ctx, &serve.Request{VideoPath: "a.mp4", SaveResultPath: "o.mp4", Params: map[string]any{"temporal_grow": "sideways"}}); err == nil || !strings.Contains(err.Error(), "temporal_grow") {
		t.Errorf("a bad parameter: %v", err)
	}
	l := run.Models()[0]
	if _, err := l.Model.NewSession(ctx, model.Video{Width: 64, Height: 48, Frames: 5}, model.Params{}); err == nil || !strings.Contains(err.Error(), "opened without its weights") {
		t.Errorf("a session of a model without weights: %v", err)
	}
	// The same flags with workers load the weights.
	full, err := newServeRunner(newServe(), f, false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := full.Models()[0].Model.NewSession(ctx, model.Video{Width: 64, Height: 48, Frames: 5}, model.Params{})
	if err != nil {
		t.Errorf("a session of the loaded model: %v", err)
	} else {
		s.Close()
	}
	full.Close()
	_, stderr, err := vsrOutputs("serve", "--data", dir, "--device", "cpu", "--workers", "0", "--nats-listen", "127.0.0.1:-1", "--model", ck, "--warmup-size", "64x48")
	if err == nil || !strings.Contains(fmt.Sprint(err, stderr), "--warmup-size with --workers 0") {
		t.Errorf("--warmup-size on the API alone: %v", err)
	}
}

// TestServeTokenHidden: vsr serve --help does not print $VSR_TOKEN as the
// --token flag's default (it did), and the flags say how to keep tokens off
// command lines.
func TestServeTokenHidden(t *testing.T) {
	t.Setenv("VSR_TOKEN", "s3cret-from-env")
	out, _, err := vsrOutputs("serve", "--help")
	if err != nil || strings.Contains(out, "s3cret-from-env") || !strings.Contains(out, "--token-file") {
		t.Errorf("vsr serve --help: %v\n%s", err, out)
	}
}
