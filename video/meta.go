package video

import (
	"encoding/json"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Colour says how a video's sample values map to colours, in ffmpeg's
// names (ffprobe's color_primaries, color_transfer, color_space,
// color_range and chroma_location). An empty field is unspecified.
type Colour struct {
	// Primaries: bt709, bt470bg, smpte170m, bt2020, ...
	Primaries string `json:"primaries,omitempty"`
	// Transfer: bt709, smpte2084 (PQ), arib-std-b67 (HLG), ...
	Transfer string `json:"transfer,omitempty"`
	// Matrix is the YCbCr matrix: bt709, bt470bg, smpte170m (both BT.601),
	// bt2020nc, gbr (RGB stored as planes), ...
	Matrix string `json:"matrix,omitempty"`
	// Range is "tv" (limited: 16-235 at 8 bits) or "pc" (full).
	Range string `json:"range,omitempty"`
	// ChromaLocation is where subsampled chroma sits: left, center,
	// topleft, ...
	ChromaLocation string `json:"chroma_location,omitempty"`
}

// IsZero reports whether nothing is specified.
func (c Colour) IsZero() bool { return c == Colour{} }

// MasteringDisplay is SMPTE ST 2086 static metadata: the mastering
// display's primaries and white point (CIE 1931 x, y) and its luminance
// range in cd/m², exact as the file states them.
type MasteringDisplay struct {
	Red          [2]Rational `json:"red"`
	Green        [2]Rational `json:"green"`
	Blue         [2]Rational `json:"blue"`
	White        [2]Rational `json:"white_point"`
	MinLuminance Rational    `json:"min_luminance"`
	MaxLuminance Rational    `json:"max_luminance"`
}

// ContentLight is CTA-861.3 static metadata, in cd/m².
type ContentLight struct {
	MaxCLL  int `json:"max_cll"`
	MaxFALL int `json:"max_fall"`
}

// HDR is a stream's HDR metadata: the static kind, which follows a change
// of resolution, and the names of the dynamic kinds present ("HDR10+",
// "Dolby Vision"), which do not.
type HDR struct {
	Mastering *MasteringDisplay `json:"mastering_display,omitempty"`
	Light     *ContentLight     `json:"content_light,omitempty"`
	Dynamic   []string          `json:"dynamic,omitempty"`
	// Unread is set when the frames carry static metadata that this
	// ffmpeg could not describe (ffmpeg before 5.0 without ffprobe).
	Unread bool `json:"unread,omitempty"`
}

// Chapter is one chapter of a file, in seconds from its start.
type Chapter struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Title string  `json:"title,omitempty"`
}

// PixFmtInfo describes an ffmpeg pixel format by name: the bits per
// sample, the chroma subsampling ("4:2:0", "4:2:2", "4:4:4", "4:1:1",
// "4:1:0"; "" for RGB and gray), whether it is RGB (or gray) rather than
// YCbCr, and whether it has alpha. Unknown names give depth 8, no
// subsampling.
func PixFmtInfo(pixFmt string) (depth int, chroma string, rgb, alpha bool) {
	p := strings.ToLower(pixFmt)
	q := p // the name without its subsampling digits (yuv420p10le: p10le)
	for _, pre := range []string{"yuva", "yuvj", "yuv"} {
		if strings.HasPrefix(q, pre) && len(q) >= len(pre)+3 {
			q = q[len(pre)+3:]
			break
		}
	}
	switch q {
	case "nv12", "nv21", "nv16", "nv24", "nv42":
		q = ""
	case "nv20le", "nv20be":
		q = "10"
	}
	depth = 8
	switch p := q; {
	case strings.Contains(p, "16"), strings.Contains(p, "48"), strings.Contains(p, "64"),
		strings.HasPrefix(p, "p016"), strings.HasPrefix(p, "p216"), strings.HasPrefix(p, "p416"):
		depth = 16
	case strings.Contains(p, "14"):
		depth = 14
	case strings.Contains(p, "12"):
		depth = 12
	case strings.Contains(p, "10"), strings.HasPrefix(p, "p010"), strings.HasPrefix(p, "p210"), strings.HasPrefix(p, "p410"),
		strings.HasPrefix(p, "y210"), strings.HasPrefix(p, "x2rgb10"), strings.HasPrefix(p, "x2bgr10"):
		depth = 10
	case strings.Contains(p, "9"):
		depth = 9
	}
	switch {
	case strings.HasPrefix(p, "rgb48"), strings.HasPrefix(p, "bgr48"), strings.HasPrefix(p, "rgba64"), strings.HasPrefix(p, "bgra64"):
		depth = 16
	case p == "rgb24", p == "bgr24":
		depth = 8
	}
	alpha = strings.HasPrefix(p, "yuva") || strings.HasPrefix(p, "gbrap") || strings.HasPrefix(p, "ya") ||
		strings.Contains(p, "rgba") || strings.Contains(p, "bgra") || strings.Contains(p, "argb") || strings.Contains(p, "abgr") ||
		p == "pal8"
	rgb = strings.HasPrefix(p, "gbr") || strings.HasPrefix(p, "rgb") || strings.HasPrefix(p, "bgr") ||
		strings.HasPrefix(p, "argb") || strings.HasPrefix(p, "abgr") || strings.HasPrefix(p, "0rgb") || strings.HasPrefix(p, "0bgr") ||
		strings.HasPrefix(p, "x2rgb") || strings.HasPrefix(p, "x2bgr") || strings.HasPrefix(p, "gray") || strings.HasPrefix(p, "ya") ||
		strings.HasPrefix(p, "pal8") || strings.HasPrefix(p, "mono")
	if !rgb {
		switch aw, ah := chromaAlign(p); {
		case aw == 2 && ah == 2:
			chroma = "4:2:0"
		case aw == 2:
			chroma = "4:2:2"
		case aw == 4 && ah == 4:
			chroma = "4:1:0"
		case aw == 4:
			chroma = "4:1:1"
		default:
			chroma = "4:4:4"
		}
	}
	return depth, chroma, rgb, alpha
}

