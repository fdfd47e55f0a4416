package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// TestPageFiles: the page and its files are public and carry a strict
// Content-Security-Policy; the API stays closed without the token; the
// page runs no inline script or style.
func TestPageFiles(t *testing.T) {
	e := newEnv(t, Config{Token: "secret"}, newFake(false))
	get := func(path, token string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, page := get("/", "")
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / without the token: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("page headers: %v", resp.Header)
	}
	// No inline script or style in the page: every script has a src, no
	// style element or attribute, no on* handler.
	for _, bad := range []string{"<script>", "<script type=\"module\">", "<style", " style=", " onclick=", " onload="} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("the page has inline code: %q", bad)
		}
	}
	for _, f := range []string{"/web/app.js", "/web/api.js", "/web/format.js", "/web/style.css", "/web/icon.svg"} {
		resp, body := get(f, "")
		if resp.StatusCode != 200 || len(body) == 0 || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %d, %d bytes", f, resp.StatusCode, len(body))
		}
	}
	if resp, _ := get("/web/app.js", ""); !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Errorf("app.js served as %q", resp.Header.Get("Content-Type"))
	}
	for path, want := range map[string]int{"/web/": 404, "/web/nothing.js": 404, "/v1/tasks/": 401, "/v1/events": 401,
		"/v1/devices": 401, "/v1/tasks/x/preview?t=0&which=input": 401, "/nothing": 401} {
		if resp, _ := get(path, ""); resp.StatusCode != want {
			t.Errorf("GET %s without the token: %d, want %d", path, resp.StatusCode, want)
		}
	}
	// Only GET and HEAD of the page's files are public.
	req, _ := http.NewRequest("POST", e.srv.URL+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("POST / without the token: %v %v", resp.StatusCode, err)
	}
	if resp, _ := get("/v1/tasks/", "secret"); resp.StatusCode != 200 {
		t.Errorf("GET /v1/tasks/ with the token: %d", resp.StatusCode)
	}
}

// sse is an open event stream of GET /v1/events.
type sse struct {
	r      *bufio.Reader
	cancel context.CancelFunc
	events chan [2]string // type, data
}

// openEvents opens GET /v1/events with token, failing unless it answers
// 200 as text/event-stream.
func (e *env) openEvents(token string) *sse {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		e.t.Fatalf("GET /v1/events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sse{r: bufio.NewReader(resp.Body), cancel: cancel, events: make(chan [2]string, 100)}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		var typ, data string
		for {
			line, err := s.r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				if data != "" {
					s.events <- [2]string{typ, data}
				}
				typ, data = "", ""
			case strings.HasPrefix(line, "event: "):
				typ = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data = line[len("data: "):]
			}
		}
	}()
	e.t.Cleanup(cancel)
	return s
}

// next waits for an event of type typ whose data has match, failing after
// 10 s; it returns the data.
func (s *sse) next(t *testing.T, typ, match string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the event stream ended before a %s event with %q", typ, match)
			}
			if ev[0] == typ && strings.Contains(ev[1], match) {
				return ev[1]
			}
		case <-timeout:
			t.Fatalf("no %s event with %q in 10 s", typ, match)
		}
	}
}

// waitSubscribers waits until the service has n open event streams.
func waitSubscribers(t *testing.T, svc *Service, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for svc.events.subscribers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d event streams open, want %d", svc.events.subscribers(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEvents: GET /v1/events sends the tasks there, then each change;
// it needs the token; its handler ends when the client goes away.
func TestEvents(t *testing.T) {
	f := newFake(true)
	e := newEnv(t, Config{Token: "secret"}, f)
	e.input("a.mp4")
	e.input("b.mp4")
	first := e.submit(map[string]any{"video_path": "a.mp4"})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) { // the fake runner's first progress
		_, m, _ := e.do("GET", "/v1/tasks/"+first+"/status", nil)
		if m["progress"].(map[string]any)["frames_done"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not start: %v", m)
		}
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("GET /v1/events with a wrong token: %v %v", resp.StatusCode, err)
	}
	s := e.openEvents("secret")
	var v statusView
	json.Unmarshal([]byte(s.next(t, "task", first)), &v)
	if v.Status != Processing || v.Progress.Done != 1 || v.Progress.Total != 4 {
		t.Errorf("first event %+v", v)
	}
	s.next(t, "ready", "")
	second := e.submit(map[string]any{"video_path": "b.mp4"})
	json.Unmarshal([]byte(s.next(t, "task", second)), &v)
	if v.Status != Pending || v.QueuePos != 1 {
		t.Errorf("the queued task's event: %+v", v)
	}
	for _, id := range []string{first, second} {
		if code, m, _ := e.do("DELETE", "/v1/tasks/"+id+"/record", nil); code != 409 || !strings.Contains(fmt.Sprint(m), "cancel it first") {
			t.Errorf("delete the record of an unfinished task: %d %v", code, m)
		}
	}
	f.release <- struct{}{}
	s.next(t, "task", `"status":"completed"`)
	if code, m, _ := e.do("DELETE", "/v1/tasks/"+second, nil); code != 200 {
		t.Fatalf("cancel: %d %v", code, m)
	}
	s.next(t, "task", `"status":"cancelled"`)
	// Deleting a finished task's record removes it from the list and the
	// stream; its output file stays.
	if code, m, _ := e.do("DELETE", "/v1/tasks/"+first+"/record", nil); code != 200 || m["deleted"] != true {
		t.Fatalf("delete the record of a completed task: %d %v", code, m)
	}
	s.next(t, "removed", first)
	for _, p := range []string{"GET /v1/tasks/" + first + "/status", "DELETE /v1/tasks/" + first + "/record", "DELETE /v1/tasks/nosuch/record"} {
		method, path, _ := strings.Cut(p, " ")
		if code, _, _ := e.do(method, path, nil); code != 404 {
			t.Errorf("%s after the deletion: %d, want 404", p, code)
		}
	}
	waitSubscribers(t, e.svc, 1)
	s.cancel()
	waitSubscribers(t, e.svc, 0)
}

