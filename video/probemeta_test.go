package video

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestProbeColourTags: bt709 tags and a full-range bt601 input are read
// on both code paths.
func TestProbeColourTags(t *testing.T) {
	bt709 := fixture(t, "bt709.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-frames:v", "3", "-c:v", "libx264",
		"-pix_fmt", "yuv420p", "-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709", "-color_range", "tv")
	full := fixture(t, "full601.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-frames:v", "3", "-c:v", "libx264",
		"-pix_fmt", "yuv444p", "-color_primaries", "smpte170m", "-color_trc", "smpte170m", "-colorspace", "bt470bg", "-color_range", "pc")
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), bt709, tl)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Colour{Primaries: "bt709", Transfer: "bt709", Matrix: "bt709", Range: "tv"}); !colourIs(info.Colour, want, tl) {
			t.Errorf("bt709: Colour = %+v, want %+v", info.Colour, want)
		}
		if info.Depth != 8 || info.Chroma != "4:2:0" || info.Alpha || info.HDR != nil {
			t.Errorf("bt709: depth %d chroma %q alpha %v HDR %+v", info.Depth, info.Chroma, info.Alpha, info.HDR)
		}
		if info.FieldOrder != "progressive" || info.DetectedFieldOrder != "" || info.Interlaced() != "" {
			t.Errorf("bt709: field order %q, detected %q", info.FieldOrder, info.DetectedFieldOrder)
		}
		info, err = probe(testCtx(t), full, tl)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Colour{Primaries: "smpte170m", Transfer: "smpte170m", Matrix: "bt470bg", Range: "pc"}); !colourIs(info.Colour, want, tl) {
			t.Errorf("full range: Colour = %+v, want %+v", info.Colour, want)
		}
		if info.Chroma != "4:4:4" {
			t.Errorf("full range: chroma %q, want 4:4:4", info.Chroma)
		}
	})
}

// colourIs compares Colours; ffmpeg's text (the ffmpeg-only path) has
// no chroma location, ffprobe's has.
func colourIs(got, want Colour, tl tools) bool {
	if tl.ffprobe != "" && got.ChromaLocation == "" {
		return false
	}
	got.ChromaLocation = ""
	return got == want
}

// hdr10 makes a 10-bit HDR10 HEVC file with the static metadata in its
// frames (as libx265 writes it) and returns its path.
func hdr10(t testing.TB) string {
	return fixture(t, "hdr10.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-frames:v", "3",
		"-c:v", "libx265", "-pix_fmt", "yuv420p10le",
		"-x265-params", "log-level=error:master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1):max-cll=1000,400",
		"-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc")
}

// TestProbeHDR10: the mastering display and content light level of an
// HDR10 input are read exactly, with its depth and colour.
func TestProbeHDR10(t *testing.T) {
	path := hdr10(t)
	q := func(n, d int) Rational { return Rational{n, d} }
	want := &HDR{
		Mastering: &MasteringDisplay{
			Red: [2]Rational{q(34000, 50000), q(16000, 50000)}, Green: [2]Rational{q(13250, 50000), q(34500, 50000)},
			Blue: [2]Rational{q(7500, 50000), q(3000, 50000)}, White: [2]Rational{q(15635, 50000), q(16450, 50000)},
			MinLuminance: q(1, 10000), MaxLuminance: q(10000000, 10000),
		},
		Light: &ContentLight{MaxCLL: 1000, MaxFALL: 400},
	}
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), path, tl)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(info.HDR, want) {
			t.Errorf("HDR = %+v, want %+v", info.HDR, want)
			if info.HDR != nil {
				t.Logf("mastering %+v light %+v", info.HDR.Mastering, info.HDR.Light)
			}
		}
		if want := (Colour{Primaries: "bt2020", Transfer: "smpte2084", Matrix: "bt2020nc", Range: "tv"}); !colourIs(info.Colour, want, tl) {
			t.Errorf("Colour = %+v, want %+v", info.Colour, want)
		}
		if info.PixFmt != "yuv420p10le" || info.Depth != 10 || info.Chroma != "4:2:0" {
			t.Errorf("pix_fmt %q depth %d chroma %q, want yuv420p10le 10 4:2:0", info.PixFmt, info.Depth, info.Chroma)
		}
	})
}

