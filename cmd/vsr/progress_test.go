package main

import (
	"bytes"
	"regexp"
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

// TestProgressRate: the rate is the frames over the time since the
// stream began: the bar's clock starts with the stream, not at its first
// update (which claimed 48612 frames/s), and plain lines claim none
// before a second of the stream has passed.
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
	// The bar's own rate is over the time since the stream began.
	var bar bytes.Buffer
	b := newBar(&bar, 100, 120)
	time.Sleep(100 * time.Millisecond)
	b.Set(8)
	if m := regexp.MustCompile(`(\d+) frames/s`).FindStringSubmatch(bar.String()); m == nil || len(m[1]) > 2 {
		t.Errorf("the bar's first update %q: want a rate under 100 frames/s", bar.String())
	}
	var buf bytes.Buffer
	p := newProgress("plain", 100, &buf)
	p.update(8, 100) // at once: a burst of frames
	if line := buf.String(); !strings.HasPrefix(line, "frame 8/100 (8%) ? frames/s ETA ?") {
		t.Errorf("first update %q claims a rate", line)
	}
}
