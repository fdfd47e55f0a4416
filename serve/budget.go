package serve

import (
	"context"
	"fmt"
	"maps"

	"github.com/vsr-dev/vsr/video"
)

// DefaultMaxOutputPixels is Config.MaxOutputPixels's default: 8192 x 8192
// (64 Mi pixels), twice 8K UHD (7680 x 4320), so that every 8K video and
// an image of up to 8192 x 8192 pass. One such frame is 192 MiB as 8-bit
// RGB and 768 MiB as float32 RGB, and a task holds a few at once; the
// requests of issue 35 (16384 x 16384, 48000 x 48000) are 4 and 34 times
// over it.
const DefaultMaxOutputPixels = 8192 * 8192

// Sizer is implemented by runners that can tell, before a task runs, the
// size of the largest frames it will make (its output, or a model's output
// before a resize down to the requested size). input is the task's input,
// which OutputSize may probe (from its headers: it must be quick). 0, 0
// means unknown. The service refuses a task whose frames are over
// Config.MaxOutputPixels: at submit with 400, and again just before the
// task runs (it fails with error_type OutputTooLarge), so that a task
// stored before the limit (recovered at a start) never runs past it.
// Without a Sizer, only a request's own size is checked.
type Sizer interface {
	OutputSize(ctx context.Context, r *Request, input string) (w, h int, err error)
}

// budgetError is a task over the pixel budget.
type budgetError struct {
	w, h  int
	limit int64
	size  []int // the size asked for, when the model makes w x h to resize it to that
}

func (e *budgetError) Error() string {
	what := "the output"
	if e.size != nil {
		what = fmt.Sprintf("the model's output (resized to %dx%d after)", e.size[1], e.size[0])
	}
	return fmt.Sprintf("%s would be %dx%d = %.0f pixels, over this server's limit of %d (vsr serve --max-output-pixels): ask for a smaller target_shape or sr_ratio, or give a smaller input",
		what, e.w, e.h, float64(e.w)*float64(e.h), e.limit)
}

// overBudget reports whether w x h is over limit pixels (without
// overflowing); an unknown size (0) is not.
func overBudget(w, h int, limit int64) bool {
	return w > 0 && h > 0 && int64(h) > limit/int64(w)
}

// fits checks r's output against the pixel budget of limit pixels: the
// runner rn's Sizer on input (a path this process may open), else r's own
// size. The Sizer's error (an input that cannot be probed, a request the
// model cannot run on it) is returned as such.
func fits(ctx context.Context, rn Runner, limit int64, r *Request, input string) error {
	w, h := 0, 0
	if len(r.Size) == 2 {
		h, w = r.Size[0], r.Size[1]
	}
	if sz, ok := rn.(Sizer); ok {
		sw, sh, err := sz.OutputSize(ctx, r, input)
		if err != nil {
			return err
		}
		if float64(sw)*float64(sh) > float64(w)*float64(h) { // no overflow

			w, h = sw, sh
		}
	}
	if !overBudget(w, h, limit) {
		return nil
	}
	e := &budgetError{w: w, h: h, limit: limit}
	if len(r.Size) == 2 && (r.Size[0] != h || r.Size[1] != w) {
		e.size = r.Size
	}
	return e
}

// fitsAtSubmit checks a request's output before it is queued: input is
// the checked input path inside the input root (an upload's hidden name),
// opened and probed through its descriptor. Only an output known to be
// over the budget is refused: an input the runner cannot probe is the
// run's to report, as it was.
func (a *api) fitsAtSubmit(ctx context.Context, r *Request, input string) error {
	f, err := openIn(a.cfg.InputRoot, input)
	if err != nil {
		return nil // resolved a moment ago; the run reports what happened
	}
	defer f.Close()
	err = fits(ctx, a.runner, a.cfg.MaxOutputPixels, r, video.FDPath(f, input))
	if _, over := err.(*budgetError); over {
		return err
	}
	return nil
}

// checkRun checks a task again just before it runs (work is the runner's
// copy, its input the opened file): its request as at submit, and its
// output against the budget, so that a task stored by an older version or
// under another limit fails instead of running. It returns the error type
// of a failure.
func (s *Service) checkRun(ctx context.Context, work *Task) (string, error) {
	r := work.Request
	r.Params = maps.Clone(r.Params)
	if err := CheckRequest(&r); err != nil {
		return "BadRequest", err
	}
	switch err := fits(ctx, s.runner, s.cfg.MaxOutputPixels, &r, work.Input); err.(type) {
	case nil:
		return "", nil
	case *budgetError:
		return "OutputTooLarge", err
	default:
		return errorType(err), err
	}
}
