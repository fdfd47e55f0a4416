package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file each reproduce one defect found by testing the
// service as a hostile or careless client would. Races are made
// deterministic by holding the worker with the blocking fake runner.

// holdWorker submits a task that keeps the worker busy until released.
func holdWorker(e *env, f *fakeRunner) string {
	e.input("hold.mp4")
	id := e.submit(map[string]any{"video_path": "hold.mp4"})
	<-f.started
	return id
}

// TestOutputSwappedAfterSubmit: a queued task's output directory replaced
// by a link out of the output root must not lead the result out.
func TestOutputSwappedAfterSubmit(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{}, f)
	hold := holdWorker(e, f)
	e.input("in.mp4")
	sub := filepath.Join(e.svc.OutputRoot(), "sub2")
	os.Mkdir(sub, 0o755)
	id := e.submit(map[string]any{"video_path": "in.mp4", "save_result_path": "sub2/x.mp4"})
	outside := t.TempDir()
	os.Remove(sub)
	if err := os.Symlink(outside, sub); err != nil {
		t.Fatal(err)
	}
	f.release <- struct{}{}
	e.wait(hold, Completed)
	m := e.wait(id, Failed)
	if m["error_type"] != "PathError" || !strings.Contains(m["error"].(string), "output root") {
		t.Errorf("status %v", m)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("%d files written outside the output root", len(ents))
	}
}

// TestInputSwappedAfterSubmit: a queued task's input replaced by a link to
// a file outside the input root must not be read; a name swapped while the
// task runs does not change what it reads (the file opened and verified).
func TestInputSwappedAfterSubmit(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{}, f)
	hold := holdWorker(e, f)
	in := e.input("sub/in.mp4")
	id := e.submit(map[string]any{"video_path": "sub/in.mp4"})
	secret := filepath.Join(t.TempDir(), "secret.mp4")
	os.WriteFile(secret, []byte("secret"), 0o644)
	os.Remove(in)
	if err := os.Symlink(secret, in); err != nil {
		t.Fatal(err)
	}
	f.release <- struct{}{}
	e.wait(hold, Completed)
	m := e.wait(id, Failed)
	if m["error_type"] != "PathError" || !strings.Contains(m["error"].(string), "input root") {
		t.Errorf("status %v", m)
	}
	if code, r, _ := e.do("GET", "/v1/tasks/"+id+"/result", nil); code == 200 {
		t.Errorf("result served: %v", r)
	}

	if runtime.GOOS != "linux" {
		return
	}
	// Swapped while running: the runner still reads the file it was given.
	in2 := e.input("in2.mp4")
	id = e.submit(map[string]any{"video_path": "in2.mp4"})
	<-f.started
	os.Remove(in2)
	os.Symlink(secret, in2)
	f.release <- struct{}{}
	e.wait(id, Completed)
	_, r, _ := e.do("GET", "/v1/tasks/"+id+"/result", nil)
	if r["_body"] != "video of "+id+" from video" {
		t.Errorf("result %q: the runner read the swapped name", r["_body"])
	}
}

// TestTargetShape: LightX2V's target_shape is accepted as size.
func TestTargetShape(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "target_shape": []int{720, 1280}})
	m := e.wait(id, Completed)
	if req := m["request"].(map[string]any); fmt.Sprint(req["size"]) != "[720 1280]" || req["target_shape"] != nil {
		t.Errorf("request %v", req)
	}
	e.submit(map[string]any{"video_path": "a.mp4", "target_shape": []int{}, "save_result_path": "b.mp4"}) // LightX2V's default
	e.submit(map[string]any{"video_path": "a.mp4", "target_shape": []int{720, 1280}, "size": []int{720, 1280}, "save_result_path": "c.mp4"})
	code, r, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "target_shape": []int{720, 1280}, "size": []int{360, 640}})
	wantError(t, "target_shape and size", code, r, 400, "target_shape")
	code, r, _ = e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "target_shape": []int{720}})
	wantError(t, "target_shape of one value", code, r, 400, "target_shape")
}