// TestProbeStreamsChaptersTitle: SAR, the file's title, tags and
// chapters, and a subtitle stream's language, title and dispositions.
func TestProbeStreamsChaptersTitle(t *testing.T) {
	dir := t.TempDir()
	meta := filepath.Join(dir, "meta.txt")
	srt := filepath.Join(dir, "s.srt")
	os.WriteFile(meta, []byte(";FFMETADATA1\ntitle=My Title\nartist=Someone\n\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=500\ntitle=Intro\n\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=500\nEND=1000\ntitle=Main\n"), 0o644)
	os.WriteFile(srt, []byte("1\n00:00:00,000 --> 00:00:00,500\nhello\n"), 0o644)
	path := fixture(t, "streams.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-i", srt, "-i", meta,
		"-map", "0:v", "-map", "1", "-map_metadata", "2", "-map_chapters", "2", "-frames:v", "10",
		"-c:v", "libx264", "-pix_fmt", "yuv420p", "-vf", "setsar=4/3", "-c:s", "srt",
		"-metadata:s:s:0", "language=fre", "-metadata:s:s:0", "title=Sous-titres", "-disposition:s:0", "default+forced")
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), path, tl)
		if err != nil {
			t.Fatal(err)
		}
		if info.SAR != (Rational{4, 3}) {
			t.Errorf("SAR = %v, want 4/3", info.SAR)
		}
		if info.Title != "My Title" || !strings.EqualFold(tagKey(info.Tags, "artist"), "Someone") {
			t.Errorf("title %q, tags %v", info.Title, info.Tags)
		}
		wantCh := []Chapter{{0, 0.5, "Intro"}, {0.5, 1, "Main"}}
		if !reflect.DeepEqual(info.Chapters, wantCh) {
			t.Errorf("chapters = %+v, want %+v", info.Chapters, wantCh)
		}
		if len(info.Streams) != 2 {
			t.Fatalf("streams = %+v", info.Streams)
		}
		s := info.Streams[1]
		if s.Kind != "subtitle" || s.Language != "fre" || s.Title != "Sous-titres" || !slices.Equal(s.Dispositions, []string{"default", "forced"}) {
			t.Errorf("subtitle stream = %+v, want fre, Sous-titres, default and forced", s)
		}
		if v := info.Streams[0]; slices.Contains(v.Dispositions, "forced") {
			t.Errorf("video stream = %+v, not forced", v)
		}
	})
}

func tagKey(tags map[string]string, key string) string {
	for k, v := range tags {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

// TestProbeUntrustedText: a title and tags are cleaned (no control
// characters) and bounded in length and number.
func TestProbeUntrustedText(t *testing.T) {
	args := []string{"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-frames:v", "2", "-c:v", "libx264",
		"-metadata", "title=evil\x1b[31mred\x07 " + strings.Repeat("x", 5000)}
	for i := range 100 {
		args = append(args, "-metadata", "key"+string(rune('a'+i%26))+strings.Repeat("k", i/26)+"=v")
	}
	path := fixture(t, "untrusted.mkv", args...)
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), path, tl)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(info.Title, "\x1b\x07\n") || len(info.Title) > maxText || !strings.HasPrefix(info.Title, "evil") || !strings.Contains(info.Title, "[31mred") {
			t.Errorf("title %q (%d bytes): want it cleaned and at most %d bytes", info.Title, len(info.Title), maxText)
		}
		if len(info.Tags) != maxTags {
			t.Errorf("%d tags, want at most %d", len(info.Tags), maxTags)
		}
	})
}

