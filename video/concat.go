package video

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ConcatOptions controls Concat.
type ConcatOptions struct {
	// CarryOptions name the source whose streams and metadata are carried
	// into the output, as EncodeOptions' are (the parts are the video).
	CarryOptions
	// NoReplace fails with ErrExists instead of replacing an existing
	// file at the output path, as EncodeOptions.NoReplace.
	NoReplace bool
	// Frames and FPS, when set, give each part's exact frame count and
	// the rate: each part then lasts exactly Frames[i]/FPS in the output,
	// instead of the duration its container rounded (which drifted the
	// joined video by up to a millisecond per part).
	Frames []int
	FPS    Rational
	// Audio, if set, holds the source's audio that the output re-encodes,
	// encoded while the parts were (StartAudio): the join copies it from
	// there. If that encode failed, the join encodes the audio itself.
	Audio *AudioAhead
}

// Concat joins video files that share codec, size and frame rate (the
// segments of one encode) into outPath without re-encoding, muxing in the
// streams and metadata of opt.StreamsFrom, and returns what the output
// carries of those and drops (the parts' own colour tags and SAR stay).
// Like an Encoder it writes a temporary file beside outPath and renames it
// only once it passed the checks Encoder.Close makes (with a packet per
// frame of opt.Frames, when given), leaving a file at outPath as it was
// otherwise. Before it starts it checks that the output's filesystem has
// room for the parts' bytes and a margin (an error wrapping ErrDiskFull
// says how much more is needed); the parts are left as they are.
func Concat(ctx context.Context, parts []string, outPath string, opt ConcatOptions) (Carried, error) {
	var none Carried
	if len(parts) == 0 {
		return none, fmt.Errorf("concat %q: no parts", outPath)
	}
	need := filesSize(parts)
	if free, ok := freeSpace(filepath.Dir(outPath)); ok && free < need+spaceMargin(need) {
		return none, diskFullError(outPath, need+spaceMargin(need)-free)
	}
	ext := filepath.Ext(outPath)
	t, err := resolveTools()
	if err != nil {
		return none, err
	}
	var ahead *aheadInput
	if opt.Audio != nil {
		ahead, _ = opt.Audio.wait(ctx) // failed: the join encodes the audio
		if ctx.Err() != nil {
			return none, fmt.Errorf("concat %q: %w", outPath, ctx.Err())
		}
	}
	streams, err := planStreams(ctx, t, opt.CarryOptions, ext, 1, ahead)
	if err != nil {
		return none, fmt.Errorf("concat %q: reading %s: %w", outPath, opt.StreamsFrom, err)
	}
	wd, tmp, err := reserveTemp(outPath, ext)
	if err != nil {
		return none, err
	}
	defer wd.Remove()
	list, err := os.CreateTemp("", "vsr-concat-*.txt")
	if err != nil {
		return none, fmt.Errorf("concat %q: %v", outPath, err)
	}
	defer os.Remove(list.Name())
	exact := len(opt.Frames) == len(parts) && opt.FPS.Valid()
	for i, p := range parts {
		abs, err := filepath.Abs(p)
		if err != nil {
			list.Close()
			return none, err
		}
		fmt.Fprintf(list, "file '%s'\n", strings.ReplaceAll(ChildPath(abs), "'", `'\''`))
		if exact {
			fmt.Fprintf(list, "duration %.6f\n", float64(opt.Frames[i])*float64(opt.FPS.Den)/float64(opt.FPS.Num))
		}
	}
	if err := list.Close(); err != nil {
		return none, err
	}
	args := append([]string{}, baseArgs...)
	args = append(args, "-f", "concat", "-safe", "0", "-i", list.Name())
	sin, err := streams.inputs(wd)
	if err != nil {
		return none, fmt.Errorf("concat %q: %v", outPath, err)
	}
	args = append(args, sin...)
	args = append(args, "-map", "0:v")
	args = append(args, streams.output...)
	args = append(args, "-c:v", "copy", "-y", fileArg(tmp))
	r := runTool(ctx, t.ffmpeg, args...)
	if ctx.Err() != nil {
		return none, fmt.Errorf("concat %q: %w", outPath, ctx.Err())
	}
	check := outputCheck{path: tmp, what: fmt.Sprintf("concat %q", outPath), tail: r.tail, sync: true, need: need}
	if exact {
		for _, n := range opt.Frames {
			check.packets += n
		}
	}
	if err := check.written(); err != nil {
		return none, err
	}
	if r.err != nil {
		return none, fmt.Errorf("concat %q: ffmpeg failed: %s", outPath, describe(r.tail, r.err))
	}
	if err := check.readBack(ctx, t); err != nil {
		return none, err
	}
	if err := moveIntoPlace(tmp, outPath, opt.NoReplace); err != nil {
		if errors.Is(err, ErrExists) {
			return none, fmt.Errorf("concat %q: %w (created while this output was made); the new output was discarded", outPath, ErrExists)
		}
		return none, fmt.Errorf("concat %q: cannot move the finished file into place: %v", outPath, err)
	}
	return streams.report, nil
}

// filesSize is the sum of the sizes of the files at paths (those it cannot
// stat count 0).
func filesSize(paths []string) int64 {
	var n int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}
