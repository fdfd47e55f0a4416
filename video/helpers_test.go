package video

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixtureDir holds the clips generated once for all tests.
var fixtureDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vsr-video-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needFFmpeg skips the test when ffmpeg is not installed and returns its path.
func needFFmpeg(t testing.TB) string {
	t.Helper()
	p, err := FFmpeg()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return p
}

// needFFprobe skips the test when ffprobe is not installed.
func needFFprobe(t testing.TB) string {
	t.Helper()
	p, err := FFprobe()
	if err != nil || p == "" {
		t.Skip("skipping: ffprobe not found")
	}
	return p
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(testCtx(t))
	t.Cleanup(cancel)
	return ctx, cancel
}

// clip describes a generated test clip.
type clip struct {
	name   string // file name, extension picks the container
	frames int
	rate   string // lavfi rate
	fps    Rational
	audio  bool
	args   []string // extra output options
}

var clips = []clip{
	{name: "one_24.mp4", frames: 1, rate: "24", fps: Rational{24, 1}},
	{name: "two_ntsc_audio.mkv", frames: 2, rate: "30000/1001", fps: Rational{30000, 1001}, audio: true,
		args: []string{"-c:a", "libopus"}},
	{name: "seven_ntsc_audio.mp4", frames: 7, rate: "30000/1001", fps: Rational{30000, 1001}, audio: true,
		args: []string{"-c:a", "aac", "-movflags", "+faststart"}},
	{name: "seven_24.mkv", frames: 7, rate: "24", fps: Rational{24, 1}},
	{name: "seven_24_audio.mkv", frames: 7, rate: "24/1", fps: Rational{24, 1}, audio: true,
		args: []string{"-c:a", "aac"}},
}

var (
	fixtureMu   sync.Mutex
	fixtureOnce = map[string]*sync.Once{}
	fixtureErr  = map[string]error{}
)

// fixture returns the path of a shared generated file, making it on first
// use with ffmpeg args (input and output options; the output path is
// appended).
func fixture(t testing.TB, name string, args ...string) string {
	t.Helper()
	ff := needFFmpeg(t)
	fixtureMu.Lock()
	once, ok := fixtureOnce[name]
	if !ok {
		once = new(sync.Once)
		fixtureOnce[name] = once
	}
	fixtureMu.Unlock()
	path := filepath.Join(fixtureDir, name)
	once.Do(func() {
		full := append([]string{"-nostdin", "-hide_banner", "-loglevel", "error"}, args...)
		full = append(full, "-y", path)
		out, err := exec.Command(ff, full...).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("generate %s: %v: %s", name, err, out)
		}
		fixtureMu.Lock()
		fixtureErr[name] = err
		fixtureMu.Unlock()
	})
	fixtureMu.Lock()
	err := fixtureErr[name]
	fixtureMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// clipPath generates (once) and returns the file for c.
func clipPath(t testing.TB, c clip) string {
	t.Helper()
	args := []string{"-f", "lavfi", "-i", "testsrc2=s=64x48:r=" + c.rate}
	if c.audio {
		// Audio a little longer than the video; no -shortest, which could
		// cut video frames.
		dur := float64(c.frames)/c.fps.Float() + 0.1
		args = append(args, "-f", "lavfi", "-i", fmt.Sprintf("sine=f=440:r=48000:d=%.3f", dur), "-map", "0:v", "-map", "1:a")
	}
	args = append(args, "-frames:v", fmt.Sprint(c.frames), "-c:v", "libx264", "-pix_fmt", "yuv420p")
	args = append(args, c.args...)
	return fixture(t, c.name, args...)
}

// noFFprobe returns the tools for the ffmpeg-only code path.
func noFFprobe(t testing.TB) tools {
	return tools{ffmpeg: needFFmpeg(t)}
}

// withFFprobe returns the tools for the ffprobe code path.
func withFFprobe(t testing.TB) tools {
	return tools{ffmpeg: needFFmpeg(t), ffprobe: needFFprobe(t)}
}

// probeModes runs f for the ffprobe and the ffmpeg-only code paths.
func probeModes(t *testing.T, f func(t *testing.T, tl tools)) {
	t.Run("ffprobe", func(t *testing.T) {
		t.Parallel()
		f(t, withFFprobe(t))
	})
	t.Run("ffmpeg-only", func(t *testing.T) {
		t.Parallel()
		f(t, noFFprobe(t))
	})
}

// decodeAll decodes every frame of info and returns them concatenated.
func decodeAll(t testing.TB, info *Info, opt DecodeOptions) ([]byte, int, error) {
	t.Helper()
	d, err := NewDecoder(testCtx(t), info, opt)
	if err != nil {
		return nil, 0, err
	}
	defer d.Close()
	var all []byte
	buf := make([]byte, d.FrameSize())
	n := 0
	for {
		err := d.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return all, n, nil
			}
			return all, n, err
		}
		n++
		all = append(all, buf...)
	}
}

// dirEntries lists the names in dir.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// assertNoOutput checks that neither outPath nor any temporary file exists.
func assertNoOutput(t testing.TB, outPath string) {
	t.Helper()
	if _, err := os.Stat(outPath); err == nil {
		t.Errorf("%s exists after a failure", outPath)
	}
	dir := filepath.Dir(outPath)
	if _, err := os.Stat(dir); err != nil {
		return
	}
	for _, n := range dirEntries(t, dir) {
		if strings.Contains(n, ".vsr-") {
			t.Errorf("temporary file %s left in %s", n, dir)
		}
	}
}

func oneLine(t testing.TB, err error) {
	t.Helper()
	if err != nil && strings.ContainsAny(err.Error(), "\n\r") {
		t.Errorf("error is not one line: %q", err)
	}
}
