package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/video"
)

const clip = "../../testdata/video/oa4_launch.webm"

func needFFmpeg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed: ", err)
	}
}

// vsr runs the CLI in-process and returns stdout and the error.
func vsr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := vsrOutputs(args...)
	return out, err
}

// vsrOutputs runs vsr in this process and returns its stdout and stderr.
func vsrOutputs(args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err = root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// buildVSR builds vsr into dir, for tests that run it as processes, and
// returns its path. Those process- and cluster-level tests (services
// killed and restarted, workers, NATS clusters, signals) are the slowest of
// the package: under -short buildVSR skips the test instead; go test ./...
// without -short (.ci/run) runs them.
func buildVSR(t testing.TB, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs vsr as processes: skipped with -short")
	}
	bin := filepath.Join(dir, "vsr")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// workerRoots makes a service's data folder in dir with its input and
// output roots, the input holding long.mp4 (150 frames of 64x48) and
// short.mp4 (5 frames of 24x16), for tests with workers.
func workerRoots(t *testing.T, dir string) (data, in, out string) {
	t.Helper()
	data, in, out = serveRoots(dir)
	sizedClip(t, filepath.Join(in, "long.mp4"), 64, 48, 150)
	sizedClip(t, filepath.Join(in, "short.mp4"), 24, 16, 5)
	return data, in, out
}

// serveRoots makes DIR/data with its input and output roots, as vsr
// serve --data takes them.
func serveRoots(dir string) (data, in, out string) {
	data = filepath.Join(dir, "data")
	in, out = filepath.Join(data, "input"), filepath.Join(data, "output")
	os.MkdirAll(in, 0o755)
	os.MkdirAll(out, 0o755)
	return data, in, out
}

// ffmpeg runs ffmpeg with args and fails the test on error.
func ffmpeg(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("ffmpeg", append([]string{"-hide_banner", "-loglevel", "error", "-y"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %v: %v\n%s", args, err, out)
	}
}

// genClip writes a small test clip of n frames, with a sine tone if audio.
func genClip(t *testing.T, dir string, n int, audio bool, ext string) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("gen%d_%v.%s", n, audio, ext))
	args := []string{"-f", "lavfi", "-i", "testsrc2=size=24x16:rate=30000/1001:duration=1"}
	if audio {
		args = append(args, "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=1", "-map", "0:v", "-map", "1:a", "-c:a", "aac")
	}
	args = append(args, "-vf", fmt.Sprintf("trim=end_frame=%d", n), "-c:v", "libx264", "-pix_fmt", "yuv420p")
	ffmpeg(t, append(args, p)...)
	return p
}

// probe probes a test's own file, an HLS or DASH output's playlist too.
func probe(t *testing.T, p string) *video.Info {
	t.Helper()
	info, err := video.ProbeWith(context.Background(), p, video.ProbeOptions{AllowPlaylists: true})
	if err != nil {
		t.Fatalf("probe %s: %v", p, err)
	}
	return info
}

// onlyFiles fails unless dir holds exactly the named files (no temporaries).
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

func TestRestoreRealClip(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.mp4")
	stdout, err := vsr(t, "restore", clip, "-o", out, "--frames", "3", "--scale", "2", "--json", "--progress", "none")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Frames, Width, Height int
		Output                string
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json output %q: %v", stdout, err)
	}
	if res.Frames != 3 || res.Width != 1280 || res.Height != 720 || res.Output != out {
		t.Errorf("summary %+v", res)
	}
	info := probe(t, out)
	if info.Frames != 3 || info.Width != 1280 || info.Height != 720 || info.FPS != (video.Rational{Num: 24, Den: 1}) || !info.HasAudio {
		t.Errorf("output %+v", info)
	}
	onlyFiles(t, dir, "out.mp4")
}

// TestRestoreGenerated checks frame count, fps, size and audio on clips of
// 1, 2 and 7 frames, with and without audio, at each bundled scale.
func TestRestoreGenerated(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	for _, n := range []int{1, 2, 7} {
		for _, audio := range []bool{false, true} {
			in := genClip(t, dir, n, audio, "mp4")
			for _, scale := range []int{2, 3, 4} {
				out := filepath.Join(dir, fmt.Sprintf("out%d_%v_x%d.mkv", n, audio, scale))
				if _, err := vsr(t, "restore", in, "-o", out, "--scale", fmt.Sprint(scale), "--progress", "none", "--pix-fmt", "yuv444p"); err != nil {
					t.Fatalf("%d frames audio=%v x%d: %v", n, audio, scale, err)
				}
				info := probe(t, out)
				if info.Frames != n || info.Width != 24*scale || info.Height != 16*scale || info.FPS != (video.Rational{Num: 30000, Den: 1001}) || info.HasAudio != audio {
					t.Errorf("%d frames audio=%v x%d: output %+v", n, audio, scale, info)
				}
			}
		}
	}
}

