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