// Bounds on what Probe keeps of the text a file states about itself
// (untrusted): longer values are cut, further entries dropped.
const (
	maxTags     = 64   // entries of Info.Tags
	maxKeyBytes = 64   // a tag's name; longer names are dropped
	maxText     = 1024 // bytes of a tag's value, a title
	maxChapters = 1000 // entries of Info.Chapters
)

// cleanText makes a value read from a file safe to keep and to print: it
// replaces invalid UTF-8 and control characters (newlines included) with
// spaces, trims it and cuts it to at most n bytes on a character boundary.
func cleanText(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > n {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// cleanTags returns the first maxTags of tags in the order of their
// names, cleaned (cleanText); names longer than maxKeyBytes or holding
// control characters are dropped. nil for none.
func cleanTags(tags map[string]string) map[string]string {
	var out map[string]string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		key := cleanText(k, maxKeyBytes)
		if key == "" || len(key) < len(k) || len(out) >= maxTags {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = cleanText(tags[k], maxText)
	}
	return out
}

// tag returns the value of the tag named key, cleaned: key itself if
// there is one, else the first in the order of their names of those that
// differ only in case (Matroska's are upper case).
func tag(tags map[string]string, key string) string {
	if v, ok := tags[key]; ok {
		return cleanText(v, maxText)
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if strings.EqualFold(k, key) {
			return cleanText(tags[k], maxText)
		}
	}
	return ""
}

// ffmpegName cleans a colour or field-order name ffmpeg printed: ""
// for unknown, unspecified or anything that is not a plain name.
func ffmpegName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "unknown" || s == "unspecified" || s == "reserved" || len(s) > 32 {
		return ""
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '+') {
			return ""
		}
	}
	return s
}

// fieldOrders maps ffprobe's field_order and ffmpeg's text for it to the
// names Info.FieldOrder uses.
var fieldOrders = map[string]string{
	"progressive": "progressive", "tt": "tt", "bb": "bb", "tb": "tb", "bt": "bt",
	"top first": "tt", "bottom first": "bb", "top coded first (swapped)": "tb", "bottom coded first (swapped)": "bt",
}

// sameColour is what ffmpeg's one-name colour description ("yuv420p(tv,
// bt709)") means: the matrix, primaries and transfer have the same number,
// named here by the matrix's name.
var sameColour = map[string]Colour{
	"bt709":     {Matrix: "bt709", Primaries: "bt709", Transfer: "bt709"},
	"smpte170m": {Matrix: "smpte170m", Primaries: "smpte170m", Transfer: "smpte170m"},
	"smpte240m": {Matrix: "smpte240m", Primaries: "smpte240m", Transfer: "smpte240m"},
	"bt470bg":   {Matrix: "bt470bg", Primaries: "bt470bg", Transfer: "gamma28"},
	"fcc":       {Matrix: "fcc", Primaries: "bt470m", Transfer: "gamma22"},
}