func TestParsePixFmtParens(t *testing.T) {
	for _, c := range []struct {
		in    string
		c     Colour
		order string
	}{
		{"tv, bt2020nc/bt2020/smpte2084, progressive", Colour{Matrix: "bt2020nc", Primaries: "bt2020", Transfer: "smpte2084", Range: "tv"}, "progressive"},
		{"tv, bt709, top first", Colour{Matrix: "bt709", Primaries: "bt709", Transfer: "bt709", Range: "tv"}, "tt"},
		{"pc, bt470bg/unknown/unknown, bottom coded first (swapped), left", Colour{Matrix: "bt470bg", Range: "pc", ChromaLocation: "left"}, "bt"},
		{"bt470bg", Colour{Matrix: "bt470bg", Primaries: "bt470bg", Transfer: "gamma28"}, ""},
	} {
		col, order := parsePixFmtParens(c.in)
		if col != c.c || order != c.order {
			t.Errorf("%q: %+v %q, want %+v %q", c.in, col, order, c.c, c.order)
		}
	}
}

// TestDynamicHDR: HDR10+ and Dolby Vision are named from ffprobe's side
// data types and ffmpeg's text.
func TestDynamicHDR(t *testing.T) {
	h := &HDR{}
	h.addSideData([]ffprobeSideData{{Type: "HDR Dynamic Metadata SMPTE2094-40 (HDR10+)"}, {Type: "DOVI configuration record"}, {Type: "Dolby Vision RPU Data"}})
	if !slices.Equal(h.Dynamic, []string{"HDR10+", "Dolby Vision"}) {
		t.Errorf("from ffprobe: %v", h.Dynamic)
	}
	h = &HDR{}
	parseHDRText(h, "DOVI configuration record: version: 1.0, profile: 8, level: 6, rpu flag: 1, el flag: 0, bl flag: 1, compatibility id: 1")
	parseHDRText(h, "HDR10+ metadata: application version: 1, num_windows: 1")
	if !slices.Equal(h.Dynamic, []string{"Dolby Vision", "HDR10+"}) {
		t.Errorf("from ffmpeg: %v", h.Dynamic)
	}
	// ffmpeg 4.1's showinfo names them by number (as for an HDR10 HEVC).
	h = &HDR{}
	parseHDRText(h, "unknown side data type 11 (88 bytes)")
	parseHDRText(h, "unknown side data type 14 (8 bytes)")
	if !h.Unread || h.orNil() == nil || h.Mastering != nil {
		t.Errorf("from ffmpeg 4.1: %+v, want the static metadata marked unread", h)
	}
	parseHDRText(h, "unknown side data type 19 (100 bytes)")
	if !slices.Equal(h.Dynamic, []string{"HDR10+"}) {
		t.Errorf("from ffmpeg 4.1: %v, want HDR10+", h.Dynamic)
	}
	v := planVideoTags(context.Background(), "", EncodeOptions{Codec: "libx265", HDR: h})
	if len(v.report.Dropped) != 2 || v.report.Dropped[1].What != "HDR10 static metadata" {
		t.Errorf("the plan drops %+v: want HDR10+ and the unread static metadata, each named", v.report.Dropped)
	}
}

// interlacedMPEG2 is 25 interlaced frames (field_order tt) of MPEG-2 in
// name's container, a key frame every 6.
func interlacedMPEG2(t testing.TB, name string) string {
	return fixture(t, name, "-f", "lavfi", "-i", "testsrc2=size=128x96:rate=25", "-frames:v", "25",
		"-flags", "+ildct+ilme", "-top", "1", "-c:v", "mpeg2video", "-q:v", "2", "-g", "6")
}

// TestInterlacedMPEG2: the stated field order is read; the Decoder of
// Deinterlaced's Info yields exactly its frames, one per frame with
// bwdif or yadif, one per field with double (at twice the rate), and a
// segment decoded from the middle equals the same frames of the whole.
func TestInterlacedMPEG2(t *testing.T) {
	for _, path := range []string{interlacedMPEG2(t, "interlaced.mpg"), interlacedMPEG2(t, "interlaced.mkv")} {
		t.Run(filepath.Ext(path), func(t *testing.T) { testInterlaced(t, path) })
	}
}

