package pipeline

import (
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/video"
)

// alphaMean is the mean alpha of frame n of path, 0 to 255.
func alphaMean(t *testing.T, path string, n int) float64 {
	t.Helper()
	a := runTool(t, "ffmpeg", "-nostdin", "-v", "error", "-i", path, "-vf", "alphaextract,select=eq(n\\,"+string(rune('0'+n))+")",
		"-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gray", "-")
	if len(a) == 0 {
		t.Fatalf("%s: no frame %d", filepath.Base(path), n)
	}
	sum := 0
	for _, v := range a {
		sum += int(v)
	}
	return float64(sum) / float64(len(a))
}

// TestAlphaSegments: the alpha of an animated input follows its frames
// when the output would be cut into segments (each took frame 0's on),
// and is not taken for limited-range values when the input is tagged so
// (ffv1 tags yuva444p tv; 20 became 5).
func TestAlphaSegments(t *testing.T) {
	needTools(t)
	for _, rng := range []string{"pc", "tv"} {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.mkv")
		ffmpegGen(t, "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10:d=0.4,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='50*N+20'",
			"-c:v", "ffv1", "-pix_fmt", "yuva444p", "-color_range", rng, in)
		info := probeWith(t, in)
		out := filepath.Join(dir, "out.mkv")
		restoreCPU(t, info, out, video.EncodeOptions{Codec: "ffv1", CRF: -1, PixFmt: "yuva444p", AlphaFrom: info}, 2)
		for n := range 4 {
			if got, want := alphaMean(t, out, n), float64(50*n+20); got < want-2 || got > want+2 {
				t.Errorf("%s input, frame %d: alpha %.1f, want %.0f", rng, n, got, want)
			}
		}
	}
}