// TestLosslessOutput restores with ffv1/gbrp and checks that the decoded
// output is exactly what the model computes in-process, and that libx265
// works.
func TestLosslessOutput(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 2, true, "mkv")
	out := filepath.Join(dir, "lossless.mkv")
	if _, err := vsr(t, "restore", in, "-o", out, "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	info := probe(t, out)
	got := decodeAll(t, info)

	src := decodeAll(t, probe(t, in))
	m, err := compact.LoadBundled(cpu.New(0), 4)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(got))
	if err := m.Upscale(context.Background(), src, 2, 24, 16, want, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("ffv1/gbrp output differs from the model's frames")
	}
	// In tiles of the smallest size allowed, the same frames as whole.
	wide := filepath.Join(dir, "wide.mp4")
	sizedClip(t, wide, 80, 48, 2)
	tiled := filepath.Join(dir, "tiled.mkv")
	if _, err := vsr(t, "restore", wide, "-o", tiled, "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none", "--tile", "32"); err != nil {
		t.Fatal(err)
	}
	want = make([]byte, 2*320*192*3)
	if err := m.Upscale(context.Background(), decodeAll(t, probe(t, wide)), 2, 80, 48, want, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(decodeAll(t, probe(t, tiled)), want) {
		t.Error("--tile 32 output differs from the model's whole frames")
	}
	x265 := filepath.Join(dir, "x265.mp4")
	if _, err := vsr(t, "restore", in, "-o", x265, "--codec", "libx265", "--preset", "ultrafast", "--crf", "28", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	if i := probe(t, x265); i.Frames != 2 || i.Codec != "hevc" || !i.HasAudio {
		t.Errorf("libx265 output %+v", i)
	}
}

func decodeAll(t *testing.T, info *video.Info) []byte {
	t.Helper()
	d, err := video.NewDecoder(context.Background(), info, video.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	all := make([]byte, info.Frames*d.FrameSize())
	for i := 0; i < info.Frames; i++ {
		if err := d.Read(all[i*d.FrameSize() : (i+1)*d.FrameSize()]); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// TestBadInput checks that every kind of bad input gives a one-line error
// and leaves no output or temporary file behind.
func TestBadInput(t *testing.T) {
	needFFmpeg(t)
	src := t.TempDir()
	good := genClip(t, src, 7, true, "mp4")

	notVideo := filepath.Join(src, "notes.txt")
	os.WriteFile(notVideo, []byte("this is not a video\n"), 0o644)

	// Truncated: the index (moved to the front) promises 30 frames, but the
	// data stops half way.
	full := filepath.Join(src, "full.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=24", "-frames:v", "30", "-c:v", "libx264", "-g", "1", "-movflags", "+faststart", full)
	data, _ := os.ReadFile(full)
	truncated := filepath.Join(src, "truncated.mp4")
	os.WriteFile(truncated, data[:len(data)/2], 0o644)

	// Corrupt: garbage over the middle of the data.
	corrupt := filepath.Join(src, "corrupt.mp4")
	c := append([]byte(nil), data...)
	for i := len(c) / 3; i < 2*len(c)/3; i++ {
		c[i] = byte(i * 7)
	}
	os.WriteFile(corrupt, c, 0o644)

	// Zero frames: an audio-only file, and a video stream with no frames.
	audioOnly := filepath.Join(src, "audio.m4a")
	ffmpeg(t, "-f", "lavfi", "-i", "sine", "-t", "0.5", audioOnly)
	zero := filepath.Join(src, "zero.mkv")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=s=64x48:r=24:d=1", "-f", "lavfi", "-i", "sine=d=1", "-map", "0:v", "-map", "1:a",
		"-vf", "trim=start_frame=1000", "-c:v", "libx264", "-c:a", "aac", zero)

	// Models: an unsupported op, and weights cut short.
	param, _ := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-x4.param")
	bin, _ := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-x4.bin")
	badOp := filepath.Join(src, "badop.param")
	os.WriteFile(badOp, bytes.Replace(param, []byte("PReLU                    PRelu_1"), []byte("HardSwish                PRelu_1"), 1), 0o644)
	os.WriteFile(filepath.Join(src, "badop.bin"), bin, 0o644)
	cut := filepath.Join(src, "cut.param")
	os.WriteFile(cut, param, 0o644)
	os.WriteFile(filepath.Join(src, "cut.bin"), bin[:1000], 0o644)
	noBin := filepath.Join(src, "nobin.param")
	os.WriteFile(noBin, param, 0o644)

	ro := filepath.Join(t.TempDir(), "readonly")
	os.Mkdir(ro, 0o555)

	cases := []struct {
		name string
		args []string
		dir  string // where the output would go
		want string
	}{
		{"missing input", []string{filepath.Join(src, "nope.mp4")}, "", "no such file"},
		{"not a video", []string{notVideo}, "", "not a video"},
		{"truncated", []string{truncated}, "", "truncated"},
		{"corrupt", []string{corrupt}, "", ""},
		{"audio only", []string{audioOnly}, "", "no video"},
		{"zero frames", []string{zero}, "", "no video frames"},
		{"unsupported op", []string{good, "--model", badOp}, "", `layer PRelu_1 (HardSwish): unsupported op "HardSwish"`},
		{"truncated weights", []string{good, "--model", cut}, "", "too short"},
		{"missing weights", []string{good, "--model", noBin}, "", "nobin.bin"},
		{"unknown model", []string{good, "--model", "nosuch"}, "", "nosuch"},
		{"bad scale", []string{good, "--scale", "5"}, "", "--scale 5: the bundled model takes 2, 3 or 4"},
		{"sr-ratio on the compact model", []string{good, "--sr-ratio", "3"}, "", "--sr-ratio applies to swiftvr models"},
		{"missing output dir", []string{good}, filepath.Join(src, "missing"), "does not exist"},
		{"unwritable output dir", []string{good}, ro, "writ"},
		{"bad codec", []string{good, "--codec", "nosuchcodec"}, "", "nosuchcodec"},
		{"bad progress", []string{good, "--progress", "loud"}, "", "--progress"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "unwritable output dir" && os.Getuid() == 0 {
				if f, err := os.CreateTemp(ro, "probe"); err == nil {
					f.Close()
					os.Remove(f.Name())
					t.Skip("running as root: permissions are not enforced")
				}
			}
			dir := c.dir
			if dir == "" {
				dir = t.TempDir()
			}
			out := filepath.Join(dir, "out.mp4")
			args := append([]string{"restore", "--progress", "none", "-o", out}, c.args...)
			_, err := vsr(t, args...)
			if err == nil {
				t.Fatalf("vsr %v succeeded", args)
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line containing %q", msg, c.want)
			}
			if _, serr := os.Stat(dir); serr == nil {
				onlyFiles(t, dir)
			}
		})
	}
}

func TestProbeAndModels(t *testing.T) {
	needFFmpeg(t)
	out, err := vsr(t, "probe", clip, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var info video.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if info.Frames != 194 || info.Width != 640 || info.Height != 360 || info.FPS != (video.Rational{Num: 24, Den: 1}) || !info.HasAudio {
		t.Errorf("probe %+v", info)
	}
	out, err = vsr(t, "models")
	if err != nil || !strings.Contains(out, "realesr-animevideov3-x4") {
		t.Errorf("models: %q %v", out, err)
	}
	if out, err = vsr(t, "version"); err != nil || !strings.HasPrefix(out, "vsr ") {
		t.Errorf("version: %q %v", out, err)
	}
}

// TestNoGPU asks for a GPU where none can be used (CI machines): a one-line
// error naming what is missing, and no output file.
func TestNoGPU(t *testing.T) {
	needFFmpeg(t)
	if r, err := vsr(t, "doctor", "--json"); err == nil && strings.Contains(r, `"compute_capability"`) {
		t.Skip("this machine has a GPU")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.mp4")
	_, err := vsr(t, "restore", clip, "-o", out, "--device", "cuda", "--frames", "1", "--progress", "none")
	if err == nil || !strings.Contains(err.Error(), "no usable NVIDIA GPU") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restore --device cuda without a GPU: %v", err)
	}
	t.Log(err)
	onlyFiles(t, dir)
	// auto falls back to the CPU.
	if _, err := vsr(t, "restore", clip, "-o", out, "--device", "auto", "--frames", "1", "--scale", "2", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, dir, "out.mp4")
	if r, err := vsr(t, "doctor"); err != nil || !strings.Contains(r, "no NVIDIA GPU found") {
		t.Errorf("doctor: %q %v", r, err)
	}
}

// TestSwiftVRRestore restores generated clips with a tiny synthetic SwiftVR
// checkpoint, autoencoder only: every length keeps its exact frame count,
// fps, audio and the requested size; then with the DiT (the default); a
// refused option leaves no output behind.
func TestSwiftVRRestore(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 5, 24, 27, 28, 29, 52, 53, 361} {
		in := filepath.Join(dir, fmt.Sprintf("in%d.mkv", n))
		ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=24x16:rate=24:duration=16", "-f", "lavfi", "-i", "sine=duration=16",
			"-map", "0:v", "-map", "1:a", "-vf", fmt.Sprintf("trim=end_frame=%d", n), "-c:v", "libx264", "-c:a", "aac", "-shortest", in)
		out := filepath.Join(dir, fmt.Sprintf("out%d.mkv", n))
		if _, err := vsr(t, "restore", in, "-o", out, "--model", ck, "--dit", "off", "--progress", "none"); err != nil {
			t.Fatalf("%d frames: %v", n, err)
		}
		info := probe(t, out)
		if info.Frames != n || info.Width != 48 || info.Height != 32 || info.FPS != (video.Rational{Num: 24, Den: 1}) {
			t.Errorf("%d frames: output %+v", n, info)
		}
	}
	in := filepath.Join(dir, "in29.mkv")
	sized := filepath.Join(dir, "sized.mp4")
	if _, err := vsr(t, "restore", in, "-o", sized, "--model", ck, "--dit", "off", "--size", "40x20", "--temporal-grow", "after", "--reae-frame-batch", "0", "--clip-len", "8", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	if i := probe(t, sized); i.Frames != 29 || i.Width != 40 || i.Height != 20 {
		t.Errorf("--size 40x20: %+v", i)
	}
	out := filepath.Join(dir, "dit.mp4")
	if _, err := vsr(t, "restore", in, "-o", out, "--model", ck, "--clip-len", "8", "--dit-overlap", "1", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	if i := probe(t, out); i.Frames != 29 || i.Width != 48 || i.Height != 32 {
		t.Errorf("DiT on: %+v", i)
	}
	if _, err := vsr(t, "checkpoint", "synth", "--preset", "tiny", "--outliers", "0.5", "-o", filepath.Join(dir, "ck2")); err == nil || !strings.Contains(err.Error(), "above 1") {
		t.Errorf("synth --outliers 0.5: %v", err)
	}
	// fp8 needs a GPU that has it, and one way of asking for it.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dtype", "fp8"}, "compute capability 8.9"},
		{[]string{"--dit-dtype", "fp8", "--device", "cpu"}, "compute capability 8.9"},
		{[]string{"--dtype", "fp8", "--dit-dtype", "bf16"}, "give one of them"},
		{[]string{"--dit-dtype", "fp16"}, "want bf16 or fp8"},
	} {
		args := append([]string{"restore", in, "-o", filepath.Join(dir, "fp8.mp4"), "--model", ck, "--progress", "none", "--device", "cpu"}, c.args...)
		if _, err := vsr(t, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	// One causal stream encoded as 3 segments joins to the same frames as
	// one encoder, with the audio.
	var frames [][]byte
	for _, seg := range []string{"1", "3"} {
		o := filepath.Join(dir, "seg"+seg+".mkv")
		if _, err := vsr(t, "restore", in, "-o", o, "--model", ck, "--clip-len", "8", "--segments", seg, "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none"); err != nil {
			t.Fatal(err)
		}
		i := probe(t, o)
		if i.Frames != 29 || !i.HasAudio {
			t.Errorf("--segments %s: %+v", seg, i)
		}
		frames = append(frames, decodeAll(t, i))
	}
	if !bytes.Equal(frames[0], frames[1]) {
		t.Error("--segments 3 output differs from --segments 1")
	}
	// Chunk parallelism: 2 and 3 ranks on the CPU (4 chunks of 8 frames)
	// give the frames of one, with the audio, through 3 encoders.
	// Sequence parallelism (2 ranks on each chunk, alone and as 2 chunk
	// groups) and the autoencoder in 2 height bands on one device give
	// them too.
	for k, c := range []struct {
		dev  string
		more []string
	}{
		{"cpu,cpu", nil}, {"cpu,cpu,cpu", nil},
		{"cpu,cpu", []string{"--parallel", "sequence"}},
		{"cpu,cpu,cpu,cpu", []string{"--parallel", "chunks=2,sequence=2"}},
		{"cpu", []string{"--reae-bands", "2"}},
	} {
		o := filepath.Join(dir, fmt.Sprintf("ranks%d.mkv", k))
		args := append([]string{"restore", in, "-o", o, "--model", ck, "--clip-len", "8", "--device", c.dev, "--segments", "3", "--codec", "ffv1", "--pix-fmt", "gbrp"}, c.more...)
		_, stderr, err := vsrOutputs(args...)
		if err != nil || !strings.Contains(stderr, "on "+c.dev+" with") {
			t.Fatalf("--device %s %v: %v\n%s", c.dev, c.more, err, stderr)
		}
		i := probe(t, o)
		if i.Frames != 29 || !i.HasAudio {
			t.Errorf("--device %s %v: %+v", c.dev, c.more, i)
		}
		if !bytes.Equal(decodeAll(t, i), frames[0]) {
			t.Errorf("--device %s %v: other frames than one device", c.dev, c.more)
		}
	}
	for _, c := range [][]string{
		{"cpu,cpu,cpu", "--parallel", "chunks=2,sequence=2", "--parallel chunks=2,sequence=2 asks for 2 x 2 = 4 devices; the device list has 3"},
		{"cpu,cpu", "--parallel", "rows", `--parallel "rows": want chunks, sequence or chunks=A,sequence=B`},
		{"cpu,cpu", "--reae-bands", "2", "--reae-bands 2 runs bands one after another on one device"},
	} {
		_, stderr, err := vsrOutputs("restore", in, "-o", filepath.Join(dir, "refused.mkv"), "--model", ck, "--clip-len", "8", "--device", c[0], c[1], c[2])
		if err == nil || !strings.Contains(fmt.Sprint(err, stderr), c[3]) {
			t.Errorf("--device %s %s %s: %v, want %q in\n%s", c[0], c[1], c[2], err, c[3], stderr)
		}
	}
	// The bench reports each rank's exchanges.
	js, err := vsr(t, "bench", in, "--model", ck, "--clip-len", "8", "--device", "cpu,cpu,cpu", "--requests", "1", "--no-encode", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	if rep.Device != "cpu,cpu,cpu" || len(rep.Mean.Ranks) != 3 || rep.Mean.Ranks[0].Messages < 18 || rep.Mean.Ranks[0].SentBytes == 0 {
		t.Errorf("bench over 3 ranks: %+v", rep.Mean)
	}
	// 4 chunks on 3 ranks: two waves, each a batch with its latency.
	if l := rep.Mean.Stages.Latency; l.Batches != 2 || l.First <= 0 || l.Steady <= 0 {
		t.Errorf("bench latency %+v", l)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*vsr*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	bad := filepath.Join(dir, "bad.mp4")
	if _, err := vsr(t, "restore", in, "-o", bad, "--model", ck, "--clip-len", "6", "--progress", "none"); err == nil || !strings.Contains(err.Error(), "clip-len") {
		t.Errorf("--clip-len 6: %v", err)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Error("a failed restore left an output file")
	}
	// A parameter of the compact family is refused, not ignored.
	if _, err := vsr(t, "restore", in, "-o", bad, "--model", ck, "--tile", "8", "--progress", "none"); err == nil || !strings.Contains(err.Error(), "--tile applies to compact models") {
		t.Errorf("--tile on SwiftVR: %v", err)
	}
}

// TestBench runs `vsr bench` on the CPU: the input is looped to the asked
// length, every request is reported with its stages, the mean skips the
// first, and --no-encode drops the frames instead of encoding them.
func TestBench(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := genClip(t, dir, 3, true, "mkv")
	for _, noEncode := range []bool{false, true} {
		args := []string{"bench", in, "--device", "cpu", "--frames", "7", "--requests", "2", "--json", "--codec", "libx264", "--preset", "ultrafast"}
		prof := filepath.Join(dir, "cpu.pprof")
		if noEncode {
			args = append(args, "--no-encode", "--cpuprofile", prof)
		}
		out, err := vsr(t, args...)
		if err != nil {
			t.Fatalf("no-encode %v: %v", noEncode, err)
		}
		var rep benchReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("no-encode %v: %v\n%s", noEncode, err, out)
		}
		if rep.Frames != 7 || rep.OutSize != "96x64" || rep.Device != "cpu" || len(rep.Runs) != 2 || rep.NoEncode != noEncode ||
			(rep.Codec == "none") != noEncode || rep.Mean.Seconds != rep.Runs[1].Seconds {
			t.Errorf("no-encode %v: report %+v", noEncode, rep)
		}
		for i, r := range rep.Runs {
			st := r.Stages
			if r.Seconds <= 0 || st.Stream <= 0 || st.WaitModel+st.WaitEncoder <= 0 || st.WaitModel+st.WaitEncoder > st.Stream ||
				cpuTimesMeasured && (r.CPUSeconds <= 0 || r.FFmpegCPU <= 0) {
				t.Errorf("no-encode %v: request %d: %+v", noEncode, i+1, r)
			}
		}
		if fi, err := os.Stat(prof); noEncode && (err != nil || fi.Size() == 0) {
			t.Errorf("--cpuprofile wrote no profile: %v", err)
		}
	}
	if _, err := vsr(t, "bench", in, "--device", "cpu", "--requests", "0"); err == nil || !strings.Contains(err.Error(), "--requests") {
		t.Errorf("--requests 0: %v", err)
	}
}

// TestCheckpointQuantize: vsr checkpoint quantize writes an fp8 copy that
// inspect describes and restore runs; wrong requests fail in one line.
func TestCheckpointQuantize(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck, fp8 := filepath.Join(dir, "ck"), filepath.Join(dir, "fp8")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	if out, err := vsr(t, "checkpoint", "quantize", "--dtype", "fp8", ck, fp8); err != nil || !strings.Contains(out, "20 DiT weights in fp8") {
		t.Fatalf("%s %v", out, err)
	}
	out, err := vsr(t, "checkpoint", "inspect", fp8, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		FP8      int               `json:"fp8_weights"`
		DTypes   map[string]string `json:"dtypes"`
		Problems []string          `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.FP8 != 20 || r.DTypes["dit"] != "BF16,F32,F8_E4M3" || len(r.Problems) != 0 {
		t.Errorf("inspect: %+v, %v", r, err)
	}
	in := genClip(t, dir, 5, false, "mp4")
	o := filepath.Join(dir, "o.mp4")
	if _, err := vsr(t, "restore", in, "-o", o, "--model", fp8, "--progress", "none", "--device", "cpu"); err != nil {
		t.Fatal(err)
	}
	if i := probe(t, o); i.Frames != 5 {
		t.Errorf("%d frames", i.Frames)
	}
	for _, c := range [][]string{
		{"already in fp8", "checkpoint", "quantize", "--dtype", "fp8", fp8, filepath.Join(dir, "x")},
		{"exists: give a new directory", "checkpoint", "quantize", "--dtype", "fp8", ck, fp8},
		{"fp8 is the one quantization", "checkpoint", "quantize", "--dtype", "int8", ck, filepath.Join(dir, "y")},
	} {
		if _, err := vsr(t, c[1:]...); err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Errorf("%v: %v, want %q", c[1:], err, c[0])
		}
	}
}

// TestBenchEncodeProxy: vsr bench --encode-proxy bicubic labels its report
// and hands the encoders the input resized (the output is that, not the
// model's, checked in model/swiftvr's TestEncodeProxy); other families
// refuse the flag.
func TestBenchEncodeProxy(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	in := genClip(t, dir, 5, false, "mp4")
	out, err := vsr(t, "bench", in, "--model", ck, "--device", "cpu", "--requests", "2", "--encode-proxy", "bicubic", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		EncodeProxy string `json:"encode_proxy"`
		Frames      int    `json:"frames"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.EncodeProxy != "bicubic" || r.Frames != 5 {
		t.Errorf("%+v, %v", r, err)
	}
	if _, err := vsr(t, "bench", in, "--device", "cpu", "--requests", "1", "--encode-proxy", "bicubic"); err == nil || !strings.Contains(err.Error(), "encode-proxy") {
		t.Errorf("the compact model took --encode-proxy: %v", err)
	}
}
