package video

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pgsSup returns a PGS (.sup) file with one 4x2 bitmap subtitle shown at
// 0 s: the smallest bitmap subtitle ffmpeg reads (lavfi makes none).
func pgsSup() []byte {
	var b bytes.Buffer
	seg := func(typ byte, data []byte) {
		b.WriteString("PG")
		binary.Write(&b, binary.BigEndian, uint32(0)) // pts
		binary.Write(&b, binary.BigEndian, uint32(0)) // dts
		b.WriteByte(typ)
		binary.Write(&b, binary.BigEndian, uint16(len(data)))
		b.Write(data)
	}
	be16 := func(v int) []byte { return []byte{byte(v >> 8), byte(v)} }
	var pcs []byte
	pcs = append(pcs, be16(64)...)
	pcs = append(pcs, be16(48)...)
	pcs = append(pcs, 0x10)          // frame rate
	pcs = append(pcs, be16(0)...)    // composition number
	pcs = append(pcs, 0x80, 0, 0, 1) // epoch start, no palette update, palette 0, one object
	pcs = append(pcs, be16(0)...)    // object id
	pcs = append(pcs, 0, 0)          // window id, not cropped
	pcs = append(pcs, be16(8)...)
	pcs = append(pcs, be16(8)...)
	seg(0x16, pcs)
	wds := []byte{1, 0}
	wds = append(wds, be16(8)...)
	wds = append(wds, be16(8)...)
	wds = append(wds, be16(4)...)
	wds = append(wds, be16(2)...)
	seg(0x17, wds)
	seg(0x14, []byte{0, 0, 1, 235, 128, 128, 255}) // palette 0: entry 1 white, opaque
	rle := []byte{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0}
	ods := append(be16(0), 0, 0xc0) // object 0, version 0, first and last
	n := len(rle) + 4
	ods = append(ods, byte(n>>16), byte(n>>8), byte(n))
	ods = append(ods, be16(4)...)
	ods = append(ods, be16(2)...)
	ods = append(ods, rle...)
	seg(0x15, ods)
	seg(0x80, nil)
	return b.Bytes()
}

// carrySource makes (once) a Matroska file of 10 frames at 10 fps with
// everything the streams plan carries: an English audio stream, a French
// SubRip subtitle (titled, default and forced), a PGS bitmap subtitle, two
// chapters, a title and another global tag, and a font attachment.
func carrySource(t *testing.T) string {
	t.Helper()
	dir := fixtureDir
	srt := filepath.Join(dir, "carry.srt")
	meta := filepath.Join(dir, "carry.ffmeta")
	sup := filepath.Join(dir, "carry.sup")
	font := filepath.Join(dir, "carry.ttf")
	for name, data := range map[string]string{
		srt:  "1\n00:00:00,000 --> 00:00:00,800\nHello carry\n\n",
		meta: ";FFMETADATA1\ntitle=My Film\nartist=Someone\n\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=500\ntitle=Opening\n\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=500\nEND=1000\ntitle=Second\n",
		sup:  string(pgsSup()),
		font: "not really a font",
	} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return fixture(t, "carry_src.mkv",
		"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-f", "lavfi", "-i", "sine=d=1", "-i", srt, "-i", sup, "-i", meta,
		"-map", "0:v", "-map", "1:a", "-map", "2:s", "-map", "3:s", "-map_metadata", "4", "-map_chapters", "4",
		"-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "libopus", "-c:s:0", "srt", "-c:s:1", "copy",
		"-metadata:s:a:0", "language=eng", "-metadata:s:s:0", "language=fra", "-metadata:s:s:0", "title=French",
		"-disposition:s:0", "default+forced", "-metadata:s:s:1", "language=ger",
		"-attach", font, "-metadata:s:t", "mimetype=application/x-truetype-font")
}

// probed is what ffprobe says of a file's streams, chapters and tags.
type probed struct {
	Streams []struct {
		CodecType   string            `json:"codec_type"`
		CodecName   string            `json:"codec_name"`
		Disposition map[string]int    `json:"disposition"`
		Tags        map[string]string `json:"tags"`
		SAR         string            `json:"sample_aspect_ratio"`
		DAR         string            `json:"display_aspect_ratio"`
		Primaries   string            `json:"color_primaries"`
		Transfer    string            `json:"color_transfer"`
		Space       string            `json:"color_space"`
		Range       string            `json:"color_range"`
		PixFmt      string            `json:"pix_fmt"`
	} `json:"streams"`
	Chapters []struct {
		Tags map[string]string `json:"tags"`
	} `json:"chapters"`
	Format struct {
		Tags map[string]string `json:"tags"`
	} `json:"format"`
}

