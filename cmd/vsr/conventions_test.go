package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// TestConventions: the conventions of ffmpeg and realesrgan-ncnn-vulkan.
// An existing output is kept unless -y; -i, -s, -t, -n, -y work as there;
// --encoder-opt reaches the encoder.
func TestConventions(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 3, false, "mp4")
	out := filepath.Join(dir, "out.mp4")
	if err := os.WriteFile(out, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := vsr(t, "restore", in, "-o", out, "--progress", "none", "--device", "cpu", "-s", "2")
	if err == nil || !strings.Contains(err.Error(), "-y") {
		t.Errorf("restore over an existing output: %v", err)
	}
	if got, _ := os.ReadFile(out); string(got) != "mine" {
		t.Fatalf("the existing output was replaced without -y")
	}
	if _, err := vsr(t, "restore", "-i", in, "-o", out, "-y", "-s", "2", "-t", "32", "--progress", "none", "--device", "cpu",
		"--encoder-opt", "tune=film", "--encoder-opt", "x264-params=keyint=2"); err != nil {
		t.Fatalf("restore -i -y -s -t --encoder-opt: %v", err)
	}
	checkOutput(t, out, 3, 48, 32)
	out3 := filepath.Join(dir, "out3.mp4")
	if _, err := vsr(t, "restore", in, "-o", out3, "-n", "realesr-animevideov3-x3", "--progress", "none", "--device", "cpu"); err != nil {
		t.Fatalf("restore -n: %v", err)
	}
	checkOutput(t, out3, 3, 72, 48)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", in, "-i", in, "-o", filepath.Join(dir, "a.mp4")}, "usage"},
		{[]string{"restore", "-o", filepath.Join(dir, "a.mp4")}, "no input"},
		{[]string{"restore", in, "-o", filepath.Join(dir, "a.mp4"), "--device", "cpu", "--encoder-opt", "=1"}, "encoder option"},
		{[]string{"restore", in, "-o", filepath.Join(dir, "a.mp4"), "-g", "0", "--device", "cpu"}, "-g"},
		{[]string{"restore", in, "-o", filepath.Join(dir, "a.mp4"), "--device", "cpu", "-t", "8"}, "at least 32"},
	} {
		if _, err := vsr(t, append(c.args, "--progress", "none")...); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("vsr %v: %v, want one line naming %q", c.args, err, c.want)
		}
	}
}

// TestExitCodes runs the built binary: Ctrl-C exits 130 and SIGTERM 143
// (as shells report), saying "interrupted" (not "context canceled") and
// leaving no output; --json prints the error as JSON, and for a folder
// only the one document that reports each file.
func TestExitCodes(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	in := filepath.Join(dir, "long.mp4")
	sizedClip(t, in, 64, 48, 200)
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		say := map[syscall.Signal]string{syscall.SIGINT: "vsr: interrupted\n", syscall.SIGTERM: "vsr: interrupted (SIGTERM)\n"}[sig]
		out := filepath.Join(dir, "out.mp4")
		cmd := exec.Command(bin, "restore", in, "-o", out, "--device", "cpu", "--progress", "plain")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the first progress line: the restore is under way.
		buf := make([]byte, 256)
		n, _ := stderr.Read(buf)
		cmd.Process.Signal(sig)
		var rest []byte
		done := make(chan error, 1)
		go func() { rest, _ = io.ReadAll(stderr); done <- cmd.Wait() }() // Wait after the reads
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != want {
				t.Errorf("%v: exit %v, want %d", sig, err, want)
			}
			if all := string(buf[:n]) + string(rest); !strings.HasSuffix(all, say) || strings.Contains(all, "context canceled") {
				t.Errorf("%v: stderr %q, want it to end %q", sig, all, say)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%v: vsr did not stop", sig)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: an output was left", sig)
		}
	}
	out, err := exec.Command(bin, "restore", filepath.Join(dir, "missing.mp4"), "-o", filepath.Join(dir, "x.mp4"), "--json").Output()
	var ee *exec.ExitError
	var m map[string]string
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || json.Unmarshal(out, &m) != nil || !strings.Contains(m["error"], "missing.mp4") {
		t.Errorf("--json on failure: %v, stdout %q", err, out)
	}
	folder := filepath.Join(dir, "folder")
	os.Mkdir(folder, 0o755)
	os.WriteFile(filepath.Join(folder, "bad.png"), []byte("\x89PNG\r\n\x1a\nnot really"), 0o644)
	out, err = exec.Command(bin, "restore", folder, "-o", filepath.Join(dir, "outs"), "--json", "--device", "cpu").Output()
	var doc []map[string]any
	if dec := json.NewDecoder(bytes.NewReader(out)); !errors.As(err, &ee) || ee.ExitCode() != 1 || dec.Decode(&doc) != nil || len(doc) != 1 || doc[0]["error"] == nil || dec.More() {
		t.Errorf("--json for a folder with a failure: %v, stdout %q, want one document naming the failure", err, out)
	}
	// A folder interrupted: still the one document, the file not finished
	// marked so.
	os.Remove(filepath.Join(folder, "bad.png"))
	if err := os.Rename(in, filepath.Join(folder, "long.mp4")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "restore", folder, "-o", filepath.Join(dir, "outs2"), "--json", "--device", "cpu", "--progress", "plain")
	stderr, _ := cmd.StderrPipe()
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	stderr.Read(buf) // the first progress line
	cmd.Process.Signal(syscall.SIGINT)
	go io.Copy(io.Discard, stderr)
	err = cmd.Wait()
	doc = nil
	if dec := json.NewDecoder(&stdout); !errors.As(err, &ee) || ee.ExitCode() != 130 || dec.Decode(&doc) != nil || len(doc) != 1 || doc[0]["error"] != "interrupted" || dec.More() {
		t.Errorf("--json for an interrupted folder: %v, stdout %q, want one document marking the file interrupted", err, stdout.String())
	}
}

