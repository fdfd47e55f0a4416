package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// tinyImage writes a 24x16 PNG at path.
func tinyImage(t *testing.T, path string) {
	t.Helper()
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=24x16", "-frames:v", "1", path)
}

// TestFolderJSON: --json for a folder is one document with each file's
// result (an image's size and time too) or its error; a failure makes
// the exit status 1 without a second document, and each message on
// stderr names the file once.
func TestFolderJSON(t *testing.T) {
	needFFmpeg(t)
	src := filepath.Join(t.TempDir(), "in")
	os.Mkdir(src, 0o755)
	tinyImage(t, filepath.Join(src, "a.png"))
	bad := filepath.Join(src, "bad.png")
	os.WriteFile(bad, []byte("\x89PNG\r\n\x1a\nnot really"), 0o644)
	dst := filepath.Join(t.TempDir(), "out")
	stdout, stderr, err := vsrOutputs("restore", src, "-o", dst, "-s", "2", "--device", "cpu", "--progress", "none", "--json")
	var done *reportedError
	if err == nil || !errors.As(err, &done) || !strings.Contains(err.Error(), "1 of the 2 files") {
		t.Errorf("a folder with a damaged image: %v, want the count of failures, reported in the document", err)
	}
	var doc []struct {
		Input, Output, Error  string
		Frames, Width, Height int
		Seconds               float64
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || len(doc) != 2 {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if a := doc[0]; a.Input != filepath.Join(src, "a.png") || a.Output != filepath.Join(dst, "a.png") || a.Error != "" ||
		a.Frames != 1 || a.Width != 48 || a.Height != 32 || a.Seconds <= 0 {
		t.Errorf("a.png: %+v", a)
	}
	if b := doc[1]; b.Input != bad || b.Error == "" || strings.Count(b.Error, "bad.png") != 1 || b.Width != 0 {
		t.Errorf("bad.png: %+v", b)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.Contains(line, "bad.png") && strings.Count(line, bad) != 1 {
			t.Errorf("stderr names the file more than once: %q", line)
		}
	}
	// One file: its path once too.
	_, err = vsr(t, "restore", bad, "-o", filepath.Join(t.TempDir(), "b.png"), "--device", "cpu", "--progress", "none")
	if err == nil || strings.Count(err.Error(), bad) != 1 {
		t.Errorf("a damaged image: %v", err)
	}
}

// TestFolderOutputNamedAsFile: a folder into a name with an image or
// video extension that does not exist is refused, and nothing is made.
func TestFolderOutputNamedAsFile(t *testing.T) {
	needFFmpeg(t)
	src := filepath.Join(t.TempDir(), "in")
	os.Mkdir(src, 0o755)
	tinyImage(t, filepath.Join(src, "a.png"))
	dir := t.TempDir()
	for _, name := range []string{"x.png", "x.mp4"} {
		out := filepath.Join(dir, "out", name)
		_, err := vsr(t, "restore", src, "-o", out, "--device", "cpu", "--progress", "none")
		if err == nil || !strings.Contains(err.Error(), "must be a folder") || strings.Contains(err.Error(), "\n") {
			t.Errorf("-o %s: %v", name, err)
		}
	}
	onlyFiles(t, dir)
}

// TestFlagNames: messages name the command line's flags, not the
// service's request fields (which the service's messages keep).
func TestFlagNames(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 3, false, "mp4")
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"-o", filepath.Join(dir, "a.mp4"), "-s", "5"}, "--scale 5: the bundled model takes 2, 3 or 4", "sr_ratio"},
		{[]string{"-o", filepath.Join(dir, "a.mp4"), "--tile", "8"}, "--tile 8: want 0", "(--tile)"},
		{[]string{"-o", filepath.Join(dir, "a.png"), "-s", "2"}, "restore the first frame only (--frames 1)", "max_frames"},
	} {
		_, err := vsr(t, append([]string{"restore", in, "--device", "cpu", "--progress", "none"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.not) {
			t.Errorf("restore %v: %v, want %q without %q", c.args, err, c.want, c.not)
		}
	}
}

// TestFlagValues: a flag value that does not parse is told what the flag
// takes, without strconv's words.
func TestFlagValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "-s", "abc"}, `--scale: "abc" is not a number: use 2, 3 or 4`},
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "--frames", "1.5"}, `--frames: "1.5" is not a whole number: use a whole number (default 0)`},
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "--crf", "99999999999999999999"}, `--crf: "99999999999999999999" is out of range`},
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "--sr-ratio", "x"}, `--sr-ratio: "x" is not a number: use a number (default 2)`},
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "--stats-every", "5"}, `--stats-every: "5" is not a duration: use a duration such as 500ms, 5s or 1m30s`},
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "--json=maybe"}, `--json: "maybe" is not true or false`},
		{[]string{"restore", "in.mp4", "-o", "out.mp4", "-g", "first"}, `--gpu: "first" is not a number: use a GPU index`},
		{[]string{"serve", "--max-queue", "many"}, `--max-queue: "many" is not a number`},
	} {
		_, err := vsr(t, c.args...)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "strconv") || strings.Contains(err.Error(), "\n") {
			t.Errorf("vsr %v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestDefaultCodec: without --codec, the encoder follows the container,
// as ffmpeg's does: a .webm output (a file's or a live stream's) is VP9,
// not refused libx264.
func TestDefaultCodec(t *testing.T) {
	needFFmpeg(t)
	ctx := t.Context()
	for ext, want := range map[string]string{".mp4": "libx264", ".MKV": "libx264", ".mov": "libx264", ".avi": "libx264", ".webm": "libvpx-vp9", ".ogv": "libtheora"} {
		if got := video.DefaultCodec(ctx, ext); got != want && !(ext == ".webm" && strings.HasPrefix(got, "lib")) {
			t.Errorf("DefaultCodec(%s) = %s, want %s", ext, got, want)
		}
	}
	if video.DefaultCodec(ctx, ".webm") != "libvpx-vp9" {
		t.Skip("this ffmpeg has no libvpx-vp9")
	}
	dir := t.TempDir()
	in := genClip(t, dir, 2, true, "mp4")
	out := filepath.Join(dir, "out.webm")
	if _, err := vsr(t, "restore", in, "-o", out, "-s", "2", "--device", "cpu", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	if info := probe(t, out); info.Codec != "vp9" || info.Frames != 2 || !info.HasAudio {
		t.Errorf("out.webm: %+v", info)
	}
	live := filepath.Join(dir, "live.webm")
	if _, err := vsr(t, "restore", in, "-o", live, "--live", "-s", "2", "--device", "cpu", "--progress", "none", "--idle-timeout", "2s"); err != nil {
		t.Fatalf("--live into .webm: %v", err)
	}
	if info := probe(t, live); info.Codec != "vp9" {
		t.Errorf("live.webm: %+v", info)
	}
}

// TestFormatOneFile: -f with one file is ignored (as by
// realesrgan-ncnn-vulkan), with a note when the output's extension says
// another format.
func TestFormatOneFile(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "a.png")
	tinyImage(t, in)
	for out, note := range map[string]bool{"b.jpg": true, "b.png": false} {
		p := filepath.Join(dir, out)
		_, stderr, err := vsrOutputs("restore", in, "-o", p, "-f", "png", "-s", "2", "--device", "cpu", "--progress", "none")
		if err != nil {
			t.Fatalf("-f png -o %s: %v", out, err)
		}
		if got := strings.Contains(stderr, "note: -f (--format) png applies to a folder"); got != note {
			t.Errorf("-f png -o %s: note %v, stderr %q", out, got, stderr)
		}
		if info := probe(t, p); info.Width != 48 || info.Codec != map[bool]string{true: "mjpeg", false: "png"}[note] {
			t.Errorf("%s: %+v", out, info)
		}
	}
}

// TestNoDriverMessage: without an NVIDIA driver, -g 0 is refused in one
// short line that sends to vsr doctor, which keeps the paths searched.
func TestNoDriverMessage(t *testing.T) {
	needFFmpeg(t)
	if r, err := vsr(t, "doctor", "--json"); err == nil && strings.Contains(r, `"compute_capability"`) {
		t.Skip("this machine has a GPU")
	}
	dir := t.TempDir()
	in := genClip(t, dir, 2, false, "mp4")
	_, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "out.mp4"), "-g", "0", "--progress", "none")
	if err == nil || !strings.Contains(err.Error(), "no usable NVIDIA GPU") || !strings.Contains(err.Error(), "vsr doctor") ||
		strings.Contains(err.Error(), "searched") || len(err.Error()) > 160 {
		t.Errorf("-g 0 without a GPU: %v", err)
	}
	if v, _ := vsr(t, "doctor", "--verbose"); strings.Contains(v, "libcuda") && !strings.Contains(v, "searched:") {
		t.Errorf("doctor --verbose leaves out the paths searched:\n%s", v)
	}
}

