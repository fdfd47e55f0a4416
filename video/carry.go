package video

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// CarryOptions says what an output carries of its source besides the
// video: audio, subtitles, attachments (fonts), chapters, the global
// metadata (title and the rest), each stream's tags and dispositions, and
// the timecode. EncodeOptions and ConcatOptions embed it.
type CarryOptions struct {
	// StreamsFrom is the source file ("" = nothing is carried). It is
	// opened as Probe opens an input: unless StreamsAllowPlaylists
	// (Info.AllowPlaylists of the probed input), the file alone, read by a
	// video container's or image's demuxer.
	StreamsFrom           string
	StreamsAllowPlaylists bool
	// StreamsDuration, if > 0, carries only the first StreamsDuration
	// seconds of the source (an excerpt: the first frames of a video).
	StreamsDuration float64
	// NoAudio keeps every audio stream out of the output (an image:
	// ffmpeg 4.1's image muxer wrote the audio packets over the picture).
	NoAudio bool
	// NoSubtitles keeps the subtitles and attachments out.
	NoSubtitles bool
	// NoMetadata keeps the global metadata (title, tags), the chapters,
	// each stream's tags and the timecode out; dispositions stay.
	NoMetadata bool
}

// Carried says what an output carries of its input besides the picture,
// and what it drops and why (see Encoder.Carried and Concat).
type Carried struct {
	// Carried names each thing carried, e.g. "audio #1 aac (eng)",
	// "subtitle #2 subrip as mov_text (fra, default)", "chapters (3)",
	// "title", "colour bt709/bt709/bt709 tv", "SAR 4:3".
	Carried []string `json:"carried"`
	// Dropped are the things left out, each with the reason.
	Dropped []Drop `json:"dropped"`
}

// Drop is one thing an output does not carry, and why.
type Drop struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// Add appends what o carries and drops to c.
func (c *Carried) Add(o Carried) {
	c.Carried = append(c.Carried, o.Carried...)
	c.Dropped = append(c.Dropped, o.Dropped...)
}

func (c *Carried) carry(format string, args ...any) {
	c.Carried = append(c.Carried, fmt.Sprintf(format, args...))
}

func (c *Carried) drop(what, why string) {
	c.Dropped = append(c.Dropped, Drop{What: what, Why: why})
}

// String is the report on one line: "carries: A, B; drops: C (why)".
func (c Carried) String() string {
	s := "carries: video only"
	if len(c.Carried) > 0 {
		s = "carries: video, " + strings.Join(c.Carried, ", ")
	}
	if len(c.Dropped) > 0 {
		d := make([]string, len(c.Dropped))
		for i, x := range c.Dropped {
			d[i] = x.What + " (" + x.Why + ")"
		}
		s += "; drops: " + strings.Join(d, ", ")
	}
	return s
}

// srcStream is what the streams plan knows of one stream of the source.
type srcStream struct {
	index    int
	kind     string // video, audio, subtitle, data, attachment
	codec    string
	cover    bool
	language string // ffmpegName's, "und" dropped
	title    string // cleanText's
	disp     []string
	timecode string // validated
}

// source is what the streams plan knows of the source file.
type source struct {
	streams  []srcStream
	title    bool // the file has a title
	tags     int  // global tags besides the title (and the muxer's own)
	chapters []Chapter
	timecode string // validated
}

var reTimecode = regexp.MustCompile(`^\d{1,2}:\d{2}:\d{2}[:;.]\d{1,3}$`)

// muxerTags are global tags a muxer writes of its own; they are not
// reported as the source's metadata.
var muxerTags = []string{"encoder", "major_brand", "minor_version", "compatible_brands", "creation_time", "duration", "title", "timecode"}

// probeSource reads the streams, tags, dispositions and chapters of src
// as Probe does (probeMeta: ffprobe when there is one, else ffmpeg's
// description of it).
func probeSource(ctx context.Context, t tools, src string) (*source, error) {
	if err := checkInput(src); err != nil {
		return nil, err
	}
	m, err := probeMeta(ctx, src, t)
	if err != nil {
		return nil, err
	}
	return sourceOf(m), nil
}