// parsePixFmtParens parses the parenthesis after the pixel format in
// ffmpeg's description of a video stream, e.g. "tv, bt2020nc/bt2020/smpte2084,
// progressive" (range; matrix/primaries/transfer, or one name when their
// numbers agree; field order; chroma location, at verbose level only).
func parsePixFmtParens(s string) (c Colour, fieldOrder string) {
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "tv" || f == "pc":
			c.Range = f
		case fieldOrders[f] != "":
			fieldOrder = fieldOrders[f]
		case strings.Count(f, "/") == 2:
			p := strings.Split(f, "/")
			c.Matrix, c.Primaries, c.Transfer = ffmpegName(p[0]), ffmpegName(p[1]), ffmpegName(p[2])
		case slices.Contains(chromaLocations, f):
			c.ChromaLocation = f
		default:
			if same, ok := sameColour[strings.ToLower(f)]; ok {
				c.Matrix, c.Primaries, c.Transfer = same.Matrix, same.Primaries, same.Transfer
			} else if n := ffmpegName(f); n != "" && c.Matrix == "" {
				c.Matrix = n
			}
		}
	}
	return c, fieldOrder
}

// dynamicHDR names the dynamic HDR metadata a side data type or line
// describes: "HDR10+" (SMPTE ST 2094-40), "Dolby Vision" (its
// configuration record or RPUs), or "".
func dynamicHDR(s string) string {
	s = strings.ToLower(s)
	switch {
	case strings.Contains(s, "2094-40") || strings.Contains(s, "hdr10+") || strings.Contains(s, "hdr10 plus") || strings.Contains(s, "dynamic_hdr_plus"):
		return "HDR10+"
	case strings.Contains(s, "dovi") || strings.Contains(s, "dolby vision"):
		return "Dolby Vision"
	}
	return ""
}

// addDynamic adds name to h.Dynamic once.
func (h *HDR) addDynamic(name string) {
	if name != "" && !slices.Contains(h.Dynamic, name) {
		h.Dynamic = append(h.Dynamic, name)
	}
}

// orNil returns h, or nil when it holds nothing.
func (h *HDR) orNil() *HDR {
	if h == nil || h.Mastering == nil && h.Light == nil && len(h.Dynamic) == 0 && !h.Unread {
		return nil
	}
	return h
}

// parseFraction parses "34000/50000" as it is written (not reduced), or
// an integer as n/1; ok is false for anything else or a denominator <= 0.
func parseFraction(s string) (Rational, bool) {
	n, d, frac := strings.Cut(strings.TrimSpace(s), "/")
	num, err1 := strconv.Atoi(n)
	den := 1
	var err2 error
	if frac {
		den, err2 = strconv.Atoi(d)
	}
	if err1 != nil || err2 != nil || den <= 0 || num < 0 {
		return Rational{}, false
	}
	return Rational{num, den}, true
}

var (
	reMastering = regexp.MustCompile(`has_primaries:(\d) has_luminance:(\d) r\(([\d.]+),\s*([\d.]+)\) g\(([\d.]+),?\s*([\d.]+)\) b\(([\d.]+),?\s*([\d.]+)\) wp\(([\d.]+),?\s*([\d.]+)\) min_luminance=([\d.]+), max_luminance=([\d.]+)`)
	reLight     = regexp.MustCompile(`MaxCLL=(\d+), MaxFALL=(\d+)`)
)

// parseHDRText adds to h the HDR metadata in a line of ffmpeg's text
// (its description of a stream's side data, or the showinfo filter's of a
// frame's). The text gives the chromaticities to 4 decimals and the
// luminances to 6: Probe turns them into the units HEVC and AV1 state
// them in (1/50000 and 1/10000), exact for files that state them so to
// that precision.
func parseHDRText(h *HDR, line string) {
	if m := reMastering.FindStringSubmatch(line); m != nil && m[1] == "1" && m[2] == "1" {
		in := func(s string, den int) Rational {
			f, _ := strconv.ParseFloat(s, 64)
			return Rational{int(math.Round(f * float64(den))), den}
		}
		xy := func(i int) [2]Rational { return [2]Rational{in(m[i], 50000), in(m[i+1], 50000)} }
		h.Mastering = &MasteringDisplay{Red: xy(3), Green: xy(5), Blue: xy(7), White: xy(9),
			MinLuminance: in(m[11], 10000), MaxLuminance: in(m[12], 10000)}
		return
	}
	if m := reLight.FindStringSubmatch(line); m != nil {
		cll, _ := strconv.Atoi(m[1])
		fall, _ := strconv.Atoi(m[2])
		h.Light = &ContentLight{MaxCLL: cll, MaxFALL: fall}
		return
	}
	// ffmpeg before 5.0 names these frame side data by number only
	// (libavutil's AVFrameSideDataType): present, but not readable.
	if rest, ok := strings.CutPrefix(line, "unknown side data type "); ok {
		switch f := strings.Fields(rest); {
		case len(f) == 0:
		case f[0] == "11" || f[0] == "14": // mastering display, content light level
			h.Unread = true
		case f[0] == "19":
			h.addDynamic("HDR10+")
		}
		return
	}
	h.addDynamic(dynamicHDR(line))
}