// TestEventsBounded: at most MaxEventClients streams at once; Close ends
// the open ones.
func TestEventsBounded(t *testing.T) {
	e := newEnv(t, Config{MaxEventClients: 1}, newFake(false))
	s := e.openEvents("")
	s.next(t, "ready", "")
	code, m, h := e.do("GET", "/v1/events", nil)
	if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(fmt.Sprint(m["error"]), "at most 1") {
		t.Errorf("a second stream: %d %v", code, m)
	}
	s.cancel()
	waitSubscribers(t, e.svc, 0)
	s = e.openEvents("")
	s.next(t, "ready", "")
	e.svc.events.close() // as Serve's shutdown and Close do
	for range s.events {
	}
	waitSubscribers(t, e.svc, 0)
}

// TestDevices: GET /v1/devices lists the runner's devices, or the CPU.
func TestDevices(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	code, m, _ := e.do("GET", "/v1/devices", nil)
	devs, _ := m["devices"].([]any)
	if code != 200 || len(devs) != 1 || devs[0].(map[string]any)["name"] != "cpu" || devs[0].(map[string]any)["kind"] != "cpu" {
		t.Errorf("devices of a runner that reports none: %d %v", code, m)
	}
	u := 42
	r := &gpuFake{fakeRunner: newFake(false), devs: []Device{{Name: "cuda:0", Kind: "gpu", Model: "Fake GPU", MemoryTotal: 80 << 30, MemoryUsed: 1 << 30, Utilization: &u}}}
	e = newEnv(t, Config{}, r)
	code, m, _ = e.do("GET", "/v1/devices", nil)
	want := `{"devices":[{"kind":"gpu","memory_total_bytes":85899345920,"memory_used_bytes":1073741824,"model":"Fake GPU","name":"cuda:0","utilization_percent":42}]}`
	if got, _ := json.Marshal(m); code != 200 || string(got) != want {
		t.Errorf("devices: %d %s, want %s", code, got, want)
	}
}

type gpuFake struct {
	*fakeRunner
	devs []Device
}

func (g *gpuFake) DeviceStats() []Device { return g.devs }

// scaleRunner restores by scaling the input 2x with ffmpeg: a real video
// output for the previews.
type scaleRunner struct{}

func (scaleRunner) Run(ctx context.Context, t *Task, progress func(int, int)) error {
	ff, err := video.FFmpeg()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, ff, "-nostdin", "-loglevel", "error", "-i", video.ChildPath(t.Input), "-vf", "scale=2*iw:2*ih",
		"-c:v", "libx264", "-pix_fmt", "yuv420p", "-preset", "ultrafast", video.ChildPath(t.Output)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	t.Width, t.Height = 96, 64
	progress(5, 5)
	return nil
}

