package swiftvr

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// mapSource is an in-memory checkpoint.
type mapSource map[string]struct {
	shape []int
	data  []float32
}

func (m mapSource) Tensor(name string) ([]int, []float32, error) {
	t, ok := m[name]
	if !ok {
		return nil, nil, fmt.Errorf("no tensor %q", name)
	}
	return t.shape, append([]float32(nil), t.data...), nil // the caller's copy
}

// randomReAE makes ReAE weights with the official key layout and the
// given widths, He-scaled so activations stay in range.
func randomReAE(seed uint64, enc int, dec []int, latent int) mapSource {
	r := rand.New(rand.NewPCG(seed, 7))
	m := mapSource{}
	put := func(name string, shape []int, fanIn int, scale float64) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		std := scale * math.Sqrt(2/float64(fanIn))
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
		m[name] = struct {
			shape []int
			data  []float32
		}{shape, v}
	}
	conv := func(key string, out, in, k int, bias bool, scale float64) {
		put(key+".weight", []int{out, in, k, k}, in*k*k, scale)
		if bias {
			put(key+".bias", []int{out}, 100, 0.5)
		}
	}
	mem := func(key string, c int) {
		conv(key+".conv.0", c, 2*c, 3, true, 1)
		conv(key+".conv.2", c, c, 3, true, 1)
		conv(key+".conv.4", c, c, 3, true, 0.3)
	}
	conv("encoder.0", enc, 12, 3, true, 1)
	for i, base := range []int{2, 7, 12} {
		s := []int{2, 2, 1}[i]
		put(fmt.Sprintf("encoder.%d.conv.weight", base), []int{enc, s * enc, 1, 1}, s*enc, 0.7)
		conv(fmt.Sprintf("encoder.%d", base+1), enc, enc, 3, false, 1)
		for j := 0; j < 3; j++ {
			mem(fmt.Sprintf("encoder.%d", base+2+j), enc)
		}
	}
	conv("encoder.17", latent, enc, 3, true, 1)
	conv("decoder.1", dec[0], latent, 3, true, 1)
	for i, base := range []int{3, 9, 15} {
		c := dec[i]
		for j := 0; j < 3; j++ {
			mem(fmt.Sprintf("decoder.%d", base+j), c)
		}
		if i == 0 {
			put(fmt.Sprintf("decoder.%d.proj.weight", base+4), []int{c, c, 1, 1}, c, 0.7)
		} else {
			put(fmt.Sprintf("decoder.%d.conv3d.weight", base+4), []int{c, c, 3, 1, 1}, 2*c, 0.7)
		}
		conv(fmt.Sprintf("decoder.%d", base+5), dec[i+1], c, 3, false, 1)
	}
	conv("decoder.22", 12, dec[3], 3, true, 0.5)
	return m
}

func testReAE(t testing.TB) (*ReAE, backend.Backend) {
	b := cpu.New(0)
	r, err := NewReAE(b, randomReAE(1, 8, []int{16, 8, 8, 8}, 8))
	if err != nil {
		t.Fatal(err)
	}
	return r, b
}

func randVideo(b backend.Backend, n, h, w int, seed uint64) backend.Tensor {
	r := rand.New(rand.NewPCG(seed, 3))
	rgb := make([]byte, n*h*w*3)
	for i := range rgb {
		rgb[i] = byte(r.IntN(256))
	}
	x, _ := b.FromRGB8(rgb, n, h, w)
	return x
}

