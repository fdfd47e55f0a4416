package video

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// frameTimes reads the video packets' timestamps and key flags (ffmpeg's
// framecrc muxer, no decoding) and returns the frames' times from the
// first, then the end of the last, and which frames are key frames, in
// display order; nil when the packets are not the Frames frames one to
// one or a timestamp is missing.
func frameTimes(ctx context.Context, path string, t tools, info *Info) ([]float64, []bool) {
	args := append(append(append([]string{}, baseArgs...), t.input(path)...),
		"-map", "0:"+strconv.Itoa(info.VideoStream), "-c", "copy", "-f", "framecrc", "-")
	r := runTool(ctx, t.ffmpeg, args...)
	if r.err != nil {
		return nil, nil
	}
	var tb Rational
	var pts []int64
	key := map[int64]bool{}
	last, top := int64(0), int64(math.MinInt64) // the duration of the packet shown last, its time
	for _, line := range strings.Split(string(r.stdout), "\n") {
		if v, ok := strings.CutPrefix(line, "#tb 0: "); ok {
			if _, err := fmt.Sscanf(v, "%d/%d", &tb.Num, &tb.Den); err != nil {
				return nil, nil
			}
			continue
		}
		f := strings.Split(line, ",") // stream, dts, pts, duration, size, crc[, flags...]
		if len(f) < 6 || strings.HasPrefix(line, "#") {
			continue
		}
		p, err1 := strconv.ParseInt(strings.TrimSpace(f[2]), 10, 64)
		d, err2 := strconv.ParseInt(strings.TrimSpace(f[3]), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, nil
		}
		if p > top {
			last, top = d, p
		}
		// framecrc writes the flags only when they are not just "key".
		flags := int64(1)
		if len(f) > 6 {
			fmt.Sscanf(strings.TrimSpace(f[6]), "F=0x%x", &flags)
		}
		key[p] = flags&1 != 0
		pts = append(pts, p)
	}
	if len(pts) != info.Frames || !tb.Valid() {
		return nil, nil
	}
	slices.Sort(pts)
	sec := func(v int64) float64 { return float64(v-pts[0]) * float64(tb.Num) / float64(tb.Den) }
	times := make([]float64, len(pts)+1)
	for i, p := range pts {
		if i > 0 && p == pts[i-1] {
			return nil, nil // two frames at one time: not timestamps to keep
		}
		times[i] = sec(p)
	}
	end := pts[len(pts)-1] + last
	if last <= 0 { // no duration stated: the mean spacing
		end = pts[len(pts)-1] + (pts[len(pts)-1]-pts[0])/int64(len(pts)-1)
	}
	times[len(pts)] = sec(end)
	keys := make([]bool, len(pts))
	for i, p := range pts {
		keys[i] = key[p]
	}
	return times, keys
}

// variable reports whether times stray from an even spacing at fps by more
// than half a frame.
func variable(times []float64, fps Rational) bool {
	if len(times) < 2 || !fps.Valid() {
		return false
	}
	step := float64(fps.Den) / float64(fps.Num)
	for i, t := range times[:len(times)-1] {
		if math.Abs(t-float64(i)*step) > step/2 {
			return true
		}
	}
	return false
}

