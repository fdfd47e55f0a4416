package video

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/internal/testutil"
)

// encodeGradient encodes n frames of 64x48 (a moving gradient) into out
// with libx264, and returns Close's error.
func encodeGradient(t *testing.T, out string, n int) error {
	t.Helper()
	e, err := NewEncoder(testCtx(t), out, EncodeOptions{Width: 64, Height: 48, FPS: Rational{25, 1}, CRF: 18, Preset: "ultrafast", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, e.FrameSize())
	for i := range n {
		for p := range frame {
			frame[p] = byte(p*7 + i*13)
		}
		if err := e.Write(frame); err != nil {
			e.Abort()
			return err
		}
	}
	return e.Close()
}

// previous puts a file at path standing for an earlier run's good
// output, and returns its bytes.
func previous(t *testing.T, path string) []byte {
	t.Helper()
	b := []byte("the previous output")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDiskFull fails unless err is a one-line ErrDiskFull that says how
// much room is missing, and out still holds prev, with no temporary
// beside it.
func checkDiskFull(t *testing.T, err error, out string, prev []byte) {
	t.Helper()
	oneLine(t, err)
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "no space left on the output's filesystem") || !strings.Contains(err.Error(), "B more needed") {
		t.Errorf("got %v, want ErrDiskFull saying how much more room is needed", err)
	}
	if strings.Contains(fmt.Sprint(err), "/proc/") {
		t.Errorf("the message names an internal path: %v", err)
	}
	if b, rerr := os.ReadFile(out); rerr != nil || !bytes.Equal(b, prev) {
		t.Errorf("the previous output was replaced (%d bytes there, want %d): %v", len(b), len(prev), rerr)
	}
	for _, n := range dirEntries(t, filepath.Dir(out)) {
		if strings.Contains(n, ".vsr-") {
			t.Errorf("temporary %s left", n)
		}
	}
}

// TestEncoderDiskFull: an Encoder whose output's filesystem (a real
// tmpfs) fills while ffmpeg writes the file's last page (in its trailer,
// after which ffmpeg 5.1 exits 0), or long before its end (ffmpeg fails),
// publishes nothing: Close fails with ErrDiskFull and the file an earlier
// run left at the output stays.
func TestEncoderDiskFull(t *testing.T) {
	needFFmpeg(t)
	ref := filepath.Join(t.TempDir(), "ref.mp4")
	if err := encodeGradient(t, ref, 60); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		frames int   // frames written
		room   int64 // free bytes for the output
	}{
		{"trailer", 60, testutil.PagesShort(st.Size())},
		{"packets", 600, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(testutil.Tmpfs(t, testutil.Pages(1)+c.room), "out.mp4")
			prev := previous(t, out)
			err := encodeGradient(t, out, c.frames)
			checkDiskFull(t, err, out, prev)
		})
	}
}

// TestConcatDiskFull: a join into a filesystem with less room than its
// parts take is refused before it starts; one whose streams muxed in
// (audio from the source) pass the room left fails with ErrDiskFull once
// ffmpeg finds the disk full. Either way the previous output and the
// parts stay.
func TestConcatDiskFull(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	parts := []string{filepath.Join(dir, "p0.mkv"), filepath.Join(dir, "p1.mkv")}
	for _, p := range parts {
		if err := encodeGradient(t, p, 30); err != nil {
			t.Fatal(err)
		}
	}
	opt := ConcatOptions{Frames: []int{30, 30}, FPS: Rational{25, 1}}
	ref := filepath.Join(dir, "ref.mkv")
	if _, err := Concat(testCtx(t), parts, ref, opt); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(ref)
	partBytes := filesSize(parts)
	// A source whose audio, copied into the join, is far larger than
	// the video: raw PCM, 2.4 s at 48 kHz stereo (about 460 kB).
	loud := fixture(t, "loud_pcm.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=25", "-f", "lavfi", "-i", "anoisesrc=r=48000:d=2.4",
		"-map", "0:v", "-map", "1:a", "-frames:v", "60", "-ac", "2", "-c:v", "libx264", "-c:a", "pcm_s16le")
	for _, c := range []struct {
		name  string
		room  int64
		carry string
	}{
		{"early", testutil.PagesShort(st.Size()), ""},
		{"streams", testutil.Pages(partBytes + spaceMargin(partBytes)), loud},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(testutil.Tmpfs(t, testutil.Pages(1)+c.room), "out.mkv")
			prev := previous(t, out)
			o := opt
			o.StreamsFrom = c.carry
			_, err := Concat(testCtx(t), parts, out, o)
			checkDiskFull(t, err, out, prev)
			if n := filesSize(parts); n != partBytes {
				t.Errorf("the parts hold %d bytes, not %d", n, partBytes)
			}
		})
	}
}

// TestReadBack: an output cut short is refused whatever ffmpeg said: an
// MP4 without its index, a Matroska file missing its last packets, and
// one that holds fewer packets than the frames written; ffmpeg's write
// errors are found in its stderr.
func TestReadBack(t *testing.T) {
	needFFmpeg(t)
	tl, err := resolveTools()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, ext := range []string{".mp4", ".mkv"} {
		whole := filepath.Join(dir, "whole"+ext)
		if err := encodeGradient(t, whole, 60); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(whole)
		cut := filepath.Join(dir, "cut"+ext)
		os.WriteFile(cut, b[:len(b)*3/4], 0o644)
		c := outputCheck{path: whole, what: "check", tail: newLogTail(), packets: 60}
		if err := c.readBack(testCtx(t), tl); err != nil {
			t.Errorf("%s: a whole file refused: %v", ext, err)
		}
		c.packets = 61
		if err := c.readBack(testCtx(t), tl); !errors.Is(err, ErrIncomplete) {
			t.Errorf("%s: 60 packets for 61 frames: %v", ext, err)
		}
		c.path, c.packets = cut, 60
		if err := c.readBack(testCtx(t), tl); !errors.Is(err, ErrIncomplete) {
			t.Errorf("%s: a file cut short: %v", ext, err)
		} else {
			oneLine(t, err)
		}
	}
	for line, want := range map[string]error{
		"[mp4 @ 0x55d0] Error writing trailer of out.mp4: No space left on device": ErrDiskFull,
		"av_interleaved_write_frame(): Disk quota exceeded":                        ErrDiskFull,
		"Error writing trailer of out.mp4: Input/output error":                     ErrIncomplete,
		"x264 [info]: frame I:1 Avg QP:20.00 size: 1000":                           nil,
	} {
		tail := newLogTail()
		tail.Write([]byte(line + "\n"))
		err := outputCheck{path: filepath.Join(dir, "none.mp4"), what: "check", tail: tail}.written()
		if !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("%q: %v, want %v", line, err, want)
		}
	}
}