func download(t *testing.T, b backend.Backend, x backend.Tensor) []byte {
	t.Helper()
	v, err := b.Download(x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*len(v))
	for i, f := range v {
		bits := math.Float32bits(f)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	return out
}

// roundTrip encodes then decodes frames in chunks of the given sizes,
// carrying the state, and returns all decoded frames.
func roundTrip(t *testing.T, r *ReAE, b backend.Backend, x backend.Tensor, chunks []int) backend.Tensor {
	t.Helper()
	z, y := chunked(t, r, b, x, chunks)
	z.Free()
	return y
}

// chunked is roundTrip returning the latents too, from a fresh state.
func chunked(t *testing.T, r *ReAE, b backend.Backend, x backend.Tensor, chunks []int) (z, y backend.Tensor) {
	t.Helper()
	st := r.NewState()
	defer st.Free()
	var zs, ys []backend.Tensor
	start := 0
	for _, n := range chunks {
		piece, err := b.Frames(x, start, n)
		if err != nil {
			t.Fatal(err)
		}
		zc, err := r.Encode(piece, st)
		if err != nil {
			t.Fatal(err)
		}
		yc, err := r.Decode(zc, st)
		if err != nil {
			t.Fatal(err)
		}
		if zc.Shape().N != n/4 || yc.Shape().N != n {
			t.Fatalf("chunk of %d: %d latents, %d frames", n, zc.Shape().N, yc.Shape().N)
		}
		piece.Free()
		zs, ys = append(zs, zc), append(ys, yc)
		start += n
	}
	z, err := b.ConcatFrames(zs...)
	if err != nil {
		t.Fatal(err)
	}
	if y, err = b.ConcatFrames(ys...); err != nil {
		t.Fatal(err)
	}
	return z, y
}

func TestReAEShapes(t *testing.T) {
	r, b := testReAE(t)
	defer r.Close()
	x := randVideo(b, 8, 32, 48, 1)
	st := r.NewState()
	z, err := r.Encode(x, st)
	if err != nil {
		t.Fatal(err)
	}
	if s := z.Shape(); s != (backend.Shape{N: 2, H: 2, W: 3, C: 8}) {
		t.Fatalf("latents %v", s)
	}
	y, err := r.Decode(z, st)
	if err != nil {
		t.Fatal(err)
	}
	if s := y.Shape(); s != (backend.Shape{N: 8, H: 32, W: 48, C: 3}) {
		t.Fatalf("decoded %v", s)
	}
	v, _ := b.Download(y)
	var mean, sq float64
	for _, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			t.Fatal("non-finite output")
		}
		mean += float64(f)
		sq += float64(f) * float64(f)
	}
	mean /= float64(len(v))
	std := math.Sqrt(sq/float64(len(v)) - mean*mean)
	if std < 1e-3 {
		t.Errorf("output is flat (std %g): weights or layers do nothing", std)
	}
	if len(st.Enc) != 9 || len(st.Dec) != 9 || st.Enc[8] == nil || st.Dec[8] == nil {
		t.Errorf("state: %d/%d boundary frames", len(st.Enc), len(st.Dec))
	}
}

// TestChunkedEqualsWhole: streaming in chunks with the carried boundary
// frames gives bitwise the output of one pass over all frames.
func TestChunkedEqualsWhole(t *testing.T) {
	r, b := testReAE(t)
	defer r.Close()
	x := randVideo(b, 40, 32, 32, 2)
	whole := download(t, b, roundTrip(t, r, b, x, []int{40}))
	for _, chunks := range [][]int{{28, 12}, {8, 8, 8, 16}, {4, 36}} {
		if got := download(t, b, roundTrip(t, r, b, x, chunks)); !bytes.Equal(got, whole) {
			t.Errorf("chunks %v differ from the whole video", chunks)
		}
	}
}

// TestReorderAndBatches: TemporalGrow before or after the upsample and
// any frame batch give bitwise-identical output.
func TestReorderAndBatches(t *testing.T) {
	r, b := testReAE(t)
	defer r.Close()
	x := randVideo(b, 12, 32, 32, 3)
	r.TGrowBefore, r.FrameBatch = false, 0
	ref := download(t, b, roundTrip(t, r, b, x, []int{8, 4}))
	for _, before := range []bool{false, true} {
		for _, fb := range []int{0, 1, 2, 3} {
			r.TGrowBefore, r.FrameBatch = before, fb
			if got := download(t, b, roundTrip(t, r, b, x, []int{8, 4})); !bytes.Equal(got, ref) {
				t.Errorf("tgrow before=%v frame batch %d differs from official order, whole chunk", before, fb)
			}
		}
	}
}

