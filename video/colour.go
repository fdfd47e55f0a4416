package video

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// The colour names ffmpeg's options take, as ffprobe prints them: a
// Colour's fields reach a command line only when they are in these lists.
var (
	colourPrimaries = []string{"bt709", "bt470m", "bt470bg", "smpte170m", "smpte240m", "film", "bt2020", "smpte428", "smpte431", "smpte432", "jedec-p22"}
	colourTransfers = []string{"bt709", "gamma22", "gamma28", "smpte170m", "smpte240m", "linear", "log100", "log316", "iec61966-2-4",
		"bt1361e", "iec61966-2-1", "bt2020-10", "bt2020-12", "smpte2084", "smpte428", "arib-std-b67"}
	colourMatrices = []string{"bt709", "fcc", "bt470bg", "smpte170m", "smpte240m", "ycgco", "bt2020nc", "bt2020c", "smpte2085",
		"chroma-derived-nc", "chroma-derived-c", "ictcp"}
	// transferOption is -color_trc's name of the transfers ffprobe names
	// otherwise (av_color_transfer_name's "bt470m" is the option's
	// "gamma22", which ffmpeg's -color_trc refuses as "bt470m").
	transferOption  = map[string]string{"bt470m": "gamma22", "bt470bg": "gamma28"}
	colourRanges    = []string{"tv", "pc"}
	chromaLocations = []string{"left", "center", "topleft", "top", "bottomleft", "bottom"}
)

// swsMatrix is the name swscale (the scale filter's in_color_matrix and
// out_color_matrix) gives a matrix, "" for one it does not convert with.
func swsMatrix(m string) string {
	switch m {
	case "bt709":
		return "bt709"
	case "bt470bg", "smpte170m":
		return "bt601"
	case "bt2020nc", "bt2020c":
		return "bt2020"
	case "fcc", "smpte240m":
		return m
	}
	return ""
}

// colourConvert returns the scale filter that converts between YCbCr in
// c's matrix and range and RGB, dir "in" (YCbCr to RGB, decoding) or
// "out" (RGB to YCbCr, encoding); "" when c names neither a matrix nor a
// range swscale takes (ffmpeg's default then applies: BT.601, the range
// of the pixel format).
func colourConvert(c Colour, dir string) string {
	var opts []string
	if m := swsMatrix(c.Matrix); m != "" {
		opts = append(opts, dir+"_color_matrix="+m)
	}
	if slices.Contains(colourRanges, c.Range) {
		opts = append(opts, dir+"_range="+c.Range)
	}
	if len(opts) == 0 {
		return ""
	}
	return "scale=" + strings.Join(opts, ":")
}

// imageCodecs are the encoders of still images: their outputs carry no
// colour tags, SAR or HDR metadata.
var imageCodecs = []string{"png", "mjpeg", "libwebp", "bmp", "tiff"}

// videoTags is how an output's video stream carries the input's colour
// description, HDR static metadata and sample aspect ratio.
type videoTags struct {
	filters []string // for -vf, in order
	args    []string // output options
	x265    []string // key=value for -x265-params
	svtav1  []string // key=value for -svtav1-params
	report  Carried
}

// planVideoTags plans the colour tags, the conversion from RGB frames,
// HDR static metadata and SAR of o's output. A zero Colour, a nil HDR and
// a zero SAR leave the output as ffmpeg makes it (untagged, BT.601).
func planVideoTags(ctx context.Context, ffmpeg string, o EncodeOptions) videoTags {
	var v videoTags
	if slices.Contains(imageCodecs, o.Codec) {
		return v
	}
	_, _, inRGB, _ := PixFmtInfo(o.InputPixFmt)
	_, outChroma, outRGB, _ := PixFmtInfo(o.PixFmt)
	c := o.Colour
	if outRGB { // RGB has no matrix, and is full range
		c.Matrix, c.Range, c.ChromaLocation = "", "", ""
	}
	if strings.HasPrefix(o.PixFmt, "yuvj") { // YCbCr, full range by its name
		c.Range = "pc"
	}
	if c.Matrix == "gbr" || !slices.Contains(colourMatrices, c.Matrix) {
		c.Matrix = ""
	}
	if inRGB && !outRGB {
		if f := colourConvert(c, "out"); f != "" {
			v.filters = append(v.filters, f, "format="+o.PixFmt)
		}
	}
	var tags []string
	for _, t := range []struct {
		opt, val string
		list     []string
	}{
		{"-color_primaries", c.Primaries, colourPrimaries},
		{"-color_trc", c.Transfer, colourTransfers},
		{"-colorspace", c.Matrix, colourMatrices},
		{"-color_range", c.Range, colourRanges},
	} {
		arg := t.val
		if a, ok := transferOption[t.val]; ok && t.opt == "-color_trc" {
			arg = a
		}
		if slices.Contains(t.list, arg) {
			v.args = append(v.args, t.opt, arg)
			tags = append(tags, t.val)
		}
	}
	if l := c.ChromaLocation; slices.Contains(chromaLocations, l) && outChroma == "4:2:0" {
		if hasOption(ctx, ffmpeg, "-chroma_sample_location", "left") {
			v.args = append(v.args, "-chroma_sample_location", l)
			tags = append(tags, "chroma "+l)
		} else {
			v.report.drop("chroma location "+l, "this ffmpeg has no -chroma_sample_location")
		}
	}
	if len(tags) > 0 {
		v.report.carry("colour %s", strings.Join(tags, "/"))
	}
	if o.SAR.Valid() && o.SAR != (Rational{1, 1}) {
		v.filters = append(v.filters, fmt.Sprintf("setsar=%d/%d", o.SAR.Num, o.SAR.Den))
		v.report.carry("SAR %d:%d", o.SAR.Num, o.SAR.Den)
	}
	v.planHDR(o)
	return v
}

