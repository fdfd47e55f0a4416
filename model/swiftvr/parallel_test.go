package swiftvr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

// engine is what the pipeline drives (Session and Parallel both are).
type engine interface {
	Plan(total int) ([]int, error)
	NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error)
	Start(ctx context.Context, b backend.Batch, k int) error
}

// driveBatches runs e as the pipeline does, with depth batches in turn
// (several waves in flight), and returns the output frames as RGB24.
func driveBatches(t *testing.T, e engine, frames int, video []byte, w, h, ow, oh, depth int) ([]byte, error) {
	t.Helper()
	var out []byte
	err := driveEach(t, e, frames, video, w, h, ow, oh, depth, func(f []byte) { out = append(out, f...) })
	return out, err
}

// driveEach is driveBatches passing each output frame to sink.
func driveEach(t *testing.T, e engine, frames int, video []byte, w, h, ow, oh, depth int, sink func([]byte)) error {
	t.Helper()
	plan, err := e.Plan(frames)
	if err != nil {
		return err
	}
	maxIn := 0
	for _, n := range plan {
		maxIn = max(maxIn, n)
	}
	var bs []backend.Batch
	for range depth {
		b, err := e.NewBatch(maxIn, w, h, backend.RGB24, backend.RGB24)
		if err != nil {
			return err
		}
		defer b.Free()
		bs = append(bs, b)
	}
	fs := ow * oh * 3
	collect := func(b backend.Batch) error {
		if err := b.Wait(); err != nil {
			return err
		}
		n := b.(model.OutCounter).OutFrames()
		for k := range n {
			if fo, ok := b.(model.FrameOuter); ok {
				sink(fo.OutFrame(k))
			} else {
				sink(b.Out()[k*fs : (k+1)*fs])
			}
		}
		return nil
	}
	read := 0
	for i, n := range plan {
		b := bs[i%depth]
		if i >= depth {
			if err := collect(b); err != nil {
				return err
			}
		}
		copy(b.In(), video[read*w*h*3:(read+n)*w*h*3])
		read += n
		if err := e.Start(context.Background(), b, n); err != nil {
			return err
		}
	}
	for i := max(0, len(plan)-depth); i < len(plan); i++ {
		if err := collect(bs[i%depth]); err != nil {
			return err
		}
	}
	return nil
}

// TestParallelEqualsOneRank: 2, 3 and 4 ranks on the CPU give bitwise the
// output of one Session, for a video of one chunk, of exactly P chunks, of
// more chunks than ranks with idle ranks in the last wave, with a last
// chunk made only of padding, with DiT history (dit_overlap) and with
// other frame batches and TemporalGrow orders.
func TestParallelEqualsOneRank(t *testing.T) {
	const w, h, ow, oh = 40, 24, 64, 32
	type tc struct {
		ranks, frames, overlap int
		fb                     int
		after                  bool
	}
	cases := []tc{
		{2, 5, 0, 1, false},  // one chunk
		{2, 17, 0, 1, false}, // 2 chunks
		{3, 25, 0, 1, false}, // 3 chunks
		{4, 33, 0, 1, false}, // 4 chunks
		{3, 41, 0, 1, false}, // 5 chunks: rank 2 idle in the last wave
		{2, 20, 0, 1, false}, // the last chunk is padding only
		{3, 53, 1, 1, false}, // middle chunks take a history latent
		{2, 41, 0, 0, false}, // whole-chunk passes
		{3, 41, 0, 2, true},  // two frames a pass, TemporalGrow after its upsample
	}
	var models []Replica
	for range 4 {
		r, d := tinyModel(t, cpu.New(1))
		models = append(models, Replica{R: r, DiT: d})
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d ranks, %d frames, overlap %d, batch %d, after %v", c.ranks, c.frames, c.overlap, c.fb, c.after), func(t *testing.T) {
			before := !c.after
			fb := c.fb
			opt := Options{Width: ow, Height: oh, ClipLen: 8, DiTOverlap: c.overlap, FrameBatch: &fb, TGrowBefore: &before}
			v := video(c.frames, w, h, uint64(c.frames))
			s, err := NewSession(models[0].R, models[0].DiT, w, h, c.frames, opt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := driveBatches(t, s, c.frames, v, w, h, ow, oh, 1)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewParallel(models[:c.ranks], w, h, c.frames, opt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := driveBatches(t, p, c.frames, v, w, h, ow, oh, 3)
			stats := p.Exchanged()
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) || len(want) != c.frames*ow*oh*3 {
				t.Fatalf("%d output bytes, one rank %d, want %d frames", len(got), len(want), c.frames)
			}
			if !bytes.Equal(got, want) {
				for k := range c.frames {
					if !bytes.Equal(got[k*ow*oh*3:(k+1)*ow*oh*3], want[k*ow*oh*3:(k+1)*ow*oh*3]) {
						t.Fatalf("frame %d differs from one rank's", k)
					}
				}
			}
			// Every chunk after the first took 18 MemBlock states (9 in the
			// encoder, 9 in the decoder) from its predecessor.
			chunks, _ := PlanChunks(c.frames, 8)
			var sent int64
			for _, st := range stats {
				sent += st.Sent
			}
			if min := int64(18 * (len(chunks) - 1)); sent < min {
				t.Errorf("%d messages for %d chunks, want at least %d", sent, len(chunks), min)
			}
		})
	}
}

