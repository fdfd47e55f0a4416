package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDeepImage: a 16-bit PNG restores to a 16-bit PNG whose samples hold
// more than 8 bits, and an 8-bit PNG stays 8-bit, alone and in a folder.
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
		if c.want == "rgb48be" {
			checkDeep(t, out)
		}
	}
	// A folder: the 16-bit image goes through the model at 16 bits too,
	// beside an 8-bit one of the same size.
	in, outDir := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rgb48be.png", "rgb24.png"} {
		if err := os.Rename(filepath.Join(dir, f), filepath.Join(in, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := vsr(t, "restore", in, "-o", outDir, "--scale", "2", "--device", "cpu", "--progress", "none"); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"rgb48be.png": "rgb48be", "rgb24.png": "rgb24"} {
		if got := probe(t, filepath.Join(outDir, f)).PixFmt; got != want {
			t.Errorf("folder: %s came out %s, want %s", f, got, want)
		}
	}
	checkDeep(t, filepath.Join(outDir, "rgb48be.png"))
}

// checkDeep fails unless the 16-bit image at path holds more than 8 bits
// a sample: an 8-bit result widened by ffmpeg repeats its high byte in the
// low one (v * 257).
func checkDeep(t *testing.T, path string) {
	t.Helper()
	raw, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb48be", "-").Output()
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
		t.Errorf("%s: only %d of %d samples of the 16-bit output are not widened 8-bit values", path, deep, len(raw)/2)
	}
}
