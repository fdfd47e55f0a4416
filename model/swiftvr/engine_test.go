package swiftvr

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

// drive runs a Session the way the pipeline does (its planned batches in
// order) and returns the output frames as RGB24.
func drive(t *testing.T, e *Session, video []byte, w, h int) []byte {
	t.Helper()
	plan, err := e.Plan(e.frames)
	if err != nil {
		t.Fatal(err)
	}
	maxIn := 0
	for _, n := range plan {
		maxIn = max(maxIn, n)
	}
	bt, err := e.NewBatch(maxIn, w, h, backend.RGB24, backend.RGB24)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Free()
	var out []byte
	read := 0
	for _, n := range plan {
		copy(bt.In(), video[read*w*h*3:(read+n)*w*h*3])
		read += n
		if err := e.Start(context.Background(), bt, n); err != nil {
			t.Fatal(err)
		}
		if err := bt.Wait(); err != nil {
			t.Fatal(err)
		}
		out = append(out, bt.Out()...)
		if got := bt.(*batch).OutFrames() * e.opt.Width * e.opt.Height * 3; got != len(bt.Out()) {
			t.Fatalf("batch says %d bytes, holds %d", got, len(bt.Out()))
		}
	}
	return out
}

func video(n, w, h int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	v := make([]byte, n*w*h*3)
	for i := range v {
		v[i] = byte(r.IntN(256))
	}
	return v
}

// TestSessionFrameCounts: the output has exactly as many frames as the
// input, for lengths around every chunk boundary.
func TestSessionFrameCounts(t *testing.T) {
	r, _ := testReAE(t)
	defer r.Close()
	const w, h = 20, 12 // cropped to 16x8, output 32x16
	for _, f := range []int{1, 2, 5, 24, 26, 27, 28, 29, 30, 52, 53, 361} {
		e, err := NewSession(r, nil, w, h, f, Options{Width: 32, Height: 16, ClipLen: 24})
		if err != nil {
			t.Fatal(err)
		}
		out := drive(t, e, video(f, w, h, uint64(f)), w, h)
		e.Close()
		if got := len(out) / (32 * 16 * 3); got != f || len(out)%(32*16*3) != 0 {
			t.Errorf("%d frames in, %d out", f, got)
		}
	}
}

