package pipeline

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/video"
)

func pieceEncoder(t *testing.T, out, codec string, workers int) *pieceSink {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("no ffmpeg")
	}
	e := video.EncodeOptions{Width: 32, Height: 16, FPS: video.Rational{Num: 24, Den: 1}, InputPixFmt: "yuv420p",
		Codec: codec, CRF: 20, Preset: "ultrafast", PixFmt: "yuv420p"}
	return newPieceSink(context.Background(), out, e, video.ConcatOptions{}, backend.YUV420P.FrameBytes(32, 16), workers)
}

// TestPieceSink encodes 61 frames in pieces of 24 on 3 workers: the
// joined output has every frame, in order (each frame's luma is its
// index), and no piece file is left beside it.
func TestPieceSink(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.mkv")
	p := pieceEncoder(t, out, "libx264", 3)
	fs := backend.YUV420P.FrameBytes(32, 16)
	const n = 61
	for i := 0; i < n; i++ {
		f := make([]byte, fs)
		for j := range 32 * 16 {
			f[j] = byte(16 + 3*i)
		}
		for j := 32 * 16; j < fs; j++ {
			f[j] = 128
		}
		if err := p.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := video.Probe(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Frames != n {
		t.Errorf("%d frames out, %d in", info.Frames, n)
	}
	raw, err := exec.Command("ffmpeg", "-v", "error", "-i", out, "-f", "rawvideo", "-pix_fmt", "yuv420p", "-").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != n*fs {
		t.Fatalf("decoded %d bytes, want %d frames of %d", len(raw), n, fs)
	}
	for i := 0; i < n; i++ {
		if got, want := int(raw[i*fs+100]), 16+3*i; got < want-2 || got > want+2 {
			t.Fatalf("frame %d has luma %d, want %d: pieces out of order", i, got, want)
		}
	}
	onlyFile(t, dir, "out.mkv")
}

// TestPieceSinkErrors: an encoder that cannot start fails Close with its
// message and leaves nothing; Abort removes the pieces.
func TestPieceSinkErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.mkv")
	p := pieceEncoder(t, out, "no-such-codec", 2)
	frame := make([]byte, backend.YUV420P.FrameBytes(32, 16))
	var err error
	for i := 0; i < 30 && err == nil; i++ {
		err = p.Write(frame)
	}
	if err == nil {
		err = p.Close()
	} else {
		p.Abort()
	}
	if err == nil {
		t.Error("an unknown codec was accepted")
	}
	onlyFile(t, dir)
	p = pieceEncoder(t, out, "libx264", 2)
	for i := 0; i < 50; i++ {
		if err := p.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	p.Abort()
	onlyFile(t, dir)
}

// onlyFile fails unless dir holds exactly the named files.
func onlyFile(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(names) {
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		t.Errorf("directory holds %v, want %v", got, names)
	}
}
