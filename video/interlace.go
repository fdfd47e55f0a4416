package video

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
)

// Deinterlace says what to do with an interlaced video before the model.
type Deinterlace string

// The deinterlacing modes. Each makes the frames progressive with one of
// ffmpeg's filters, which look at the frames before and after: bwdif
// (the better, and Auto's) or yadif.
const (
	// DeinterlaceAuto deinterlaces an interlaced input with bwdif, one
	// frame per frame; a progressive input is left as it is.
	DeinterlaceAuto Deinterlace = "auto"
	// DeinterlaceBwdif and DeinterlaceYadif give one frame per frame.
	DeinterlaceBwdif Deinterlace = "bwdif"
	DeinterlaceYadif Deinterlace = "yadif"
	// DeinterlaceDouble gives one frame per field with bwdif: twice the
	// frames at twice the rate, the motion as smooth as the fields'.
	DeinterlaceDouble Deinterlace = "double"
	// DeinterlaceOff processes interlaced frames as they are (combing
	// included).
	DeinterlaceOff Deinterlace = "off"
)

// DeinterlaceModes lists the modes, the default first.
var DeinterlaceModes = []Deinterlace{DeinterlaceAuto, DeinterlaceBwdif, DeinterlaceYadif, DeinterlaceDouble, DeinterlaceOff}

// ParseDeinterlace checks a mode's name; "" is DeinterlaceAuto.
func ParseDeinterlace(s string) (Deinterlace, error) {
	if s == "" {
		return DeinterlaceAuto, nil
	}
	if d := Deinterlace(s); slices.Contains(DeinterlaceModes, d) {
		return d, nil
	}
	return "", fmt.Errorf("deinterlace mode %q: want auto, bwdif, yadif, double or off", s)
}

// Interlaced returns the field order of an interlaced video: the one
// its file states ("tt", "bb", "tb" or "bt"), else the one ffmpeg's idet
// filter found in its first frames (DetectedFieldOrder: "tt" or "bb");
// "" for a progressive video, or one Deinterlaced made progressive.
func (i *Info) Interlaced() string {
	switch i.FieldOrder {
	case "tt", "bb", "tb", "bt":
		return i.FieldOrder
	case "":
		if i.DetectedFieldOrder == "tt" || i.DetectedFieldOrder == "bb" {
			return i.DetectedFieldOrder
		}
	}
	return ""
}

// fieldOrderWords names a field order for messages.
var fieldOrderWords = map[string]string{"tt": "top field first", "bb": "bottom field first", "tb": "top field coded first, bottom shown first", "bt": "bottom field coded first, top shown first"}

// Deinterlaced returns the Info of info's video as a Decoder delivers it
// deinterlaced in mode, and a one-line notice of what was done, "" when
// nothing was (a progressive video, or mode off on a progressive one).
// For an interlaced video and a mode other than off, the copy describes
// progressive frames (FieldOrder "progressive"; Deinterlace the filter
// its Decoders apply); with DeinterlaceDouble it has twice the frames,
// at twice the rate, each field's frame at its own time (Times and Keys
// follow). With DeinterlaceOff, info itself is returned with a notice
// to show as a warning. info is not changed.
func (i *Info) Deinterlaced(mode Deinterlace) (*Info, string) {
	order := i.Interlaced()
	if order == "" || i.Deinterlace != "" {
		return i, ""
	}
	how := "as the file states"
	if i.FieldOrder == "" {
		how = "as detected by ffmpeg's idet filter"
	}
	if mode == DeinterlaceOff {
		return i, fmt.Sprintf("%s is interlaced (%s, %s) and deinterlacing is off: its frames go to the model as they are, combing included, and the output is interlaced content flagged progressive", i.Path, fieldOrderWords[order], how)
	}
	out := *i
	out.FieldOrder, out.DetectedFieldOrder = "progressive", ""
	out.parity = "auto" // the decoder's flags, which a stated order sets
	if i.FieldOrder == "" {
		out.parity = map[string]string{"tt": "tff", "bb": "bff"}[order]
	}
	switch mode {
	case DeinterlaceDouble:
		out.Deinterlace = DeinterlaceDouble
		out.Frames, out.DeclaredFrames = 2*i.Frames, 2*i.DeclaredFrames
		out.FPS = Rational{2 * i.FPS.Num, i.FPS.Den}.Reduced()
		out.Times, out.Keys = nil, nil
		if len(i.Times) == i.Frames+1 && len(i.Keys) == i.Frames {
			out.Times = make([]float64, 0, 2*i.Frames+1)
			out.Keys = make([]bool, 0, 2*i.Frames)
			for k := range i.Frames {
				out.Times = append(out.Times, i.Times[k], (i.Times[k]+i.Times[k+1])/2)
				out.Keys = append(out.Keys, i.Keys[k], false)
			}
			out.Times = append(out.Times, i.Times[i.Frames])
		}
		return &out, fmt.Sprintf("%s is interlaced (%s, %s): deinterlaced with bwdif to one frame per field, %d frames at %s fps", i.Path, fieldOrderWords[order], how, out.Frames, out.FPS)
	case DeinterlaceYadif:
		out.Deinterlace = DeinterlaceYadif
	default:
		out.Deinterlace = DeinterlaceBwdif
	}
	return &out, fmt.Sprintf("%s is interlaced (%s, %s): deinterlaced with %s, one frame per frame (--deinterlace double gives one per field)", i.Path, fieldOrderWords[order], how, out.Deinterlace)
}