// TestSessionEqualsWhole: streaming in chunks equals one pass of the ReAE
// over the whole padded video (prepare, pad to 4k+1 and 3 more, encode,
// decode, crop, drop the first 3 decoded frames), bitwise.
func TestSessionEqualsWhole(t *testing.T) {
	r, b := testReAE(t)
	defer r.Close()
	const w, h, ow, oh = 36, 20, 48, 28
	for _, f := range []int{29, 53, 58} {
		v := video(f, w, h, 5)
		e, err := NewSession(r, nil, w, h, f, Options{Width: ow, Height: oh, ClipLen: 8})
		if err != nil {
			t.Fatal(err)
		}
		streamed := drive(t, e, v, w, h)
		e.Close()

		x, _ := b.FromRGB8(v, f, h, w)
		whole, _ := NewSession(r, nil, w, h, f, Options{Width: ow, Height: oh})
		prep, err := whole.prepare(x)
		if err != nil {
			t.Fatal(err)
		}
		lastF, _ := b.Frames(prep, f-1, 1)
		parts := []backend.Tensor{prep}
		for i := 0; i < PaddedFrames(f)-f+3; i++ {
			parts = append(parts, lastF)
		}
		all, _ := b.ConcatFrames(parts...)
		st := r.NewState()
		z, err := r.Encode(all, st)
		if err != nil {
			t.Fatal(err)
		}
		y, _ := r.Decode(z, st)
		crop, _ := b.CropPad(y, oh, ow)
		keep, _ := b.Frames(crop, 3, f)
		want := make([]byte, f*ow*oh*3)
		if err := b.ToRGB8(keep, want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(streamed, want) {
			t.Errorf("%d frames: chunked streaming differs from the whole-video pass", f)
		}
	}
}

func TestSessionErrors(t *testing.T) {
	r, _ := testReAE(t)
	defer r.Close()
	for _, o := range []Options{{Width: 127, Height: 128}, {Width: 128, Height: 128, ClipLen: 6}} {
		if _, err := NewSession(r, nil, 64, 64, 10, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := NewSession(r, nil, 7, 64, 10, Options{Width: 128, Height: 128}); err == nil {
		t.Error("a 7-pixel-wide video accepted")
	}
}

// TestSessionWithDiT restores videos end to end with the tiny checkpoint on
// the CPU (ReAE encode, DiT with its history rule, decode): exactly as many
// frames out as in, the same bytes on a second run, and not the output of
// encode -> decode alone.
func TestSessionWithDiT(t *testing.T) {
	r, dit := tinyModel(t, cpu.New(0))
	const w, h, ow, oh = 40, 24, 64, 32
	for _, c := range []struct{ frames, clip, overlap int }{{1, 8, 0}, {29, 8, 0}, {53, 8, 1}} {
		v := video(c.frames, w, h, 9)
		run := func(d *DiT) []byte {
			e, err := NewSession(r, d, w, h, c.frames, Options{Width: ow, Height: oh, ClipLen: c.clip, DiTOverlap: c.overlap})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			return drive(t, e, v, w, h)
		}
		out := run(dit)
		if got := len(out) / (ow * oh * 3); got != c.frames || len(out)%(ow*oh*3) != 0 {
			t.Errorf("%d frames in, %d out", c.frames, got)
		}
		if !bytes.Equal(run(dit), out) {
			t.Errorf("%d frames: a second run differs", c.frames)
		}
		if bytes.Equal(run(nil), out) {
			t.Errorf("%d frames: the DiT changed nothing", c.frames)
		}
	}
}

// tinyModel loads the tiny synthetic checkpoint's ReAE and DiT onto b.
func tinyModel(t *testing.T, b backend.Backend) (*ReAE, *DiT) {
	t.Helper()
	ck := synthCheckpoint(t, "tiny")
	r, err := NewReAE(b, FileSource{ck.ReAE})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, loadDiT(t, b, ck)
}

// request is one restore: a video and the options it runs with.
type request struct {
	frames, w, h, ow, oh, clip int
	seed                       uint64
}

func (q request) run(t *testing.T, r *ReAE, d *DiT) []byte {
	t.Helper()
	e, err := NewSession(r, d, q.w, q.h, q.frames, Options{Width: q.ow, Height: q.oh, ClipLen: q.clip})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return drive(t, e, video(q.frames, q.w, q.h, q.seed), q.w, q.h)
}

// backToBack checks that requests of different sizes and lengths run one
// after the other on one loaded model give the same bytes as each run in a
// fresh process (a new backend and model): no state leaks between
// requests.
func backToBack(t *testing.T, open func() backend.Backend) {
	reqs := []request{{29, 40, 24, 64, 32, 8, 1}, {13, 56, 40, 96, 64, 24, 2}, {53, 40, 32, 48, 48, 8, 3}}
	b := open()
	r, d := tinyModel(t, b)
	var seq [][]byte
	for _, q := range append(reqs, reqs[0]) {
		seq = append(seq, q.run(t, r, d))
	}
	if !bytes.Equal(seq[0], seq[3]) {
		t.Error("the first request repeated after the others differs")
	}
	for i, q := range reqs {
		b := open()
		r, d := tinyModel(t, b)
		if !bytes.Equal(q.run(t, r, d), seq[i]) {
			t.Errorf("request %d (%+v) differs from the same request alone", i, q)
		}
	}
}

func TestBackToBackRequests(t *testing.T) {
	backToBack(t, func() backend.Backend { return cpu.New(0) })
}

// TestWarmup: a warmup at one size runs the three kinds of chunk and
// leaves nothing behind: a request after it gives the bytes of the same
// request on a fresh model.
func TestWarmup(t *testing.T) { warmupLeavesNothing(t, func() backend.Backend { return cpu.New(0) }) }

func warmupLeavesNothing(t *testing.T, newBackend func() backend.Backend) {
	q := request{29, 40, 24, 64, 32, 8, 1}
	r, d := tinyModel(t, newBackend())
	want := q.run(t, r, d)
	r, d = tinyModel(t, newBackend())
	if err := Warmup(context.Background(), r, d, 64, 32, Options{ClipLen: 8}, backend.YUV420P); err != nil {
		t.Fatal(err)
	}
	shapes, passes, replays := len(d.graphs), d.passes, d.replays
	if !bytes.Equal(q.run(t, r, d), want) {
		t.Error("a request after a warmup differs from the same request on a fresh model")
	}
	// The warmup saw every DiT input shape of the request: nothing new is
	// recorded, and on the GPU every DiT pass is a replay.
	if len(d.graphs) != shapes || shapes < 2 || d.passes == passes {
		t.Errorf("the warmup left %d DiT shapes recorded, the request %d, in %d passes", shapes, len(d.graphs), d.passes-passes)
	}
	if _, gpu := d.b.(backend.Recorder); gpu {
		for k, g := range d.graphs {
			if g == nil {
				t.Errorf("DiT shape %v was not recorded", k.s)
			}
		}
		if d.replays-replays != d.passes-passes {
			t.Errorf("%d of the request's %d DiT passes were replayed", d.replays-replays, d.passes-passes)
		}
	}
	if err := Warmup(context.Background(), r, d, 63, 32, Options{ClipLen: 8}, backend.YUV420P); err == nil {
		t.Error("an odd warmup size was accepted")
	}
}

// TestRequestSettings: a request's TGrowBefore and FrameBatch apply to its
// Session only (a view of the ReAE); the resident ReAE keeps its own.
func TestRequestSettings(t *testing.T) {
	q := request{13, 40, 24, 64, 32, 8, 4}
	r, d := tinyModel(t, cpu.New(0))
	before, fb := false, 0
	e, err := NewSession(r, d, q.w, q.h, q.frames, Options{Width: q.ow, Height: q.oh, ClipLen: q.clip, TGrowBefore: &before, FrameBatch: &fb})
	if err != nil {
		t.Fatal(err)
	}
	if e.r == r || e.r.TGrowBefore || e.r.FrameBatch != 0 {
		t.Errorf("the Session does not work with the request's settings")
	}
	got := drive(t, e, video(q.frames, q.w, q.h, q.seed), q.w, q.h)
	e.Close()
	if !r.TGrowBefore || r.FrameBatch != 1 {
		t.Fatalf("the request changed the resident ReAE: TGrowBefore %v, FrameBatch %d", r.TGrowBefore, r.FrameBatch)
	}
	// (Both orders give the same bytes on the tiny model, as they should.)
	r.TGrowBefore, r.FrameBatch = false, 0
	if !bytes.Equal(q.run(t, r, d), got) {
		t.Error("the request's settings gave another output than the same settings on the ReAE")
	}
}

// TestSizePrecedence: a server's default size applies to requests that set
// neither a size nor a ratio.
func TestSizePrecedence(t *testing.T) {
	m := &resident{def: model.Params{Set: model.Values{"size": model.Size{W: 64, H: 32}}}}
	if p := m.params(model.Params{Set: model.Values{"sr-ratio": 4.0}}); p.Set["size"] != nil {
		t.Errorf("a request's sr_ratio lost to the server's size: %v", p.Set)
	}
	if p := m.params(model.Params{}); p.Set["size"] != (model.Size{W: 64, H: 32}) {
		t.Errorf("a request without size or ratio did not get the server's size: %v", p.Set)
	}
	if p := m.params(model.Params{Set: model.Values{"size": model.Size{W: 32, H: 16}}}); p.Set["size"] != (model.Size{W: 32, H: 16}) {
		t.Errorf("the request's size lost: %v", p.Set)
	}
}

// driveLive runs a live Session as the live pipeline does: whole chunks
// of LiveBatch frames while the stream goes on, then End and the batch of
// the frames left (possibly none).
func driveLive(t *testing.T, e *Session, video []byte, frames, w, h int) []byte {
	t.Helper()
	bt, err := e.NewBatch(max(e.LiveBatch(0), e.LiveBatch(1)), w, h, backend.RGB24, backend.RGB24)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Free()
	var out []byte
	run := func(from, n int) {
		copy(bt.In(), video[from*w*h*3:(from+n)*w*h*3])
		if err := e.Start(context.Background(), bt, n); err != nil {
			t.Fatal(err)
		}
		if err := bt.Wait(); err != nil {
			t.Fatal(err)
		}
		out = append(out, bt.Out()...)
	}
	read := 0
	for i := 0; read+e.LiveBatch(i) <= frames; i++ {
		run(read, e.LiveBatch(i))
		read += e.LiveBatch(i)
	}
	if flush, err := e.End(frames); err != nil || !flush {
		t.Fatal(flush, err)
	}
	run(read, frames-read)
	return out
}

// TestLiveSessionEqualsPlanned: a live session, which learns the video's
// length only at its end, writes the same bytes as one planned for that
// length, for lengths around every chunk boundary (with the DiT).
func TestLiveSessionEqualsPlanned(t *testing.T) {
	r, dit := tinyModel(t, cpu.New(0))
	const w, h, ow, oh = 40, 24, 64, 32
	for _, f := range []int{1, 5, 11, 12, 13, 20, 21, 29, 36} {
		v := video(f, w, h, uint64(f))
		opt := Options{Width: ow, Height: oh, ClipLen: 8, DiTOverlap: 1}
		planned, err := NewSession(r, dit, w, h, f, opt)
		if err != nil {
			t.Fatal(err)
		}
		want := drive(t, planned, v, w, h)
		planned.Close()
		live, err := NewSession(r, dit, w, h, 0, opt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := live.Plan(f); err == nil {
			t.Error("a live session made a plan")
		}
		got := driveLive(t, live, v, f, w, h)
		live.Close()
		if !bytes.Equal(got, want) {
			t.Errorf("%d frames: live %d bytes, planned %d: they differ", f, len(got), len(want))
		}
	}
}

// TestEncodeProxy: with EncodeProxy the output frames are the input
// frames, cropped to a multiple of 8 and resized with bicubic to the
// output size, in order, one for each, for lengths around the chunk
// boundaries, with the DiT running (its output is not what comes out).
func TestEncodeProxy(t *testing.T) {
	be := cpu.New(0)
	r, dit := tinyModel(t, be)
	const w, h, ow, oh = 42, 26, 64, 32
	for _, f := range []int{1, 13, 29} {
		v := video(f, w, h, 3)
		e, err := NewSession(r, dit, w, h, f, Options{Width: ow, Height: oh, ClipLen: 8, EncodeProxy: true})
		if err != nil {
			t.Fatal(err)
		}
		got := drive(t, e, v, w, h)
		e.Close()
		x, _ := be.FromRGB8(v, f, h, w)
		c, _ := be.CropPad(x, h&^7, w&^7)
		y, _ := be.Resize(c, backend.Bicubic, oh, ow, backend.Tile{}, backend.Tile{})
		want := make([]byte, f*ow*oh*3)
		if err := be.ToRGB8(y, want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d frames: the proxy's frames are not the inputs resized", f)
		}
	}
}
