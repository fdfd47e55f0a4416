package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
)

// deepFormats are the output formats the frame kernels write, with the
// colours that change their arithmetic.
var deepFormats = []backend.PixelFormat{
	backend.RGB24,
	backend.RGB48,
	backend.YUV420P,
	{Layout: backend.YUV420, Depth: 8, YCbCr: backend.YCbCr{Matrix: backend.BT709, Full: true}},
	{Layout: backend.YUV420, Depth: 10},
	{Layout: backend.YUV420, Depth: 10, YCbCr: backend.YCbCr{Matrix: backend.BT709}},
	{Layout: backend.YUV420, Depth: 12, YCbCr: backend.YCbCr{Matrix: backend.BT2020NC, Full: true}},
	{Layout: backend.YUV420, Depth: 16, YCbCr: backend.YCbCr{Matrix: backend.BT2020NC}},
	{Layout: backend.YUV444, Depth: 10, YCbCr: backend.YCbCr{Matrix: backend.BT709}},
	{Layout: backend.YUV444, Depth: 12, YCbCr: backend.YCbCr{Full: true}},
	{Layout: backend.YUV444, Depth: 16},
}

// rgb48 is n random RGB48 frames of w x h.
func rgb48(seed uint64, n, w, h int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n*backend.RGB48.FrameBytes(w, h))
	for i := 0; i < len(b); i += 2 {
		binary.LittleEndian.PutUint16(b[i:], uint16(r.IntN(65536)))
	}
	return b
}

// TestDeepFrameKernels uploads RGB48 frames through a Slot (from_rgb16)
// and converts them on the GPU to every output format (to_rgb8, to_rgb16,
// to_yuv), byte for byte against the CPU's conversion of the same stored
// values.
func TestDeepFrameKernels(t *testing.T) {
	for _, dt := range allTypes {
		g, c := open(t, dt), cpu.New(0)
		n, w, h := 2, 38, 22
		in := rgb48(7, n, w, h)
		slot, err := g.NewSlot(len(in), len(in))
		if err != nil {
			t.Fatal(err)
		}
		copy(slot.In(), in)
		x, err := slot.Input(n, h, w, backend.RGB48)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := g.Download(x)
		if err != nil {
			t.Fatal(err)
		}
		if dt == F32 {
			for i, v := range vals {
				if want := float32(binary.LittleEndian.Uint16(in[2*i:])) / 65535; v != want {
					t.Fatalf("from_rgb16 f32: value %d is %v, want %v", i, v, want)
				}
			}
		}
		cx, err := c.Upload(x.Shape(), vals)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range deepFormats {
			want := make([]byte, n*f.FrameBytes(w, h))
			if err := backend.ToFrames(c, cx, f, want); err != nil {
				t.Fatal(err)
			}
			if _, err := backend.Output(slot, x, f); err != nil {
				t.Fatalf("%v %v: %v", dt, f, err)
			}
			if err := slot.Wait(); err != nil {
				t.Fatal(err)
			}
			if got := slot.Out(); !bytes.Equal(got, want) {
				t.Errorf("%v %v: GPU frames differ from the CPU's in %d of %d bytes", dt, f, diffBytes(got, want), len(want))
			}
		}
		x.Free()
		cx.Free()
		slot.Free()
	}
}

