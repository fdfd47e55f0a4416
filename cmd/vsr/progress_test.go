package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/schollz/progressbar/v3"
)

// TestNarrowBar: in narrow terminals every redraw of the bar fits on one
// line.
func TestNarrowBar(t *testing.T) {
	for _, width := range []int{30, 40, 60, 80} {
		var buf bytes.Buffer
		bar := progressbar.NewOptions(4567, append(barOptions(&buf, width), progressbar.OptionThrottle(0))...)
		for _, n := range []int{1, 123, 2000, 4567} {
			bar.Set(n)
			time.Sleep(time.Millisecond)
		}
		for _, line := range strings.FieldsFunc(buf.String(), func(r rune) bool { return r == '\r' || r == '\n' }) {
			if n := len([]rune(strings.TrimRight(line, " "))); n > width {
				t.Errorf("width %d: a %d-column line %q", width, n, line)
			}
		}
	}
}

// TestProgressRate: no rate is claimed before a second of the stream has
// passed (the first update once claimed 48612 frames/s); after that, it
// is the frames over the time since the stream began.
func TestProgressRate(t *testing.T) {
	for _, c := range []struct {
		done int
		el   time.Duration
		fps  float64
		ok   bool
	}{
		{8, 160 * time.Microsecond, 0, false},
		{1, 999 * time.Millisecond, 0, false},
		{0, 5 * time.Second, 0, false},
		{30, 2 * time.Second, 15, true},
		{1, time.Second, 1, true},
	} {
		if fps, ok := rate(c.done, c.el); fps != c.fps || ok != c.ok {
			t.Errorf("rate(%d, %v) = %v, %v; want %v, %v", c.done, c.el, fps, ok, c.fps, c.ok)
		}
	}
	var buf bytes.Buffer
	p := newProgress("plain", 100, &buf)
	p.update(8, 100) // at once: a burst of frames
	if line := buf.String(); !strings.HasPrefix(line, "frame 8/100 (8%) ? frames/s ETA ?") {
		t.Errorf("first update %q claims a rate", line)
	}
}
