package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sizedFake is a fakeRunner that sizes outputs (Sizer): an input file
// holding "WxH" is a video of that size, and the output is the request's
// size, else the input times sr_ratio (1 when unset).
type sizedFake struct{ *fakeRunner }

func (f sizedFake) OutputSize(_ context.Context, r *Request, input string) (int, int, error) {
	if len(r.Size) == 2 {
		return r.Size[1], r.Size[0], nil
	}
	b, err := os.ReadFile(input)
	if err != nil {
		return 0, 0, err
	}
	var w, h int
	if _, err := fmt.Sscanf(string(b), "%dx%d", &w, &h); err != nil {
		return 0, 0, fmt.Errorf("not a video: %q", b)
	}
	s := max(r.SRRatio, 1)
	return int(float64(w) * s), int(float64(h) * s), nil
}

// inputOf writes content as the input file name.
func (e *env) inputOf(name, content string) {
	if err := os.WriteFile(filepath.Join(e.svc.InputRoot(), name), []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// TestParamsCheckedAsFields: a model parameter given in "params" is
// checked by the rules of its field (issue 35: a params size of
// 60000x60000 was accepted, then took the server down).
func TestParamsCheckedAsFields(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	for _, c := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"size": []int{60000, 60000}}, "target_shape"},
		{map[string]any{"target_shape": []int{0, 10}}, "target_shape"},
		{map[string]any{"sr_ratio": 1000}, "sr_ratio"},
		{map[string]any{"tile": -1}, "tile"},
		{map[string]any{"clip_len": -4}, "clip_len"},
		{map[string]any{"dit": "maybe"}, "dit"},
		{map[string]any{"size": "big"}, "size"},
		{map[string]any{"video_path": "/etc/passwd"}, "video_path"},
		{map[string]any{"save_result_path": "x.mp4"}, "save_result_path"},
	} {
		code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "params": c.params})
		wantError(t, fmt.Sprintf("params %v", c.params), code, m, 400, c.want)
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "sr_ratio": 2, "params": map[string]any{"sr_ratio": 3}})
	wantError(t, "sr_ratio twice", code, m, 400, "twice")
	// In range, a params value is the field's.
	id := e.submit(map[string]any{"video_path": "a.mp4", "params": map[string]any{"size": []int{48, 64}, "reae_frame_batch": 0}})
	m = e.wait(id, Completed)
	req := m["request"].(map[string]any)
	if fmt.Sprint(req["size"]) != "[48 64]" || fmt.Sprint(req["params"]) != "map[reae_frame_batch:0]" {
		t.Errorf("stored request %v", req)
	}
	if code, _, _ := e.do("GET", "/healthz", nil); code != 200 {
		t.Errorf("healthz %d", code)
	}
}

// TestOutputBudget: an output over Config.MaxOutputPixels is refused at
// submit, whether its size comes from target_shape, size, params or the
// scale applied to the input's size (issue 35: a 16384x16384
// target_shape, a 12000x12000 image at x4).
func TestOutputBudget(t *testing.T) {
	f := sizedFake{newFake(false)}
	e := newEnv(t, Config{MaxOutputPixels: 10000}, f)
	e.inputOf("small.png", "50x40")
	e.inputOf("big.png", "120x100")
	for _, body := range []map[string]any{
		{"video_path": "small.png", "target_shape": []int{16384, 16384}},
		{"video_path": "small.png", "size": []int{200, 100}},
		{"video_path": "small.png", "params": map[string]any{"size": []int{101, 100}}},
		{"video_path": "small.png", "sr_ratio": 4},
		{"video_path": "big.png"},
	} {
		code, m, _ := e.do("POST", "/v1/tasks/video/", body)
		wantError(t, fmt.Sprint(body), code, m, 400, "over this server's limit of 10000")
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "small.png", "sr_ratio": 4})
	wantError(t, "x4", code, m, 400, "200x160 = 32000 pixels")
	// An upload is sized as it was stored, and removed when refused.
	code, m = e.upload(map[string]string{"sr_ratio": "3"}, "up.png", []byte("50x40"))
	wantError(t, "upload x3", code, m, 400, "150x120")
	if n := names(e.svc.InputRoot()); strings.Contains(n, "upload") {
		t.Errorf("refused upload left: %s", n)
	}
	// Within the budget, and an input the runner cannot size (the run
	// reports it), are queued.
	e.wait(e.submit(map[string]any{"video_path": "small.png", "sr_ratio": 2, "save_result_path": "x2.png"}), Completed)
	e.wait(e.submit(map[string]any{"video_path": "small.png", "size": []int{100, 100}}), Completed)
	e.inputOf("junk.mp4", "junk")
	m = e.wait(e.submit(map[string]any{"video_path": "junk.mp4"}), Failed)
	if !strings.Contains(m["error"].(string), "not a video") {
		t.Errorf("unsizable input: %v", m["error"])
	}
	if got := len(f.ran); got != 2 {
		t.Errorf("the runner ran %d tasks, want 2", got)
	}
}