// sourceOf is what the streams plan knows of a file whose metadata is m.
func sourceOf(m *fileMeta) *source {
	s := &source{chapters: m.chapters, title: tag(m.tags, "title") != ""}
	for k := range m.tags {
		if !slices.Contains(muxerTags, strings.ToLower(k)) {
			s.tags++
		}
	}
	if tc := tag(m.tags, "timecode"); reTimecode.MatchString(tc) {
		s.timecode = tc
	}
	for _, st := range m.streams {
		ss := srcStream{index: st.index, kind: st.kind, codec: st.codec, cover: st.attachedPic, title: st.title}
		if l := ffmpegName(st.language); l != "und" {
			ss.language = l
		}
		if reTimecode.MatchString(st.timecode) {
			ss.timecode = st.timecode
			if s.timecode == "" && (st.kind == "video" || st.kind == "data") {
				s.timecode = st.timecode
			}
		}
		for _, d := range st.dispositions {
			if d != "attached_pic" {
				ss.disp = append(ss.disp, d)
			}
		}
		s.streams = append(s.streams, ss)
	}
	return s
}

// describe names a stream in a report: "subtitle #2 subrip (fra, default)".
func (s srcStream) describe(codec string) string {
	d := fmt.Sprintf("%s #%d %s", s.kind, s.index, codec)
	var notes []string
	if s.language != "" {
		notes = append(notes, s.language)
	}
	if s.title != "" {
		notes = append(notes, strconv.Quote(cleanText(s.title, 60)))
	}
	notes = append(notes, s.disp...)
	if len(notes) > 0 {
		d += " (" + strings.Join(notes, ", ") + ")"
	}
	return d
}

// bitmapSubtitles are the subtitle codecs that are pictures.
var bitmapSubtitles = []string{"dvd_subtitle", "hdmv_pgs_subtitle", "dvb_subtitle", "xsub", "dvb_teletext"}

// textSubtitles are the subtitle codecs ffmpeg can convert to one another.
var textSubtitles = []string{"subrip", "srt", "ass", "ssa", "webvtt", "mov_text", "text"}

// subtitleCodec returns how a subtitle of codec c goes into a file of
// extension ext: "copy", an encoder to convert it with, or "" and why not.
func subtitleCodec(c, ext string) (string, string) {
	text := slices.Contains(textSubtitles, c)
	switch ext {
	case ".mkv", ".mka", ".mks":
		switch {
		case c == "mov_text" || c == "text":
			return "srt", ""
		case text, slices.Contains(bitmapSubtitles, c) && c != "dvb_teletext":
			return "copy", ""
		}
		return "", "Matroska cannot hold " + c
	case ".mp4", ".mov", ".m4v":
		switch {
		case c == "mov_text":
			return "copy", ""
		case text:
			return "mov_text", ""
		case slices.Contains(bitmapSubtitles, c):
			return "", "a bitmap subtitle cannot go into " + ext + ": use .mkv"
		}
	case ".webm":
		switch {
		case c == "webvtt":
			return "copy", ""
		case text:
			return "webvtt", ""
		case slices.Contains(bitmapSubtitles, c):
			return "", "a bitmap subtitle cannot go into .webm: use .mkv"
		}
	case ".ts", ".m2ts":
		if c == "dvb_subtitle" || c == "dvb_teletext" {
			return "copy", ""
		}
	}
	return "", "a " + ext + " file cannot hold " + c + " subtitles: use .mkv"
}

// streamsPlan is how an output carries its source's streams besides the
// video: the source's input options, the output's options, and the
// report.
type streamsPlan struct {
	input  []string // nil when nothing is read from the source
	output []string
	report Carried
	// chapters, if set, is an ffmetadata file of the chapters an excerpt
	// keeps, read as the input after the source and ahead (see inputs).
	chapters []byte
	// ahead, if set, is the file of the audio encoded ahead (AudioAhead),
	// read as the input after the source: its streams are copied.
	ahead *aheadInput
}

