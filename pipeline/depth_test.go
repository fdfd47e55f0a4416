package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/video"
)

// identityEngine restores frames to themselves on the CPU backend: the
// frames the model gets, back in the output format.
type identityEngine struct {
	b   backend.Backend
	ins []backend.PixelFormat // the input format of each batch made
}

type identityBatch struct {
	in, out []byte
	inf, f  backend.PixelFormat
	w, h    int
}

func (b *identityBatch) In() []byte  { return b.in }
func (b *identityBatch) Out() []byte { return b.out }
func (b *identityBatch) Wait() error { return nil }
func (b *identityBatch) Free()       {}

func (e *identityEngine) OutputSize(w, h int) (int, int) { return w, h }

func (e *identityEngine) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	e.ins = append(e.ins, in)
	return &identityBatch{in: make([]byte, n*in.FrameBytes(w, h)), out: make([]byte, n*f.FrameBytes(w, h)), inf: in, f: f, w: w, h: h}, nil
}

func (e *identityEngine) Start(_ context.Context, bt backend.Batch, k int) error {
	b := bt.(*identityBatch)
	x, err := backend.FromFrames(e.b, b.in[:k*b.inf.FrameBytes(b.w, b.h)], b.inf, k, b.h, b.w)
	if err != nil {
		return err
	}
	defer x.Free()
	return backend.ToFrames(e.b, x, b.f, b.out[:k*b.f.FrameBytes(b.w, b.h)])
}

// ffmpegOrSkip skips a test without ffmpeg and ffprobe.
func ffmpegOrSkip(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
}