// TestNotAModel: PyTorch pickles that are no state dict, plain
// directories and missing paths given as --model or to checkpoint inspect
// are named for what they are.
func TestNotAModel(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 2, false, "mp4")
	pth := filepath.Join(dir, "RealESRGAN_x4plus.pth")
	os.WriteFile(pth, []byte{0x80, 0x02, 'K', 0x01, '.'}, 0o644) // a pickle stream (protocol 2)
	plain := filepath.Join(dir, "weights")
	os.Mkdir(plain, 0o755)
	os.WriteFile(filepath.Join(plain, "reae.safetensors"), []byte("x"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", in, "-o", filepath.Join(dir, "a.mp4"), "--model", pth}, "not a torch.save file"},
		{[]string{"restore", in, "-o", filepath.Join(dir, "a.mp4"), "--model", plain}, "no transformer/"},
		{[]string{"restore", in, "-o", filepath.Join(dir, "a.mp4"), "--model", filepath.Join(dir, "nothing")}, "no such file"},
		{[]string{"checkpoint", "inspect", pth}, "PyTorch pickle"},
		{[]string{"checkpoint", "inspect", plain}, "not a SwiftVR checkpoint"},
	} {
		if _, err := vsr(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("vsr %v: %v, want one line naming %q", c.args, err, c.want)
		}
	}
}