// TestRecoveredOverBudget: a task stored before the limit (pending, or
// running when the server died) fails at the next start instead of
// running (issue 35: the task that had taken the server down took it down
// again at each start).
func TestRecoveredOverBudget(t *testing.T) {
	data := t.TempDir()
	f := newFake(true)
	svc, err := New(withStore(Config{Data: data}), f)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(svc.InputRoot(), "a.png"), []byte("4000x3000"), 0o644)
	mk := func(r Request) string {
		t := &Task{ID: newID(), Input: filepath.Join(svc.InputRoot(), "a.png"), Request: r}
		t.Output = filepath.Join(svc.OutputRoot(), t.ID+".mp4")
		if err := svc.submit(t, ""); err != nil {
			panic(err)
		}
		return t.ID
	}
	running := mk(Request{SRRatio: 4})
	<-f.started
	pending := mk(Request{Params: map[string]any{"size": []any{60000.0, 60000.0}}}) // as an older version stored it
	small := mk(Request{})
	// A crash: the store says processing for running.
	svc.mu.Lock()
	svc.closing = true
	svc.mu.Unlock()
	svc.st.Close()
	svc.stop()
	svc.workers.Wait()

	f2 := sizedFake{newFake(false)}
	e := newEnv(t, Config{Data: data, MaxOutputPixels: 4000 * 3000}, f2)
	m := e.wait(running, Failed)
	if m["error_type"] != "OutputTooLarge" || !strings.Contains(m["error"].(string), "16000x12000") {
		t.Errorf("recovered running task: %v %v", m["error_type"], m["error"])
	}
	m = e.wait(pending, Failed)
	if !strings.Contains(m["error"].(string), "target_shape") {
		t.Errorf("recovered pending task: %v %v", m["error_type"], m["error"])
	}
	e.wait(small, Completed)
	if got := strings.Join(f2.ran, ","); got != small {
		t.Errorf("after restart ran %q, want only %s", got, small)
	}
}

// TestRequestStrings: control characters are refused in every path and
// name (issue 35: a NUL in save_result_path was accepted, then failed as
// "not writable"), as are HLS/DASH outputs of file tasks and task ids that
// an endpoint's path shadows.
func TestRequestStrings(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	for _, body := range []map[string]any{
		{"video_path": "a.mp4", "save_result_path": "out\x00.mp4"},
		{"video_path": "a.mp4\x00.txt"},
		{"video_path": "a.mp4", "save_result_path": "out\n.mp4"},
		{"video_path": "a.mp4", "model": "m\x1b[31m"},
		{"video_path": "a.mp4", "params": map[string]any{"temporal_grow": "after\x00"}},
		{"video_path": "a.mp4", "params": map[string]any{"x\x00": 1}},
		{"video_path": "a.mp4", "task_id": "a\x00b"},
	} {
		code, m, _ := e.do("POST", "/v1/tasks/video/", body)
		wantError(t, fmt.Sprintf("%q", body), code, m, 400, "control character")
	}
	code, m := e.upload(map[string]string{"save_result_path": "up\x00.mp4"}, "a.mp4", []byte("v"))
	wantError(t, "upload with a NUL", code, m, 400, "control character")
	for _, out := range []string{"live.m3u8", "sub/live.M3U8", "x.mpd"} {
		code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "save_result_path": out})
		wantError(t, out, code, m, 400, "HLS or DASH")
	}
	code, m, _ = e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "task_id": "queue"})
	wantError(t, "task_id queue", code, m, 400, "endpoint")
	code, m, _ = e.do("GET", "/v1/tasks/queue/status", nil)
	if _, ok := m["pending_count"]; code != 200 || !ok {
		t.Errorf("queue status: %d %v", code, m)
	}
	e.wait(e.submit(map[string]any{"video_path": "a.mp4", "task_id": "Queue"}), Completed)
	if names := names(e.svc.OutputRoot()); names != "Queue.mp4" {
		t.Errorf("outputs: %s", names)
	}
}

// TestReadOnlyToken: the read-only token reads (GET) and cannot submit,
// cancel or upload; the service's token can.
func TestReadOnlyToken(t *testing.T) {
	if _, err := New(Config{Data: t.TempDir(), ReadToken: "r"}, newFake(false)); err == nil {
		t.Errorf("a read-only token without a token is accepted")
	}
	e := newEnv(t, Config{Token: "w", ReadToken: "r"}, newFake(false))
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4"})
	e.wait(id, Completed)
	e.tok = "r"
	for _, p := range []string{"/v1/tasks/", "/v1/tasks/" + id + "/status", "/v1/tasks/" + id + "/result", "/v1/service/status", "/metrics"} {
		if code, m, _ := e.do("GET", p, nil); code != 200 {
			t.Errorf("read-only GET %s: %d %v", p, code, m)
		}
	}
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4"})
	wantError(t, "read-only submit", code, m, 403, "read-only")
	code, m, _ = e.do("DELETE", "/v1/tasks/"+id, nil)
	wantError(t, "read-only cancel", code, m, 403, "read-only")
	code, m, _ = e.do("POST", "/v1/streams", map[string]any{"input": "udp://127.0.0.1:1", "output": "udp://127.0.0.1:2"})
	wantError(t, "read-only stream", code, m, 403, "read-only")
	e.tok = "rw"
	code, m, _ = e.do("GET", "/v1/tasks/", nil)
	wantError(t, "another token", code, m, 401, "token")
	e.tok = "w"
	if code, m, _ := e.do("DELETE", "/v1/tasks/"+id, nil); code != 200 {
		t.Errorf("cancel with the token: %d %v", code, m)
	}
}
