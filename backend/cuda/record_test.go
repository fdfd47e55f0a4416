package cuda

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestRecord records a transformer step (LayerNorm, a Linear with GELU,
// RMSNorm + RoPE, windowed attention, a Linear accumulating into the input)
// once and replays it with other RoPE offsets and inputs: every replay is
// bitwise the same as running the ops one by one with that offset. It also
// checks that the capture ran nothing, that a failing or panicking step
// leaves the stream usable and the pool's count balanced, and replay after
// Free.
func TestRecord(t *testing.T) {
	b := open(t, BF16)
	const hd = 64
	g := backend.Grid{F: 3, H: 6, W: 10}
	rows, cols := g.Tokens(), 2*hd
	r := rand.New(rand.NewPCG(5, 6))
	w1, err := b.PrepareLinear(cols, cols, randSlice(r, cols*cols, -0.2, 0.2), randSlice(r, cols, -1, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Free()
	w2, err := b.PrepareLinear(cols, cols, randSlice(r, cols*cols, -0.2, 0.2), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Free()
	norm, err := b.Upload(backend.Matrix(1, cols), randSlice(r, cols, 0.5, 1.5))
	if err != nil {
		t.Fatal(err)
	}
	defer norm.Free()
	win := backend.Windows{Size: 4, YStarts: []int{0, 2}, XStarts: []int{0, 4, 6},
		YOwner: []int{0, 0, 0, 1, 1, 1}, XOwner: []int{0, 0, 0, 0, 1, 1, 2, 2, 2, 2}}
	// step works on x in place.
	step := func(x backend.Tensor, offset int) error {
		n, err := b.LayerNorm(x, 1e-6)
		if err != nil {
			return err
		}
		defer n.Free()
		h, err := b.Linear(n, w1, backend.ActGELUTanh, nil)
		if err != nil {
			return err
		}
		defer h.Free()
		if err := b.RMSNormRoPE(h, norm, 1e-6, &backend.RoPE{Grid: g, Offset: offset, HeadDim: hd}); err != nil {
			return err
		}
		a, err := b.WindowAttention(h, h, h, hd, g, win)
		if err != nil {
			return err
		}
		defer a.Free()
		_, err = b.Linear(a, w2, backend.ActNone, x)
		return err
	}
	inputs := [][]float32{randSlice(r, rows*cols, -1, 1), randSlice(r, rows*cols, -1, 1)}
	eager := func(in []float32, offset int) []byte {
		x, err := b.Upload(backend.Matrix(rows, cols), in)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Free()
		if err := step(x, offset); err != nil {
			t.Fatal(err)
		}
		return download(t, b, x)
	}
	x, err := b.Upload(backend.Matrix(rows, cols), inputs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	eager(inputs[1], 1) // kernels compiled and GEMM plans chosen before recording, as the DiT does
	before := download(t, b, x)
	rec, err := b.Record(func() error { return step(x, 99) })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(download(t, b, x), before) {
		t.Fatal("recording ran the ops")
	}
	for i, offset := range []int{0, 7, 3, 7} {
		in := inputs[i%2]
		want := eager(in, offset)
		x2, err := b.Upload(backend.Matrix(rows, cols), in)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CopyFrames(x, 0, x2); err != nil {
			t.Fatal(err)
		}
		x2.Free()
		if err := rec.Replay(offset); err != nil {
			t.Fatal(err)
		}
		if got := download(t, b, x); !bytes.Equal(got, want) {
			t.Errorf("replay %d with offset %d differs from running the ops", i, offset)
		}
	}
	rec.Free()
	rec.Free()
	if rec.Replay(0) == nil {
		t.Error("replay after Free succeeded")
	}

	// A step that fails while recording: an error, and the stream works.
	// (The RoPE tables of the offsets above stay cached: count from here.)
	inUse := b.pool.inUse
	if _, err := b.Record(func() error {
		n, err := b.LayerNorm(x, 1e-6)
		if err != nil {
			return err
		}
		defer n.Free()
		_, err = b.Linear(n, w1, backend.ActGELUTanh, x) // GELU with an accumulator: rejected
		return err
	}); err == nil {
		t.Error("a failing recording returned no error")
	} else {
		t.Logf("failing recording: %v", err)
	}
	func() {
		defer func() { recover() }()
		b.Record(func() error {
			n, _ := b.LayerNorm(x, 1e-6)
			defer n.Free()
			panic("a bug in the recorded function")
		})
	}()
	if capturing, _ := b.compute.Capturing(); capturing || b.rec != nil {
		t.Fatal("the compute stream is still capturing")
	}
	if b.pool.inUse != inUse {
		t.Errorf("%d bytes in use after the recordings, %d before", b.pool.inUse, inUse)
	}
	if got := eager(inputs[1], 5); !bytes.Equal(got, eager(inputs[1], 5)) {
		t.Error("ops after a failed recording are not deterministic")
	}

	t.Setenv("VSR_CUDA_GRAPHS", "0")
	if _, err := b.Record(func() error { return nil }); err == nil {
		t.Error("VSR_CUDA_GRAPHS=0 did not turn recording off")
	}
}

// download copies t's storage to the host, bit for bit.
func download(t *testing.T, b *Backend, x backend.Tensor) []byte {
	t.Helper()
	ct, err := b.tensor(x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, ct.shape.Elems()*2)
	if err := b.compute.CopyDtoH(out, ct.ptr()); err != nil {
		t.Fatal(err)
	}
	if err := b.compute.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return out
}
