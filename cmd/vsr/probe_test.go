package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/video"
)

// TestProbeShowsAll: vsr probe shows the pixel format and depth, colour
// tags, HDR10 metadata, SAR and DAR, field order, each stream's language,
// title and dispositions, chapters and the title, as text and as JSON.
func TestProbeShowsAll(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	meta := filepath.Join(dir, "meta.txt")
	srt := filepath.Join(dir, "s.srt")
	os.WriteFile(meta, []byte(";FFMETADATA1\ntitle=My Title\n\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=500\ntitle=Intro\n"), 0o644)
	os.WriteFile(srt, []byte("1\n00:00:00,000 --> 00:00:00,400\nhello\n"), 0o644)
	in := filepath.Join(dir, "hdr.mkv")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10", "-i", srt, "-i", meta, "-map", "0:v", "-map", "1",
		"-map_metadata", "2", "-map_chapters", "2", "-frames:v", "5", "-vf", "setsar=4/3",
		"-c:v", "libx265", "-pix_fmt", "yuv420p10le",
		"-x265-params", "log-level=error:master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1):max-cll=1000,400",
		"-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc",
		"-c:s", "srt", "-metadata:s:s:0", "language=eng", "-metadata:s:s:0", "title=Signs", "-disposition:s:0", "default+forced", in)
	out, err := vsr(t, "probe", in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"yuv420p10le", "10-bit 4:2:0", "primaries bt2020", "transfer smpte2084 (PQ)", "matrix bt2020nc",
		"range tv (limited)", "R(0.6800, 0.3200)", "luminance 0.0001-1000 cd/m²", "MaxCLL 1000 cd/m², MaxFALL 400 cd/m²",
		"SAR 4:3, DAR 16:9", "fields       progressive", `subtitle subrip [eng] "Signs" (default, forced)`,
		"0.000-0.500 s Intro", "title        My Title"} {
		if !strings.Contains(out, want) {
			t.Errorf("vsr probe: no %q in\n%s", want, out)
		}
	}
	out, err = vsr(t, "probe", "--json", in)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		video.Info
		DAR video.Rational `json:"dar"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	switch {
	case got.Depth != 10 || got.Chroma != "4:2:0" || got.Colour.Transfer != "smpte2084" || got.Colour.Range != "tv":
		t.Errorf("--json: depth %d chroma %q colour %+v", got.Depth, got.Chroma, got.Colour)
	case got.HDR == nil || got.HDR.Mastering == nil || got.HDR.Mastering.Red[0] != (video.Rational{Num: 34000, Den: 50000}) || got.HDR.Light == nil || got.HDR.Light.MaxFALL != 400:
		t.Errorf("--json: hdr %+v", got.HDR)
	case got.SAR != (video.Rational{Num: 4, Den: 3}) || got.DAR != (video.Rational{Num: 16, Den: 9}) || got.FieldOrder != "progressive":
		t.Errorf("--json: sar %v dar %v field order %q", got.SAR, got.DAR, got.FieldOrder)
	case got.Title != "My Title" || len(got.Chapters) != 1 || got.Chapters[0].Title != "Intro":
		t.Errorf("--json: title %q chapters %+v", got.Title, got.Chapters)
	case len(got.Streams) != 2 || got.Streams[1].Language != "eng" || strings.Join(got.Streams[1].Dispositions, ",") != "default,forced":
		t.Errorf("--json: streams %+v", got.Streams)
	}
}

// TestRestoreInterlaced: an interlaced MPEG-2 input is deinterlaced by
// default, with a notice, to a progressive output of as many frames;
// --deinterlace double gives twice the frames at twice the rate; off
// warns and keeps the frames as they are; a bad mode is refused.
func TestRestoreInterlaced(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "interlaced.mpg")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-frames:v", "6", "-flags", "+ildct+ilme", "-top", "1", "-c:v", "mpeg2video", in)
	if info := probe(t, in); info.FieldOrder != "tt" {
		t.Fatalf("input field order %q, want tt", info.FieldOrder)
	}
	for _, c := range []struct {
		mode, notice string
		frames       int
		fps          video.Rational
	}{
		{"", "note: " + in + " is interlaced (top field first, as the file states): deinterlaced with bwdif", 6, video.Rational{Num: 25, Den: 1}},
		{"double", "one frame per field, 12 frames at 50/1 fps", 12, video.Rational{Num: 50, Den: 1}},
		{"off", "warning: " + in + " is interlaced", 6, video.Rational{Num: 25, Den: 1}},
	} {
		out := filepath.Join(dir, "out"+c.mode+".mkv")
		args := []string{"restore", in, "-o", out, "--scale", "2", "--progress", "none"}
		if c.mode != "" {
			args = append(args, "--deinterlace", c.mode)
		}
		_, stderr, err := vsrOutputs(args...)
		if err != nil {
			t.Fatalf("%s: %v", c.mode, err)
		}
		if !strings.Contains(stderr, c.notice) {
			t.Errorf("%s: stderr %q, want %q", c.mode, stderr, c.notice)
		}
		info := probe(t, out)
		if info.Frames != c.frames || info.FPS != c.fps || info.FieldOrder != "progressive" {
			t.Errorf("%s: output has %d frames at %v, field order %q; want %d at %v, progressive", c.mode, info.Frames, info.FPS, info.FieldOrder, c.frames, c.fps)
		}
	}
	if _, err := vsr(t, "restore", in, "-o", filepath.Join(dir, "x.mkv"), "--deinterlace", "weave"); err == nil || !strings.Contains(err.Error(), "--deinterlace \"weave\": want auto") {
		t.Errorf("--deinterlace weave: %v", err)
	}
}
