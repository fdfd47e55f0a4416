package video

import "testing"

func TestPixFmtInfo(t *testing.T) {
	for _, c := range []struct {
		pf     string
		d      int
		ch     string
		rgb, a bool
	}{
		{"yuv420p", 8, "4:2:0", false, false}, {"yuv420p10le", 10, "4:2:0", false, false}, {"yuv444p12le", 12, "4:4:4", false, false},
		{"yuv410p", 8, "4:1:0", false, false}, {"nv12", 8, "4:2:0", false, false}, {"p010le", 10, "4:2:0", false, false},
		{"gbrp16le", 16, "", true, false}, {"rgb48le", 16, "", true, false}, {"rgba", 8, "", true, true}, {"rgb24", 8, "", true, false},
		{"yuva420p", 8, "4:2:0", false, true}, {"gray16le", 16, "", true, false}, {"yuvj422p", 8, "4:2:2", false, false}, {"rgba64le", 16, "", true, true},
		{"ya16le", 16, "", true, true}, {"gbrap", 8, "", true, true}, {"yuv422p10le", 10, "4:2:2", false, false}, {"x2rgb10le", 10, "", true, false},
	} {
		d, ch, rgb, a := PixFmtInfo(c.pf)
		if d != c.d || ch != c.ch || rgb != c.rgb || a != c.a {
			t.Errorf("%s: %d %q %v %v", c.pf, d, ch, rgb, a)
		}
	}
}

// TestTagExactFirst: tag prefers the key as written, else the first name
// that differs only in case, every time.
func TestTagExactFirst(t *testing.T) {
	tags := map[string]string{"TITLE": "upper", "title": "exact", "Title": "mixed"}
	for range 20 { // map order varies from one range to the next
		if got := tag(tags, "title"); got != "exact" {
			t.Fatalf("tag title = %q, want exact", got)
		}
		if got := tag(map[string]string{"Title": "mixed", "TITLE": "upper"}, "title"); got != "upper" {
			t.Fatalf("tag title = %q, want upper (TITLE sorts first)", got)
		}
	}
}