// fieldsPerFrame is how many frames a Decoder delivers per source frame.
func (i *Info) fieldsPerFrame() int {
	if i.Deinterlace == DeinterlaceDouble {
		return 2
	}
	return 1
}

// deinterlaceFilter is the filter a Decoder applies for info.Deinterlace,
// "" for none. It deinterlaces every frame (deint=all), so that the count
// of frames out is exact whatever each frame's flags say.
func deinterlaceFilter(info *Info) string {
	parity := info.parity
	if parity == "" {
		parity = "auto"
	}
	switch info.Deinterlace {
	case DeinterlaceBwdif:
		return "bwdif=mode=send_frame:parity=" + parity + ":deint=all"
	case DeinterlaceYadif:
		return "yadif=mode=send_frame:parity=" + parity + ":deint=all"
	case DeinterlaceDouble:
		return "bwdif=mode=send_field:parity=" + parity + ":deint=all"
	}
	return ""
}

// idetFrames is how many frames detectFieldOrder looks at.
const idetFrames = 100

var reIdet = regexp.MustCompile(`Multi frame detection: TFF:\s*(\d+)\s+BFF:\s*(\d+)\s+Progressive:\s*(\d+)\s+Undetermined:\s*(\d+)`)

// detectFieldOrder runs ffmpeg's idet filter on the first idetFrames
// frames of info's video stream and returns "tt" or "bb" when at least
// half of them look interlaced and four times as many as look
// progressive, "progressive" otherwise, "" when idet said nothing. A
// still picture looks neither way, so a video whose first seconds do not
// move is taken as progressive.
func detectFieldOrder(ctx context.Context, path string, t tools, info *Info) string {
	args := append([]string{"-nostdin", "-hide_banner", "-nostats"}, t.input(path)...)
	r := runTool(ctx, t.ffmpeg, append(args, "-map", "0:"+strconv.Itoa(info.VideoStream),
		"-frames:v", strconv.Itoa(idetFrames), "-vf", "idet", "-f", "null", "-")...)
	m := reIdet.FindAllSubmatch(r.stderr, -1)
	if m == nil {
		return ""
	}
	last := m[len(m)-1]
	n := func(i int) int { v, _ := strconv.Atoi(string(last[i])); return v }
	tff, bff, prog, und := n(1), n(2), n(3), n(4)
	il := tff + bff
	switch {
	case il > 0 && 2*il >= tff+bff+prog+und && il >= 4*prog && tff >= bff:
		return "tt"
	case il > 0 && 2*il >= tff+bff+prog+und && il >= 4*prog:
		return "bb"
	}
	return "progressive"
}