// runFFmpeg runs ffmpeg with args, failing the test on error.
func runFFmpeg(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("ffmpeg", append([]string{"-v", "error", "-nostdin", "-y"}, args...)...).Output()
	if err != nil {
		t.Fatalf("ffmpeg %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// luma10 decodes the luma planes of a video as 10-bit samples, through
// ffmpeg's options opts (e.g. a filter keeping the range).
func luma10(t *testing.T, path string, w, h int, opts ...string) []int {
	raw := runFFmpeg(t, append(append([]string{"-i", path}, opts...), "-f", "rawvideo", "-pix_fmt", "yuv420p10le", "-")...)
	fs := 2 * (w*h + 2*(w/2)*(h/2))
	var y []int
	for f := 0; f+fs <= len(raw); f += fs {
		for i := 0; i < w*h; i++ {
			y = append(y, int(binary.LittleEndian.Uint16(raw[f+2*i:])))
		}
	}
	return y
}

func pixFmtOf(t *testing.T, path string) string {
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=pix_fmt", "-of", "csv=p=0", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestDeepRestorePrecision restores a 10-bit luma ramp (every level from
// 64 to 940 in steps of 1) through an engine that returns its input: the
// model gets 16-bit frames, the default output is yuv420p10le, and each
// luma sample comes back within 1 level. Through 8-bit RGB, as before,
// samples were up to 2 levels off and the output was 8-bit yuv420p.
func TestDeepRestorePrecision(t *testing.T) {
	ffmpegOrSkip(t)
	dir := t.TempDir()
	w, h := 880, 4
	raw := make([]byte, 2*(w*h+2*(w/2)*(h/2)))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			binary.LittleEndian.PutUint16(raw[2*(y*w+x):], uint16(min(64+x, 940)))
		}
	}
	for i := 2 * w * h; i < len(raw); i += 2 {
		binary.LittleEndian.PutUint16(raw[i:], 512)
	}
	rawPath, in, out := filepath.Join(dir, "in.yuv"), filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mkv")
	if err := writeFile(rawPath, raw); err != nil {
		t.Fatal(err)
	}
	runFFmpeg(t, "-f", "rawvideo", "-pix_fmt", "yuv420p10le", "-s", "880x4", "-r", "1", "-i", rawPath, "-c:v", "ffv1", in)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := video.Probe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	eng := &identityEngine{b: cpu.New(1)}
	if _, err := Restore(ctx, Request{Input: in, Output: out, Engine: eng, Info: info, Encode: video.EncodeOptions{Codec: "ffv1"}}); err != nil {
		t.Fatal(err)
	}
	if len(eng.ins) == 0 || eng.ins[0] != (backend.PixelFormat{Layout: backend.YUV420, Depth: 10}) {
		t.Errorf("the model got %v frames, want yuv420p10le as decoded", eng.ins)
	}
	if pf := pixFmtOf(t, out); pf != "yuv420p10le" {
		t.Errorf("a 10-bit 4:2:0 input gave %s by default, want yuv420p10le", pf)
	}
	want, got := luma10(t, in, w, h), luma10(t, out, w, h)
	worst := 0
	for i := range want {
		worst = max(worst, want[i]-got[i], got[i]-want[i])
	}
	if worst > 1 {
		t.Errorf("luma is up to %d levels (10-bit) off after a restore that changes nothing", worst)
	}
}

// TestDeepFullRange restores a full-range ("pc") 10-bit BT.709 luma ramp
// (every level from 0 to 1023) stored as yuv440p10le, which is decoded as
// yuv444p16le, through an engine that returns its input: each luma sample
// comes back within 1 level, as a limited-range one does. ffmpeg's
// automatic conversion to yuv444p16le made the samples limited range
// while the backend took them as full (1023 arrived as 60314, not 65472).
func TestDeepFullRange(t *testing.T) {
	ffmpegOrSkip(t)
	dir := t.TempDir()
	w, h := 1024, 2
	raw := make([]byte, 2*(w*h+2*(w/2)*(h/2)))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			binary.LittleEndian.PutUint16(raw[2*(y*w+x):], uint16(x))
		}
	}
	for i := 2 * w * h; i < len(raw); i += 2 {
		binary.LittleEndian.PutUint16(raw[i:], 512)
	}
	rawPath, in, out := filepath.Join(dir, "in.yuv"), filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mkv")
	if err := writeFile(rawPath, raw); err != nil {
		t.Fatal(err)
	}
	full := []string{"-color_range", "pc", "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709"}
	runFFmpeg(t, append(append([]string{"-f", "rawvideo", "-pix_fmt", "yuv420p10le", "-s", "1024x2", "-r", "1"}, full...),
		append([]string{"-i", rawPath, "-vf", "scale=in_range=pc:out_range=pc", "-pix_fmt", "yuv440p10le", "-c:v", "ffv1"}, append(full, in)...)...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := video.Probe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	info.Colour = video.Colour{Matrix: "bt709", Range: "pc", Primaries: "bt709", Transfer: "bt709"} // as the probe reports it
	if _, err := Restore(ctx, Request{Input: in, Output: out, Engine: &identityEngine{b: cpu.New(1)}, Info: info, Encode: video.EncodeOptions{Codec: "ffv1"}}); err != nil {
		t.Fatal(err)
	}
	keep := []string{"-vf", "scale=in_range=pc:out_range=pc"}
	want, got := luma10(t, in, w, h, keep...), luma10(t, out, w, h, keep...)
	if len(want) != len(got) || len(want) == 0 {
		t.Fatalf("%d luma samples out, %d in", len(got), len(want))
	}
	worst := 0
	for i := range want {
		worst = max(worst, want[i]-got[i], got[i]-want[i])
	}
	if worst > 1 {
		t.Errorf("luma is up to %d levels (10-bit) off after a restore that changes nothing", worst)
	}
}

// TestDeepRestoreModel restores a 10-bit clip with the bundled compact
// model on the CPU: the output is 10-bit and holds luma samples that 8-bit
// values scaled up cannot (not multiples of 4).
func TestDeepRestoreModel(t *testing.T) {
	ffmpegOrSkip(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mkv")
	runFFmpeg(t, "-f", "lavfi", "-i", "testsrc2=s=48x32:r=10:d=0.2,format=yuv420p10le", "-c:v", "ffv1", in)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := video.Probe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	m, err := compact.LoadBundled(cpu.New(0), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := Restore(ctx, Request{Input: in, Output: out, Engine: compact.Engine{M: m}, Info: info, Encode: video.EncodeOptions{Codec: "ffv1"}}); err != nil {
		t.Fatal(err)
	}
	if pf := pixFmtOf(t, out); pf != "yuv420p10le" {
		t.Fatalf("output is %s, want yuv420p10le", pf)
	}
	y := luma10(t, out, 96, 64)
	odd := 0
	for _, v := range y {
		if v%4 != 0 {
			odd++
		}
	}
	if odd < len(y)/4 {
		t.Errorf("%d of %d luma samples are not multiples of 4: the output holds 8-bit values", odd, len(y))
	}
}

// TestDefaultPixFmt: the output follows the input's depth and chroma
// subsampling above 8 bits, and 8-bit inputs keep yuv420p.
func TestDefaultPixFmt(t *testing.T) {
	for pf, want := range map[string]string{
		"yuv420p": "yuv420p", "yuv444p": "yuv420p", "rgb24": "yuv420p", "": "yuv420p",
		"yuv420p10le": "yuv420p10le", "yuv444p10le": "yuv444p10le", "yuv422p10le": "yuv422p10le",
		"yuv420p12le": "yuv420p12le", "gbrp16le": "yuv444p16le", "rgb48be": "yuv444p16le", "p010le": "yuv420p10le",
	} {
		if got := DefaultPixFmt(&video.Info{PixFmt: pf}); got != want {
			t.Errorf("input %q: default %s, want %s", pf, got, want)
		}
	}
	// Depth and Chroma, where the probe set them, win over the name.
	if got := DefaultPixFmt(&video.Info{PixFmt: "yuv420p", Depth: 10, Chroma: "4:4:4"}); got != "yuv444p10le" {
		t.Errorf("Depth 10, Chroma 4:4:4: %s", got)
	}
	// Planar little-endian YCbCr of 10, 12 and 16 bits is decoded as it
	// is, with its chroma location; other deep YCbCr as yuv444p16le.
	f := frameFormats(&video.Info{PixFmt: "yuv420p10le", Colour: video.Colour{Matrix: "bt709", Range: "tv"}}, "", 64, 64)
	if f.decode != "yuv420p10le" || f.in != (backend.PixelFormat{Layout: backend.YUV420, Depth: 10, YCbCr: backend.YCbCr{Matrix: backend.BT709}}) || f.out.Name() != "yuv420p10le" || f.out.YCbCr.Matrix != backend.BT709 {
		t.Errorf("10-bit bt709 input: %+v", f)
	}
	f = frameFormats(&video.Info{PixFmt: "yuv422p12le", Colour: video.Colour{ChromaLocation: "center"}}, "", 64, 64)
	if f.decode != "yuv422p12le" || f.in != (backend.PixelFormat{Layout: backend.YUV422, Depth: 12, Siting: backend.SitingCenter}) {
		t.Errorf("12-bit 4:2:2 input, chroma centred: %+v", f)
	}
	for pf, d := range map[string]int{"p010le": 10, "yuv420p10be": 10, "yuv420p9le": 9} {
		if f := frameFormats(&video.Info{PixFmt: pf}, "", 64, 64); f.decode != "yuv444p16le" || f.in.Source != d || f.in.Name() != "yuv444p16le" {
			t.Errorf("%s input: %+v", pf, f)
		}
	}
	if f := frameFormats(&video.Info{PixFmt: "rgb48be"}, "", 64, 64); f.decode != "rgb48le" || f.in != backend.RGB48 {
		t.Errorf("16-bit RGB input: %+v", f)
	}
	if f := frameFormats(&video.Info{PixFmt: "yuv420p"}, "", 64, 64); f.decode != "rgb24" || f.out != backend.YUV420P {
		t.Errorf("8-bit input: %+v", f)
	}
	if f := frameFormats(&video.Info{PixFmt: "yuv420p10le"}, "yuv422p10le", 64, 64); f.out != backend.RGB48 {
		t.Errorf("yuv422p10le, which no backend writes, goes as %v, want rgb48le", f.out)
	}
	if f := frameFormats(&video.Info{PixFmt: "yuv420p"}, "yuv420p", 63, 64); f.out != backend.RGB24 {
		t.Errorf("an odd size goes as %v, want rgb24", f.out)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

// TestColourRoundTrip restores flat colours tagged with each matrix and
// range through an engine that returns its input: ffmpeg decodes them to
// RGB with the tagged matrix and range, and the backend's YCbCr output
// must use the same, giving each sample back within 1 level. With the
// fixed BT.601 limited-range output, BT.709, BT.2020 and full-range
// inputs came back with shifted colours.
func TestColourRoundTrip(t *testing.T) {
	ffmpegOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []video.Colour{{}, {Matrix: "bt709", Range: "tv"}, {Matrix: "bt470bg", Range: "pc"}, {Matrix: "bt2020nc", Range: "tv"}, {Matrix: "bt709", Range: "pc"}} {
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mkv")
		args := []string{"-f", "lavfi", "-i", "color=c=0xC83C28:s=16x8:r=1:d=1,format=yuv420p", "-f", "lavfi", "-i", "color=c=0x2896D2:s=16x8:r=1:d=1,format=yuv420p",
			"-filter_complex", "[0][1]concat=n=2", "-c:v", "ffv1"}
		if c.Matrix != "" {
			args = append(args, "-colorspace", c.Matrix, "-color_range", c.Range)
		}
		runFFmpeg(t, append(args, in)...)
		info, err := video.Probe(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		info.Colour = c // as the probe reports it
		if _, err := Restore(ctx, Request{Input: in, Output: out, Engine: &identityEngine{b: cpu.New(1)}, Info: info, Encode: video.EncodeOptions{Codec: "ffv1"}}); err != nil {
			t.Fatal(err)
		}
		want := runFFmpeg(t, "-i", in, "-f", "rawvideo", "-pix_fmt", "yuv420p", "-")
		got := runFFmpeg(t, "-i", out, "-f", "rawvideo", "-pix_fmt", "yuv420p", "-")
		if len(got) != len(want) {
			t.Fatalf("%+v: %d bytes out, %d in", c, len(got), len(want))
		}
		worst := 0
		for i := range want {
			worst = max(worst, int(want[i])-int(got[i]), int(got[i])-int(want[i]))
		}
		if worst > 1 {
			t.Errorf("%+v: a sample is %d levels off after a restore that changes nothing", c, worst)
		}
	}
}

// TestUnknownMatrix restores an 8-bit clip in a matrix the backends do not
// convert (smpte240m) through an engine that returns its input: ffmpeg
// converts it both ways, and each sample comes back within 2 levels. The
// backends had written BT.601 into an output tagged smpte240m.
func TestUnknownMatrix(t *testing.T) {
	ffmpegOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mkv")
	runFFmpeg(t, "-f", "lavfi", "-i", "color=c=0xC83C28:s=16x8:r=1:d=1,format=yuv420p", "-f", "lavfi", "-i", "color=c=0x2896D2:s=16x8:r=1:d=1,format=yuv420p",
		"-filter_complex", "[0][1]concat=n=2", "-c:v", "ffv1", "-colorspace", "smpte240m", "-color_range", "tv", in)
	info, err := video.Probe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	info.Colour = video.Colour{Matrix: "smpte240m", Range: "tv"} // as the probe reports it
	eng := &identityEngine{b: cpu.New(1)}
	if _, err := Restore(ctx, Request{Input: in, Output: out, Engine: eng, Info: info, Encode: video.EncodeOptions{Codec: "ffv1"}}); err != nil {
		t.Fatal(err)
	}
	want := runFFmpeg(t, "-i", in, "-f", "rawvideo", "-pix_fmt", "yuv420p", "-")
	got := runFFmpeg(t, "-i", out, "-f", "rawvideo", "-pix_fmt", "yuv420p", "-")
	if len(got) != len(want) {
		t.Fatalf("%d bytes out, %d in", len(got), len(want))
	}
	worst := 0
	for i := range want {
		worst = max(worst, int(want[i])-int(got[i]), int(got[i])-int(want[i]))
	}
	if worst > 2 {
		t.Errorf("a sample is %d levels off after a restore that changes nothing", worst)
	}
	if f := frameFormats(info, "yuv420p10le", 16, 8); f.out != backend.RGB48 {
		t.Errorf("smpte240m to yuv420p10le leaves the backend as %v, want rgb48le", f.out)
	}
	if f := frameFormats(&video.Info{PixFmt: "yuv420p10le", Colour: info.Colour}, "", 16, 8); f.decode != "rgb48le" || f.in != backend.RGB48 {
		t.Errorf("a 10-bit smpte240m input is decoded as %s (%v), want rgb48le", f.decode, f.in)
	}
}

// TestDefaultPixFmtReduced restores a 12-bit 4:4:4 input to .mp4 with
// libx264, which takes at most 10 bits: the default output format is the
// deepest libx264 takes, yuv444p10le, and the report says the depth was
// reduced. ffmpeg had reduced the default (yuv444p12le) without a word.
func TestDefaultPixFmtReduced(t *testing.T) {
	ffmpegOrSkip(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.mkv"), filepath.Join(dir, "out.mp4")
	runFFmpeg(t, "-f", "lavfi", "-i", "testsrc2=s=32x16:r=5:d=0.4,format=yuv444p12le", "-c:v", "ffv1", in)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := video.Probe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Restore(ctx, Request{Input: in, Output: out, Engine: &identityEngine{b: cpu.New(1)}, Info: info, Encode: video.EncodeOptions{Codec: "libx264"}})
	if err != nil {
		t.Fatal(err)
	}
	if pf := pixFmtOf(t, out); pf != "yuv444p10le" {
		t.Errorf("a 12-bit 4:4:4 input to libx264 gave %s, want yuv444p10le", pf)
	}
	if d := res.Carried.Dropped; len(d) == 0 || d[len(d)-1].What != "yuv444p12le" || !strings.Contains(d[len(d)-1].Why, "yuv444p10le") {
		t.Errorf("the report does not say the depth was reduced: %+v", d)
	}
}

// TestOutputFormat: a service warms up the format the backends write for
// the encoder's pixel format (a 10-bit yuv420p10le, not rgb24 as the old
// rule had it).
func TestOutputFormat(t *testing.T) {
	yuv10, _ := backend.ParsePixelFormat("yuv420p10le", backend.YCbCr{})
	for pf, want := range map[string]backend.PixelFormat{"": backend.YUV420P, "yuv420p": backend.YUV420P, "yuv420p10le": yuv10,
		"yuv422p10le": backend.RGB48, "yuv444p": backend.RGB24, "rgb24": backend.RGB24} {
		if got := OutputFormat(pf, 64, 32); got != want {
			t.Errorf("--pix-fmt %q: warms up %v, want %v", pf, got, want)
		}
	}
}

// TestLiveDeep: a live stream encoded to a 10-bit format is decoded and
// restored at 16 bits (a live source is not probed: the output format
// asked for decides), and an 8-bit one as before.
func TestLiveDeep(t *testing.T) {
	ffmpegOrSkip(t)
	for _, c := range []struct {
		pix  string
		want backend.PixelFormat
	}{{"yuv420p10le", backend.RGB48}, {"", backend.RGB24}} {
		out := filepath.Join(t.TempDir(), "out.mkv")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		eng := &identityEngine{b: cpu.New(1)}
		_, err := Live(ctx, LiveRequest{
			Input: video.LiveInput{URL: "-", Format: "rawvideo", Options: []string{"video_size=64x48", "pixel_format=rgb48le"},
				Stdin: bytes.NewReader(make([]byte, 3*64*48*6))},
			Output:      video.LiveOutput{URL: out, Encode: video.EncodeOptions{Codec: "ffv1", PixFmt: c.pix}},
			Open:        func(w, h int) (Engine, func(), error) { return eng, func() {}, nil },
			IdleTimeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range eng.ins {
			if in != c.want {
				t.Errorf("--pix-fmt %q: the model got %v frames, want %v", c.pix, in, c.want)
			}
		}
		if want := cmp.Or(c.pix, "yuv420p"); pixFmtOf(t, out) != want {
			t.Errorf("--pix-fmt %q: output %s", c.pix, pixFmtOf(t, out))
		}
	}
}