// countFrames decodes the video stream with ffmpeg, discarding the frames,
// and returns how many there are. It turns decoding errors, missing data
// and an empty stream into errors, and stops past the limit of frames
// (ErrLimit).
func countFrames(ctx context.Context, path string, t tools, info *Info) (int, error) {
	args := append(append([]string{}, baseArgs...), "-progress", "pipe:1")
	args = append(append(args, t.input(path)...), "-map", "0:"+strconv.Itoa(info.VideoStream), "-vf", renumberFilter(info.FPS))
	lim := t.in.Limits.withDefaults()
	if c := lim.countCap(); c > 0 {
		args = append(args, "-frames:v", strconv.Itoa(c))
	}
	args = append(append(args, passthroughArgs(ctx, t.ffmpeg)...), "-f", "null", "-")
	r := runTool(ctx, t.ffmpeg, args...)
	if ctx.Err() != nil {
		return 0, fmt.Errorf("probe %q: %w", path, ctx.Err())
	}
	if errors.Is(r.err, ErrNoFFmpeg) {
		return 0, r.err
	}
	n := lastProgressFrame(r.stdout)
	if c := lim.countCap(); c > 0 && n >= c {
		return 0, kindErrorf(ErrLimit, "%q: it has over %d frames, the limit: vsr refuses inputs this long", path, lim.MaxFrames)
	}
	failed := r.err != nil || r.tail.Count() > 0
	why := ""
	if failed {
		why = " (ffmpeg: " + describe(r.tail, r.err) + ")"
	}
	// How demuxers report data that ends early.
	cut := r.tail.Contains("partial file") || r.tail.Contains("ended prematurely")
	packets := func() int {
		p := countPackets(ctx, path, t, info.VideoStream)
		if ctx.Err() != nil {
			return -1
		}
		return p
	}
	if declared := info.DeclaredFrames; declared > 0 && n < declared {
		p := packets()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("probe %q: %w", path, ctx.Err())
		}
		switch {
		case cut || (p >= 0 && p < declared):
			return n, kindErrorf(ErrTruncated, "%q is truncated: the container says %d frames but only %d could be decoded%s; --frames %d restores those", path, declared, n, why, n)
		case failed:
			return 0, kindErrorf(ErrCorrupt, "%q is corrupt: the container says %d frames but only %d could be decoded%s", path, declared, n, why)
		}
		// Every packet is there and decoding was clean: an edit list hides
		// some frames, as in MP4 files cut without re-encoding. ffmpeg
		// decodes (and the Decoder yields) only the n that are shown.
	}
	switch {
	case cut:
		if n == 0 {
			return 0, kindErrorf(ErrTruncated, "%q is truncated: its data ends before any frame could be decoded%s", path, why)
		}
		return n, kindErrorf(ErrTruncated, "%q is truncated: its data ends early and only %d frames could be decoded%s; --frames %d restores those", path, n, why, n)
	case n == 0 && !failed:
		return 0, kindErrorf(ErrNoFrames, "%q has no video frames", path)
	case n == 0:
		// Nothing decoded, with errors: an empty stream or an undecodable one?
		p := packets()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("probe %q: %w", path, ctx.Err())
		}
		if p == 0 {
			return 0, kindErrorf(ErrNoFrames, "%q has no video frames", path)
		}
		return 0, kindErrorf(ErrCorrupt, "%q is corrupt: none of its video frames could be decoded%s", path, why)
	case failed:
		return 0, kindErrorf(ErrCorrupt, "%q is corrupt: ffmpeg reported errors decoding its %d video frames%s; repair or re-encode it first", path, n, why)
	}
	return n, nil
}

// countPackets counts the packets of one stream without decoding them, with
// ffprobe when available, else with ffmpeg's framecrc muxer (one line per
// packet). It returns -1 when it cannot tell.
func countPackets(ctx context.Context, path string, t tools, stream int) int {
	n, _ := readPackets(ctx, path, t, strconv.Itoa(stream), t.input(path))
	return n
}

// readPackets reads every packet of the stream spec ("0", "v:0") of the
// file input opens (ffmpeg's input options, ending with its -i), without
// decoding them, with ffprobe when available, else with ffmpeg's framecrc
// muxer, and returns their count (-1 when it cannot tell) and the
// reader's result: its stderr holds what it reported at the error level.
func readPackets(ctx context.Context, path string, t tools, spec string, input []string) (int, result) {
	if t.ffprobe != "" {
		r := runTool(ctx, t.ffprobe, append([]string{"-v", "error", "-select_streams", spec, "-count_packets",
			"-show_entries", "stream=nb_read_packets", "-of", "default=noprint_wrappers=1:nokey=1"}, input...)...)
		out := strings.TrimSpace(string(r.stdout))
		if n, err := strconv.Atoi(out); err == nil {
			return n, r
		}
		if r.err == nil && out == "N/A" {
			return 0, r // what ffprobe prints for a stream without packets
		}
		return -1, r
	}
	args := append(append(append([]string{}, baseArgs...), input...),
		"-map", "0:"+spec, "-c", "copy", "-f", "framecrc", "-")
	r := runTool(ctx, t.ffmpeg, args...)
	n := 0
	for _, line := range strings.Split(string(r.stdout), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n, r
}

// renumberFilter is the filter chain the frame-counting and decoding
// passes use. It gives the frames fresh, evenly spaced timestamps N/fps in
// a fine time base. The source timestamps are irrelevant for raw output, but
// in passthrough mode ffmpeg rounds them to the encoder's 1/fps time base,
// and in a millisecond time base (Matroska, WebM) two frames can round to
// the same value, which the muxer reports as an error ("non monotonically
// increasing dts").
func renumberFilter(fps Rational) string {
	if !fps.Valid() {
		fps = Rational{25, 1}
	}
	return fmt.Sprintf("settb=AVTB,setpts=N*1000000*%d/%d", fps.Den, fps.Num)
}

// lastProgressFrame returns the last "frame=N" of ffmpeg's -progress output.
func lastProgressFrame(out []byte) int {
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "frame="); ok {
			if k, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				n = k
			}
		}
	}
	return n
}