// TestYUVInputKernel uploads deep YCbCr frames through a Slot (from_yuv):
// yuv444p16le for each matrix and range, and 4:2:0, 4:2:2 and 4:4:4 of 10,
// 12 and 16 bits at each chroma siting, at an odd size, and compares the
// RGB values with the CPU's conversion (the reference): equal in float32,
// within the rounding of the storage type otherwise.
func TestYUVInputKernel(t *testing.T) {
	n, w, h := 2, 31, 15
	var formats []backend.PixelFormat
	for _, yc := range []backend.YCbCr{{}, {Matrix: backend.BT709}, {Matrix: backend.BT2020NC, Full: true}, {Full: true}} {
		formats = append(formats, backend.YUV16(yc))
	}
	for i, name := range []string{"yuv420p10le", "yuv420p12le", "yuv420p16le", "yuv422p10le", "yuv444p10le", "yuv420p10le", "yuv420p10le", "yuv420p10le", "yuv422p12le"} {
		f, ok := backend.ParseInput(name, backend.YCbCr{Matrix: backend.YCbCrMatrix(i % 3), Full: i%2 == 1}, backend.Siting(i%6))
		if !ok {
			t.Fatalf("ParseInput(%q) failed", name)
		}
		formats = append(formats, f)
	}
	for _, dt := range allTypes {
		g, c := open(t, dt), cpu.New(0)
		for _, f := range formats {
			in := rgb48(11, n, w, h)[:n*f.FrameBytes(w, h)] // any 16-bit samples: out-of-range ones clamp
			slot, err := g.NewSlot(len(in), 16)
			if err != nil {
				t.Fatal(err)
			}
			copy(slot.In(), in)
			x, err := slot.Input(n, h, w, f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Download(x)
			if err != nil {
				t.Fatal(err)
			}
			cx, err := backend.FromFrames(c, in, f, n, h, w)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := c.Download(cx)
			tol := float32(0)
			if dt != F32 {
				tol = 1.0 / 128 // bf16 keeps 8 bits of mantissa
			}
			for i := range want {
				if d := got[i] - want[i]; d > tol || d < -tol {
					t.Fatalf("%v %v siting %d: value %d is %v, the CPU's %v", dt, f, f.Siting, i, got[i], want[i])
				}
			}
			x.Free()
			cx.Free()
			slot.Free()
		}
	}
}

// TestDeepFusedFrames runs the bundled model on a 16-bit frame with the
// fused tail (shuffle_add_nearest writing the frames) and without it, for
// every output format: the frames must be the same bytes.
func TestDeepFusedFrames(t *testing.T) {
	rgb8, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	in := make([]byte, 2*len(rgb8)) // the frame at 16 bits, with low bits set
	for i, v := range rgb8 {
		binary.LittleEndian.PutUint16(in[2*i:], uint16(v)<<8|uint16(i*37)&0xff)
	}
	for _, dt := range allTypes {
		g := open(t, dt)
		g.fusedMin = 0
		mg := loadPair(t, g, 4, compact.Options{})
		mu := loadPair(t, g, 4, compact.Options{SeparateTail: true})
		for _, f := range deepFormats {
			fused, unfused := framesAs(t, mg, in, backend.RGB48, f), framesAs(t, mu, in, backend.RGB48, f)
			if !bytes.Equal(fused, unfused) {
				t.Errorf("%v %v: fused shuffle-add frames differ from unfused in %d of %d bytes", dt, f, diffBytes(fused, unfused), len(fused))
			}
		}
		// An 8-bit input to a 10-bit output, as a --pix-fmt yuv420p10le
		// restore of an 8-bit video runs.
		f := backend.PixelFormat{Layout: backend.YUV420, Depth: 10}
		if a, b := framesAs(t, mg, rgb8, backend.RGB24, f), framesAs(t, mu, rgb8, backend.RGB24, f); !bytes.Equal(a, b) {
			t.Errorf("%v rgb24 -> %v: fused differs from unfused", dt, f)
		}
	}
}

// framesAs runs m on one 48x32 frame in format in through a Slot to format f.
func framesAs(t *testing.T, m *compact.Graph, frame []byte, in, f backend.PixelFormat) []byte {
	r := compact.Engine{M: m}
	bt, err := r.NewBatch(1, 48, 32, in, f)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Free()
	copy(bt.In(), frame)
	if err := r.Start(context.Background(), bt, 1); err != nil {
		t.Fatal(err)
	}
	if err := bt.Wait(); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), bt.Out()...)
}

func diffBytes(a, b []byte) int {
	d := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			d++
		}
	}
	return d + max(len(a), len(b)) - min(len(a), len(b))
}
