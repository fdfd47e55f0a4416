package video

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secretTS makes, in a fresh folder, a small MPEG-TS clip that stands for
// a file outside the input root (10 frames of 32x24), and returns its path.
func secretTS(t *testing.T) string {
	t.Helper()
	src := fixture(t, "secret.ts", "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10:d=1", "-c:v", "libx264", "-pix_fmt", "yuv420p")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "secret.ts")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeList writes text (with %s for the secret's path) into name in a
// fresh folder.
func writeList(t *testing.T, name, text, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(fmt.Sprintf(text, secret)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const hlsPlaylist = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n%s\n#EXT-X-ENDLIST\n"

// TestPlaylistsRefused: a playlist or list of files, whatever its name,
// is refused by Probe (both code paths) and by a Decoder given an Info
// for it, so the file it names is never read.
func TestPlaylistsRefused(t *testing.T) {
	needFFmpeg(t)
	secret := secretTS(t)
	cases := []struct{ name, path, format string }{
		{"hls-file-url", writeList(t, "upload.m3u8", hlsPlaylist, "file://"+secret), "hls"},
		{"hls-absolute", writeList(t, "clip.mp4", hlsPlaylist, secret), "hls"},
		{"ffconcat", writeList(t, "list.mkv", "ffconcat version 1.0\nfile '%s'\n", secret), "concat"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			probeModes(t, func(t *testing.T, tl tools) {
				info, err := probe(testCtx(t), c.path, tl)
				if !errors.Is(err, ErrFormat) || info != nil {
					t.Fatalf("probe = %v, %v; want ErrFormat", info, err)
				}
				oneLine(t, err)
				if !strings.Contains(err.Error(), c.format+" demuxer") || !strings.Contains(err.Error(), "playlist") {
					t.Errorf("error %q does not name the %s demuxer as a playlist", err, c.format)
				}
			})
			if _, err := ProbeHeader(testCtx(t), c.path, ProbeOptions{}); !errors.Is(err, ErrFormat) {
				t.Errorf("ProbeHeader: %v; want ErrFormat", err)
			}
			// A Decoder opens the file as Probe does.
			for _, frames := range []int{0, 10} {
				info := &Info{Path: c.path, Width: 32, Height: 24, FPS: Rational{10, 1}, Frames: frames}
				_, n, err := decodeAll(t, info, DecodeOptions{})
				if !errors.Is(err, ErrFormat) || n != 0 {
					t.Errorf("decode (Frames %d): %d frames, %v; want ErrFormat", frames, n, err)
				}
			}
		})
	}
}

// TestAllowPlaylists: told so, Probe and a Decoder read a playlist and
// the file it names.
func TestAllowPlaylists(t *testing.T) {
	needFFmpeg(t)
	secret := secretTS(t)
	list := writeList(t, "upload.m3u8", hlsPlaylist, "file://"+secret)
	info, err := ProbeWith(testCtx(t), list, ProbeOptions{AllowPlaylists: true})
	if err != nil {
		t.Fatal(err)
	}
	if !info.AllowPlaylists || info.Frames != 10 || info.Width != 32 {
		t.Fatalf("info %+v", info)
	}
	if _, n, err := decodeAll(t, info, DecodeOptions{}); err != nil || n != 10 {
		t.Fatalf("decode: %d frames, %v", n, err)
	}
}

// TestAllowedFormats: the containers and images vsr reads still probe and
// decode with the allow-lists.
func TestAllowedFormats(t *testing.T) {
	needFFmpeg(t)
	png := fixture(t, "still.png", "-f", "lavfi", "-i", "testsrc2=s=32x24", "-frames:v", "1")
	// ffmpeg reads this one with image2 when left to choose.
	jpg := fixture(t, "still.jpg", "-f", "lavfi", "-i", "testsrc2=s=120x90", "-frames:v", "1", "-c:v", "mjpeg", "-pix_fmt", "yuvj444p", "-q:v", "2")
	bmp := fixture(t, "still.bmp", "-f", "lavfi", "-i", "testsrc2=s=32x24", "-frames:v", "1")
	tif := fixture(t, "still.tif", "-f", "lavfi", "-i", "testsrc2=s=32x24", "-frames:v", "1")
	webp := fixture(t, "still.webp", "-f", "lavfi", "-i", "testsrc2=s=32x24", "-frames:v", "1", "-c:v", "libwebp")
	webm := fixture(t, "three.webm", "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10", "-frames:v", "3", "-c:v", "libvpx", "-b:v", "100k")
	paths := []string{clipPath(t, clips[2]), clipPath(t, clips[1]), webm, png, jpg, bmp, tif, webp, secretTS(t)}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			probeModes(t, func(t *testing.T, tl tools) {
				info, err := probe(testCtx(t), p, tl)
				if err != nil {
					t.Fatal(err)
				}
				if _, n, err := decodeAll(t, info, DecodeOptions{}); err != nil || n != info.Frames || n == 0 {
					t.Fatalf("decode: %d of %d frames, %v", n, info.Frames, err)
				}
			})
		})
	}
}