// stream returns the stream of a's file that holds the source's stream
// i, if a has it (a may be nil).
func (a *aheadInput) stream(i int) (int, bool) {
	if a == nil {
		return 0, false
	}
	k, ok := a.streams[i]
	return k, ok
}

// aheadInputs is the number of inputs the audio encoded ahead takes: 1
// with a file, else 0.
func (p *streamsPlan) aheadInputs() int {
	if p.ahead == nil {
		return 0
	}
	return 1
}

// inputs returns the plan's input options: the source's, then, for an
// excerpt that keeps chapters, its chapters' file, written into wd.
func (p *streamsPlan) inputs(wd *Workdir) ([]string, error) {
	in := slices.Clone(p.input)
	if p.ahead != nil && in != nil {
		// Shifted back by its start: ffmpeg starts every input at 0, and
		// the file's timestamps are already those of the output.
		in = append(in, "-itsoffset", strconv.FormatFloat(p.ahead.start, 'f', -1, 64), "-i", fileArg(p.ahead.path))
	}
	if p.chapters == nil {
		return in, nil
	}
	path := wd.Path(".vsr-chapters.ffmeta")
	if err := os.WriteFile(path, p.chapters, 0o600); err != nil {
		return nil, err
	}
	return append(in, "-f", "ffmetadata", "-i", fileArg(path)), nil
}

// count is the number of inputs the plan's options open.
func (p *streamsPlan) count() int {
	if p.input == nil {
		return 0
	}
	n := 1 + p.aheadInputs()
	if p.chapters != nil {
		n++
	}
	return n
}

// excerptChapters returns the chapters of an excerpt of d seconds: those
// starting before d, ending by d at the latest.
func excerptChapters(chapters []Chapter, d float64) []Chapter {
	var kept []Chapter
	for _, c := range chapters {
		if c.Start < d {
			c.End = max(c.Start, min(c.End, d))
			kept = append(kept, c)
		}
	}
	return kept
}