// testClip writes a 48x32 clip of 5 frames at 25 fps at path.
func testClip(t *testing.T, path string) {
	t.Helper()
	ff, err := video.FFmpeg()
	if err != nil {
		t.Skip(err)
	}
	if out, err := exec.Command(ff, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=48x32:rate=25",
		"-frames:v", "5", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-y", path).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// TestPreview: frames of a completed task as PNG at the output's size,
// cached; the requests' values are checked; an upload's input is kept
// for its previews.
func TestPreview(t *testing.T) {
	e := newEnv(t, Config{}, scaleRunner{})
	testClip(t, filepath.Join(e.svc.InputRoot(), "clip.mp4"))
	if _, err := os.Stat(filepath.Join(e.svc.InputRoot(), "clip.mp4")); err != nil {
		t.Fatal(err)
	}
	id := e.submit(map[string]any{"video_path": "clip.mp4", "save_result_path": "out.mp4"})
	e.wait(id, Completed)
	get := func(query string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(e.srv.URL + "/v1/tasks/" + id + "/preview" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, which := range []string{"input", "output"} {
		code, b := get("?t=0.08&which=" + which)
		if code != 200 {
			t.Fatalf("%s preview: %d %s", which, code, b)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Dx() != 96 || img.Bounds().Dy() != 64 {
			t.Errorf("%s preview: %v %v, want a 96x64 PNG", which, img.Bounds(), err)
		}
	}
	for query, want := range map[string]int{
		"?t=0&which=both": 400, "?t=-1&which=input": 400, "?t=NaN&which=input": 400, "?t=abc&which=input": 400, "?t=1_0&which=input": 400, "?t=0x1p3&which=input": 400,
		"?which=input": 400, "?t=1e9&which=input": 400, "?t=30&which=output": 422,
	} {
		if code, b := get(query); code != want {
			t.Errorf("preview%s: %d %s, want %d", query, code, b, want)
		}
	}
	for path, want := range map[string]int{"/v1/tasks/nope/preview?t=0&which=input": 404,
		"/v1/tasks/..%2f..%2fetc/preview?t=0&which=input": 404} {
		if code, m, _ := e.do("GET", path, nil); code != want {
			t.Errorf("GET %s: %d %v, want %d", path, code, m, want)
		}
	}
	// Cached: the same frame comes back once the file is gone, another
	// frame does not.
	os.Remove(filepath.Join(e.svc.OutputRoot(), "out.mp4"))
	if code, _ := get("?t=0.08&which=output"); code != 200 {
		t.Errorf("a cached frame: %d", code)
	}
	if code, b := get("?t=0.12&which=output"); code != 404 || !strings.Contains(string(b), "no longer there") {
		t.Errorf("a frame of a removed output: %d %s", code, b)
	}
	// An upload's input is kept for the previews of its completed task,
	// and removed from the input root.
	clip, _ := os.ReadFile(filepath.Join(e.svc.InputRoot(), "clip.mp4"))
	code, m := e.upload(map[string]string{"save_result_path": "up.mp4"}, "up.mp4", clip)
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	up := m["task_id"].(string)
	e.wait(up, Completed)
	resp, err := http.Get(e.srv.URL + "/v1/tasks/" + up + "/preview?t=0&which=input")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("the input preview of an upload: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	ents, _ := os.ReadDir(e.svc.InputRoot())
	if len(ents) != 1 {
		t.Errorf("the input root holds %d files, want only clip.mp4", len(ents))
	}
	code, info, _ := e.do("GET", "/v1/tasks/"+up+"/preview/info", nil)
	if code != 200 || info["frames"] != 5.0 || info["fps"] != 25.0 || info["duration_seconds"] != 0.2 || info["width"] != 96.0 {
		t.Errorf("preview info: %d %v", code, info)
	}
}

func TestPreviewSize(t *testing.T) {
	for _, c := range [][4]int{{96, 64, 96, 64}, {3840, 2160, 3840, 2160}, {7680, 4320, 3840, 2160}, {15360, 200, 15360, 200}, {20000, 20000, 2880, 2880}} {
		w, h := previewSize(c[0], c[1])
		if w != c[2] || h != c[3] || w*h > previewMaxPixels {
			t.Errorf("previewSize(%d, %d) = %d, %d, want %d, %d", c[0], c[1], w, h, c[2], c[3])
		}
	}
}

// TestKeepPreviewInput: the kept inputs are bounded, the oldest removed
// first.
func TestKeepPreviewInput(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	dir := e.svc.previewDir()
	os.MkdirAll(dir, 0o700)
	old := time.Now().Add(-time.Hour)
	for i := range previewKeep {
		p := filepath.Join(dir, previewInputName(fmt.Sprint("old", i)))
		os.WriteFile(p, []byte("x"), 0o600)
		os.Chtimes(p, old.Add(time.Duration(i)*time.Second), old.Add(time.Duration(i)*time.Second))
	}
	in := filepath.Join(e.svc.InputRoot(), "upload-x.mp4")
	os.WriteFile(in, []byte("new"), 0o644)
	e.svc.keepPreviewInput(&Task{ID: "new", Input: in})
	ents, _ := os.ReadDir(dir)
	names := map[string]bool{}
	for _, d := range ents {
		names[d.Name()] = true
	}
	if len(ents) != previewKeep || !names[previewInputName("new")] || names[previewInputName("old0")] || !names[previewInputName("old1")] {
		t.Errorf("kept %d inputs %v: want %d, the oldest gone", len(ents), names, previewKeep)
	}
	if _, err := os.Stat(in); err == nil {
		t.Error("the upload is still in the input root")
	}
}
