package video

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestLiveColourSAR: a live source's colour primaries, transfer and SAR
// are read from its stream, and a LiveEncoder given them tags its output
// so, and reports it.
func TestLiveColourSAR(t *testing.T) {
	needFFprobe(t)
	ctx := testCtx(t)
	src := fixture(t, "live_bt709_sar.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=0.5", "-vf", "setsar=4/3", "-c:v", "libx264",
		"-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709")
	dec, err := OpenLive(ctx, LiveInput{URL: src, NoAudio: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	if err := dec.Header(); err != nil {
		t.Fatal(err)
	}
	if c, s := dec.Colour(), dec.SAR(); c != (Colour{Primaries: "bt709", Transfer: "bt709"}) || s != (Rational{4, 3}) {
		t.Fatalf("live source: colour %+v, SAR %v", c, s)
	}
	out := filepath.Join(t.TempDir(), "out.mkv")
	w, h := dec.Size()
	enc, err := NewLiveEncoder(ctx, LiveOutput{URL: out, Encode: EncodeOptions{Width: w, Height: h, CRF: -1, Preset: "ultrafast", Colour: dec.Colour(), SAR: dec.SAR()}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.WriteFrame(p.NS, p.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	p := ffprobeJSON(t, out)
	if v := p.Streams[0]; v.Primaries != "bt709" || v.Transfer != "bt709" || v.SAR != "4:3" {
		t.Errorf("live output: primaries %s, transfer %s, SAR %s", v.Primaries, v.Transfer, v.SAR)
	}
	if line := enc.Carried().String(); !strings.Contains(line, "colour bt709/bt709") || !strings.Contains(line, "SAR 4:3") {
		t.Errorf("report %q", line)
	}
}