func ffprobeJSON(t *testing.T, path string) probed {
	t.Helper()
	out, err := exec.Command(needFFprobe(t), "-v", "error", "-show_streams", "-show_chapters", "-show_format", "-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var p probed
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// subtitleText extracts the first subtitle stream of path as SubRip.
func subtitleText(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command(needFFmpeg(t), "-v", "error", "-i", path, "-map", "0:s:0", "-c:s", "srt", "-f", "srt", "-").Output()
	if err != nil {
		t.Fatalf("extract subtitles of %s: %v", path, err)
	}
	return string(out)
}

// encodeCarry writes 10 frames into out carrying the streams of src.
func encodeCarry(t *testing.T, out string, carry CarryOptions) Carried {
	t.Helper()
	opt := testEncodeOptions()
	opt.FPS = Rational{10, 1}
	opt.CarryOptions = carry
	e, err := NewEncoder(testCtx(t), out, opt)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, e.FrameSize())
	for range 10 {
		if err := e.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return e.Carried()
}

// checkCarried checks out (.mkv or .mp4) for what carrySource's streams
// become, and the report c.
func checkCarried(t *testing.T, out string, c Carried) {
	t.Helper()
	mkv := strings.HasSuffix(out, ".mkv")
	p := ffprobeJSON(t, out)
	if got := tag(p.Format.Tags, "title"); got != "My Film" {
		t.Errorf("title %q, want My Film", got)
	}
	if got := tag(p.Format.Tags, "artist"); got != "Someone" {
		t.Errorf("artist %q, want Someone", got)
	}
	if len(p.Chapters) != 2 || tag(p.Chapters[1].Tags, "title") != "Second" {
		t.Errorf("chapters %+v, want Opening and Second", p.Chapters)
	}
	var kinds []string
	for _, s := range p.Streams {
		kinds = append(kinds, s.CodecType+":"+s.CodecName)
		switch s.CodecType {
		case "audio":
			if l := tag(s.Tags, "language"); l != "eng" {
				t.Errorf("audio language %q, want eng", l)
			}
		case "subtitle":
			if s.CodecName == "hdmv_pgs_subtitle" {
				continue
			}
			if l := tag(s.Tags, "language"); l != "fra" {
				t.Errorf("subtitle language %q, want fra", l)
			}
			want := "subrip"
			if !mkv {
				want = "mov_text"
			}
			if s.CodecName != want {
				t.Errorf("subtitle codec %s, want %s", s.CodecName, want)
			}
			if s.Disposition["default"] != 1 || s.Disposition["forced"] != 1 {
				t.Errorf("subtitle dispositions %v, want default and forced", s.Disposition)
			}
			if mkv && tag(s.Tags, "title") != "French" {
				t.Errorf("subtitle title %q, want French", tag(s.Tags, "title"))
			}
		}
	}
	has := func(k string) bool { return slices.Contains(kinds, k) }
	if !has("audio:opus") && !has("audio:aac") {
		t.Errorf("streams %v: no audio", kinds)
	}
	if got := subtitleText(t, out); !strings.Contains(got, "Hello carry") {
		t.Errorf("subtitle text %q, want Hello carry", got)
	}
	line := c.String()
	if mkv {
		if !has("subtitle:hdmv_pgs_subtitle") || !slices.ContainsFunc(kinds, func(k string) bool { return strings.HasPrefix(k, "attachment:") }) {
			t.Errorf("streams %v: want the PGS subtitle and the attachment", kinds)
		}
		if len(c.Dropped) != 0 {
			t.Errorf("report %q drops something", line)
		}
	} else {
		if has("subtitle:hdmv_pgs_subtitle") {
			t.Errorf("streams %v: a PGS subtitle in MP4", kinds)
		}
		if !strings.Contains(line, "drops: subtitle #3 hdmv_pgs_subtitle (ger)") || !strings.Contains(line, "attachment #4") {
			t.Errorf("report %q does not name the dropped PGS subtitle and attachment", line)
		}
	}
	for _, want := range []string{"audio #1 opus", "(eng)", "subtitle #2 subrip", "(fra, \"French\", default, forced)", "chapters (2)", "title"} {
		if !strings.Contains(line, want) {
			t.Errorf("report %q lacks %q", line, want)
		}
	}
}

// TestCarryStreams: an Encoder carries the source's audio, subtitles (as
// they are into Matroska, as mov_text into MP4), their languages, titles
// and dispositions, chapters, title and tags, and the attachment into
// Matroska; into MP4 the bitmap subtitle and attachment are dropped and
// reported.
func TestCarryStreams(t *testing.T) {
	needFFprobe(t)
	src := carrySource(t)
	for _, ext := range []string{".mkv", ".mp4"} {
		t.Run(ext, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "out"+ext)
			c := encodeCarry(t, out, CarryOptions{StreamsFrom: src})
			checkCarried(t, out, c)
		})
	}
}

