package video

import "strings"

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