// TestOutputConflicts: two tasks may not target one file; an existing file
// is replaced only when the request says so, or by the task's own rerun.
func TestOutputConflicts(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{}, f)
	e.input("a.mp4")
	a := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "same.mp4"})
	<-f.started
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": "same.mp4"})
	wantError(t, "same output as a running task", code, m, 409, a)
	f.release <- struct{}{}
	e.wait(a, Completed)

	// An existing file: refused, unless overwrite is set.
	code, m, _ = e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": "same.mp4"})
	wantError(t, "existing output", code, m, 409, "overwrite")
	b := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "same.mp4", "overwrite": true})
	<-f.started
	f.release <- struct{}{}
	e.wait(b, Completed)
	if got, _ := os.ReadFile(filepath.Join(e.svc.OutputRoot(), "same.mp4")); string(got) != "video of "+b+" from video" {
		t.Errorf("overwritten output holds %q", got)
	}

	// A file that appears while the task waits is not replaced.
	hold := holdWorker(e, f)
	c := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "late.mp4"})
	late := filepath.Join(e.svc.OutputRoot(), "late.mp4")
	os.WriteFile(late, []byte("someone else's"), 0o644)
	f.release <- struct{}{}
	e.wait(hold, Completed)
	<-f.started
	f.release <- struct{}{}
	e.wait(c, Failed)
	if got, _ := os.ReadFile(late); string(got) != "someone else's" {
		t.Errorf("a file created after submit was replaced: %q", got)
	}
	if got := names(e.svc.OutputRoot()); strings.Contains(got, ".vsr-") {
		t.Errorf("output root holds temporaries: %s", got)
	}
}

// TestOwnOutputOnRerun: a task interrupted by a restart replaces the
// output its interrupted run put in place (its identity recorded), and
// never a file someone else put there.
func TestOwnOutputOnRerun(t *testing.T) {
	for _, own := range []bool{true, false} {
		data := t.TempDir()
		f := newFake(true)
		e := newEnv(t, Config{Data: data}, f)
		e.input("a.mp4")
		id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "own.mp4"})
		<-f.started
		out := filepath.Join(e.svc.OutputRoot(), "own.mp4")
		os.WriteFile(out, []byte("first run"), 0o644)
		e.srv.Close()
		e.svc.Close()
		if own { // the interrupted run got as far as renaming its result in
			st, err := OpenBoltStore(data)
			if err != nil {
				t.Fatal(err)
			}
			ts, _ := st.Load()
			fi, _ := os.Stat(out)
			fid, _ := identity(fi)
			ts[0].Wrote = []FileID{fid}
			st.Put(ts[0])
			st.Close()
		}
		e2 := newEnv(t, Config{Data: data}, newFake(false))
		got := ""
		if own {
			e2.wait(id, Completed)
			got = "video of " + id + " from video"
		} else {
			m := e2.wait(id, Failed)
			if m["error_type"] != "OutputExists" || !strings.Contains(m["error"].(string), "did not write") {
				t.Errorf("a rerun over someone else's file: %v", m)
			}
			got = "first run"
		}
		if b, _ := os.ReadFile(out); string(b) != got {
			t.Errorf("own %v: output holds %q, want %q", own, b, got)
		}
		if n := names(e2.svc.OutputRoot()); n != "own.mp4" {
			t.Errorf("own %v: output root holds %s", own, n)
		}
	}
}

// TestDamagedStore: a damaged database is refused with one line naming the
// file, never a panic, and an empty file is not reinitialised.
func TestDamagedStore(t *testing.T) {
	for _, damage := range []string{"half", "pages", "header", "empty"} {
		t.Run(damage, func(t *testing.T) {
			data := t.TempDir()
			st, err := openStore(data)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				st.Put(&Task{ID: fmt.Sprintf("task-%d", i), Error: strings.Repeat("x", 300)})
			}
			st.Close()
			p := filepath.Join(data, "tasks.db")
			fi, _ := os.Stat(p)
			junk := func(off int64, n int) {
				f, _ := os.OpenFile(p, os.O_RDWR, 0)
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(i * 7)
				}
				f.WriteAt(b, off)
				f.Close()
			}
			switch damage {
			case "half":
				os.Truncate(p, fi.Size()/2)
			case "pages":
				junk(4*4096, 3*4096)
			case "header":
				junk(0, 2*4096)
			case "empty":
				os.Truncate(p, 0)
			}
			_, err = New(Config{Data: data}, newFake(false))
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "damaged") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("opening a database with %s damage: %v", damage, err)
			}
			if damage == "empty" {
				if fi, _ := os.Stat(p); fi.Size() != 0 {
					t.Errorf("the empty database was reinitialised")
				}
			}
		})
	}
}

