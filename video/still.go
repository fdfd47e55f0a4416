package video

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Errors of Still.
var (
	// ErrStillTooLarge: the frame's PNG is over the bound Still was given.
	ErrStillTooLarge = errors.New("the frame's PNG is over the limit")
	// ErrNoFrameAt: the video ends before the time asked for.
	ErrNoFrameAt = errors.New("no frame at that time")
)

// Still renders the frame of the video or image at path that shows at
// sec seconds from its start, scaled with bicubic to w x h (square
// pixels), as PNG of at most max bytes (ErrStillTooLarge past them). It
// opens path as every input is opened (the file protocol and the allowed
// demuxers only: see Limits), so a playlist cannot make it read other
// files; path may be an open descriptor's (FDPath). The child is killed
// when ctx ends.
func Still(ctx context.Context, path string, sec float64, w, h, max int) ([]byte, error) {
	if w <= 0 || h <= 0 || sec < 0 {
		return nil, fmt.Errorf("still: %dx%d at %g s", w, h, sec)
	}
	bin, err := FFmpeg()
	if err != nil {
		return nil, err
	}
	args := append(slices.Clone(baseArgs), "-ss", strconv.FormatFloat(sec, 'f', 3, 64))
	args = append(args, inputArgs(path, false)...)
	args = append(args, "-map", "0:v:0", "-frames:v", "1", "-vf", fmt.Sprintf("scale=%d:%d:flags=bicubic,setsar=1", w, h),
		"-f", "image2pipe", "-c:v", "png", "-")
	r := runToolMax(ctx, max, bin, args...)
	switch {
	case r.over:
		return nil, fmt.Errorf("%w (%d bytes)", ErrStillTooLarge, max)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case r.err != nil:
		return nil, fmt.Errorf("ffmpeg: %s", describe(r.tail, r.err))
	case len(r.stdout) == 0:
		return nil, fmt.Errorf("%w: %.3f s is past the end", ErrNoFrameAt, sec)
	}
	return r.stdout, nil
}