// failing is a backend whose convolutions fail after a number of calls.
type failing struct {
	backend.Backend
	left atomic.Int64
}

func (f *failing) Conv2D(x backend.Tensor, w backend.Weights, p backend.ConvParams, act backend.Activation) (backend.Tensor, error) {
	if f.left.Add(-1) < 0 {
		return nil, errors.New("injected failure")
	}
	return f.Backend.Conv2D(x, w, p, act)
}

// TestParallelFailure: a failure on one rank stops every rank (none waits
// forever for an exchange), the wave reports it, and Close returns.
func TestParallelFailure(t *testing.T) {
	const w, h, ow, oh = 40, 24, 64, 32
	bad := &failing{Backend: cpu.New(1)}
	bad.left.Store(1 << 40)
	ck := synthCheckpoint(t, "tiny")
	var ranks []Replica // encode -> decode only: the wrapper hides the DiT's ops
	for _, b := range []backend.Backend{cpu.New(1), bad, cpu.New(1)} {
		r, err := NewReAE(b, FileSource{ck.ReAE})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		ranks = append(ranks, Replica{R: r})
	}
	bad.left.Store(40) // in the middle of rank 1's first chunk
	p, err := NewParallel(ranks, w, h, 41, Options{Width: ow, Height: oh, ClipLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := driveBatches(t, p, 41, video(41, w, h, 1), w, h, ow, oh, 2)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("got %v, want rank 1's injected failure", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the ranks did not stop after one failed")
	}
	p.Close()
	if _, err := NewParallel(ranks[:1], w, h, 41, Options{Width: ow, Height: oh, ClipLen: 8}); err == nil {
		t.Error("a group of one rank was accepted")
	}
}

// TestSequenceEqualsOneRank: sequence parallelism on the CPU (each chunk
// on a group of ranks: the ReAE in height bands with halo exchanges, the
// DiT split by tokens and heads) gives bitwise the output of one Session:
// one group of 2 (the tiny DiT has 2 heads), 2 groups of 2 (chunk and
// sequence parallelism composed, with DiT history), and the ReAE alone in
// 3 uneven bands and in 4 bands of one latent row each, whole-chunk passes.
func TestSequenceEqualsOneRank(t *testing.T) {
	const w, h = 40, 24
	cases := []struct {
		ranks, seq, frames, overlap, fb int
		ow, oh                          int
		dit                             bool
	}{
		{2, 2, 41, 0, 1, 64, 64, true},
		{4, 2, 41, 1, 1, 64, 64, true},
		{3, 3, 33, 0, 0, 64, 48, false},
		{4, 4, 17, 0, 1, 48, 64, false},
	}
	var models []Replica
	for range 4 {
		r, d := tinyModel(t, cpu.New(1))
		models = append(models, Replica{R: r, DiT: d})
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d ranks in groups of %d, %d frames to %dx%d, DiT %v", c.ranks, c.seq, c.frames, c.ow, c.oh, c.dit), func(t *testing.T) {
			fb := c.fb
			opt := Options{Width: c.ow, Height: c.oh, ClipLen: 8, DiTOverlap: c.overlap, FrameBatch: &fb}
			ranks := append([]Replica(nil), models[:c.ranks]...)
			if !c.dit {
				for i := range ranks {
					ranks[i].DiT = nil
				}
			}
			v := video(c.frames, w, h, uint64(c.frames))
			s, err := NewSession(ranks[0].R, ranks[0].DiT, w, h, c.frames, opt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := driveBatches(t, s, c.frames, v, w, h, c.ow, c.oh, 1)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			opt.Sequence = c.seq
			p, err := NewParallel(ranks, w, h, c.frames, opt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := driveBatches(t, p, c.frames, v, w, h, c.ow, c.oh, 2)
			stats := p.Exchanged()
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) || len(want) != c.frames*c.ow*c.oh*3 {
				t.Fatalf("%d output bytes, one rank %d, want %d frames", len(got), len(want), c.frames)
			}
			fs := c.ow * c.oh * 3
			for k := range c.frames {
				if !bytes.Equal(got[k*fs:(k+1)*fs], want[k*fs:(k+1)*fs]) {
					t.Fatalf("frame %d differs from one rank's", k)
				}
			}
			for r, st := range stats {
				if st.Sent == 0 {
					t.Errorf("rank %d exchanged nothing", r)
				}
			}
		})
	}
}

// TestSequenceRefusals: groups that do not divide the ranks, the DiT's
// heads or the latent rows are refused before anything runs.
func TestSequenceRefusals(t *testing.T) {
	var ranks []Replica
	for range 3 {
		r, d := tinyModel(t, cpu.New(1))
		ranks = append(ranks, Replica{R: r, DiT: d})
	}
	for _, c := range []struct {
		n, seq, oh int
		want       string
	}{
		{3, 2, 64, "3 ranks do not make chunk groups of 2"},
		{3, 3, 64, "the DiT's 2 heads do not split over 3 sequence-parallel ranks"},
		{3, 3, 16, "2 latent rows (output height 16) do not make 3 height bands"},
	} {
		rs := ranks[:c.n]
		if c.oh == 16 { // the ReAE alone: the heads allow any group
			rs = []Replica{{R: ranks[0].R}, {R: ranks[1].R}, {R: ranks[2].R}}
		}
		_, err := NewParallel(rs, 40, 24, 17, Options{Width: 64, Height: c.oh, ClipLen: 8, Sequence: c.seq})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d ranks in groups of %d: got %v, want %q", c.n, c.seq, err, c.want)
		}
	}
}