// ffprobeSideData is one entry of ffprobe's side_data_list (a stream's or
// a frame's): the fields vsr reads.
type ffprobeSideData struct {
	Type       string   `json:"side_data_type"`
	Rotation   jsonText `json:"rotation"`
	RedX       jsonText `json:"red_x"`
	RedY       jsonText `json:"red_y"`
	GreenX     jsonText `json:"green_x"`
	GreenY     jsonText `json:"green_y"`
	BlueX      jsonText `json:"blue_x"`
	BlueY      jsonText `json:"blue_y"`
	WhiteX     jsonText `json:"white_point_x"`
	WhiteY     jsonText `json:"white_point_y"`
	MinLum     jsonText `json:"min_luminance"`
	MaxLum     jsonText `json:"max_luminance"`
	MaxContent jsonText `json:"max_content"`
	MaxAverage jsonText `json:"max_average"`
}

// jsonText is a JSON string or number as its text, so that an unexpected
// type in ffprobe's output does not fail the whole parse.
type jsonText string

func (t *jsonText) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = jsonText(s)
	} else {
		*t = jsonText(strings.TrimSpace(string(b)))
	}
	return nil
}

// addSideData adds to h the HDR metadata of ffprobe's side data entries.
func (h *HDR) addSideData(list []ffprobeSideData) {
	for _, sd := range list {
		switch strings.ToLower(sd.Type) {
		case "mastering display metadata":
			var md MasteringDisplay
			ok := true
			for _, f := range []struct {
				dst *Rational
				src jsonText
			}{{&md.Red[0], sd.RedX}, {&md.Red[1], sd.RedY}, {&md.Green[0], sd.GreenX}, {&md.Green[1], sd.GreenY},
				{&md.Blue[0], sd.BlueX}, {&md.Blue[1], sd.BlueY}, {&md.White[0], sd.WhiteX}, {&md.White[1], sd.WhiteY},
				{&md.MinLuminance, sd.MinLum}, {&md.MaxLuminance, sd.MaxLum}} {
				var fine bool
				*f.dst, fine = parseFraction(string(f.src))
				ok = ok && fine
			}
			if ok {
				h.Mastering = &md
			}
		case "content light level metadata":
			cll, err1 := strconv.Atoi(string(sd.MaxContent))
			fall, err2 := strconv.Atoi(string(sd.MaxAverage))
			if err1 == nil && err2 == nil && cll >= 0 && fall >= 0 {
				h.Light = &ContentLight{MaxCLL: cll, MaxFALL: fall}
			}
		default:
			h.addDynamic(dynamicHDR(sd.Type))
		}
	}
}

// dispositionNames maps ffmpeg's text for a disposition ("(hearing
// impaired)" at the end of a stream's line) to ffprobe's name.
var dispositionNames = map[string]string{
	"default": "default", "dub": "dub", "original": "original", "comment": "comment", "lyrics": "lyrics",
	"karaoke": "karaoke", "forced": "forced", "hearing impaired": "hearing_impaired", "visual impaired": "visual_impaired",
	"clean effects": "clean_effects", "attached pic": "attached_pic", "timed thumbnails": "timed_thumbnails",
	"captions": "captions", "descriptions": "descriptions", "metadata": "metadata", "dependent": "dependent",
	"still image": "still_image", "non-diegetic": "non_diegetic",
}

// dispositionsOf returns the names of the flags set in ffprobe's
// disposition object, sorted; nil for none.
func dispositionsOf(d map[string]int) []string {
	var out []string
	for k, v := range d {
		if name := ffmpegName(k); v != 0 && name != "" && len(out) < 32 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// DAR returns the display aspect ratio of the decoded frames, Width x
// Height scaled by SAR (square pixels when SAR is zero), in lowest terms.
func (i *Info) DAR() Rational {
	sar := i.SAR
	if !sar.Valid() {
		sar = Rational{1, 1}
	}
	return Rational{i.Width * sar.Num, i.Height * sar.Den}.Reduced()
}
