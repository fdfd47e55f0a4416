package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
)

// TestImages: an image in, an image out (PNG bitwise the model's output,
// JPEG of the right size); an opaque RGBA image restored as RGB; a video
// into an image refused.
func TestImages(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	png := filepath.Join(dir, "photo.png")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", png)
	out := filepath.Join(dir, "photo_x2.png")
	if _, err := vsr(t, "restore", png, "-o", out, "-s", "2", "--device", "cpu", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	info := probe(t, out)
	if !strings.Contains(info.Format, "png") || info.Codec != "png" || info.Width != 80 || info.Height != 60 || info.Frames != 1 {
		t.Fatalf("PNG output %+v", info)
	}
	m, err := compact.LoadBundled(cpu.New(0), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 80*60*3)
	if err := m.Upscale(context.Background(), decodeAll(t, probe(t, png)), 1, 40, 30, want, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(decodeAll(t, info), want) {
		t.Error("the PNG output is not the model's frame")
	}
	jpg := filepath.Join(dir, "photo.jpg")
	if _, err := vsr(t, "restore", png, "-o", jpg, "-s", "3", "--device", "cpu", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	if i := probe(t, jpg); i.Codec != "mjpeg" || i.Width != 120 || i.Height != 90 {
		t.Errorf("JPEG output %+v", i)
	}
	alpha := filepath.Join(dir, "alpha.png")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30,format=rgba", "-frames:v", "1", alpha)
	if _, err := vsr(t, "restore", alpha, "-o", filepath.Join(dir, "a.png"), "-s", "2", "--device", "cpu", "--progress", "none"); err != nil {
		t.Errorf("an opaque RGBA PNG: %v", err)
	} else if i := probe(t, filepath.Join(dir, "a.png")); i.PixFmt != "rgb24" {
		t.Errorf("an opaque RGBA PNG came out %s, want rgb24", i.PixFmt)
	}
	clip := genClip(t, dir, 3, false, "mp4")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", clip, "-o", filepath.Join(dir, "v.png")}, "is an image"},
	} {
		if _, err := vsr(t, append(c.args, "--device", "cpu", "--progress", "none")...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("vsr %v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}

// TestFolder: a folder of images and videos to a folder, names kept (or
// the -f format), other files left alone, existing outputs per -y, and
// two inputs that would write one output refused.
func TestFolder(t *testing.T) {
	needFFmpeg(t)
	src := filepath.Join(t.TempDir(), "in")
	os.Mkdir(src, 0o755)
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", filepath.Join(src, "a.png"))
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", filepath.Join(src, "b.jpg"))
	genClip(t, src, 2, false, "mp4")
	os.WriteFile(filepath.Join(src, "notes.txt"), []byte("x"), 0o644)
	dst := filepath.Join(t.TempDir(), "out") // created by vsr
	run := func(extra ...string) error {
		_, err := vsr(t, append([]string{"restore", src, "-o", dst, "-s", "2", "--device", "cpu", "--progress", "none"}, extra...)...)
		return err
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	if got := names(dst); got != "a.png,b.jpg,gen2_false.mp4" {
		t.Errorf("outputs %s", got)
	}
	if i := probe(t, filepath.Join(dst, "b.jpg")); i.Width != 80 || i.Height != 60 {
		t.Errorf("b.jpg %+v", i)
	}
	if err := run(); err == nil || !strings.Contains(err.Error(), "3 of the 3 files") {
		t.Errorf("again without -y: %v", err)
	}
	if err := run("-y"); err != nil {
		t.Errorf("again with -y: %v", err)
	}
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", filepath.Join(src, "a.jpg"))
	if err := run("-f", "png", "-y"); err == nil || !strings.Contains(err.Error(), "would both be written") {
		t.Errorf("a.png and a.jpg as png: %v", err)
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

// TestServeImage: the service writes an image for an image
// save_result_path, and refuses a video into one at run time.
func TestServeImage(t *testing.T) {
	needFFmpeg(t)
	a, svc, stop := serveWith(t, serveFlags{maxQueue: 100, base: cpuRestore})
	defer stop()
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", filepath.Join(svc.InputRoot(), "p.png"))
	sizedClip(t, filepath.Join(svc.InputRoot(), "v.mp4"), 24, 16, 3)
	id := a.submit(map[string]any{"video_path": "p.png", "sr_ratio": 2, "save_result_path": "p2.png"})
	m := a.wait(id, "completed", time.Minute)
	if i := probe(t, m["save_result_path"].(string)); i.Codec != "png" || i.Width != 80 {
		t.Errorf("image task output %+v", i)
	}
	id = a.submit(map[string]any{"video_path": "v.mp4", "save_result_path": "v.png"})
	if m := a.wait(id, "failed", time.Minute); !strings.Contains(m["error"].(string), "is an image") {
		t.Errorf("video into an image: %v", m["error"])
	}
	// The service hands inputs over as descriptors: alpha is still found,
	// and kept.
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='6*X'", "-frames:v", "1", filepath.Join(svc.InputRoot(), "alpha.png"))
	id = a.submit(map[string]any{"video_path": "alpha.png", "sr_ratio": 2, "save_result_path": "alpha2.png"})
	m = a.wait(id, "completed", time.Minute)
	if i := probe(t, m["save_result_path"].(string)); i.PixFmt != "rgba" || i.Width != 80 {
		t.Errorf("an RGBA image task's output %+v", i)
	}
}

// TestFolderSkipExisting: a folder run twice, the second time with
// --skip-existing, skips every file (exit 0, each entry "skipped" in
// --json, the outputs untouched); with one output removed it redoes only
// that one, and the summary line counts what it skipped. --skip-existing
// with -y is refused in one line; for one file whose output exists it
// exits 0 saying so, and a symbolic link there is refused.
func TestFolderSkipExisting(t *testing.T) {
	needFFmpeg(t)
	src := filepath.Join(t.TempDir(), "in")
	os.Mkdir(src, 0o755)
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=40x30", "-frames:v", "1", filepath.Join(src, "a.png"))
	clip := genClip(t, src, 2, false, "mp4")
	dst := filepath.Join(t.TempDir(), "out")
	run := func(extra ...string) (string, string, error) {
		return vsrOutputs(append([]string{"restore", src, "-o", dst, "-s", "2", "--device", "cpu", "--progress", "none"}, extra...)...)
	}
	statuses := func(stdout string) string {
		t.Helper()
		var doc []struct{ Output, Status, Error string }
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("--json: %v\n%s", err, stdout)
		}
		var s []string
		for _, e := range doc {
			s = append(s, filepath.Base(e.Output)+"="+e.Status)
		}
		return strings.Join(s, ",")
	}
	stdout, _, err := run("--json")
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(stdout); got != "a.png=restored,gen2_false.mp4=restored" {
		t.Errorf("first run: %s", got)
	}
	vout := filepath.Join(dst, "gen2_false.mp4")
	aSt, _ := os.Stat(filepath.Join(dst, "a.png"))
	vSt, _ := os.Stat(vout)

	stdout, _, err = run("--skip-existing", "--json")
	if err != nil {
		t.Fatalf("again with --skip-existing: %v", err)
	}
	if got := statuses(stdout); got != "a.png=skipped,gen2_false.mp4=skipped" {
		t.Errorf("again with --skip-existing: %s", got)
	}
	if a, _ := os.Stat(filepath.Join(dst, "a.png")); !os.SameFile(a, aSt) || !a.ModTime().Equal(aSt.ModTime()) {
		t.Error("a.png was rewritten")
	}
	if v, _ := os.Stat(vout); !os.SameFile(v, vSt) || !v.ModTime().Equal(vSt.ModTime()) {
		t.Error("the video was rewritten")
	}

	// The video's output removed (a private directory an interrupted run
	// left is no output): only it is redone.
	os.Remove(vout)
	os.Mkdir(filepath.Join(dst, ".gen2_false.vsr-1"), 0o700)
	_, stderr, err := run("--skip-existing")
	if err != nil {
		t.Fatalf("with the video's output removed: %v", err)
	}
	if !strings.Contains(stderr, "restored 1 of the 2 files into "+dst+"; skipped 1 existing") {
		t.Errorf("summary: %s", stderr)
	}
	if i := probe(t, vout); i.Width != 48 || i.Frames != 2 {
		t.Errorf("the video redone: %+v", i)
	}
	if a, _ := os.Stat(filepath.Join(dst, "a.png")); !os.SameFile(a, aSt) || !a.ModTime().Equal(aSt.ModTime()) {
		t.Error("a.png was rewritten")
	}

	if _, _, err := run("--skip-existing", "-y"); err == nil || !strings.Contains(err.Error(), "not both") || strings.Contains(err.Error(), "\n") {
		t.Errorf("--skip-existing -y: %v", err)
	}

	// One file: its existing output kept, exit 0, with a notice.
	_, stderr, err = vsrOutputs("restore", clip, "-o", vout, "--skip-existing", "--device", "cpu", "--progress", "none")
	if err != nil || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "exists; kept it") {
		t.Errorf("one file, its output existing: %v, %q", err, stderr)
	}
	link := filepath.Join(dst, "link.mp4")
	if err := os.Symlink(vout, link); err != nil {
		t.Fatal(err)
	}
	if _, err := vsr(t, "restore", clip, "-o", link, "--skip-existing", "--device", "cpu", "--progress", "none"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("one file, a symbolic link at its output: %v", err)
	}
}