// TestProbeLimits: an input over a limit is refused at its header or when
// its frames are counted, with a one-line error naming the limit.
func TestProbeLimits(t *testing.T) {
	needFFmpeg(t)
	mp4 := clipPath(t, clips[2]) // 7 frames of 64x48 with audio, frames declared
	mkv := clipPath(t, clips[3]) // 7 frames of 64x48, no count declared
	cases := []struct {
		name   string
		path   string
		lim    Limits
		header bool   // refused by ProbeHeader too
		msg    string // wanted in the error
	}{
		{"width", mp4, Limits{MaxWidth: 63}, true, "width of 64 pixels is over the limit of 63"},
		{"height", mp4, Limits{MaxHeight: 40}, true, "height of 48 pixels"},
		{"pixels", mp4, Limits{MaxPixels: 64*48 - 1}, true, "64x48 (3072 pixels)"},
		{"streams", mp4, Limits{MaxStreams: 1}, true, "count of 2 streams"},
		// The ffmpeg-only path knows no declared count: it counts them.
		{"declared-frames", mp4, Limits{MaxFrames: 6}, true, "7 frames is over the limit of 6|over 6 frames"},
		{"counted-frames", mkv, Limits{MaxFrames: 6}, false, "over 6 frames"},
		{"duration", mkv, Limits{MaxDuration: 100 * time.Millisecond}, true, "duration of"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			probeModes(t, func(t *testing.T, tl tools) {
				tl.in.Limits = c.lim
				_, err := probe(testCtx(t), c.path, tl)
				want, alt, _ := strings.Cut(c.msg, "|")
				if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), want) && (alt == "" || !strings.Contains(err.Error(), alt)) {
					t.Fatalf("probe: %v; want ErrLimit with %q", err, c.msg)
				}
				oneLine(t, err)
			})
			_, err := ProbeHeader(testCtx(t), c.path, ProbeOptions{Limits: c.lim})
			if c.header != errors.Is(err, ErrLimit) {
				t.Errorf("ProbeHeader: %v (refused at the header: %v)", err, c.header)
			}
		})
	}
	// At the limits, and with no limit, the same files pass.
	for _, lim := range []Limits{{MaxWidth: 64, MaxHeight: 48, MaxPixels: 64 * 48, MaxStreams: 2, MaxFrames: 7}, {MaxWidth: -1, MaxFrames: -1, MaxDuration: -1}} {
		for _, p := range []string{mp4, mkv} {
			if info, err := ProbeWith(testCtx(t), p, ProbeOptions{Limits: lim}); err != nil || info.Frames != 7 {
				t.Errorf("%s with %+v: %v", p, lim, err)
			}
		}
	}
	h, err := ProbeHeader(testCtx(t), mp4, ProbeOptions{})
	if err != nil || h.Width != 64 || h.Height != 48 || h.DeclaredFrames != 7 {
		t.Errorf("ProbeHeader = %+v, %v", h, err)
	}
}
