package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRunner writes a small file for each task, holding the input's
// contents, read through t.Input when the run ends; it replaces an
// existing output only when t.Replace says so. With block set, each run
// waits for a value on release (or for cancellation) before finishing.
// Model "fail" fails, "panic" panics, "stubborn" ignores cancellation,
// "alloc" leaves 256 MiB of garbage behind.
type fakeRunner struct {
	block   bool
	release chan struct{}
	started chan string

	mu      sync.Mutex
	ran     []string
	replace map[string]bool // t.Replace of each run
}

func newFake(block bool) *fakeRunner {
	return &fakeRunner{block: block, release: make(chan struct{}, 100), started: make(chan string, 100)}
}

func (f *fakeRunner) Run(ctx context.Context, t *Task, progress func(int, int)) error {
	f.mu.Lock()
	f.ran = append(f.ran, t.ID)
	if f.replace == nil {
		f.replace = map[string]bool{}
	}
	f.replace[t.ID] = t.Replace
	f.mu.Unlock()
	f.started <- t.ID
	switch t.Request.Model {
	case "fail":
		return errors.New("corrupt video: invalid data\nfound")
	case "panic":
		panic("boom")
	case "stubborn":
		<-f.release
		return ctx.Err()
	case "ticking": // reports progress until released or cancelled
		for i := 0; ; i++ {
			select {
			case <-f.release:
				return errors.New("released")
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
				progress(i%4, 4)
			}
		}
	case "alloc":
		garbage = make([]byte, 256<<20)
		for i := range garbage {
			garbage[i] = byte(i)
		}
		garbage = nil
	}
	tmp := filepath.Join(filepath.Dir(t.Output), "."+filepath.Base(t.Output)+".vsr-fake")
	if err := os.WriteFile(tmp, []byte("partial"), 0o644); err != nil {
		return err
	}
	progress(1, 4)
	if f.block {
		select {
		case <-f.release:
		case <-ctx.Done():
			os.Remove(tmp)
			return ctx.Err()
		}
	}
	progress(4, 4)
	t.Width, t.Height, t.Devices = 48, 32, "fake:0"
	in, err := os.ReadFile(t.Input)
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.WriteFile(tmp, []byte("video of "+t.ID+" from "+string(in)), 0o644); err != nil {
		return err
	}
	if t.Replace {
		return os.Rename(tmp, t.Output)
	}
	defer os.Remove(tmp)
	return os.Link(tmp, t.Output) // fails if the output exists
}

var garbage []byte

func (f *fakeRunner) Validate(_ context.Context, r *Request) error {
	if r.Model == "bogus" {
		return fmt.Errorf("field \"model\": unknown model %q", r.Model)
	}
	return nil
}

type env struct {
	t   *testing.T
	svc *Service
	srv *httptest.Server
	cfg Config
	tok string
}

// onJetStream makes the tests' services keep tasks on an embedded NATS
// server instead of bbolt (TestServiceOnJetStream).
var onJetStream bool

// withStore returns cfg with the store the tests run on.
func withStore(cfg Config) Config {
	if onJetStream && cfg.Store == nil && cfg.NATS == nil {
		cfg.NATS = &NATS{Listen: "127.0.0.1:-1"}
	}
	return cfg
}

func newEnv(t *testing.T, cfg Config, r Runner) *env {
	t.Helper()
	return openEnv(t, cfg, r, New)
}

// newRemoteEnv is newEnv with the API of remote workers (NewRemote).
func newRemoteEnv(t *testing.T, cfg Config, r Runner) *env {
	t.Helper()
	return openEnv(t, cfg, r, NewRemote)
}

func openEnv(t *testing.T, cfg Config, r Runner, open func(Config, Runner) (*Service, error)) *env {
	t.Helper()
	if cfg.Data == "" {
		cfg.Data = t.TempDir()
	}
	cfg = withStore(cfg)
	svc, err := open(cfg, r)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, svc: svc, srv: httptest.NewServer(svc.Handler()), cfg: cfg, tok: cfg.Token}
	t.Cleanup(func() {
		e.srv.Close()
		svc.Close()
	})
	return e
}

// do sends a request and decodes the JSON answer into a map.
func (e *env) do(method, path string, body any) (int, map[string]any, http.Header) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.tok != "" {
		req.Header.Set("Authorization", "Bearer "+e.tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &m); err != nil {
			e.t.Fatalf("%s %s: bad JSON %q: %v", method, path, data, err)
		}
	}
	if m == nil {
		m = map[string]any{"_body": string(data)}
	}
	return resp.StatusCode, m, resp.Header
}