// TestReAEBands: a Session's ReAE in 2, 3, 4 and 5 height bands run one
// after another (--reae-bands) gives bitwise the output of whole frames on
// the CPU, on frames tall enough (40 latent rows) that every band leaves
// rows out of reach, over two chunks (the bands' causal states), with the
// DiT between.
func TestReAEBands(t *testing.T) {
	const w, h, ow, oh, frames = 8, 160, 32, 640, 17
	r, d := tinyModel(t, cpu.New(1))
	if enc, dec := r.reach(); enc != 18 || dec != 18 {
		t.Errorf("reach %d and %d latent rows, want 18 and 18 (walked by hand from the layers)", enc, dec)
	}
	v := video(frames, w, h, 3)
	run := func(bands int) []byte {
		s, err := NewSession(r, d, w, h, frames, Options{Width: ow, Height: oh, ClipLen: 8, Bands: bands})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out, err := driveBatches(t, s, frames, v, w, h, ow, oh, 1)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := run(1)
	for _, n := range []int{2, 3, 4, 5} {
		if !bytes.Equal(run(n), want) {
			t.Errorf("%d bands give other frames than whole ones", n)
		}
	}
	if _, err := NewSession(r, d, w, h, frames, Options{Width: ow, Height: 64, ClipLen: 8, Bands: 5}); err == nil ||
		err.Error() != "--reae-bands 5: the output's 4 latent rows (height 64) make at most 4 bands" {
		t.Errorf("got %v", err)
	}
}

// memGPU is a CPU backend that says it is a GPU with avail bytes free.
type memGPU struct {
	backend.Backend
	avail int64
}

func (g memGPU) UUID() (string, error)     { return "GPU-test", nil }
func (g memGPU) DeviceName() string        { return "test GPU" }
func (g memGPU) StorageType() string       { return "bf16" }
func (g memGPU) PeakBytes() int64          { return 0 }
func (g memGPU) ResetPeak()                {}
func (g memGPU) Available() (int64, error) { return g.avail, nil }
func (g memGPU) Spans() []backend.Span     { return nil }

// TestAutoBands: --reae-bands 0 keeps whole frames where the working set
// (bytesPerPixel per output pixel and latent of a pass) fits 3/4 of the
// memory available, and otherwise takes the fewest bands whose own
// working set, reach included, fits.
func TestAutoBands(t *testing.T) {
	r, _ := tinyModel(t, cpu.New(1))
	fb := 1
	opt := Options{Width: 7680, Height: 4320, ClipLen: 24, FrameBatch: &fb}
	whole := int64(bytesPerPixel) * 7680 * 4320 // 270 latent rows of 16 pixels
	for _, c := range []struct {
		avail int64
		want  int
	}{
		{whole * 2, 1},
		{whole, 2},          // 3/4 of it holds 135+36 of 270 rows
		{whole / 2, 5},      // 54+36 = 90 rows: a third
		{whole / 1000, 270}, // nothing fits: one band per latent row
	} {
		r.b = memGPU{Backend: cpu.New(1), avail: c.avail}
		if got := autoBands(r, opt.Width, opt.Height, opt); got != c.want {
			t.Errorf("%d bytes available: %d bands, want %d", c.avail, got, c.want)
		}
	}
	r.b = cpu.New(1)
	if got := autoBands(r, opt.Width, opt.Height, opt); got != 1 {
		t.Errorf("on the CPU: %d bands, want 1", got)
	}
}