// TestMessages: what a new user's first mistakes get told.
func TestMessages(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 2, false, "mp4")
	text := filepath.Join(dir, "notes.mp4")
	os.WriteFile(text, []byte("hello, this is a text file\n"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "o.mp4")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", text, "-o", out}, "does not begin as an MP4 file does"},
		{[]string{"restore", fifo, "-o", out}, "live input " + fifo + ": nothing arrived within"}, // a FIFO is a live source
		{[]string{"restore", in, "-o", dir}, "is a directory: give a file name"},
		{[]string{"restore", in, "-o", out, "--frames", "-1"}, "--frames -1"},
		{[]string{"restore", in, in, "-o", out}, "usage: vsr restore"},
		{[]string{"probe"}, "usage: vsr probe"},
		// Checked before any work, with ffmpeg's message and what to do.
		{[]string{"restore", in, "-o", filepath.Join(dir, "x.webm"), "--codec", "libx264"}, ".webm takes libvpx-vp9"},
		{[]string{"restore", in, "-o", filepath.Join(dir, "x.gif")}, "use .mp4, .mkv"},
		{[]string{"restore", in, "-o", out, "--preset", "bogus"}, "--preset takes the presets of libx264"},
		{[]string{"restore", in, "-o", out, "--pix-fmt", "bogus"}, "--pix-fmt takes"},
		{[]string{"restore", in, "-o", out, "--encoder-opt", "bogusopt=1"}, "--encoder-opt is not an option"},
	} {
		_, err := vsr(t, append(c.args, "--progress", "none")...)
		if c.args[0] == "probe" {
			_, err = vsr(t, c.args...)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("vsr %v: %v, want one line naming %q", c.args, err, c.want)
		}
	}
	help, _ := vsr(t, "restore", "--help")
	if !strings.Contains(help, "--model string") {
		t.Errorf("restore --help: the --model placeholder is not \"string\"")
	}
	doc, err := vsr(t, "doctor")
	if err != nil || !strings.Contains(doc, "video tools:") || !strings.Contains(doc, "ffmpeg") {
		t.Errorf("doctor: %v\n%s", err, doc)
	}
	if strings.Contains(doc, "no NVIDIA GPU") && (!strings.Contains(doc, "vsr will use the CPU") || strings.Contains(doc, "searched:")) {
		t.Errorf("doctor without a GPU:\n%s", doc)
	}
	if v, _ := vsr(t, "doctor", "--verbose"); strings.Contains(doc, "missing") && !strings.Contains(v, "searched:") {
		t.Errorf("doctor --verbose leaves out the paths searched")
	}
}