// TestUploadsNotOrphaned: an upload is stored under its visible name only
// with its task; one whose form never ends stays hidden (removed at start),
// and uploads that no task reads are swept at start.
func TestUploadsNotOrphaned(t *testing.T) {
	data := t.TempDir()
	e := newEnv(t, Config{Data: data}, newFake(true))
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(e.srv.URL+"/v1/tasks/video/upload", mw.FormDataContentType(), pr)
		if err == nil {
			resp.Body.Close()
		}
	}()
	fw, _ := mw.CreateFormFile("video", "clip.mp4")
	fw.Write([]byte("a whole video"))
	mw.WriteField("sr_ratio", "2")
	// The server has the video part once it reads the next one; the form
	// is never finished.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, _ := os.ReadDir(e.svc.InputRoot())
		if len(ents) == 1 {
			if i, _ := ents[0].Info(); i.Size() == int64(len("a whole video")) {
				if !strings.HasPrefix(ents[0].Name(), ".upload-") {
					t.Errorf("an upload without its task is visible as %s", ents[0].Name())
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upload never arrived: %v", ents)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A crash now; and an orphan of an older version (renamed, never
	// stored) beside it.
	orphan := filepath.Join(e.svc.InputRoot(), uploadPrefix+newID()+".mp4")
	os.WriteFile(orphan, []byte("orphan"), 0o644)
	mine := filepath.Join(e.svc.InputRoot(), "upload-notes.mp4") // a user's file
	os.WriteFile(mine, []byte("mine"), 0o644)
	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-done
	e.srv.Close()
	e.svc.Close()
	e2 := newEnv(t, Config{Data: data}, newFake(false))
	if ents := names(e2.svc.InputRoot()); ents != "upload-notes.mp4" {
		t.Errorf("input root after restart holds %s, want only the user's upload-notes.mp4", ents)
	}
}

func names(dir string) string {
	ents, _ := os.ReadDir(dir)
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return strings.Join(n, ",")
}

// serveEnv runs Serve on a real listener.
func serveEnv(t *testing.T, cfg Config, r Runner) (*env, string, context.CancelFunc, chan error) {
	e := newEnv(t, cfg, r)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.svc.Serve(ctx, ln) }()
	t.Cleanup(cancel)
	return e, ln.Addr().String(), cancel, errc
}

// rawStatus sends head (and then body, a byte every gap) on a new
// connection and returns the status line of the answer, or the error.
func rawStatus(addr, head, body string, gap time.Duration) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		return "", err
	}
	go func() {
		for i := range len(body) {
			if _, err := io.WriteString(c, body[i:i+1]); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if testing.Verbose() {
		rest, _ := io.ReadAll(br)
		fmt.Printf("%s%s\n", line, rest)
	}
	return strings.TrimSpace(line), err
}

// TestSlowClients: trickled bodies and idle connections are dropped, and
// connections are bounded.
func TestSlowClients(t *testing.T) {
	cfg := Config{BodyTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond,
		MinUploadRate: 1000, UploadGrace: 300 * time.Millisecond, MaxConns: 2}
	_, addr, _, _ := serveEnv(t, cfg, newFake(false))

	// A JSON body trickled a byte every 100 ms: 408 after BodyTimeout.
	body := `{"video_path": "a.mp4", "sr_ratio": 2, "save_result_path": "x.mp4"}`
	start := time.Now()
	line, err := rawStatus(addr, fmt.Sprintf("POST /v1/tasks/video/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)), body, 100*time.Millisecond)
	if err != nil || !strings.Contains(line, "408") || time.Since(start) > 3*time.Second {
		t.Errorf("trickled JSON body: %q %v after %v", line, err, time.Since(start))
	}

	// An upload trickled below MinUploadRate: 408 after the grace.
	b := "--B\r\nContent-Disposition: form-data; name=\"video\"; filename=\"a.mp4\"\r\n\r\n" + strings.Repeat("v", 100)
	start = time.Now()
	line, err = rawStatus(addr, fmt.Sprintf("POST /v1/tasks/video/upload HTTP/1.1\r\nHost: localhost\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: %d\r\n\r\n", len(b)+100), b, 50*time.Millisecond)
	if err != nil || !strings.Contains(line, "408") || time.Since(start) > 4*time.Second {
		t.Errorf("trickled upload: %q %v after %v", line, err, time.Since(start))
	}

	// An idle keep-alive connection is closed after IdleTimeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	start = time.Now()
	if n, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("idle connection: read %d, %v after %v", n, err, time.Since(start))
	}
	c.Close()

	// MaxConns: with two connections in a request (a body awaited), a
	// third waits; when one turns idle, the third takes its place.
	_, addr, _, _ = serveEnv(t, Config{MaxConns: 2}, newFake(false))
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/tasks/video/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{")
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // their first bytes read
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	third.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); err == nil {
		t.Errorf("a third connection was served beyond MaxConns 2")
	}
	io.WriteString(held[0], "}")
	held[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(held[0])
	if r, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		r.Body.Close()
	}
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := http.ReadResponse(bufio.NewReader(third), nil); err != nil {
		t.Errorf("the waiting connection was not served once another turned idle: %v", err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the idle connection that made room is still open")
	}
}

// TestShutdownStopsWorkerFirst: at shutdown no queued task starts and the
// running one is interrupted at once, even while a request is in flight.
func TestShutdownStopsWorkerFirst(t *testing.T) {
	data := t.TempDir()
	f := newFake(true)
	e, addr, cancel, errc := serveEnv(t, Config{Data: data, DrainTimeout: 5 * time.Second}, f)
	a := holdWorker(e, f)
	e.input("b.mp4")
	b := e.submit(map[string]any{"video_path": "b.mp4"})
	// A request in flight: headers sent, body pending.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/tasks/video/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{")
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	deadline := time.Now().Add(2 * time.Second)
	for {
		tk, _ := e.svc.get(a)
		if tk.Status == Pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running task was not interrupted within 2 s of shutdown (status %s)", tk.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if time.Since(start) > time.Second {
		t.Errorf("interrupting took %v", time.Since(start))
	}
	c.Close()
	if err := <-errc; err != nil {
		t.Errorf("Serve: %v", err)
	}
	f.mu.Lock()
	ran := strings.Join(f.ran, ",")
	f.mu.Unlock()
	if ran != a {
		t.Errorf("ran %s during shutdown, want only %s", ran, a)
	}
	e.srv.Close()
	e.svc.Close()
	e2 := newEnv(t, Config{Data: data}, newFake(false))
	e2.wait(a, Completed)
	e2.wait(b, Completed)
}

// TestCancelStopping: a cancel whose task does not stop within the wait
// says so instead of reporting success.
func TestCancelStopping(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{CancelWait: 100 * time.Millisecond}, f)
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "model": "stubborn"})
	<-f.started
	code, m, _ := e.do("DELETE", "/v1/tasks/"+id, nil)
	if code != 200 || m["stop_status"] != "stopping" || m["status"] != "processing" {
		t.Errorf("cancel of a task that does not stop: %d %v", code, m)
	}
	f.release <- struct{}{}
	e.wait(id, Cancelled)
}