// ffmetadata writes chapters as an ffmetadata file: numbers in
// microseconds, titles (cleanText's) escaped as the format wants.
func ffmetadata(chapters []Chapter) []byte {
	var b bytes.Buffer
	b.WriteString(";FFMETADATA1\n")
	us := func(s float64) int64 { return int64(math.Round(s * 1e6)) }
	for _, c := range chapters {
		fmt.Fprintf(&b, "[CHAPTER]\nTIMEBASE=1/1000000\nSTART=%d\nEND=%d\n", us(c.Start), us(c.End))
		if c.Title != "" {
			b.WriteString("title=")
			for _, r := range cleanText(c.Title, maxText) {
				if strings.ContainsRune("=;#\\", r) {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// planStreams probes o.StreamsFrom and plans what a file of extension ext
// carries of it. The source is the output command's input number in (1:
// the video comes from input 0). Nothing is planned without StreamsFrom.
func planStreams(ctx context.Context, t tools, o CarryOptions, ext string, in int, ahead *aheadInput) (*streamsPlan, error) {
	p := &streamsPlan{ahead: ahead}
	if o.StreamsFrom == "" {
		return p, nil
	}
	ext = strings.ToLower(ext)
	t.in.AllowPlaylists = o.StreamsAllowPlaylists
	src, err := probeSource(ctx, t, o.StreamsFrom)
	if err != nil {
		return nil, err
	}
	from := func(i int) string { return strconv.Itoa(in) + ":" + strconv.Itoa(i) }
	var out []string
	na, ns, nt := 0, 0, 0 // audio, subtitle and attachment streams mapped
	videoDone := false
	for _, s := range src.streams {
		switch {
		case s.kind == "video" && !s.cover && !videoDone:
			videoDone = true // the restored video replaces it; its tags stay
			if !o.NoMetadata {
				for _, kv := range [][2]string{{"language", s.language}, {"title", s.title}} {
					if kv[1] != "" {
						out = append(out, "-metadata:s:v:0", kv[0]+"="+kv[1])
					}
				}
			}
		case s.kind == "audio" && o.NoAudio:
			p.report.drop(s.describe(s.codec), "left out")
		case s.kind == "audio":
			codec, err := audioCodec(ctx, t, o.StreamsFrom, s.codec, ext)
			if err != nil {
				return nil, err
			}
			if k, ok := ahead.stream(s.index); ok && codec != "copy" { // encoded ahead: copied from its file
				out = append(out, "-map", strconv.Itoa(in+1)+":"+strconv.Itoa(k), "-c:a:"+strconv.Itoa(na), "copy")
			} else {
				out = append(out, "-map", from(s.index), "-c:a:"+strconv.Itoa(na), codec)
			}
			na++
			p.report.carry("%s", s.describe(converted(s.codec, codec)))
		case s.kind == "subtitle" && o.NoSubtitles:
			p.report.drop(s.describe(s.codec), "--no-subtitles")
		case s.kind == "subtitle":
			codec, why := subtitleCodec(s.codec, ext)
			if codec == "" {
				p.report.drop(s.describe(s.codec), why)
				continue
			}
			out = append(out, "-map", from(s.index), "-c:s:"+strconv.Itoa(ns), codec)
			ns++
			p.report.carry("%s", s.describe(converted(s.codec, codec)))
		case s.kind == "attachment" && o.NoSubtitles:
			p.report.drop(s.describe(s.codec), "--no-subtitles")
		case s.kind == "attachment" && (ext == ".mkv" || ext == ".mka" || ext == ".mks"):
			out = append(out, "-map", from(s.index))
			nt++
			p.report.carry("%s", s.describe(s.codec))
		case s.kind == "attachment":
			p.report.drop(s.describe(s.codec), "only Matroska (.mkv) holds attachments")
		case s.kind == "data" && s.timecode != "":
			// A timecode track: carried as the timecode (below).
		case s.kind == "video" && s.cover:
			p.report.drop(s.describe(s.codec), "cover art is not carried")
		default:
			p.report.drop(s.describe(s.codec), "a "+s.kind+" stream is not carried")
		}
	}
	if nt > 0 {
		out = append(out, "-c:t", "copy")
	}
	if o.NoMetadata {
		out = append(out, "-map_metadata", "-1", "-map_metadata:s", "-1", "-map_chapters", "-1")
		if src.title || src.tags > 0 || len(src.chapters) > 0 {
			p.report.drop("metadata", "--no-metadata")
		}
	} else {
		chapters, from := src.chapters, strconv.Itoa(in)
		if o.StreamsDuration > 0 && len(chapters) > 0 {
			// An excerpt: its chapters are written anew (ffmpeg keeps
			// one starting where the excerpt ends, as an empty chapter).
			if chapters = excerptChapters(chapters, o.StreamsDuration); len(chapters) > 0 {
				p.chapters, from = ffmetadata(chapters), strconv.Itoa(in+1+p.aheadInputs())
			} else {
				from = "-1"
			}
		}
		out = append(out, "-map_metadata", strconv.Itoa(in), "-map_chapters", from)
		if src.title {
			p.report.carry("title")
		}
		if src.tags > 0 {
			p.report.carry("metadata (%d tags)", src.tags)
		}
		if len(chapters) > 0 {
			p.report.carry("chapters (%d)", len(chapters))
		}
		if src.timecode != "" {
			out = append(out, "-timecode", src.timecode)
			p.report.carry("timecode %s", src.timecode)
		}
	}
	if o.StreamsDuration > 0 { // on the output too: a subtitle after it is read all the same
		d := strconv.FormatFloat(o.StreamsDuration, 'f', 6, 64)
		p.input = append(p.input, "-t", d)
		out = append(out, "-t", d)
	}
	p.output = out
	p.input = append(p.input, inputArgs(o.StreamsFrom, o.StreamsAllowPlaylists)...)
	return p, nil
}

// converted names a stream's codec as carried: itself when copied, else
// "FROM as TO".
func converted(from, to string) string {
	if to == "copy" {
		return from
	}
	return from + " as " + to
}
