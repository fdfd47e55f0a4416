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
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("restoring"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("frames"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
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
	el := now.Sub(p.start).Seconds()
	fps := float64(done) / el
	eta := "?"
	if fps > 0 {
		eta = time.Duration(float64(total-done) / fps * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "frame %d/%d (%.0f%%) %.2f frames/s ETA %s\n", done, total, 100*float64(done)/float64(max(total, 1)), fps, eta)
}

func (p *progress) finish(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !ok {
		_ = p.bar.Exit()
		fmt.Fprintln(p.w)
	}
}
