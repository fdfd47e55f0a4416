package video

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDecodeMatrix: a Decoder converts YCbCr to RGB with Info.Colour's
// matrix and range, as ffmpeg's scale filter does when told them, whatever
// the file's own tags say (here: none, which ffmpeg reads as BT.601).
func TestDecodeMatrix(t *testing.T) {
	ff := needFFmpeg(t)
	in := fixture(t, "bars_untagged.mkv", "-f", "lavfi", "-i", "smptebars=s=64x48", "-frames:v", "1", "-pix_fmt", "yuv444p", "-c:v", "ffv1")
	info, err := Probe(testCtx(t), in)
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := decodeAll(t, info, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info.Colour = Colour{Matrix: "bt709", Range: "pc"}
	got, _, err := decodeAll(t, info, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command(ff, "-v", "error", "-i", in, "-vf", "scale=in_color_matrix=bt709:in_range=pc", "-f", "rawvideo", "-pix_fmt", "rgb24", "-").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("decoded with Colour bt709 pc: not ffmpeg's conversion with that matrix and range")
	}
	if bytes.Equal(got, plain) {
		t.Error("Colour bt709 pc decodes as an untagged input")
	}
}

// TestVideoTagsArgs: the colour tags come from the closed lists, RGB
// outputs and images get no matrix or range, SAR is set, and HDR10's
// numbers go into one -x265-params with vsr's and the user's.
func TestVideoTagsArgs(t *testing.T) {
	ff := needFFmpeg(t)
	ctx := testCtx(t)
	o := EncodeOptions{Codec: "libx265", PixFmt: "yuv420p10le", InputPixFmt: "rgb24", CRF: -1,
		Colour: Colour{Primaries: "bt2020", Transfer: "smpte2084", Matrix: "bt2020nc", Range: "tv", ChromaLocation: "topleft"},
		SAR:    Rational{4, 3},
		HDR: &HDR{Mastering: &MasteringDisplay{
			Green: [2]Rational{{13250, 50000}, {34500, 50000}}, Blue: [2]Rational{{7500, 50000}, {3000, 50000}},
			Red: [2]Rational{{34000, 50000}, {16000, 50000}}, White: [2]Rational{{15635, 50000}, {16450, 50000}},
			MinLuminance: Rational{50, 10000}, MaxLuminance: Rational{10000000, 10000}},
			Light: &ContentLight{MaxCLL: 1000, MaxFALL: 400}, Dynamic: []string{"HDR10+"}},
		Options: []string{"x265-params=aq-mode=3", "tune=grain"},
	}
	tags := planVideoTags(ctx, ff, o)
	args := strings.Join(videoArgs(o, ".mkv", tags), " ")
	for _, want := range []string{
		"-vf scale=out_color_matrix=bt2020:out_range=tv,format=yuv420p10le,setsar=4/3",
		"-color_primaries bt2020 -color_trc smpte2084 -colorspace bt2020nc -color_range tv -chroma_sample_location topleft",
		"-tune grain -x265-params log-level=error:master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,50):max-cll=1000,400:aq-mode=3",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Count(args, "-x265-params") != 1 {
		t.Errorf("args %q: -x265-params more than once", args)
	}
	line := tags.report.String()
	if !strings.Contains(line, "HDR10 static metadata") || !strings.Contains(line, "drops: HDR10+ dynamic metadata (it cannot follow a change of resolution)") {
		t.Errorf("report %q", line)
	}

	// ffprobe's names of the BT.470 transfers are -color_trc's gamma22 and
	// gamma28.
	for probe, opt := range map[string]string{"bt470m": "gamma22", "bt470bg": "gamma28"} {
		o := EncodeOptions{Codec: "libx264", PixFmt: "yuv420p", InputPixFmt: "rgb24", CRF: -1, Colour: Colour{Transfer: probe}}
		if a := strings.Join(videoArgs(o, ".mkv", planVideoTags(ctx, ff, o)), " "); !strings.Contains(a, "-color_trc "+opt) {
			t.Errorf("transfer %s: args %q lack -color_trc %s", probe, a, opt)
		}
	}
	// Untrusted names stay off the command line; RGB and images get no matrix.
	o = EncodeOptions{Codec: "ffv1", PixFmt: "gbrp", InputPixFmt: "rgb24", Colour: Colour{Primaries: "bt709; rm -rf", Matrix: "bt709", Range: "tv"}}
	if a := videoArgs(o, ".mkv", planVideoTags(ctx, ff, o)); slices.Contains(a, "-colorspace") || slices.Contains(a, "-color_primaries") || slices.Contains(a, "-vf") {
		t.Errorf("gbrp output: %q", a)
	}
	// A yuvj output is YCbCr in full range: it keeps the matrix.
	o = EncodeOptions{Codec: "libx264", PixFmt: "yuvj420p", InputPixFmt: "rgb24", CRF: -1, Colour: Colour{Primaries: "bt709", Transfer: "bt709", Matrix: "bt709", Range: "tv"}}
	a := strings.Join(videoArgs(o, ".mkv", planVideoTags(ctx, ff, o)), " ")
	for _, want := range []string{"-vf scale=out_color_matrix=bt709:out_range=pc,format=yuvj420p", "-colorspace bt709 -color_range pc"} {
		if !strings.Contains(a, want) {
			t.Errorf("yuvj420p output: args %q lack %q", a, want)
		}
	}
	o = EncodeOptions{Codec: "png", PixFmt: "rgb24", Colour: Colour{Primaries: "bt709", Matrix: "bt709"}, SAR: Rational{2, 1}}
	if v := planVideoTags(ctx, ff, o); len(v.args)+len(v.filters) != 0 {
		t.Errorf("png output: %+v", v)
	}
	// libaom cannot take HDR10's static metadata: it is reported dropped.
	o = EncodeOptions{Codec: "libaom-av1", PixFmt: "yuv420p10le", HDR: &HDR{Light: &ContentLight{MaxCLL: 1}}}
	if v := planVideoTags(ctx, ff, o); len(v.report.Dropped) != 1 || !strings.Contains(v.report.Dropped[0].Why, "libaom-av1") {
		t.Errorf("libaom-av1: %+v", v.report)
	}
	// libsvtav1 takes it in -svtav1-params, in cd/m² and CIE units to
	// their last digit.
	o = EncodeOptions{Codec: "libsvtav1", PixFmt: "yuv420p10le", HDR: &HDR{Mastering: &MasteringDisplay{
		Green: [2]Rational{{13251, 50000}, {34500, 50000}}, Blue: [2]Rational{{7500, 50000}, {3000, 50000}},
		Red: [2]Rational{{34000, 50000}, {16000, 50000}}, White: [2]Rational{{15635, 50000}, {16450, 50000}},
		MinLuminance: Rational{1, 20000}, MaxLuminance: Rational{10000000, 10000}}}}
	if a := strings.Join(videoArgs(o, ".mkv", planVideoTags(ctx, ff, o)), " "); !strings.Contains(a, "mastering-display=G(0.265020,0.690000)") || !strings.Contains(a, "L(1000.000000,0.000050)") {
		t.Errorf("libsvtav1 mastering display: %q", a)
	}
	// libsvtav1 takes it in -svtav1-params.
	o = EncodeOptions{Codec: "libsvtav1", PixFmt: "yuv420p10le", HDR: &HDR{Light: &ContentLight{MaxCLL: 1000, MaxFALL: 400}}}
	if a := strings.Join(videoArgs(o, ".mkv", planVideoTags(ctx, ff, o)), " "); !strings.Contains(a, "-svtav1-params content-light=1000,400") {
		t.Errorf("libsvtav1: %q", a)
	}
}