func testInterlaced(t *testing.T, path string) {
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), path, tl)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Ext(path) == ".mkv"; seekable(info) != want {
			t.Fatalf("seekable = %v, want %v", !want, want)
		}
		if info.FieldOrder != "tt" || info.Interlaced() != "tt" || info.Frames != 25 {
			t.Fatalf("field order %q, interlaced %q, %d frames: want tt and 25", info.FieldOrder, info.Interlaced(), info.Frames)
		}
		plain, _, err := decodeAll(t, info, DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			mode   Deinterlace
			frames int
			fps    Rational
		}{{DeinterlaceAuto, 25, Rational{25, 1}}, {DeinterlaceYadif, 25, Rational{25, 1}}, {DeinterlaceDouble, 50, Rational{50, 1}}} {
			d, note := info.Deinterlaced(c.mode)
			if d == info || note == "" || d.FieldOrder != "progressive" || d.Interlaced() != "" {
				t.Fatalf("%s: Deinterlaced gave %+v, %q", c.mode, d, note)
			}
			if d.Frames != c.frames || d.FPS != c.fps || info.Frames != 25 {
				t.Errorf("%s: %d frames at %v, want %d at %v", c.mode, d.Frames, d.FPS, c.frames, c.fps)
			}
			all, n, err := decodeAll(t, d, DecodeOptions{})
			if err != nil || n != c.frames {
				t.Fatalf("%s: decoded %d frames, %v; want %d", c.mode, n, err, c.frames)
			}
			if c.mode != DeinterlaceDouble && bytes.Equal(all, plain) {
				t.Errorf("%s: the frames are those of no deinterlacing", c.mode)
			}
			size := len(all) / n
			start, count := 13, 7 // odd: the second field of a frame with double
			part, m, err := decodeAll(t, d, DecodeOptions{StartFrame: start, MaxFrames: count})
			if err != nil || m != count {
				t.Fatalf("%s: segment: %d frames, %v", c.mode, m, err)
			}
			if !bytes.Equal(part, all[start*size:(start+count)*size]) {
				t.Errorf("%s: frames %d..%d decoded from the middle differ from the whole's", c.mode, start, start+count-1)
			}
		}
		if d, note := info.Deinterlaced(DeinterlaceOff); d != info || !strings.Contains(note, "interlaced") {
			t.Errorf("off: %+v, %q: want info as it is and a warning", d, note)
		}
	})
}

