package compact

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// TestEngineDeepOutput: 8-bit frames restored on the CPU into a deeper
// output format go through the model at 16 bits, as the GPU writes them:
// the result equals that of the same frames widened to rgb48le first. The
// model's RGB had followed the input only, so the output held 8-bit
// values widened.
func TestEngineDeepOutput(t *testing.T) {
	m, err := LoadBundled(cpu.New(1), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e := Engine{M: m}
	w, h := 8, 6
	in8 := make([]byte, backend.RGB24.FrameBytes(w, h))
	rand.New(rand.NewSource(1)).Read(in8)
	in16 := make([]byte, 2*len(in8))
	for i, v := range in8 {
		binary.LittleEndian.PutUint16(in16[2*i:], uint16(v)*257)
	}
	run := func(in backend.PixelFormat, data []byte, f backend.PixelFormat) []byte {
		b, err := e.NewBatch(1, w, h, in, f)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		copy(b.In(), data)
		if err := e.Start(context.Background(), b, 1); err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(); err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b.Out()...)
	}
	yuv10, _ := backend.ParsePixelFormat("yuv420p10le", backend.YCbCr{})
	for _, f := range []backend.PixelFormat{backend.RGB48, yuv10} {
		if got, want := run(backend.RGB24, in8, f), run(backend.RGB48, in16, f); !bytes.Equal(got, want) {
			t.Errorf("rgb24 in, %s out: not the model's 16-bit result", f.Name())
		}
	}
}

// TestUpscaleFormatPackedRGB: UpscaleFormat, which tiles packed RGB, takes
// rgb24 and rgb48le only, not the YUV that may enter an engine (it had
// taken yuv444p16le as if it were 6-byte pixels).
func TestUpscaleFormatPackedRGB(t *testing.T) {
	m, err := LoadBundled(cpu.New(1), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f := backend.YUV16(backend.YCbCr{})
	in, out := make([]byte, f.FrameBytes(8, 8)), make([]byte, f.FrameBytes(16, 16))
	if err := m.UpscaleFormat(context.Background(), f, in, 1, 8, 8, out, 0); err == nil {
		t.Error("yuv444p16le frames went through UpscaleFormat as packed RGB")
	}
}