// input writes a file into the input root.
// upload posts a multipart upload of the form fields and, unless video
// is nil, the file video named name.
func (e *env) upload(fields map[string]string, name string, video []byte) (int, map[string]any) {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if video != nil {
		fw, _ := mw.CreateFormFile("video", name)
		fw.Write(video)
	}
	mw.Close()
	resp, err := http.Post(e.srv.URL+"/v1/tasks/video/upload", mw.FormDataContentType(), &buf)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func (e *env) input(name string) string {
	p := filepath.Join(e.svc.InputRoot(), name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte("video"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) submit(body any) string {
	e.t.Helper()
	code, m, _ := e.do("POST", "/v1/tasks/video/", body)
	if code != 200 {
		e.t.Fatalf("submit %v: %d %v", body, code, m)
	}
	if m["task_status"] != "pending" || m["save_result_path"] == "" {
		e.t.Fatalf("submit answer %v", m)
	}
	return m["task_id"].(string)
}

func (e *env) wait(id string, want Status) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, m, _ := e.do("GET", "/v1/tasks/"+id+"/status", nil)
		if code != 200 {
			e.t.Fatalf("status %s: %d %v", id, code, m)
		}
		if Status(m["status"].(string)) == want {
			return m
		}
		if Status(m["status"].(string)).Final() || time.Now().After(deadline) {
			e.t.Fatalf("task %s is %v, want %s: %v", id, m["status"], want, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantError(t *testing.T, what string, code int, m map[string]any, wantCode int, wantIn string) {
	t.Helper()
	msg, _ := m["error"].(string)
	if code != wantCode || msg == "" || !strings.Contains(msg, wantIn) || strings.Contains(msg, "\n") {
		t.Errorf("%s: got %d %v, want %d with an error naming %q", what, code, m, wantCode, wantIn)
	}
}

func TestEndpoints(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4", "sr_ratio": 2, "size": []int{32, 48}, "crf": 20, "codec": "libx264"})
	m := e.wait(id, Completed)
	out := filepath.Join(e.svc.OutputRoot(), id+".mp4")
	if m["save_result_path"] != out || m["error"] != nil || m["start_time"] == nil || m["end_time"] == nil {
		t.Errorf("status %v", m)
	}
	if p := m["progress"].(map[string]any); p["frames_done"] != 4.0 || p["frames_total"] != 4.0 {
		t.Errorf("progress %v", p)
	}
	if m["width"] != 48.0 || m["height"] != 32.0 {
		t.Errorf("size %v", m)
	}
	// The result streams the file.
	code, r, h := e.do("GET", "/v1/tasks/"+id+"/result", nil)
	if code != 200 || r["_body"] != "video of "+id+" from video" || !strings.Contains(h.Get("Content-Disposition"), id+".mp4") {
		t.Errorf("result: %d %v %v", code, r, h)
	}
	// Named output, relative to the output root; a name without extension gets .mp4.
	os.MkdirAll(filepath.Join(e.svc.OutputRoot(), "sub"), 0o755)
	id2 := e.submit(map[string]any{"video_path": filepath.Join(e.svc.InputRoot(), "a.mp4"), "save_result_path": "sub/named"})
	m = e.wait(id2, Completed)
	if m["save_result_path"] != filepath.Join(e.svc.OutputRoot(), "sub", "named.mp4") {
		t.Errorf("named output: %v", m["save_result_path"])
	}
	// Client-chosen task id (LightX2V accepts one); a duplicate is 409.
	id3 := e.submit(map[string]any{"video_path": "a.mp4", "task_id": "my-task"})
	if id3 != "my-task" {
		t.Errorf("task id %s", id3)
	}
	e.wait(id3, Completed)
	code, m, _ = e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "task_id": "my-task"})
	wantError(t, "duplicate task_id", code, m, 409, "my-task")

	code, m, _ = e.do("GET", "/v1/tasks/", nil)
	if code != 200 || len(m) != 3 || m[id] == nil || m[id].(map[string]any)["status"] != "completed" {
		t.Errorf("list: %d %v", code, m)
	}
	code, m, _ = e.do("GET", "/v1/tasks/queue/status", nil)
	if code != 200 || m["is_processing"] != false || m["pending_count"] != 0.0 || m["queue_size"] != 100.0 || m["queue_available"] != 100.0 {
		t.Errorf("queue: %d %v", code, m)
	}
	code, m, _ = e.do("GET", "/v1/service/status", nil)
	if code != 200 || m["service_status"] != "idle" || m["total_tasks"] != 3.0 || m["completed_tasks"] != 3.0 {
		t.Errorf("service status: %d %v", code, m)
	}
	code, m, _ = e.do("GET", "/v1/service/metadata", nil)
	if code != 200 || m["service"] != "vsr" || m["output_root"] != e.svc.OutputRoot() {
		t.Errorf("metadata: %d %v", code, m)
	}
	code, m, _ = e.do("GET", "/healthz", nil)
	if code != 200 || m["status"] != "ok" {
		t.Errorf("healthz: %d %v", code, m)
	}
	code, m, _ = e.do("GET", "/metrics", nil)
	body := m["_body"].(string)
	for _, want := range []string{`vsr_tasks{status="completed"} 3`, "vsr_queue_depth 0", "vsr_frames_processed_total 12",
		`vsr_task_duration_seconds_count{status="completed"} 3`, "vsr_frames_per_second", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// DELETE of a finished task does nothing.
	code, m, _ = e.do("DELETE", "/v1/tasks/"+id, nil)
	if code != 200 || m["stop_status"] != "do_nothing" {
		t.Errorf("delete finished: %d %v", code, m)
	}
	// Other methods on known paths: 405 as JSON.
	code, m, _ = e.do("PUT", "/v1/tasks/"+id, nil)
	wantError(t, "PUT", code, m, 405, "PUT")
	code, m, _ = e.do("GET", "/v1/nothing", nil)
	wantError(t, "unknown path", code, m, 404, "/v1/nothing")
}

func TestUpload(t *testing.T) {
	e := newEnv(t, Config{MaxUpload: 1000}, newFake(false))
	post := func(fields map[string]string, video []byte) (int, map[string]any) {
		return e.upload(fields, "clip.MP4", video)
	}
	code, m := post(map[string]string{"sr_ratio": "3", "size": "[48, 72]", "save_result_path": "up.mkv", "codec": "ffv1"}, []byte("video bytes"))
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	id := m["task_id"].(string)
	st := e.wait(id, Completed)
	req := st["request"].(map[string]any)
	if req["sr_ratio"] != 3.0 || req["codec"] != "ffv1" || st["save_result_path"] != filepath.Join(e.svc.OutputRoot(), "up.mkv") {
		t.Errorf("upload task %v", st)
	}
	in := st["video_path"].(string)
	if filepath.Dir(in) != e.svc.InputRoot() || !strings.HasSuffix(in, ".mp4") {
		t.Errorf("upload stored at %s", in)
	}
	if _, err := os.Stat(in); err == nil {
		t.Errorf("the upload of a finished task is kept")
	}
	code, m = post(nil, bytes.Repeat([]byte("x"), 5000))
	wantError(t, "upload too large", code, m, 413, "limit")
	code, m = post(map[string]string{"prompt": "x"}, []byte("v"))
	wantError(t, "upload unknown field", code, m, 400, "prompt")
	code, m = post(map[string]string{"sr_ratio": "two"}, []byte("v"))
	wantError(t, "upload wrong type", code, m, 400, "sr_ratio")
	code, m = post(map[string]string{"save_result_path": "../x.mp4"}, []byte("v"))
	wantError(t, "upload escape", code, m, 403, "save_result_path")
	code, m = post(map[string]string{"sr_ratio": "2"}, nil)
	wantError(t, "upload without video", code, m, 400, "video")
	// Refused uploads leave nothing in the input root.
	ents, _ := os.ReadDir(e.svc.InputRoot())
	if len(ents) != 0 {
		t.Errorf("input root holds %d files after refused uploads", len(ents))
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.mp4"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(outside, "secret.mp4"), filepath.Join(e.svc.InputRoot(), "link.mp4"))
	os.Symlink(outside, filepath.Join(e.svc.OutputRoot(), "escape"))
	os.Symlink(outside, filepath.Join(e.svc.InputRoot(), "escdir"))
	cases := []struct {
		name string
		body any
		code int
		in   string
	}{
		{"unknown field", `{"video_path": "a.mp4", "prompt": "x"}`, 400, `"prompt"`},
		{"wrong type", `{"video_path": "a.mp4", "sr_ratio": "2"}`, 400, `"sr_ratio"`},
		{"wrong type in array", `{"video_path": "a.mp4", "size": [1, "x"]}`, 400, `size`},
		{"wrong type string", `{"video_path": 5}`, 400, `"video_path"`},
		{"not an object", `[1]`, 400, "JSON object"},
		{"bad JSON", `{"video_path": `, 400, "JSON"},
		{"empty", ``, 400, "empty"},
		{"trailing", `{"video_path": "a.mp4"} {}`, 400, "after"},
		{"size shape", map[string]any{"video_path": "a.mp4", "size": []int{1}}, 400, "size"},
		{"bad ratio", map[string]any{"video_path": "a.mp4", "sr_ratio": -1}, 400, "sr_ratio"},
		{"runner refuses", map[string]any{"video_path": "a.mp4", "model": "bogus"}, 400, "model"},
		{"no video_path", map[string]any{"sr_ratio": 2}, 400, "video_path"},
		{"missing input", map[string]any{"video_path": "none.mp4"}, 400, "does not exist"},
		{"input traversal", map[string]any{"video_path": "../../etc/passwd"}, 403, "video_path"},
		{"input absolute outside", map[string]any{"video_path": filepath.Join(outside, "secret.mp4")}, 403, "video_path"},
		{"input symlink escape", map[string]any{"video_path": "link.mp4"}, 403, "video_path"},
		{"input dir symlink escape", map[string]any{"video_path": "escdir/secret.mp4"}, 403, "video_path"},
		{"output traversal", map[string]any{"video_path": "a.mp4", "save_result_path": "../out.mp4"}, 403, "save_result_path"},
		{"output absolute outside", map[string]any{"video_path": "a.mp4", "save_result_path": filepath.Join(outside, "o.mp4")}, 403, "save_result_path"},
		{"output symlink escape", map[string]any{"video_path": "a.mp4", "save_result_path": "escape/o.mp4"}, 403, "save_result_path"},
		{"output hidden", map[string]any{"video_path": "a.mp4", "save_result_path": ".x.vsr-1.mp4"}, 400, "save_result_path"},
		{"output dir missing", map[string]any{"video_path": "a.mp4", "save_result_path": "no/o.mp4"}, 400, "save_result_path"},
		{"bad task id", map[string]any{"video_path": "a.mp4", "task_id": "../x"}, 400, "task_id"},
		{"bad codec", map[string]any{"video_path": "a.mp4", "codec": "x -y"}, 400, "codec"},
	}
	for _, c := range cases {
		code, m, _ := e.do("POST", "/v1/tasks/video/", c.body)
		wantError(t, c.name, code, m, c.code, c.in)
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", `{"video_path":"`+strings.Repeat("a", maxJSON)+`"}`)
	wantError(t, "huge body", code, m, 413, "bytes")
	if got := len(e.svc.list()); got != 0 {
		t.Errorf("%d tasks stored after refused requests", got)
	}
	// 404 on every task endpoint.
	for _, ep := range []struct{ method, path string }{
		{"GET", "/v1/tasks/nope/status"}, {"GET", "/v1/tasks/nope/result"}, {"DELETE", "/v1/tasks/nope"},
	} {
		code, m, _ := e.do(ep.method, ep.path, nil)
		wantError(t, ep.method+" "+ep.path, code, m, 404, "not found")
	}
	// A failing task fails alone (with a one-line error); a panicking one too.
	bad := e.submit(map[string]any{"video_path": "a.mp4", "model": "fail"})
	pan := e.submit(map[string]any{"video_path": "a.mp4", "model": "panic"})
	good := e.submit(map[string]any{"video_path": "a.mp4"})
	m = e.wait(bad, Failed)
	if m["error"] != "corrupt video: invalid data; found" {
		t.Errorf("failed task error %v", m["error"])
	}
	m = e.wait(pan, Failed)
	if !strings.Contains(m["error"].(string), "boom") {
		t.Errorf("panicked task error %v", m["error"])
	}
	e.wait(good, Completed)
	code, m, _ = e.do("GET", "/v1/tasks/"+bad+"/result", nil)
	wantError(t, "result of a failed task", code, m, 404, "not completed")
}

func TestToken(t *testing.T) {
	e := newEnv(t, Config{Token: "s3cret"}, newFake(false))
	e.input("a.mp4")
	e.submit(map[string]any{"video_path": "a.mp4"})
	for _, tok := range []string{"", "wrong", "s3cre", "s3cret2"} {
		e.tok = tok
		for _, p := range []string{"/v1/tasks/", "/v1/service/status", "/metrics"} {
			code, m, h := e.do("GET", p, nil)
			wantError(t, "token "+tok+" "+p, code, m, 401, "token")
			if h.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		}
		code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4"})
		wantError(t, "token submit", code, m, 401, "token")
	}
	e.tok = ""
	if code, _, _ := e.do("GET", "/healthz", nil); code != 200 {
		t.Errorf("healthz needs the token: %d", code)
	}
	e.tok = "s3cret"
	if code, m, _ := e.do("GET", "/v1/tasks/", nil); code != 200 || len(m) != 1 {
		t.Errorf("with the token: %d %v", code, m)
	}
}

func TestQueueFull(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{MaxQueue: 1}, f)
	e.input("a.mp4")
	running := e.submit(map[string]any{"video_path": "a.mp4"})
	<-f.started
	queued := e.submit(map[string]any{"video_path": "a.mp4"})
	code, m, h := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4"})
	wantError(t, "full queue", code, m, 503, "full")
	if h.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	code, m, _ = e.do("GET", "/v1/tasks/queue/status", nil)
	if m["is_processing"] != true || m["current_task"] != running || m["pending_count"] != 1.0 || m["queue_available"] != 0.0 {
		t.Errorf("queue status %v", m)
	}
	code, m, _ = e.do("GET", "/v1/service/status", nil)
	if m["service_status"] != "busy" || m["current_task"] != running {
		t.Errorf("service status %v", m)
	}
	code, m, _ = e.do("GET", "/metrics", nil)
	if !strings.Contains(m["_body"].(string), "vsr_queue_depth 1") {
		t.Errorf("metrics queue depth")
	}
	f.release <- struct{}{}
	f.release <- struct{}{}
	e.wait(running, Completed)
	e.wait(queued, Completed)
	e.submit(map[string]any{"video_path": "a.mp4"}) // room again
	f.release <- struct{}{}
}

func TestCancel(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{}, f)
	e.input("a.mp4")
	a := e.submit(map[string]any{"video_path": "a.mp4"})
	<-f.started
	b := e.submit(map[string]any{"video_path": "a.mp4"})
	c := e.submit(map[string]any{"video_path": "a.mp4"})
	// A queued task is removed from the queue and never runs.
	code, m, _ := e.do("DELETE", "/v1/tasks/"+b, nil)
	if code != 200 || m["stop_status"] != "success" || m["status"] != "cancelled" {
		t.Errorf("cancel queued: %d %v", code, m)
	}
	e.wait(b, Cancelled)
	// The running one stops, leaving no file, and the next starts.
	e.wait(a, Processing)
	code, m, _ = e.do("DELETE", "/v1/tasks/"+a, nil)
	if code != 200 || m["stop_status"] != "success" || m["status"] != "cancelled" {
		t.Errorf("cancel running: %d %v", code, m)
	}
	m = e.wait(a, Cancelled)
	if m["error"] != "task cancelled by user" || m["end_time"] == nil {
		t.Errorf("cancelled status %v", m)
	}
	if got := <-f.started; got != c {
		t.Errorf("next task run %s, want %s", got, c)
	}
	f.release <- struct{}{}
	e.wait(c, Completed)
	ents, _ := os.ReadDir(e.svc.OutputRoot())
	if len(ents) != 1 || ents[0].Name() != c+".mp4" {
		t.Errorf("output root %v", ents)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Join(f.ran, ",") != a+","+c {
		t.Errorf("ran %v", f.ran)
	}
	code, m, _ = e.do("DELETE", "/v1/tasks/"+a, nil) // as LightX2V: success again
	if code != 200 || m["stop_status"] != "success" || m["status"] != "cancelled" {
		t.Errorf("second cancel: %d %v", code, m)
	}
	code, m, _ = e.do("GET", "/metrics", nil)
	if !strings.Contains(m["_body"].(string), `vsr_tasks{status="cancelled"} 2`) {
		t.Errorf("metrics: cancelled count")
	}
}

// TestRestart reopens a service on the same data directory: finished tasks
// are listed, pending ones run, the interrupted one runs again, and
// temporaries are removed.
func TestRestart(t *testing.T) {
	data := t.TempDir()
	f := newFake(true)
	svc, err := New(withStore(Config{Data: data}), f)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(svc.InputRoot(), "a.mp4"), []byte("v"), 0o644)
	mk := func() string {
		t := &Task{ID: newID(), Input: filepath.Join(svc.InputRoot(), "a.mp4")}
		t.Output = filepath.Join(svc.OutputRoot(), t.ID+".mp4")
		if err := svc.submit(t, ""); err != nil {
			panic(err)
		}
		return t.ID
	}
	done := mk()
	<-f.started
	f.release <- struct{}{}
	for {
		if t, _ := svc.get(done); t.Status == Completed {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	running := mk()
	<-f.started
	queued := []string{mk(), mk()}
	// Simulate a crash: the store says "processing" for running and a
	// temporary lies in the output root. Close the database without
	// letting the worker record anything.
	svc.mu.Lock()
	svc.closing = true
	svc.mu.Unlock()
	svc.st.Close()
	os.WriteFile(filepath.Join(svc.OutputRoot(), ".x.vsr-123.mp4"), []byte("partial"), 0o644)
	os.WriteFile(filepath.Join(svc.OutputRoot(), ".y.mp4.vsr-seg000.mp4"), []byte("partial"), 0o644)
	os.MkdirAll(filepath.Join(svc.OutputRoot(), "sub", ".z.vsr-42", ".w.vsr-7"), 0o700) // encoders' private directories
	os.WriteFile(filepath.Join(svc.OutputRoot(), "sub", ".z.vsr-42", "z.mp4"), []byte("partial"), 0o644)
	svc.stop()
	svc.workers.Wait()

	f2 := newFake(false)
	e := newEnv(t, Config{Data: data}, f2)
	e.wait(done, Completed)
	m := e.wait(running, Completed)
	if m["attempts"] != 2.0 {
		t.Errorf("rerun attempts %v", m["attempts"])
	}
	for _, id := range queued {
		e.wait(id, Completed)
	}
	if got := strings.Join(f2.ran, ","); got != running+","+queued[0]+","+queued[1] {
		t.Errorf("after restart ran %s", got)
	}
	for _, n := range []string{".x.vsr-123.mp4", ".y.mp4.vsr-seg000.mp4", "sub/.z.vsr-42"} {
		if _, err := os.Stat(filepath.Join(e.svc.OutputRoot(), n)); err == nil {
			t.Errorf("temporary %s kept", n)
		}
	}
}

func TestShutdownRequeues(t *testing.T) {
	data := t.TempDir()
	f := newFake(true)
	svc, err := New(withStore(Config{Data: data}), f)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(svc.InputRoot(), "a.mp4"), []byte("v"), 0o644)
	tk := &Task{ID: "t1", Input: filepath.Join(svc.InputRoot(), "a.mp4"), Output: filepath.Join(svc.OutputRoot(), "t1.mp4")}
	svc.submit(tk, "")
	<-f.started
	svc.Close()
	e := newEnv(t, Config{Data: data}, newFake(false))
	m := e.wait("t1", Completed)
	if m["attempts"] != 1.0 {
		t.Errorf("attempts after a clean shutdown %v", m["attempts"])
	}
}

// TestWorkers: with two workers two tasks run at once (both started before
// either is released), the queue and service status list both, a third
// waits, and the devices a runner reports are kept on the task.
func TestWorkers(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{Workers: 2}, f)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.submit(map[string]any{"video_path": e.input(fmt.Sprintf("w%d.mp4", i))}))
	}
	started := map[string]bool{}
	for range 2 {
		select {
		case id := <-f.started:
			started[id] = true
		case <-time.After(10 * time.Second):
			t.Fatal("two workers did not start two tasks")
		}
	}
	_, q, _ := e.do("GET", "/v1/tasks/queue/status", nil)
	if q["is_processing"] != true || len(q["running_tasks"].([]any)) != 2 || q["pending_count"] != 1.0 || q["active_count"] != 3.0 {
		t.Errorf("queue with two running: %v", q)
	}
	_, st, _ := e.do("GET", "/v1/service/status", nil)
	if len(st["active_tasks"].([]any)) != 2 || st["service_status"] != "busy" {
		t.Errorf("status with two running: %v", st)
	}
	for range 3 {
		f.release <- struct{}{}
	}
	for _, id := range ids {
		if m := e.wait(id, Completed); m["devices"] != "fake:0" {
			t.Errorf("task %s: devices %v", id, m["devices"])
		}
	}
	_, mm, _ := e.do("GET", "/metrics", nil)
	if body := mm["_body"].(string); !strings.Contains(body, `vsr_tasks_finished_total{devices="fake:0",status="completed"} 3`) {
		t.Errorf("metrics lack the tasks by devices:\n%s", body)
	}
	if !started[ids[0]] || !started[ids[1]] {
		t.Errorf("started %v, want the first two", started)
	}
}
