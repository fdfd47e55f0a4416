package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDeepImage: a 16-bit PNG restores to a 16-bit PNG whose samples hold
// more than 8 bits (an 8-bit result widened by ffmpeg repeats its high
// byte in the low one, v * 257), and an 8-bit PNG stays 8-bit.
func TestDeepImage(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	for _, c := range []struct{ pix, want string }{{"rgb48be", "rgb48be"}, {"rgb24", "rgb24"}} {
		in, out := filepath.Join(dir, c.pix+".png"), filepath.Join(dir, c.pix+"_x2.png")
		if b, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=32x24", "-frames:v", "1", "-pix_fmt", c.pix, in).CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v %s", in, err, b)
		}
		if _, err := vsr(t, "restore", in, "-o", out, "--scale", "2", "--device", "cpu", "--progress", "none"); err != nil {
			t.Fatal(err)
		}
		info := probe(t, out)
		if info.PixFmt != c.want {
			t.Errorf("%s in: %s out, want %s", c.pix, info.PixFmt, c.want)
			continue
		}
		if c.want != "rgb48be" {
			continue
		}
		raw, err := exec.Command("ffmpeg", "-v", "error", "-i", out, "-f", "rawvideo", "-pix_fmt", "rgb48be", "-").Output()
		if err != nil {
			t.Fatal(err)
		}
		deep := 0
		for i := 0; i+1 < len(raw); i += 2 {
			if raw[i] != raw[i+1] {
				deep++
			}
		}
		if deep < len(raw)/8 {
			t.Errorf("only %d of %d samples of the 16-bit output are not widened 8-bit values", deep, len(raw)/2)
		}
	}
}