// TestVersion: a build without VCS stamping says so instead of "dev".
func TestVersion(t *testing.T) {
	out, err := vsr(t, "version")
	if err != nil || !strings.HasPrefix(out, "vsr ") || strings.TrimSpace(out) == "vsr dev" || !strings.Contains(out, runtime.Version()) {
		t.Errorf("vsr version: %q %v", out, err)
	}
	for _, c := range []struct {
		set  string
		bi   *debug.BuildInfo
		want string
	}{
		{"v1.0.0", nil, "v1.0.0"},
		{"", nil, "(devel), unknown revision"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel), unknown revision"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}}, "dev-0123456789ab-dirty"},
	} {
		if got := versionOf(c.set, c.bi); got != c.want {
			t.Errorf("versionOf(%q, %+v) = %q, want %q", c.set, c.bi, got, c.want)
		}
	}
}

// TestServeDefaults: the service's messages name request fields where
// the command line's name flags; a service without --codec gives a task's
// output its container's encoder too.
func TestServeDefaults(t *testing.T) {
	needFFmpeg(t)
	base := cpuRestore
	base.codec = ""
	a, svc, stop := serveWith(t, serveFlags{maxQueue: 100, base: base})
	defer stop()
	sizedClip(t, filepath.Join(svc.InputRoot(), "v.mp4"), 24, 16, 2)
	if code, m := a.call("POST", "/v1/tasks/video/", map[string]any{"video_path": "v.mp4", "sr_ratio": 5}); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "sr_ratio 5: the bundled model takes 2, 3 or 4") {
		t.Errorf("sr_ratio 5: %d %v", code, m)
	}
	if video.DefaultCodec(t.Context(), ".webm") != "libvpx-vp9" {
		t.Skip("this ffmpeg has no libvpx-vp9")
	}
	for out, codec := range map[string]string{"v.webm": "vp9", "v.mkv": "h264"} {
		m := a.wait(a.submit(map[string]any{"video_path": "v.mp4", "sr_ratio": 2, "save_result_path": out}), "completed", time.Minute)
		if i := probe(t, m["save_result_path"].(string)); i.Codec != codec || i.Frames != 2 {
			t.Errorf("%s: %+v, want %s", out, i, codec)
		}
	}
}
