package main

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/serve"
)

// TestServeOutputBudget runs the real runner (bundled model on the CPU)
// under a small pixel budget: what issue 35 found is refused at submit,
// and the server goes on serving. A params size of 60000x60000 was
// accepted and took the server down; a 16384x16384 target_shape ran for
// minutes; an image at x4 grew past 3 GB.
func TestServeOutputBudget(t *testing.T) {
	needFFmpeg(t)
	run, err := newServeRunner(newServe(), serveFlags{maxQueue: 100, base: cpuRestore}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	svc, err := serve.New(serve.Config{Data: t.TempDir(), Workers: run.Workers(), MaxOutputPixels: 20000}, run)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	a := api{t, srv.URL}
	png := filepath.Join(svc.InputRoot(), "p.png")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=64x48", "-frames:v", "1", png)
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"video_path": "p.png", "params": map[string]any{"size": []int{60000, 60000}}}, "target_shape"},
		{map[string]any{"video_path": "p.png", "target_shape": []int{16384, 16384}}, "16384x16384"},
		{map[string]any{"video_path": "p.png", "params": map[string]any{"size": []int{200, 200}}}, "model's output (resized to 200x200 after) would be 256x192"},
		{map[string]any{"video_path": "p.png", "sr_ratio": 4, "save_result_path": "p4.png"}, "256x192 = 49152 pixels, over this server's limit of 20000"},
		{map[string]any{"video_path": "p.png", "model": "realesr-animevideov3-x3"}, "192x144"},
	} {
		code, m := a.call("POST", "/v1/tasks/video/", c.body)
		if e, _ := m["error"].(string); code != 400 || !strings.Contains(e, c.want) {
			t.Errorf("%v: %d %v, want 400 naming %q", c.body, code, m, c.want)
		}
	}
	// An upload at x4: refused, and not kept.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("sr_ratio", "4")
	fw, _ := mw.CreateFormFile("video", "up.png")
	b, _ := os.ReadFile(png)
	fw.Write(b)
	mw.Close()
	resp, err := http.Post(srv.URL+"/v1/tasks/video/upload", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("upload at x4: %d", resp.StatusCode)
	}
	if ents, _ := os.ReadDir(svc.InputRoot()); len(ents) != 1 {
		t.Errorf("input root after a refused upload: %v", ents)
	}
	// The server is alive and runs what fits.
	if code, _ := a.call("GET", "/healthz", nil); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	m := a.wait(a.submit(map[string]any{"video_path": "p.png", "sr_ratio": 2, "save_result_path": "p2.png"}), serve.Completed, time.Minute)
	if i := probe(t, m["save_result_path"].(string)); i.Width != 128 || i.Height != 96 {
		t.Errorf("x2 output %dx%d", i.Width, i.Height)
	}
}

// TestRestoreMaxOutputPixels: vsr restore refuses an output over
// --max-output-pixels before any work, naming the flag, and restores it
// when the flag allows it.
func TestRestoreMaxOutputPixels(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	png := filepath.Join(dir, "p.png")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", png)
	out := filepath.Join(dir, "p4.png")
	_, err := vsr(t, "restore", png, "-o", out, "-s", "4", "--device", "cpu", "--progress", "none", "--max-output-pixels", "10000")
	if err == nil || !strings.Contains(err.Error(), "160x120 = 19200 pixels, over --max-output-pixels 10000") {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("an output was written")
	}
	if _, err := vsr(t, "restore", png, "-o", out, "-s", "4", "--device", "cpu", "--progress", "none", "--max-output-pixels", "19200"); err != nil {
		t.Fatal(err)
	}
	// A folder: the image over the limit fails alone.
	in := filepath.Join(dir, "in")
	os.Mkdir(in, 0o755)
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", filepath.Join(in, "big.png"))
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=20x16", "-frames:v", "1", filepath.Join(in, "small.png"))
	_, err = vsr(t, "restore", in, "-o", filepath.Join(dir, "out"), "-s", "2", "--device", "cpu", "--progress", "none", "--max-output-pixels", "2000")
	if err == nil || !strings.Contains(err.Error(), "1 of the 2 files") {
		t.Errorf("folder: %v", err)
	}
	if n := names(filepath.Join(dir, "out")); n != "small.png" {
		t.Errorf("folder outputs: %s", n)
	}
}

// TestReadTokenFlags: the read-only token comes from --read-token-file or
// $VSR_READ_TOKEN, needs --token and must differ from it.
func TestReadTokenFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "read.token")
	os.WriteFile(file, []byte("dash\n"), 0o600)
	t.Setenv("VSR_READ_TOKEN", "")
	if tok, err := readTokenOf(serveFlags{token: "w", readTokenFile: file}); err != nil || tok != "dash" {
		t.Errorf("from the file: %q %v", tok, err)
	}
	if _, err := readTokenOf(serveFlags{readTokenFile: file}); err == nil || !strings.Contains(err.Error(), "--token") {
		t.Errorf("without --token: %v", err)
	}
	if _, err := readTokenOf(serveFlags{token: "dash", readTokenFile: file}); err == nil {
		t.Errorf("the same token is accepted")
	}
	t.Setenv("VSR_READ_TOKEN", "env")
	if tok, err := readTokenOf(serveFlags{token: "w"}); err != nil || tok != "env" {
		t.Errorf("from the environment: %q %v", tok, err)
	}
}
