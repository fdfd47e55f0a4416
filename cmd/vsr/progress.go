package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports frames done: a live bar on a terminal, plain lines
// otherwise (at most one every few seconds), or nothing.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int
	start time.Time
	last  time.Time
	plain bool
}

func newProgress(mode string, total int, w io.Writer) *progress {
	p := &progress{w: w, total: total, start: time.Now()}
	if mode == "none" {
		return p
	}
	f, isFile := w.(*os.File)
	if mode == "auto" && isFile && term.IsTerminal(int(f.Fd())) {
		width, _, err := term.GetSize(int(f.Fd()))
		if err != nil {
			width = 80
		}
		p.bar = newBar(w, total, width)
		return p
	}
	p.plain = true
	return p
}

func (p *progress) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Set(done)
		return
	}
	if !p.plain {
		return
	}
	now := time.Now()
	if done < total && now.Sub(p.last) < 2*time.Second {
		return
	}
	p.last = now
	speed, eta := "? frames/s", "?"
	if fps, ok := rate(done, now.Sub(p.start)); ok {
		speed = fmt.Sprintf("%.2f frames/s", fps)
		eta = time.Duration(float64(total-done) / fps * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "frame %d/%d (%.0f%%) %s ETA %s\n", done, total, 100*float64(done)/float64(max(total, 1)), speed, eta)
}

// minRateTime is how long a stream runs before its rate is shown.
const minRateTime = time.Second

// rate is the frames per second of done frames in el, the time since the
// stream began; ok is false until a frame is done and minRateTime has
// passed: before that the rate says nothing (the first frames may come
// out of a full pipeline at once, microseconds apart).
func rate(done int, el time.Duration) (fps float64, ok bool) {
	if done <= 0 || el < minRateTime {
		return 0, false
	}
	return float64(done) / el.Seconds(), true
}

func (p *progress) finish(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !ok {
		_ = p.bar.Exit()
		fmt.Fprintln(p.w)
	}
}

// newBar is a bar of total frames for a terminal of width columns, its
// clock started now, with the stream: unstarted, a bar starts it at its
// first update and rates the frames that came at once over microseconds
// (an absurd rate).
func newBar(w io.Writer, total, width int) *progressbar.ProgressBar {
	bar := progressbar.NewOptions(total, barOptions(w, width)...)
	bar.StartWithoutRender()
	return bar
}

// barOptions lay the bar out for a terminal of width columns: in a narrow
// one the description and the rate are left out and the bar shrinks, so
// that the line never wraps (a wrapped line is redrawn on a new line at
// every update).
func barOptions(w io.Writer, width int) []progressbar.Option {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	}
	switch {
	case width >= 100:
		return append(opts, progressbar.OptionSetPredictTime(true), progressbar.OptionSetDescription("restoring"),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("frames"), progressbar.OptionFullWidth())
	case width >= 50: // percent, count and times take about 36 columns
		return append(opts, progressbar.OptionSetPredictTime(true), progressbar.OptionSetWidth(width-40))
	}
	// percent and count alone take about 22 columns
	return append(opts, progressbar.OptionSetPredictTime(false), progressbar.OptionSetWidth(max(width-26, 3)))
}