// TestCarryConcat: the segments path carries the same.
func TestCarryConcat(t *testing.T) {
	needFFprobe(t)
	src := carrySource(t)
	dir := t.TempDir()
	var parts []string
	for i := range 2 {
		p := filepath.Join(dir, "seg"+string(rune('0'+i))+".mkv")
		encodeCarry(t, p, CarryOptions{})
		parts = append(parts, p)
	}
	for _, ext := range []string{".mkv", ".mp4"} {
		out := filepath.Join(dir, "joined"+ext)
		if ext == ".mp4" {
			for i, p := range parts {
				parts[i] = strings.TrimSuffix(p, ".mkv") + ".mp4"
				encodeCarry(t, parts[i], CarryOptions{})
			}
		}
		c, err := Concat(testCtx(t), parts, out, ConcatOptions{CarryOptions: CarryOptions{StreamsFrom: src}, Frames: []int{10, 10}, FPS: Rational{10, 1}})
		if err != nil {
			t.Fatal(err)
		}
		checkCarried(t, out, c)
	}
}

// TestCarryLeaveOut: NoSubtitles and NoMetadata leave the subtitles,
// attachment, title, tags and chapters out, and say so.
func TestCarryLeaveOut(t *testing.T) {
	needFFprobe(t)
	src := carrySource(t)
	out := filepath.Join(t.TempDir(), "out.mkv")
	c := encodeCarry(t, out, CarryOptions{StreamsFrom: src, NoSubtitles: true, NoMetadata: true})
	p := ffprobeJSON(t, out)
	if tag(p.Format.Tags, "title") != "" || len(p.Chapters) != 0 {
		t.Errorf("title %q, %d chapters: want none", tag(p.Format.Tags, "title"), len(p.Chapters))
	}
	for _, s := range p.Streams {
		if s.CodecType != "video" && s.CodecType != "audio" {
			t.Errorf("a %s stream with --no-subtitles", s.CodecType)
		}
		if s.CodecType == "audio" && tag(s.Tags, "language") != "" {
			t.Errorf("audio language %q with NoMetadata", tag(s.Tags, "language"))
		}
	}
	line := c.String()
	for _, want := range []string{"audio #1 opus", "subtitle #2 subrip (fra, \"French\", default, forced) (--no-subtitles)", "metadata (--no-metadata)"} {
		if !strings.Contains(line, want) {
			t.Errorf("report %q lacks %q", line, want)
		}
	}
}

// TestCarryTimecode: a camera file's timecode (an MP4 tmcd track) is
// carried, as a timecode track into MP4 and a tag into Matroska, and
// reported; its data stream is not reported dropped.
func TestCarryTimecode(t *testing.T) {
	needFFprobe(t)
	src := fixture(t, "timecode.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-c:v", "libx264", "-timecode", "01:02:03:04")
	for _, ext := range []string{".mp4", ".mkv"} {
		out := filepath.Join(t.TempDir(), "out"+ext)
		c := encodeCarry(t, out, CarryOptions{StreamsFrom: src})
		p := ffprobeJSON(t, out)
		tc := tag(p.Format.Tags, "timecode")
		for _, s := range p.Streams {
			if v := tag(s.Tags, "timecode"); v != "" {
				tc = v
			}
		}
		if tc != "01:02:03:04" && tc != "01:02:03:4" {
			t.Errorf("%s: timecode %q", ext, tc)
		}
		if line := c.String(); !strings.Contains(line, "timecode 01:02:03") || strings.Contains(line, "drops") {
			t.Errorf("%s: report %q", ext, line)
		}
	}
}