// TestDetectInterlaced: an interlaced video without a stated field order
// (FFV1 in NUT) is found interlaced by idet, and deinterlaced; a
// progressive one without a stated order is found progressive.
func TestDetectInterlaced(t *testing.T) {
	il := fixture(t, "untagged_interlaced.nut", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=50,tinterlace=mode=interleave_top,setfield=prog",
		"-frames:v", "30", "-c:v", "ffv1")
	prog := fixture(t, "untagged_progressive.nut", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-frames:v", "30", "-c:v", "ffv1")
	probeModes(t, func(t *testing.T, tl tools) {
		info, err := probe(testCtx(t), il, tl)
		if err != nil {
			t.Fatal(err)
		}
		if info.FieldOrder != "" || info.DetectedFieldOrder != "tt" || info.Interlaced() != "tt" {
			t.Fatalf("interlaced: field order %q, detected %q", info.FieldOrder, info.DetectedFieldOrder)
		}
		d, note := info.Deinterlaced(DeinterlaceDouble)
		if !strings.Contains(note, "idet") || d.Frames != 60 {
			t.Errorf("double: %d frames, %q", d.Frames, note)
		}
		if _, n, err := decodeAll(t, d, DecodeOptions{}); err != nil || n != 60 {
			t.Errorf("double: decoded %d frames, %v; want 60", n, err)
		}
		info, err = probe(testCtx(t), prog, tl)
		if err != nil {
			t.Fatal(err)
		}
		if info.FieldOrder != "" || info.DetectedFieldOrder != "progressive" || info.Interlaced() != "" {
			t.Errorf("progressive: field order %q, detected %q", info.FieldOrder, info.DetectedFieldOrder)
		}
		if d, note := info.Deinterlaced(DeinterlaceAuto); d != info || note != "" {
			t.Errorf("progressive: Deinterlaced changed it: %q", note)
		}
	})
}

// TestParseFFmpegInfoMeta: the ffmpeg-only path reads the title, tags
// (a value on two lines), chapters, a stream's language, title,
// dispositions, colour, field order, SAR and side data (mastering
// display, content light level, a Dolby Vision configuration record,
// the rotation) from ffmpeg's description of its input, as ffmpeg 4.1
// prints it too.
func TestParseFFmpegInfoMeta(t *testing.T) {
	const dump = `Input #0, matroska,webm, from 'in.mkv':
  Metadata:
    title           : A film
    COMMENT         : line one
                    : line two
  Duration: 00:00:02.00, start: 0.000000, bitrate: 100 kb/s
    Chapter #0:0: start 0.000000, end 1.000000
    Metadata:
      title           : One
    Chapter #0:1: start 1.000000, end 2.000000
  Stream #0:0(jpn): Video: hevc (Main 10), yuv420p10le(tv, bt2020nc/bt2020/smpte2084, top first), 1920x1080 [SAR 1:1 DAR 16:9], SAR 4:3 DAR 64:27, 25 fps, 25 tbr, 1k tbn (default)
    Metadata:
      title           : Main video
      rotate          : 90
    Side data:
      Mastering Display Metadata, has_primaries:1 has_luminance:1 r(0.6800,0.3200) g(0.2650,0.6900) b(0.1500 0.0600) wp(0.3127, 0.3290) min_luminance=0.005000, max_luminance=1000.000000
      Content Light Level Metadata, MaxCLL=1000, MaxFALL=400
      DOVI configuration record: version: 1.0, profile: 8, level: 6, rpu flag: 1, el flag: 0, bl flag: 1, compatibility id: 1
  Stream #0:1(eng): Subtitle: ass (default) (forced) (hearing impaired)
    Metadata:
      title           : Signs & Songs
  Stream #0:2: Attachment: ttf
    Metadata:
      filename        : font.ttf
`
	m, ok := parseFFmpegInfo([]byte(dump))
	if !ok || len(m.streams) != 3 {
		t.Fatalf("parse: %v %+v", ok, m)
	}
	if tag(m.tags, "title") != "A film" || cleanText(m.tags["COMMENT"], maxText) != "line one line two" {
		t.Errorf("tags %q", m.tags)
	}
	if want := []Chapter{{0, 1, "One"}, {1, 2, ""}}; !reflect.DeepEqual(m.chapters, want) {
		t.Errorf("chapters %+v, want %+v", m.chapters, want)
	}
	v := m.streams[0]
	if v.language != "jpn" || v.title != "Main video" || !slices.Equal(v.dispositions, []string{"default"}) || v.rotation != 90 {
		t.Errorf("video %+v", v)
	}
	if v.colour != (Colour{Matrix: "bt2020nc", Primaries: "bt2020", Transfer: "smpte2084", Range: "tv"}) || v.fieldOrder != "tt" || v.sar != (Rational{4, 3}) {
		t.Errorf("video colour %+v, field order %q, SAR %v", v.colour, v.fieldOrder, v.sar)
	}
	md := v.hdr.Mastering
	if md == nil || md.Green != [2]Rational{{13250, 50000}, {34500, 50000}} || md.MinLuminance != (Rational{50, 10000}) || md.MaxLuminance != (Rational{10000000, 10000}) ||
		v.hdr.Light == nil || *v.hdr.Light != (ContentLight{1000, 400}) || !slices.Equal(v.hdr.Dynamic, []string{"Dolby Vision"}) {
		t.Errorf("HDR %+v %+v %+v", md, v.hdr.Light, v.hdr.Dynamic)
	}
	s := m.streams[1]
	if s.kind != "subtitle" || s.language != "eng" || s.title != "Signs & Songs" || !slices.Equal(s.dispositions, []string{"default", "forced", "hearing_impaired"}) {
		t.Errorf("subtitle %+v", s)
	}
	if a := m.streams[2]; a.kind != "attachment" || a.title != "" {
		t.Errorf("attachment %+v", a)
	}
}