// TestStreamsAndNotes: probe lists every stream; restore says in one line
// on stderr what the output carries and drops, also with --progress none,
// and --json has it as fields; and it names the stale temporaries beside
// the output.
func TestStreamsAndNotes(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	srt := filepath.Join(dir, "subs.srt")
	os.WriteFile(srt, []byte("1\n00:00:00,000 --> 00:00:01,000\nhello\n"), 0o644)
	in := filepath.Join(dir, "in.mkv")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i", "sine=duration=1", "-i", srt,
		"-frames:v", "3", "-map", "0:v", "-map", "1:a", "-map", "2:s", "-c:v", "libx264", "-c:a", "libvorbis", "-c:s", "srt", "-shortest",
		"-metadata", "title=Notes", in)
	out, err := vsr(t, "probe", in)
	if err != nil || !strings.Contains(out, "stream #2") || !strings.Contains(out, "subtitle subrip") || !strings.Contains(out, "audio vorbis") {
		t.Errorf("probe: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(dir, ".old.vsr-123.mp4"), []byte("partial"), 0o644)
	mkv := filepath.Join(dir, "out.mkv")
	_, stderr, err := vsrOutputs("restore", in, "-o", mkv, "--device", "cpu", "-s", "2", "--progress", "plain")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, mkv+" carries: video, colour chroma left, audio #1 vorbis, subtitle #2 subrip, title") || !strings.Contains(stderr, ".old.vsr-123.mp4") {
		t.Errorf("restore notes:\n%s", stderr)
	}
	mp4 := filepath.Join(dir, "out.mp4")
	stdout, stderr, err := vsrOutputs("restore", in, "-o", mp4, "--device", "cpu", "-s", "2", "--progress", "none", "--json", "--no-metadata")
	if err != nil {
		t.Fatal(err)
	}
	line := mp4 + " carries: video, colour chroma left, audio #1 vorbis as aac, subtitle #2 subrip as mov_text; drops: metadata (--no-metadata)\n"
	if stderr != line {
		t.Errorf("--progress none: stderr %q, want %q", stderr, line)
	}
	var res struct {
		Carried []string     `json:"carried"`
		Dropped []video.Drop `json:"dropped"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Carried, ",") != "colour chroma left,audio #1 vorbis as aac,subtitle #2 subrip as mov_text" || len(res.Dropped) != 1 || res.Dropped[0].Why != "--no-metadata" {
		t.Errorf("--json: %s", stdout)
	}
	if _, stderr, err := vsrOutputs("restore", in, "-o", filepath.Join(dir, "nosubs.mkv"), "--device", "cpu", "-s", "2", "--progress", "none", "--no-subtitles"); err != nil || !strings.Contains(stderr, "drops: subtitle #2 subrip (--no-subtitles)") {
		t.Errorf("--no-subtitles: %v %q", err, stderr)
	}
}

// TestSegmentsExactDuration: segments joined keep the exact duration
// (50 frames at 24 fps: 2.083333 s, not 2.084310 s as the containers'
// rounded durations once made it).
func TestSegmentsExactDuration(t *testing.T) {
	needFFmpeg(t)
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("no ffprobe")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=24", "-frames:v", "50", "-c:v", "libx264", in)
	for _, ext := range []string{"mp4", "mov"} {
		out := filepath.Join(dir, "out."+ext)
		if _, err := vsr(t, "restore", in, "-o", out, "--segments", "3", "-s", "2", "--device", "cpu", "--progress", "none"); err != nil {
			t.Fatal(err)
		}
		d, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "stream=duration", "-of", "csv=p=0", out).Output()
		if err != nil || strings.TrimSpace(string(d)) != "2.083333" {
			t.Errorf("%s: video duration %q (%v), want 2.083333", ext, d, err)
		}
	}
}

// TestModelsCommand: vsr models lists the fetchable models with where they
// go, says what an ncnn .param needs, and a fetchable model that is not
// there is named with the command that fetches it; --tile that is mostly
// halo is warned about.
func TestModelsCommand(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	t.Setenv("VSR_MODELS", filepath.Join(dir, "models"))
	out, err := vsr(t, "models")
	if err != nil || !strings.Contains(out, "realesrgan-x4plus") || !strings.Contains(out, "vsr models fetch realesrgan-x4plus") || !strings.Contains(out, filepath.Join(dir, "models")) {
		t.Errorf("vsr models: %v\n%s", err, out)
	}
	out, err = vsr(t, "models", "../../testdata/compact/dense-8.param")
	if err != nil || !strings.Contains(out, "Concat") || !strings.Contains(out, "vsr runs it") || !strings.Contains(out, "scale        x2") {
		t.Errorf("vsr models dense-8.param: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.param")
	os.WriteFile(bad, []byte("7767517\n2 2\nInput in 0 1 data\nHardSwish s 1 1 data out\n"), 0o644)
	if out, err = vsr(t, "models", bad); err != nil || !strings.Contains(out, "vsr cannot run it: no HardSwish") {
		t.Errorf("vsr models bad.param: %v\n%s", err, out)
	}
	in := genClip(t, dir, 2, false, "mp4")
	_, err = vsr(t, "restore", in, "-o", filepath.Join(dir, "a.mp4"), "-n", "realesrgan-x4plus")
	if err == nil || !strings.Contains(err.Error(), "vsr models fetch realesrgan-x4plus") {
		t.Errorf("restore with a model not fetched: %v", err)
	}
	if _, err := vsr(t, "models", "fetch", "nope"); err == nil || !strings.Contains(err.Error(), "realesrgan-x4plus") {
		t.Errorf("fetch of an unknown model: %v", err)
	}
	big := filepath.Join(dir, "big.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=160x96:rate=10:duration=0.2", "-pix_fmt", "yuv420p", big)
	_, stderr, err := vsrOutputs("restore", big, "-o", filepath.Join(dir, "t.mp4"), "--tile", "32", "--frames", "1", "--scale", "2", "--progress", "none")
	if err != nil || !strings.Contains(stderr, "warning: --tile 32") {
		t.Errorf("--tile 32 on a 160x96 clip: %v, stderr %q", err, stderr)
	}
}

// frameTimes returns the presentation times of a file's video frames in
// seconds, sorted, as ffmpeg's framecrc muxer reports its packets.
func frameTimes(t *testing.T, path string) []float64 {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-c", "copy", "-f", "framecrc", "-").Output()
	if err != nil {
		t.Fatalf("framecrc %s: %v", path, err)
	}
	var num, den float64
	var times []float64
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "#tb 0: "); ok {
			fmt.Sscanf(v, "%g/%g", &num, &den)
		}
		if f := strings.Split(line, ","); len(f) >= 6 && !strings.HasPrefix(line, "#") {
			var p float64
			fmt.Sscan(strings.TrimSpace(f[2]), &p)
			times = append(times, p*num/den)
		}
	}
	sort.Float64s(times)
	return times
}

// TestVariableFrameRate: a clip whose frames are not evenly spaced (20
// frames, a 0.6 s gap after the tenth) keeps each frame's time by default
// (MP4 and Matroska, whole and an excerpt, with --segments), or is spaced
// evenly over the same duration with --vfr cfr; vsr probe says it is VFR.
func TestVariableFrameRate(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	var want []float64
	for i := 0; i < 20; i++ {
		s := float64(i) / 10
		if i >= 10 {
			s += 0.5
		}
		want = append(want, s)
	}
	for _, ext := range []string{"mp4", "mkv"} {
		in := filepath.Join(dir, "vfr."+ext)
		args := []string{"-f", "lavfi", "-i", "testsrc2=size=32x24:rate=10:duration=2", "-f", "lavfi", "-i", "sine=duration=2.5",
			"-vf", "setpts=N/10/TB+if(gte(N\\,10)\\,0.5/TB\\,0)", "-vsync", "vfr", "-pix_fmt", "yuv420p", "-shortest"}
		if ext == "mp4" {
			args = append(args, "-video_track_timescale", "1000")
		}
		ffmpeg(t, append(args, in)...)
		out, err := vsr(t, "probe", in, "--json")
		if err != nil || !strings.Contains(out, `"vfr": true`) {
			t.Fatalf("probe %s: %v\n%s", in, err, out)
		}
		for _, c := range []struct {
			name   string
			args   []string
			frames int
		}{
			{"keep", nil, 20},
			{"keep-segments", []string{"--segments", "3"}, 20},
			{"excerpt", []string{"--frames", "12"}, 12},
		} {
			o := filepath.Join(dir, c.name+"."+ext)
			if _, err := vsr(t, append([]string{"restore", in, "-o", o, "-s", "2", "--progress", "none"}, c.args...)...); err != nil {
				t.Fatalf("%s %s: %v", ext, c.name, err)
			}
			got := frameTimes(t, o)
			if len(got) != c.frames {
				t.Fatalf("%s %s: %d frames, want %d", ext, c.name, len(got), c.frames)
			}
			for i := range got {
				if math.Abs(got[i]-got[0]-want[i]) > 0.0015 {
					t.Errorf("%s %s: frame %d at %.4f s, want %.4f s", ext, c.name, i, got[i]-got[0], want[i])
					break
				}
			}
		}
		o := filepath.Join(dir, "cfr."+ext)
		if _, err := vsr(t, "restore", in, "-o", o, "-s", "2", "--progress", "none", "--vfr", "cfr", "--segments", "3", "--crf", "0"); err != nil {
			t.Fatal(err)
		}
		got := frameTimes(t, o)
		if len(got) != 20 || math.Abs(got[19]-got[0]-19*0.125) > 0.0015 || math.Abs(got[1]-got[0]-0.125) > 0.0015 {
			t.Errorf("%s --vfr cfr: frame times %v, want 20 frames 0.125 s apart (2.5 s / 20)", ext, got)
		}
		// The segments start at the right frames: losslessly encoded
		// (libx264 CRF 0), 3 segments decode to 1 segment's frames.
		one := filepath.Join(dir, "cfr1."+ext)
		if _, err := vsr(t, "restore", in, "-o", one, "-s", "2", "--progress", "none", "--vfr", "cfr", "--segments", "1", "--crf", "0"); err != nil {
			t.Fatal(err)
		}
		if a, b := videoMD5(t, o), videoMD5(t, one); a != b {
			t.Errorf("%s --vfr cfr: 3 segments give frames other than 1 segment", ext)
		}
	}
	if _, err := vsr(t, "restore", "x.mp4", "-o", "y.mp4", "--vfr", "drop"); err == nil || !strings.Contains(err.Error(), "--vfr") {
		t.Errorf("--vfr drop: %v", err)
	}
}

// videoMD5 is the MD5 of a file's decoded video frames.
func videoMD5(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-f", "md5", "-").Output()
	if err != nil {
		t.Fatalf("md5 %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

// TestTruncatedSalvage: a truncated video is refused with the count of
// its decodable frames, and --frames up to that count restores them.
func TestTruncatedSalvage(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	for _, ext := range []string{"mp4", "mkv"} {
		whole := filepath.Join(dir, "whole."+ext)
		ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24:duration=2", "-pix_fmt", "yuv420p", "-g", "6", "-movflags", "+faststart", whole)
		data, err := os.ReadFile(whole)
		if err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(dir, "cut."+ext)
		os.WriteFile(in, data[:len(data)*6/10], 0o644)
		_, err = vsr(t, "restore", in, "-o", filepath.Join(dir, "a.mp4"), "-s", "2")
		var n int
		if err == nil || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("%s: %v, want a truncation error", ext, err)
		}
		if _, serr := fmt.Sscanf(err.Error()[strings.LastIndex(err.Error(), "--frames "):], "--frames %d restores those", &n); serr != nil || n < 5 || n >= 48 {
			t.Fatalf("%s: %v: no --frames count in the message (%d)", ext, err, n)
		}
		out := filepath.Join(dir, "salvaged-"+ext+".mp4")
		if _, err := vsr(t, "restore", in, "-o", out, "-s", "2", "--frames", fmt.Sprint(n), "--progress", "none"); err != nil {
			t.Fatalf("%s --frames %d: %v", ext, n, err)
		}
		if got := len(frameTimes(t, out)); got != n {
			t.Errorf("%s: salvaged %d frames, want %d", ext, got, n)
		}
		if _, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "b.mp4"), "-s", "2", "--frames", fmt.Sprint(n+1)); err == nil {
			t.Errorf("%s --frames %d (one past the decodable part) succeeded", ext, n+1)
		}
	}
}

// TestSizeResize: --size that is no whole multiple of the input is the
// model's output resized after super-resolution (yuv420p and RGB outputs,
// an image), from the smallest bundled scale that reaches it.
func TestSizeResize(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 3, false, "mp4") // 24x16
	for _, c := range []struct {
		out, size string
		args      []string
	}{
		{"a.mp4", "40x28", nil},
		{"b.mkv", "90x60", []string{"--codec", "ffv1", "--pix-fmt", "gbrp"}},
		{"c.png", "50x30", []string{"--frames", "1"}},
	} {
		o := filepath.Join(dir, c.out)
		if _, err := vsr(t, append([]string{"restore", in, "-o", o, "--size", c.size, "--progress", "none"}, c.args...)...); err != nil {
			t.Fatalf("--size %s: %v", c.size, err)
		}
		out, err := vsr(t, "probe", o, "--json")
		var w, h int
		fmt.Sscanf(c.size, "%dx%d", &w, &h)
		if err != nil || !strings.Contains(out, fmt.Sprintf(`"width": %d`, w)) || !strings.Contains(out, fmt.Sprintf(`"height": %d`, h)) {
			t.Errorf("--size %s: %v\n%s", c.size, err, out)
		}
	}
}

// TestCDAVSR: a synthetic CDA-VSR checkpoint is written, inspected (text
// and JSON) and restores a clip with audio frame by frame; a damaged
// contract is refused with its problem.
func TestCDAVSR(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "cda.safetensors")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "cdavsr", "--scale", "2", "--prefix", "params_ema.", "-o", ck); err != nil {
		t.Fatal(err)
	}
	out, err := vsr(t, "checkpoint", "inspect", ck, "--json", "--size", "24x16")
	var c map[string]any
	if err != nil || json.Unmarshal([]byte(out), &c) != nil || c["family"] != "cdavsr" || c["tensors"] != float64(179) ||
		c["scale"] != float64(2) || c["prefix"] != "params_ema." || c["state_bytes"] != float64(2*128*4*24*16) {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	in := genClip(t, dir, 5, true, "mp4")
	o := filepath.Join(dir, "out.mkv")
	if _, err := vsr(t, "restore", in, "-o", o, "--model", ck, "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	out, err = vsr(t, "probe", o, "--json")
	if err != nil || !strings.Contains(out, `"frames": 5`) || !strings.Contains(out, `"width": 48`) || !strings.Contains(out, `"has_audio": true`) {
		t.Errorf("output: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.safetensors")
	data, _ := os.ReadFile(ck)
	os.WriteFile(bad, bytes.Replace(data, []byte("luma-range"), []byte("luma-rangX"), 1), 0o644)
	if _, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "b.mkv"), "--model", bad); err == nil || !strings.Contains(err.Error(), `cda_vsr.residual_unit is "luma-rangX"`) {
		t.Errorf("damaged metadata: %v", err)
	}
}

// TestCDAVSRSideData: the side data vsr computes, dumped and read back,
// gives the same frames; the service does not take the paths.
func TestCDAVSRSideData(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "cda.safetensors")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "cdavsr", "--scale", "2", "-o", ck); err != nil {
		t.Fatal(err)
	}
	in := genClip(t, dir, 6, false, "mp4")
	side := filepath.Join(dir, "side")
	a, b := filepath.Join(dir, "a.mkv"), filepath.Join(dir, "b.mkv")
	lossless := []string{"--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none", "--model", ck, "--reset-every", "4"}
	if _, err := vsr(t, append([]string{"restore", in, "-o", a, "--dump-side-data", side}, lossless...)...); err != nil {
		t.Fatal(err)
	}
	resets, err := os.ReadFile(filepath.Join(side, "resets.txt"))
	if err != nil || !strings.HasPrefix(string(resets), "0\n") {
		t.Fatalf("resets.txt: %q (%v)", resets, err)
	}
	if _, err := os.Stat(filepath.Join(side, "mv_00001.npy")); err != nil {
		t.Fatal(err)
	}
	if _, err := vsr(t, append([]string{"restore", in, "-o", b, "--side-data", side}, lossless...)...); err != nil {
		t.Fatal(err)
	}
	if videoMD5(t, a) != videoMD5(t, b) {
		t.Error("restoring from the dumped side data gives other frames")
	}
	os.Remove(filepath.Join(side, "res_00002.npy"))
	if _, err := vsr(t, append([]string{"restore", in, "-o", filepath.Join(dir, "c.mkv"), "--side-data", side}, lossless...)...); err == nil || !strings.Contains(err.Error(), "res_00002.npy") {
		t.Errorf("missing side data: %v", err)
	}
}

// TestDeviceLists: several ranks (cpu,cpu,cpu) give the frames of one,
// with the segments spread over them; bad lists are refused.
func TestDeviceLists(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 7, true, "mp4")
	outs := map[string]string{}
	for _, dev := range []string{"cpu", "cpu,cpu,cpu"} {
		o := filepath.Join(dir, strings.ReplaceAll(dev, ",", "_")+".mkv")
		_, stderr, err := vsrOutputs("restore", in, "-o", o, "--device", dev, "--scale", "2", "--codec", "ffv1", "--pix-fmt", "gbrp")
		if err != nil || !strings.Contains(stderr, "on "+dev+" with") {
			t.Fatalf("--device %s: %v\n%s", dev, err, stderr)
		}
		outs[dev] = videoMD5(t, o)
		if got := len(frameTimes(t, o)); got != 7 {
			t.Errorf("--device %s: %d frames", dev, got)
		}
	}
	if outs["cpu"] != outs["cpu,cpu,cpu"] {
		t.Error("three ranks give other frames than one")
	}
	// The service: the compact model runs a task per device; all devices
	// in one group with --ranks-per-task 2; 3 does not divide 2 devices.
	for k, want := range map[int]int{0: 2, 1: 2, 2: 1} {
		f := serveFlags{maxQueue: 10, base: cpuRestore, ranksPerTask: k}
		f.base.device = "cpu,cpu"
		run, err := newServeRunner(newServe(), f, false)
		if err != nil {
			t.Fatalf("serve --ranks-per-task %d: %v", k, err)
		}
		if run.Workers() != want {
			t.Errorf("serve --ranks-per-task %d on cpu,cpu: %d tasks at once, want %d", k, run.Workers(), want)
		}
		run.Close()
	}
	f := serveFlags{maxQueue: 10, base: cpuRestore, ranksPerTask: 3}
	f.base.device = "cpu,cpu"
	if _, err := newServeRunner(newServe(), f, false); err == nil || !strings.Contains(err.Error(), "must divide the 2 device(s)") {
		t.Errorf("serve --ranks-per-task 3 on 2 devices: %v", err)
	}
	for dev, want := range map[string]string{"cpu,": "empty name", "auto,cpu": "auto stands alone", "cpu,tpu": "unknown device"} {
		if _, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "x.mp4"), "--device", dev); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--device %s: %v, want %q", dev, err, want)
		}
	}
}