// TestSubtitleCodec: text subtitles are converted where the container
// needs it, bitmap ones copied into Matroska only.
func TestSubtitleCodec(t *testing.T) {
	for _, c := range []struct{ codec, ext, want string }{
		{"subrip", ".mkv", "copy"}, {"ass", ".mkv", "copy"}, {"mov_text", ".mkv", "srt"}, {"hdmv_pgs_subtitle", ".mkv", "copy"},
		{"subrip", ".mp4", "mov_text"}, {"ass", ".mov", "mov_text"}, {"webvtt", ".mp4", "mov_text"}, {"mov_text", ".mp4", "copy"},
		{"dvd_subtitle", ".mp4", ""}, {"subrip", ".webm", "webvtt"}, {"ass", ".webm", "webvtt"}, {"dvb_subtitle", ".webm", ""},
		{"subrip", ".avi", ""}, {"dvb_subtitle", ".ts", "copy"},
	} {
		got, why := subtitleCodec(c.codec, c.ext)
		if got != c.want || (got == "") != (why != "") {
			t.Errorf("%s into %s: %q (%s), want %q", c.codec, c.ext, got, why, c.want)
		}
	}
}

// TestPlanStreamsFFmpegOnly: without ffprobe (ffmpeg 4.1's static
// builds) the plan still maps and converts every stream, from ffmpeg's
// description of the source.
func TestPlanStreamsFFmpegOnly(t *testing.T) {
	src := carrySource(t)
	p, err := planStreams(testCtx(t), noFFprobe(t), CarryOptions{StreamsFrom: src}, ".mp4", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(p.output, " ")
	for _, want := range []string{"-map 1:1 -c:a:0 aac", "-map 1:2 -c:s:0 mov_text", "-map_metadata 1 -map_chapters 1"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	line := p.report.String()
	for _, want := range []string{"drops: subtitle #3 hdmv_pgs_subtitle (ger) (a bitmap subtitle cannot go into .mp4: use .mkv)",
		"title", "metadata (1 tags)", "chapters (2)", "audio #1 opus as aac (eng)", "(fra, \"French\", default, forced)"} {
		if !strings.Contains(line, want) {
			t.Errorf("report %q lacks %q", line, want)
		}
	}
}

// TestCarryLongTitle: the video stream's title is carried whole (it was
// cut to 60 characters).
func TestCarryLongTitle(t *testing.T) {
	needFFprobe(t)
	title := strings.Repeat("A long title, ", 10) + "end"
	src := fixture(t, "long_title.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1", "-c:v", "libx264", "-metadata:s:v:0", "title="+title)
	out := filepath.Join(t.TempDir(), "out.mkv")
	encodeCarry(t, out, CarryOptions{StreamsFrom: src})
	if got := tag(ffprobeJSON(t, out).Streams[0].Tags, "title"); got != title {
		t.Errorf("video title %q, want %q", got, title)
	}
}

// TestCarryExcerpt: an excerpt of 1 s of a 5 s source keeps only the
// chapter that begins within it (not the one beginning where it ends, nor
// the third), says so, and carries no subtitle that begins after it; the
// subtitle crossing its end is kept.
func TestCarryExcerpt(t *testing.T) {
	needFFprobe(t)
	dir := fixtureDir
	srt := filepath.Join(dir, "excerpt.srt")
	meta := filepath.Join(dir, "excerpt.ffmeta")
	for name, data := range map[string]string{
		srt:  "1\n00:00:00,500 --> 00:00:03,000\nCrossing\n\n2\n00:00:03,500 --> 00:00:04,000\nLate\n\n",
		meta: ";FFMETADATA1\ntitle=Film\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1000\ntitle=One \\= first\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=1000\nEND=3000\ntitle=Two\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=3000\nEND=5000\ntitle=Three\n",
	} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := fixture(t, "excerpt_src.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=5", "-i", srt, "-i", meta,
		"-map", "0:v", "-map", "1:s", "-map_metadata", "2", "-map_chapters", "2", "-c:v", "libx264", "-c:s", "srt")
	for _, ext := range []string{".mkv", ".mp4"} {
		out := filepath.Join(t.TempDir(), "out"+ext)
		c := encodeCarry(t, out, CarryOptions{StreamsFrom: src, StreamsDuration: 1})
		p := ffprobeJSON(t, out)
		if len(p.Chapters) != 1 || tag(p.Chapters[0].Tags, "title") != "One = first" {
			t.Errorf("%s: chapters %+v, want One = first only", ext, p.Chapters)
		}
		if line := c.String(); !strings.Contains(line, "chapters (1)") {
			t.Errorf("%s: report %q, want chapters (1)", ext, line)
		}
		if got := subtitleText(t, out); !strings.Contains(got, "Crossing") || strings.Contains(got, "Late") {
			t.Errorf("%s: subtitles %q, want Crossing only", ext, got)
		}
	}
}