// TestDecodeFrames: decoding only a range of the output frames gives
// bitwise those frames of the whole decode, for any frame batch, and
// leaves the same causal state.
func TestDecodeFrames(t *testing.T) {
	r, b := testReAE(t)
	defer r.Close()
	x := randVideo(b, 12, 32, 32, 4)
	z, err := r.Encode(x, r.NewState())
	if err != nil {
		t.Fatal(err)
	}
	for _, fb := range []int{0, 1, 2} {
		r.FrameBatch = fb
		st := r.NewState()
		whole, err := r.Decode(z, st)
		if err != nil {
			t.Fatal(err)
		}
		next := download(t, b, mustDecode(t, r, z, st))
		for _, c := range [][2]int{{0, 12}, {3, 9}, {0, 7}, {5, 1}, {4, 4}} {
			st2 := r.NewState()
			got, err := r.DecodeFrames(z, st2, c[0], c[1])
			if err != nil {
				t.Fatal(err)
			}
			want, _ := b.Frames(whole, c[0], c[1])
			if !bytes.Equal(download(t, b, got), download(t, b, want)) {
				t.Errorf("frame batch %d: frames [%d, %d) differ from the whole decode", fb, c[0], c[0]+c[1])
			}
			if !bytes.Equal(download(t, b, mustDecode(t, r, z, st2)), next) {
				t.Errorf("frame batch %d: frames [%d, %d) left another causal state", fb, c[0], c[0]+c[1])
			}
			// DecodeTo hands the same frames over in order, a group at a time.
			var parts []backend.Tensor
			err = r.DecodeTo(z, r.NewState(), c[0], c[1], func(y backend.Tensor, at int) error {
				var n int
				for _, p := range parts {
					n += p.Shape().N
				}
				if at != n {
					t.Errorf("frame batch %d: frames handed over at %d after %d", fb, at, n)
				}
				cp, err := b.Frames(y, 0, y.Shape().N)
				parts = append(parts, cp)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if fb > 0 && c[0]/(4*fb) != (c[0]+c[1]-1)/(4*fb) && len(parts) < 2 {
				t.Errorf("frame batch %d: %d frames handed over in %d piece(s)", fb, c[1], len(parts))
			}
			all, _ := b.ConcatFrames(parts...)
			if !bytes.Equal(download(t, b, all), download(t, b, want)) {
				t.Errorf("frame batch %d: DecodeTo frames [%d, %d) differ from the whole decode", fb, c[0], c[0]+c[1])
			}
		}
		for _, c := range [][2]int{{-1, 2}, {10, 3}, {0, 0}} {
			if _, err := r.DecodeFrames(z, r.NewState(), c[0], c[1]); err == nil {
				t.Errorf("frames [%d, %d) of 12 accepted", c[0], c[0]+c[1])
			}
		}
	}
}

func mustDecode(t *testing.T, r *ReAE, z backend.Tensor, st *State) backend.Tensor {
	t.Helper()
	y, err := r.Decode(z, st)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// TestCausalMemory: the MemBlocks carry information forward in time (a
// change in frame 0 reaches frames 4..7, through another latent) and never
// backward (a change in frame 7 leaves frames 0..3 alone).
func TestCausalMemory(t *testing.T) {
	r, b := testReAE(t)
	defer r.Close()
	for _, fb := range []int{0, 1} {
		r.FrameBatch = fb
		base := randVideo(b, 8, 32, 32, 4)
		ref, _ := b.Download(roundTrip(t, r, b, base, []int{4, 4}))
		frame := 32 * 32 * 3
		for _, tc := range []struct {
			changed      int
			same, differ [2]int // frame ranges of the output
		}{{0, [2]int{8, 8}, [2]int{4, 8}}, {7, [2]int{0, 4}, [2]int{4, 8}}} {
			v, _ := b.Download(base)
			for i := tc.changed * frame; i < (tc.changed+1)*frame; i++ {
				v[i] = 1 - v[i]
			}
			x, _ := b.Upload(base.Shape(), v)
			got, _ := b.Download(roundTrip(t, r, b, x, []int{4, 4}))
			same := bytes.Equal(f32bytes(got[tc.same[0]*frame:tc.same[1]*frame]), f32bytes(ref[tc.same[0]*frame:tc.same[1]*frame]))
			differ := !bytes.Equal(f32bytes(got[tc.differ[0]*frame:tc.differ[1]*frame]), f32bytes(ref[tc.differ[0]*frame:tc.differ[1]*frame]))
			if !same || !differ {
				t.Errorf("frame batch %d, input frame %d changed: frames %v unchanged=%v, frames %v changed=%v", fb, tc.changed, tc.same, same, tc.differ, differ)
			}
		}
	}
}

func f32bytes(v []float32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b := math.Float32bits(f)
		out = append(out, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
	}
	return out
}