// planHDR adds o.HDR's static metadata in the encoder's parameters, built
// from the parsed numbers; dynamic metadata is dropped.
func (v *videoTags) planHDR(o EncodeOptions) {
	h := o.HDR
	if h == nil {
		return
	}
	for _, d := range h.Dynamic {
		v.report.drop(cleanText(d, 60)+" dynamic metadata", "it cannot follow a change of resolution")
	}
	md, cl := h.Mastering, h.Light
	if md == nil && cl == nil {
		if h.Unread {
			v.report.drop("HDR10 static metadata", "this ffmpeg cannot read it without ffprobe: install ffprobe, or ffmpeg 5 or newer")
		}
		return
	}
	switch o.Codec {
	case "libx265":
		if md != nil {
			v.x265 = append(v.x265, "master-display="+masterDisplay(md, 50000, 10000, "%.0f"))
		}
		if cl != nil {
			v.x265 = append(v.x265, fmt.Sprintf("max-cll=%d,%d", max(cl.MaxCLL, 0), max(cl.MaxFALL, 0)))
		}
	case "libsvtav1":
		if md != nil {
			v.svtav1 = append(v.svtav1, "mastering-display="+masterDisplay(md, 1, 1, "%.6f"))
		}
		if cl != nil {
			v.svtav1 = append(v.svtav1, fmt.Sprintf("content-light=%d,%d", max(cl.MaxCLL, 0), max(cl.MaxFALL, 0)))
		}
	default:
		v.report.drop("HDR10 static metadata", o.Codec+" cannot take it through ffmpeg: use libx265 or libsvtav1")
		return
	}
	v.report.carry("HDR10 static metadata")
}

// masterDisplay is "G(x,y)B(x,y)R(x,y)WP(x,y)L(max,min)" with the
// chromaticities times xy and the luminances times lum, each printed with
// format.
func masterDisplay(m *MasteringDisplay, xy, lum float64, format string) string {
	f := func(r Rational, k float64) string {
		x := 0.0
		if r.Den != 0 {
			x = float64(r.Num) / float64(r.Den) * k
		}
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			x = 0
		}
		return fmt.Sprintf(format, x)
	}
	p := func(c [2]Rational) string { return f(c[0], xy) + "," + f(c[1], xy) }
	return fmt.Sprintf("G(%s)B(%s)R(%s)WP(%s)L(%s,%s)", p(m.Green), p(m.Blue), p(m.Red), p(m.White),
		f(m.MaxLuminance, lum), f(m.MinLuminance, lum))
}

// optionCache remembers, per ffmpeg and option, whether ffmpeg has it.
var optionCache sync.Map // [2]string -> bool

// hasOption reports whether ffmpeg takes option opt (with the value val),
// asking it once per executable: an old ffmpeg refuses an option it lacks
// as "Unrecognized option" before printing its version.
func hasOption(ctx context.Context, ffmpeg, opt, val string) bool {
	key := [2]string{ffmpeg, opt}
	if v, ok := optionCache.Load(key); ok {
		return v.(bool)
	}
	r := runTool(ctx, ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", opt, val, "-version")
	if ctx.Err() != nil {
		return false
	}
	optionCache.Store(key, r.err == nil)
	return r.err == nil
}
