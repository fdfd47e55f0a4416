package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/video"
)

func needTools(t *testing.T) {
	t.Helper()
	for _, p := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skip(p, " not installed")
		}
	}
}

func runTool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s %v: %v %s", name, args, err, msg)
	}
	return out
}

func ffmpegGen(t *testing.T, args ...string) {
	t.Helper()
	runTool(t, "ffmpeg", append([]string{"-nostdin", "-v", "error", "-y"}, args...)...)
}

// firstFrame is what ffprobe says of a file's video stream and its first
// frame: colour tags, SAR and DAR, HDR side data.
type firstFrame struct {
	Colour   video.Colour
	SAR, DAR string
	PixFmt   string
	Side     []map[string]any // the first frame's side data
}

func probeFirst(t *testing.T, path string) firstFrame {
	t.Helper()
	var s struct {
		Streams []struct {
			PixFmt    string `json:"pix_fmt"`
			Primaries string `json:"color_primaries"`
			Transfer  string `json:"color_transfer"`
			Space     string `json:"color_space"`
			Range     string `json:"color_range"`
			SAR       string `json:"sample_aspect_ratio"`
			DAR       string `json:"display_aspect_ratio"`
		} `json:"streams"`
		Frames []struct {
			Side []map[string]any `json:"side_data_list"`
		} `json:"frames"`
	}
	out := runTool(t, "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_streams", "-show_frames", "-read_intervals", "%+#1", "-of", "json", path)
	if err := json.Unmarshal(out, &s); err != nil || len(s.Streams) == 0 {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	v := s.Streams[0]
	f := firstFrame{Colour: video.Colour{Primaries: v.Primaries, Transfer: v.Transfer, Matrix: v.Space, Range: v.Range}, SAR: v.SAR, DAR: v.DAR, PixFmt: v.PixFmt}
	if len(s.Frames) > 0 {
		f.Side = s.Frames[0].Side
	}
	return f
}

// probeWith probes path and sets what the probe of this branch does not
// fill in yet from ffprobe: the colour, HDR metadata and SAR.
func probeWith(t *testing.T, path string) *video.Info {
	t.Helper()
	info, err := video.Probe(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	f := probeFirst(t, path)
	info.Colour = f.Colour
	if sar, err := video.ParseRational(strings.Replace(f.SAR, ":", "/", 1)); err == nil && sar.Valid() {
		info.SAR = sar
	}
	rat := func(v any) video.Rational {
		r, _ := video.ParseRational(fmt.Sprint(v))
		return r
	}
	for _, sd := range f.Side {
		switch sd["side_data_type"] {
		case "Mastering display metadata":
			if info.HDR == nil {
				info.HDR = &video.HDR{}
			}
			info.HDR.Mastering = &video.MasteringDisplay{
				Red: [2]video.Rational{rat(sd["red_x"]), rat(sd["red_y"])}, Green: [2]video.Rational{rat(sd["green_x"]), rat(sd["green_y"])},
				Blue: [2]video.Rational{rat(sd["blue_x"]), rat(sd["blue_y"])}, White: [2]video.Rational{rat(sd["white_point_x"]), rat(sd["white_point_y"])},
				MinLuminance: rat(sd["min_luminance"]), MaxLuminance: rat(sd["max_luminance"]),
			}
		case "Content light level metadata":
			if info.HDR == nil {
				info.HDR = &video.HDR{}
			}
			n := func(v any) int { f, _ := v.(float64); return int(f) }
			info.HDR.Light = &video.ContentLight{MaxCLL: n(sd["max_content"]), MaxFALL: n(sd["max_average"])}
		}
	}
	return info
}

// restoreCPU restores in into out with the bundled 4x model on the CPU.
func restoreCPU(t *testing.T, info *video.Info, out string, enc video.EncodeOptions, segments int) *Result {
	t.Helper()
	m, err := compact.LoadBundled(cpu.New(0), 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if enc.Codec == "" {
		enc.Codec, enc.CRF, enc.Preset = "libx264", 0, "ultrafast"
	}
	res, err := Restore(ctx, Request{Input: info.Path, Output: out, Engine: compact.Engine{M: m}, Info: info, Encode: enc, Segments: segments})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// rgbFrame decodes the first frame of path to rgb24 at its size, with
// the matrix and range c (as a player that honours the tags does).
func rgbFrame(t *testing.T, path string, c video.Colour, vf string) []byte {
	t.Helper()
	m := map[string]string{"bt709": "bt709", "smpte170m": "bt601", "bt470bg": "bt601", "bt2020nc": "bt2020"}[c.Matrix]
	filter := fmt.Sprintf("scale=in_color_matrix=%s:in_range=%s", m, c.Range)
	if vf != "" {
		filter = vf + ":in_color_matrix=" + m + ":in_range=" + c.Range
	}
	return runTool(t, "ffmpeg", "-nostdin", "-v", "error", "-i", path, "-frames:v", "1", "-vf", filter, "-f", "rawvideo", "-pix_fmt", "rgb24", "-")
}

// barMeans is the mean R, G, B of the inside of each of the 7 upper bars
// of an smptebars frame w pixels wide.
func barMeans(rgb []byte, w, h int) [7][3]float64 {
	var m [7][3]float64
	for b := range 7 {
		x0, x1 := w*b/7+w/28, w*(b+1)/7-w/28
		n := 0.0
		for y := h / 8; y < h/2; y++ {
			for x := x0; x < x1; x++ {
				for c := range 3 {
					m[b][c] += float64(rgb[(y*w+x)*3+c])
				}
			}
			n += float64(x1 - x0)
		}
		for c := range 3 {
			m[b][c] /= n
		}
	}
	return m
}

// TestColourBars: colour bars in BT.709 limited, BT.601 full and BT.2020
// limited range come out of a restore (yuv444p: RGB to the encoder;
// yuv420p: the backend's conversion where it converts as the input needs,
// else RGB) tagged as they went in, and the mean RGB of each bar, read as
// the tags say, equals within 2 levels (3 for yuv420p) the model's own output for the
// input read as its tags say. (The model itself moves flat colours by up
// to 11 levels from ffmpeg's lanczos upscale: it sharpens and adds
// contrast; that is checked within 16 levels, a sanity bound.)
func TestColourBars(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	m, err := compact.LoadBundled(cpu.New(0), 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, sws string
		colour    video.Colour
	}{
		{"bt709", "out_color_matrix=bt709:out_range=tv", video.Colour{Primaries: "bt709", Transfer: "bt709", Matrix: "bt709", Range: "tv"}},
		{"bt601full", "out_color_matrix=bt601:out_range=pc", video.Colour{Primaries: "smpte170m", Transfer: "smpte170m", Matrix: "smpte170m", Range: "pc"}},
		{"bt2020", "out_color_matrix=bt2020:out_range=tv", video.Colour{Primaries: "bt2020", Transfer: "bt709", Matrix: "bt2020nc", Range: "tv"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := filepath.Join(dir, c.name+".mkv")
			ffmpegGen(t, "-f", "lavfi", "-i", "smptebars=s=112x64:r=1", "-frames:v", "1", "-vf", "scale="+c.sws+",format=yuv444p",
				"-c:v", "ffv1", "-color_primaries", c.colour.Primaries, "-color_trc", c.colour.Transfer, "-colorspace", c.colour.Matrix, "-color_range", c.colour.Range, in)
			info := probeWith(t, in)
			if info.Colour != c.colour {
				t.Fatalf("input tagged %+v, want %+v", info.Colour, c.colour)
			}
			for _, pix := range []string{"yuv444p", "yuv420p"} {
				out := filepath.Join(dir, c.name+"_"+pix+".mkv")
				res := restoreCPU(t, info, out, video.EncodeOptions{Codec: "libx264", CRF: 0, Preset: "ultrafast", PixFmt: pix}, 1)
				if got := probeFirst(t, out).Colour; got != c.colour {
					t.Errorf("%s: output tagged %+v, want %+v", pix, got, c.colour)
				}
				if !strings.Contains(res.Carried.String(), "colour "+c.colour.Primaries) {
					t.Errorf("%s: report %q lacks the colour", pix, res.Carried)
				}
				w, h := 448, 256
				got := barMeans(rgbFrame(t, out, c.colour, ""), w, h)
				model := make([]byte, w*h*3)
				if err := m.Upscale(context.Background(), rgbFrame(t, in, c.colour, ""), 1, w/4, h/4, model, 0); err != nil {
					t.Fatal(err)
				}
				want := barMeans(model, w, h)
				lanczos := barMeans(rgbFrame(t, in, c.colour, fmt.Sprintf("scale=%d:%d:flags=lanczos", w, h)), w, h)
				tol := 2.0
				if pix == "yuv420p" {
					tol = 3 // chroma averaged over 2x2 of the model's texture, then clipped
				}
				for b := range got {
					for k := range 3 {
						if math.Abs(got[b][k]-want[b][k]) > tol || math.Abs(got[b][k]-lanczos[b][k]) > 16 {
							t.Errorf("%s: bar %d: mean RGB %.1f, the model's %.1f, ffmpeg's lanczos upscale %.1f", pix, b, got[b], want[b], lanczos[b])
							break
						}
					}
				}
			}
		})
	}
}

// TestHDR10: an HDR10 input restored to Matroska with libx265 has the
// same colour tags and the same mastering display and content light
// level metadata on its first frame.
func TestHDR10(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "hdr10.mkv")
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-frames:v", "2", "-pix_fmt", "yuv420p10le", "-c:v", "libx265",
		"-x265-params", "log-level=error:master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,50):max-cll=1000,400",
		"-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-color_range", "tv", in)
	info := probeWith(t, in)
	if info.HDR == nil || info.HDR.Mastering == nil || info.HDR.Light == nil {
		t.Fatalf("input has no HDR10 metadata: %+v", probeFirst(t, in).Side)
	}
	out := filepath.Join(dir, "out.mkv")
	res := restoreCPU(t, info, out, video.EncodeOptions{Codec: "libx265", CRF: 28, Preset: "ultrafast", PixFmt: "yuv420p10le",
		Options: []string{"x265-params=aq-mode=3"}}, 1)
	a, b := probeFirst(t, in), probeFirst(t, out)
	if a.Colour != b.Colour {
		t.Errorf("output tagged %+v, input %+v", b.Colour, a.Colour)
	}
	if fmt.Sprint(a.Side) != fmt.Sprint(b.Side) {
		t.Errorf("output side data %v, input %v", b.Side, a.Side)
	}
	if !strings.Contains(res.Carried.String(), "HDR10 static metadata") {
		t.Errorf("report %q", res.Carried)
	}
}

// TestSAR: a 4:3 SAR input comes out with the same SAR and DAR, through
// one encoder and through joined segments.
func TestSAR(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "sar.mp4")
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=48x32:r=10", "-frames:v", "2", "-vf", "setsar=4/3", "-c:v", "libx264", "-pix_fmt", "yuv420p", in)
	info := probeWith(t, in)
	a := probeFirst(t, in)
	if a.SAR != "4:3" || a.DAR != "2:1" {
		t.Fatalf("input SAR %s DAR %s", a.SAR, a.DAR)
	}
	for _, seg := range []int{1, 2} {
		out := filepath.Join(dir, fmt.Sprintf("out%d.mp4", seg))
		res := restoreCPU(t, info, out, video.EncodeOptions{}, seg)
		if b := probeFirst(t, out); b.SAR != a.SAR || b.DAR != a.DAR {
			t.Errorf("%d segments: output SAR %s DAR %s, want %s %s", seg, b.SAR, b.DAR, a.SAR, a.DAR)
		}
		if !strings.Contains(res.Carried.String(), "SAR 4:3") {
			t.Errorf("report %q", res.Carried)
		}
	}
}

// TestCarrySegments: the segments path carries the subtitles and title,
// and Result reports them.
func TestCarrySegments(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	srt := filepath.Join(dir, "a.srt")
	os.WriteFile(srt, []byte("1\n00:00:00,000 --> 00:00:00,300\nHello segments\n\n"), 0o644)
	in := filepath.Join(dir, "in.mkv")
	ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10:d=0.4", "-i", srt, "-map", "0", "-map", "1", "-c:v", "libx264", "-c:s", "srt",
		"-metadata", "title=Segments", "-metadata:s:s:0", "language=spa", in)
	info := probeWith(t, in)
	out := filepath.Join(dir, "out.mp4")
	res := restoreCPU(t, info, out, video.EncodeOptions{}, 2)
	sub := runTool(t, "ffmpeg", "-v", "error", "-i", out, "-map", "0:s:0", "-f", "srt", "-")
	if !strings.Contains(string(sub), "Hello segments") {
		t.Errorf("subtitles %q", sub)
	}
	if s := res.Carried.String(); !strings.Contains(s, "subtitle #1 subrip as mov_text (spa)") || !strings.Contains(s, "title") {
		t.Errorf("report %q", s)
	}
}