// TestSubmitChecks: what can be judged at submit is refused at submit.
func TestSubmitChecks(t *testing.T) {
	e := newEnv(t, Config{Token: "s3cret"}, newFake(false))
	e.input("a.mp4")
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": strings.Repeat("n", 5000) + ".mp4"})
	wantError(t, "5000-byte name", code, m, 400, "file name")
	code, m, _ = e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": strings.Repeat("d/", 2100) + "x.mp4"})
	wantError(t, "4000-byte path", code, m, 400, "path")

	// The bearer scheme is case-insensitive.
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/tasks/", nil)
		req.Header.Set("Authorization", scheme+" s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("Authorization: %s TOKEN: %d", scheme, resp.StatusCode)
		}
	}
	for _, h := range []string{"Basic s3cret", "Bearers3cret", "bearer wrong"} {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/tasks/", nil)
		req.Header.Set("Authorization", h)
		resp, _ := http.DefaultClient.Do(req)
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("Authorization: %s: %d", h, resp.StatusCode)
		}
	}
}

// memRunner reports GPU memory as a GPU runner does, or not at all as on
// the CPU.
type memRunner struct {
	*fakeRunner
	gpu bool
}

func (m memRunner) GPUMemoryBytes() (int64, bool) {
	if !m.gpu {
		return 0, false
	}
	return 1 << 30, true
}

