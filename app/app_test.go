package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/serve"
	"github.com/vsr-dev/vsr/video"
)

// level is a stand-in family registered from this test package: a model
// named "level:NAME" whose output frame is LEVEL - input, per byte
// (clamped), at the input's size. Nothing in cmd/, serve/ or app/ knows it.
type level struct{}

func init() { model.Register(level{}) }

func (level) Name() string            { return "level" }
func (level) Detect(spec string) bool { return strings.HasPrefix(spec, "level:") }
func (level) StorageType() string     { return "" }
func (level) About() model.About {
	return model.About{Title: "level", Spec: "level:NAME (a test model)"}
}
func (level) Params() []model.Param {
	return []model.Param{{Name: "level", Kind: model.Int, Default: 255, Help: "level: the value inputs are subtracted from"},
		{Name: "level-dump", Kind: model.String, Local: true, Help: "level: a path on the host (the command line's only)"}}
}

func (level) Load(dev backend.Backend, spec string, p model.Params) (model.Model, error) {
	return levelModel{name: spec, def: p}, nil
}

type levelModel struct {
	name string
	def  model.Params
}

func (m levelModel) Name() string { return m.name }
func (m levelModel) Describe() map[string]any {
	return map[string]any{"name": m.name, "family": "level"}
}
func (m levelModel) Close() {}
func (m levelModel) NewSession(_ context.Context, v model.Video, p model.Params) (model.Session, error) {
	l, ok := p.Set["level"].(int)
	if !ok {
		l = m.def.Int("level")
	}
	return &levelSession{level: l}, nil
}

type levelSession struct{ level int }

func (s *levelSession) OutputSize(w, h int) (int, int) { return w, h }
func (s *levelSession) Close()                         {}

type hostBatch struct {
	in, out, rgb []byte
	f            backend.PixelFormat
	w, h         int
}

func (b *hostBatch) In() []byte  { return b.in }
func (b *hostBatch) Out() []byte { return b.out }
func (b *hostBatch) Wait() error { return nil }
func (b *hostBatch) Free()       {}

func (s *levelSession) NewBatch(n, w, h int, _, f backend.PixelFormat) (backend.Batch, error) {
	return &hostBatch{in: make([]byte, n*w*h*3), out: make([]byte, n*f.FrameBytes(w, h)), rgb: make([]byte, n*w*h*3), f: f, w: w, h: h}, nil
}

func (s *levelSession) Start(_ context.Context, bt backend.Batch, k int) error {
	b := bt.(*hostBatch)
	for i, v := range b.in[:k*b.w*b.h*3] {
		b.rgb[i] = byte(min(max(s.level-int(v), 0), 255))
	}
	if b.f == backend.YUV420P {
		if err := backend.RGBToYUV(b.out, b.rgb, b.f, k, b.w, b.h); err != nil {
			return err
		}
	} else {
		copy(b.out, b.rgb[:k*b.w*b.h*3])
	}
	return nil
}

// frames decodes a video to packed RGB24.
func frames(t *testing.T, path string) []byte {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-").Output()
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return out
}

// clip writes a lossless RGB test clip.
func clip(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-frames:v", "6",
		"-c:v", "ffv1", "-pix_fmt", "gbrp", path).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
}

func wantLevel(t *testing.T, in, out []byte, l int) {
	t.Helper()
	if len(in) != len(out) || len(in) == 0 {
		t.Fatalf("output of %d bytes for an input of %d", len(out), len(in))
	}
	for i := range in {
		if int(out[i]) != min(max(l-int(in[i]), 0), 255) {
			t.Fatalf("byte %d: %d from %d, want %d - input", i, out[i], in[i], l)
		}
	}
}

// TestStandInFamily runs a family registered from a test package end to
// end through app (a job) and through the service (an HTTP task with its
// parameter in "params"), and checks the refusals of parameters of other
// families.
func TestStandInFamily(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mkv")
	clip(t, in)
	src := frames(t, in)

	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := app.Load(devs[0], "level:x", model.Values{"level": 200}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ld.Family.Name() != "level" {
		t.Fatalf("family %s", ld.Family.Name())
	}
	out := filepath.Join(dir, "out.mkv")
	res, err := ld.Run(context.Background(), app.Job{Input: in, Output: out, Params: model.Values{"level": 200},
		Encode: video.EncodeOptions{Codec: "ffv1", PixFmt: "gbrp"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Frames != 6 || res.Width != 32 || res.Height != 24 {
		t.Errorf("result %+v", res)
	}
	wantLevel(t, src, frames(t, out), 200)
	if _, err := app.Load(devs[0], "level:x", model.Values{"clip-len": 8}, nil); err == nil || !strings.Contains(err.Error(), "swiftvr") {
		t.Errorf("--clip-len on the level family: %v", err)
	}
	ld.Close()

	// Through the service, with nothing of it changed.
	run, err := app.NewRunner(devs[:1], app.Served{Specs: []string{"level:x"},
		Base: app.Job{Encode: video.EncodeOptions{Codec: "ffv1", PixFmt: "gbrp"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	svc, err := serve.New(serve.Config{Data: t.TempDir(), InputRoot: dir}, run)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	post := func(body string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+"/v1/tasks/video/", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	// A refused value is echoed as it was sent, not as %v prints a float64.
	if code, m := post(`{"video_path": "in.mkv", "save_result_path": "big.mkv", "params": {"level": 2147483647}}`); code != 400 ||
		!strings.Contains(fmt.Sprint(m["error"]), ": 2147483647: want a whole number") {
		t.Errorf("level 2147483647: %d %v", code, m)
	}
	code, m := post(`{"video_path": "in.mkv", "save_result_path": "served.mkv", "params": {"level": 100}}`)
	if code != 200 {
		t.Fatalf("submit: %d %v", code, m)
	}
	id := m["task_id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/v1/tasks/" + id + "/status")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m["status"] == "completed" {
			break
		}
		if m["status"] == "failed" || time.Now().After(deadline) {
			t.Fatalf("task: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantLevel(t, src, frames(t, m["save_result_path"].(string)), 100)
	for body, want := range map[string]string{
		`{"video_path": "in.mkv", "clip_len": 8}`:                            "swiftvr",
		`{"video_path": "in.mkv", "sr_ratio": 3}`:                            "compact",
		`{"video_path": "in.mkv", "params": {"level": "hi"}}`:                "level",
		`{"video_path": "in.mkv", "params": {"colour": "on"}}`:               "colour",
		`{"video_path": "in.mkv", "segments": 1, "params": {"segments": 2}}`: "given twice",
		`{"video_path": "in.mkv", "params": {"level_dump": "/etc"}}`:         "names a path on the server",
	} {
		if code, m := post(body); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), want) {
			t.Errorf("%s: %d %v, want 400 naming %q", body, code, m, want)
		}
	}
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(run.Metadata())
	if !strings.Contains(buf.String(), `"family":"level"`) {
		t.Errorf("metadata %s", buf.String())
	}
}