func TestGPUMemoryMetric(t *testing.T) {
	for _, gpu := range []bool{false, true} {
		e := newEnv(t, Config{}, memRunner{newFake(false), gpu})
		_, m, _ := e.do("GET", "/metrics", nil)
		if got := strings.Contains(m["_body"].(string), "vsr_gpu_memory_bytes"); got != gpu {
			t.Errorf("gpu %v: vsr_gpu_memory_bytes exported: %v", gpu, got)
		}
	}
}

// TestMemoryReturned: the garbage a task leaves is given back once it ends.
func TestMemoryReturned(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "model": "alloc"})
	e.wait(id, Completed)
	deadline := time.Now().Add(3 * time.Second)
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc < 128<<20 && ms.HeapSys-ms.HeapReleased < 192<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 s after a task that left 256 MiB of garbage: heap %d MiB allocated, %d MiB held from the system",
				ms.HeapAlloc>>20, (ms.HeapSys-ms.HeapReleased)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLightX2VCompat: LightX2V's paths and fields.
func TestLightX2VCompat(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{Token: "tok", Model: "realesr-animevideov3", ModelClass: "compact"}, f)
	e.input("a.mp4")
	// /health needs no token, as /healthz.
	resp, err := http.Get(e.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health: %d", resp.StatusCode)
	}
	var ids []string
	for i, p := range []string{"/v1/tasks/video/", "/v1/tasks/video", "/v1/tasks/"} {
		code, m, _ := e.do("POST", p, map[string]any{"video_path": "a.mp4", "save_result_path": fmt.Sprintf("o%d.mp4", i)})
		if code != 200 || m["task_status"] != "pending" {
			t.Fatalf("POST %s: %d %v", p, code, m)
		}
		ids = append(ids, m["task_id"].(string))
	}
	<-f.started
	// A pending task's start_time is its creation time; error_type is there.
	_, m, _ := e.do("GET", "/v1/tasks/"+ids[1]+"/status", nil)
	if m["status"] != "pending" || m["start_time"] == nil || m["start_time"] != m["create_time"] || m["error_type"] != "" {
		t.Errorf("pending status %v", m)
	}
	_, m, _ = e.do("GET", "/v1/service/metadata", nil)
	if m["nproc_per_node"] != 1.0 || m["model_cls"] != "compact" || m["model_path"] != "realesr-animevideov3" {
		t.Errorf("metadata %v", m)
	}
	for range ids {
		f.release <- struct{}{}
	}
	for _, id := range ids {
		e.wait(id, Completed)
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "model": "fail"})
	if code != 200 {
		t.Fatalf("submit: %d %v", code, m)
	}
	id := m["task_id"].(string)
	<-f.started
	m = e.wait(id, Failed)
	if m["error_type"] != "RuntimeError" {
		t.Errorf("failed status %v", m)
	}
}

// TestFIFOSwapped: an input replaced by a FIFO after submit fails the task
// at once instead of hanging the worker, and a result replaced by one is
// not served (nor hangs the handler).
func TestFIFOSwapped(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{}, f)
	hold := holdWorker(e, f)
	in := e.input("in.mp4")
	id := e.submit(map[string]any{"video_path": "in.mp4"})
	os.Remove(in)
	if err := syscall.Mkfifo(in, 0o644); err != nil {
		t.Fatal(err)
	}
	f.release <- struct{}{}
	e.wait(hold, Completed)
	if m := e.wait(id, Failed); !strings.Contains(m["error"].(string), "regular file") {
		t.Errorf("status %v", m)
	}
	out := filepath.Join(e.svc.OutputRoot(), hold+".mp4")
	os.Remove(out)
	syscall.Mkfifo(out, 0o644)
	done := make(chan int, 1)
	go func() {
		code, _, _ := e.do("GET", "/v1/tasks/"+hold+"/result", nil)
		done <- code
	}()
	select {
	case code := <-done:
		if code == 200 {
			t.Errorf("a FIFO was served as the result")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GET /result on a FIFO hung")
	}
}

// TestRequestLimits: an upload without an extension is stored under a
// name the start-up sweep knows; over-long encoder names are refused.
func TestRequestLimits(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	_, m := e.upload(nil, "clip", []byte("video"))
	st := e.wait(m["task_id"].(string), Completed)
	if name := filepath.Base(st["video_path"].(string)); !uploadName.MatchString(name) {
		t.Errorf("an upload without an extension was stored as %s", name)
	}
	e.input("a.mp4")
	code, r, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "preset": strings.Repeat("x", 100)})
	wantError(t, "100-character preset", code, r, 400, "preset")
}
