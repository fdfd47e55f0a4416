package swiftvr

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/vsr-dev/vsr/backend"
)

// Options configure one restore request.
type Options struct {
	// Width and Height are the output size (even; see OutputSize).
	Width, Height int
	// ClipLen is the chunk length in frames (a multiple of 4; default 24).
	ClipLen int
	// DiTOverlap is the number of previous latents prepended to middle
	// chunks for the DiT.
	DiTOverlap int
	// TGrowBefore and FrameBatch, when set, replace the ReAE's settings
	// of those names for this request only: the Session works on a view of
	// the resident ReAE (the same weights), which no request changes.
	TGrowBefore *bool
	FrameBatch  *int
	// Sequence is the number of ranks of a NewParallel group that run
	// each chunk together (sequence parallelism: the DiT split by tokens
	// and heads, the ReAE by height bands); the group's ranks form
	// len/Sequence chunk groups that run chunks side by side. 0 or 1: each
	// chunk on one rank (chunk parallelism).
	Sequence int
	// Bands runs a Session's ReAE in this many height bands, one after
	// another, for frames whose autoencoder does not fit at once (see
	// encodeBands). 0 or 1: whole frames.
	Bands int
	// AutoBands says that Bands was chosen for the memory the device had
	// free (--reae-bands 0), not asked for: a Session that loads a state
	// then takes the state's bands instead (LoadState), so that it runs as
	// the run that saved the state did.
	AutoBands bool
	// EncodeProxy hands back, for each output frame, its input frame
	// resized with bicubic to the output size, after all of the model's
	// work on the chunk: a benchmark's stand-in for trained weights'
	// output, which the encoders find as costly as natural video (random
	// weights give noise).
	EncodeProxy bool
}

// Session streams one video through SwiftVR chunk by chunk (ReAE encode,
// DiT, ReAE decode), keeping the causal state between chunks: the ReAE's
// boundary frames and the previous chunk's latents for the DiT's history.
// It is a pipeline engine that takes frames in its own batch sizes (one
// batch per chunk). A Session serves one request: make a new one per
// video, so no state leaks between requests. It saves that state after a
// batch and a new Session loads it to resume there (model.Resumer; what
// the state holds: resume.go).
type Session struct {
	r      *ReAE
	dit    *DiT // nil: encode -> decode only
	opt    Options
	frames int // frames of the video
	inW    int
	inH    int
	chunks []Chunk
	next   int // next chunk to run
	state  *State
	bands  []int          // latent row bounds of the ReAE's bands (nil: whole frames)
	bandSt []*State       // each band's causal state
	last   backend.Tensor // the video's last real frame, prepared (for padding)
	hist   backend.Tensor // the previous chunk's input latents (DiT history)
	// live: a stream whose length is not known yet (frames 0 at
	// NewSession); its chunks are made one batch at a time until End.
	live bool
	// proxy holds, with EncodeProxy, the input frames from proxyFrom on
	// that output frames are still to be made of.
	proxy     []backend.Tensor
	proxyFrom int
}

// liveFrames stands for the length of a live stream until it ends: every
// chunk is then whole.
const liveFrames = 1 << 40

// NewSession prepares a request for a video of frames frames of inW x inH
// (0: a live stream, whose length End gives when it is known). With dit
// nil, chunks are encoded and decoded only (the diagnostic --dit off).
func NewSession(r *ReAE, dit *DiT, inW, inH, frames int, opt Options) (*Session, error) {
	if dit != nil && dit.b != r.b {
		return nil, errors.New("swiftvr: the ReAE and the DiT are on different devices")
	}
	if opt.ClipLen == 0 {
		opt.ClipLen = 24
	}
	if opt.Width <= 0 || opt.Height <= 0 || opt.Width%2 != 0 || opt.Height%2 != 0 {
		return nil, fmt.Errorf("output size %dx%d: want positive even numbers", opt.Width, opt.Height)
	}
	if inW&^7 == 0 || inH&^7 == 0 {
		return nil, fmt.Errorf("a %dx%d video is too small for SwiftVR (it needs at least 8x8)", inW, inH)
	}
	live := frames == 0
	var cs []Chunk
	if live {
		if opt.ClipLen <= 0 || opt.ClipLen%4 != 0 {
			return nil, fmt.Errorf("--clip-len %d: want a positive multiple of 4", opt.ClipLen)
		}
		frames = liveFrames
	} else {
		var err error
		if cs, err = PlanChunks(frames, opt.ClipLen); err != nil {
			return nil, err
		}
	}
	if opt.TGrowBefore != nil || opt.FrameBatch != nil {
		view := *r
		if opt.TGrowBefore != nil {
			view.TGrowBefore = *opt.TGrowBefore
		}
		if opt.FrameBatch != nil {
			view.FrameBatch = *opt.FrameBatch
		}
		r = &view
	}
	e := &Session{r: r, dit: dit, opt: opt, frames: frames, inW: inW, inH: inH, chunks: cs, state: r.NewState(), live: live}
	if err := e.setBands(opt.Bands); err != nil {
		return nil, err
	}
	return e, nil
}

// latentRows is the number of latent rows of an output of height h.
func latentRows(h int) int { return (h + 31) &^ 31 / 16 }

// setBands makes the session run its ReAE in n height bands (0 or 1: whole
// frames), each band with a new causal state.
func (e *Session) setBands(n int) error {
	if rows := latentRows(e.opt.Height); n > rows {
		return fmt.Errorf("--reae-bands %d: the output's %d latent rows (height %d) make at most %d bands", n, rows, e.opt.Height, rows)
	}
	for _, st := range e.bandSt {
		st.Free()
	}
	e.opt.Bands, e.bands, e.bandSt = n, nil, nil
	if n > 1 {
		e.bands = bandRows(latentRows(e.opt.Height), n)
		for range n {
			e.bandSt = append(e.bandSt, e.r.NewState())
		}
	}
	return nil
}

// Close frees the request's state.
func (e *Session) Close() {
	for _, t := range e.proxy {
		t.Free()
	}
	e.state.Free()
	for _, st := range e.bandSt {
		st.Free()
	}
	for _, t := range []*backend.Tensor{&e.last, &e.hist} {
		if *t != nil {
			(*t).Free()
			*t = nil
		}
	}
}

// OutputSize returns the output size.
func (e *Session) OutputSize(w, h int) (int, int) { return e.opt.Width, e.opt.Height }

// Plan returns the input frames of each batch: one batch per chunk, with
// chunks made only of padding folded into the batch before them.
func (e *Session) Plan(total int) ([]int, error) {
	if e.live || total != e.frames {
		return nil, fmt.Errorf("swiftvr: planned for %d frames, asked for %d", e.frames, total)
	}
	var plan []int
	for _, ids := range batches(e.chunks, e.frames, 1) {
		plan = append(plan, batchFrames(e.chunks, ids, e.frames))
	}
	return plan, nil
}

// LiveBatch is the input frames of batch i of a live stream: a chunk,
// the first of ClipLen+4 frames, the others of ClipLen.
func (e *Session) LiveBatch(i int) int {
	if i == 0 {
		return e.opt.ClipLen + 4
	}
	return e.opt.ClipLen
}

// End tells a live session that its stream has total frames: the chunks
// still to run are those of a video of that length, and the next batch
// (holding the frames after the chunks run so far, possibly none) ends
// the output: it always runs (flush), to write the frames the decoder's
// lag holds back.
func (e *Session) End(total int) (flush bool, err error) {
	if !e.live {
		return false, errors.New("swiftvr: End of a session that is not live")
	}
	cs, err := PlanChunks(total, e.opt.ClipLen)
	if err != nil {
		return false, err
	}
	if len(cs) < e.next || !slices.Equal(cs[:e.next], e.chunks[:e.next]) {
		return false, fmt.Errorf("swiftvr: a stream of %d frames after %d whole chunks", total, e.next)
	}
	e.chunks, e.frames, e.live = cs, total, false
	return true, nil
}

// maxOut bounds the output frames of one batch: a chunk writes its frames
// less the 3 its decoder lags by, plus the 3 the chunk before it held
// back, and a chunk made only of padding writes into the batch before it.
// ClipLen+4 is the most any batch writes (TestMaxOut tries every video
// length up to 200 frames; the bound is reached).
func (e *Session) maxOut() int { return e.opt.ClipLen + 4 }

// batch is a Slot with the format its frames leave in.
type batch struct {
	backend.Slot
	in, f  backend.PixelFormat
	frames int // output frames after the last Start
}

// OutFrames is the number of output frames the batch holds.
func (b *batch) OutFrames() int { return b.frames }

// NewBatch allocates staging for up to n input frames in format in (RGB24
// or RGB48) and the outputs, in format f, of the chunks they complete.
func (e *Session) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	if err := f.CheckSize(e.opt.Width, e.opt.Height); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	s, err := backend.NewSlot(e.r.b, n*in.FrameBytes(w, h), e.maxOut()*f.FrameBytes(e.opt.Width, e.opt.Height))
	if err != nil {
		return nil, err
	}
	return &batch{Slot: s, in: in, f: f}, nil
}

// Start runs the chunk(s) whose frames end in this batch: prepare the
// frames (crop to a multiple of 8, bilinear resize to the output size, pad
// to a multiple of 32), encode, decode, crop, and queue the output frames.
func (e *Session) Start(ctx context.Context, bt backend.Batch, k int) error {
	bb, ok := bt.(*batch)
	if !ok {
		return fmt.Errorf("swiftvr: batch %T was not made by this runner", bt)
	}
	if e.live { // the stream goes on: this batch is one whole chunk
		start := 0
		if n := len(e.chunks); n > 0 {
			start = e.chunks[n-1].Start + e.chunks[n-1].N
		}
		if k != e.LiveBatch(len(e.chunks)) {
			return fmt.Errorf("swiftvr: a live batch of %d frames, want %d", k, e.LiveBatch(len(e.chunks)))
		}
		e.chunks = append(e.chunks, Chunk{Index: len(e.chunks), Start: start, N: k})
	}
	if e.next >= len(e.chunks) {
		return fmt.Errorf("swiftvr: more batches than chunks")
	}
	var frames backend.Tensor
	if k > 0 { // none: the stream ended with the last batch
		var err error
		if frames, err = bb.Input(k, e.inH, e.inW, bb.in); err != nil {
			return err
		}
		defer frames.Free()
	}
	// Run this batch's chunk, then any chunk of padding only after it; the
	// decoded frames go into the batch's output as they come.
	out := 0
	put := func(y backend.Tensor) error {
		if out+y.Shape().N > e.maxOut() {
			return fmt.Errorf("swiftvr: more than %d output frames in one batch", e.maxOut())
		}
		err := bb.Put(y, bb.f, out)
		out += y.Shape().N
		return err
	}
	used := 0
	for e.next < len(e.chunks) {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := e.chunks[e.next]
		n := c.realFrames(e.frames)
		if n > 0 && used > 0 {
			break
		}
		if err := e.chunk(c, frames, used, n, put); err != nil {
			return err
		}
		used += n
		e.next++
	}
	bb.frames = out
	_, err := bb.Send(out, e.opt.Width, e.opt.Height, bb.f)
	return err
}

// prepare turns input frames into the model's input: crop to a multiple
// of 8, resize to the output size, pad to a multiple of 32. The encoder
// calls it on a few frames at a time.
func (e *Session) prepare(x backend.Tensor) (backend.Tensor, error) {
	return prepare(e.r.b, x, e.inW, e.inH, e.opt)
}

func prepare(b backend.Backend, x backend.Tensor, inW, inH int, opt Options) (backend.Tensor, error) {
	c, err := b.CropPad(x, inH&^7, inW&^7)
	if err != nil {
		return nil, err
	}
	r, err := b.Resize(c, backend.Bilinear, opt.Height, opt.Width, backend.Tile{}, backend.Tile{})
	c.Free()
	if err != nil {
		return nil, err
	}
	p, err := b.CropPad(r, (opt.Height+31)&^31, (opt.Width+31)&^31)
	r.Free()
	return p, err
}

// chunk encodes and decodes chunk c, whose first n real frames are frames
// [from, from+n) of x, padded with the video's last frame, and passes its
// output frames to put in order.
func (e *Session) chunk(c Chunk, x backend.Tensor, from, n int, put func(backend.Tensor) error) error {
	b := e.r.b
	var parts []backend.Tensor
	defer func() {
		for _, p := range parts {
			p.Free()
		}
	}()
	if n > 0 {
		p, err := b.Frames(x, from, n)
		if err != nil {
			return err
		}
		parts = append(parts, p)
		if c.Start+n == e.frames || e.live { // the video's last frame (so far): keep it for padding
			if e.last != nil {
				e.last.Free()
			}
			if e.last, err = b.Frames(p, n-1, 1); err != nil {
				return err
			}
		}
	}
	pad := c.N - n
	if c.Last {
		pad += 3 // the encoder sees 3 more copies of the final frame
	}
	for i := 0; i < pad; i++ {
		if e.last == nil {
			return fmt.Errorf("swiftvr: padding chunk %d before the last frame was seen", c.Index)
		}
		p, err := b.Frames(e.last, 0, 1)
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	in, err := b.ConcatFrames(parts...)
	if err != nil {
		return err
	}
	var z backend.Tensor
	if e.bands != nil {
		z, err = e.encodeBands(in)
	} else {
		z, err = e.r.EncodeFrom(in, e.state, e.prepare)
	}
	in.Free()
	if err != nil {
		return err
	}
	if e.dit != nil {
		restored, err := e.restore(c, z)
		z.Free()
		if err != nil {
			return err
		}
		z = restored
	}
	defer z.Free()
	lo, hi := c.OutputRange(e.frames)
	if hi <= lo {
		return fmt.Errorf("swiftvr: chunk %d writes no frames", c.Index)
	}
	emit := func(y backend.Tensor, _ int) error {
		crop, err := b.CropPad(y, e.opt.Height, e.opt.Width)
		if err != nil {
			return err
		}
		defer crop.Free()
		return put(crop)
	}
	if e.opt.EncodeProxy {
		if err := e.keepProxy(x, from, n); err != nil {
			return err
		}
		out := lo
		emit = func(y backend.Tensor, _ int) error {
			for range y.Shape().N {
				if err := e.putProxy(out, put); err != nil {
					return err
				}
				out++
			}
			return nil
		}
	}
	if e.bands != nil {
		y, err := e.decodeBands(z, lo-(c.Start-3), hi-lo)
		if err != nil {
			return err
		}
		defer y.Free()
		return emit(y, 0)
	}
	return e.r.DecodeTo(z, e.state, lo-(c.Start-3), hi-lo, emit)
}

// keepProxy keeps the input frames [from, from+n) of x, a chunk's real
// frames, for EncodeProxy: output frames are only ever real frames.
func (e *Session) keepProxy(x backend.Tensor, from, n int) error {
	for i := range n {
		f, err := e.r.b.Frames(x, from+i, 1)
		if err != nil {
			return err
		}
		e.proxy = append(e.proxy, f)
	}
	return nil
}

// putProxy passes output frame j as its input frame, cropped to a multiple
// of 8 and resized with bicubic to the output size, and frees the input
// frames before it.
func (e *Session) putProxy(j int, put func(backend.Tensor) error) error {
	b := e.r.b
	for e.proxyFrom < j && len(e.proxy) > 1 {
		e.proxy[0].Free()
		e.proxy, e.proxyFrom = e.proxy[1:], e.proxyFrom+1
	}
	if len(e.proxy) == 0 || j < e.proxyFrom {
		return fmt.Errorf("swiftvr: output frame %d has no input frame for the encode proxy", j)
	}
	c, err := b.CropPad(e.proxy[min(j-e.proxyFrom, len(e.proxy)-1)], e.inH&^7, e.inW&^7)
	if err != nil {
		return err
	}
	defer c.Free()
	r, err := b.Resize(c, backend.Bicubic, e.opt.Height, e.opt.Width, backend.Tile{}, backend.Tile{})
	if err != nil {
		return err
	}
	defer r.Free()
	return put(r)
}

// restore runs the DiT on chunk c's latents z with its history (see
// DiTInput) and returns the restored latents z - v. It keeps z as the
// next chunk's history.
func (e *Session) restore(c Chunk, z backend.Tensor) (backend.Tensor, error) {
	b := e.r.b
	out, err := denoise(b, e.dit, nil, c, c.DiTInput(e.opt.ClipLen, e.opt.DiTOverlap), z, e.hist)
	if err != nil {
		return nil, err
	}
	hist, err := b.Frames(z, 0, z.Shape().N)
	if err != nil {
		out.Free()
		return nil, err
	}
	if e.hist != nil {
		e.hist.Free()
	}
	e.hist = hist
	return out, nil
}

// denoise runs the DiT (on a rank of sh; nil: alone) on chunk c's latents
// z after plan's prefix, taken from hist (the previous chunk's latents;
// nil: there is none), and returns the restored latents z - v.
func denoise(b backend.Backend, dit *DiT, sh *Shard, c Chunk, plan DiTInput, z, hist backend.Tensor) (backend.Tensor, error) {
	var sc scratch
	defer sc.free()
	in := z
	if plan.Prefix > 0 {
		s := z.Shape()
		var prefix backend.Tensor
		var err error
		switch {
		case plan.ZeroPrefix || hist == nil:
			s.N = plan.Prefix
			prefix, err = sc.add(b.Upload(s, make([]float32, s.Elems())))
		case hist.Shape().N < plan.Prefix:
			return nil, fmt.Errorf("swiftvr: chunk %d needs %d history latents, has %d", c.Index, plan.Prefix, hist.Shape().N)
		default:
			prefix, err = sc.add(b.Frames(hist, hist.Shape().N-plan.Prefix, plan.Prefix))
		}
		if err != nil {
			return nil, err
		}
		if in, err = sc.add(b.ConcatFrames(prefix, z)); err != nil {
			return nil, err
		}
	}
	v, err := sc.add(dit.ForwardShard(in, plan.Offset, sh))
	if err != nil {
		return nil, err
	}
	if plan.Prefix > 0 {
		if v, err = sc.add(b.Frames(v, plan.Prefix, z.Shape().N)); err != nil {
			return nil, err
		}
	}
	return b.Binary(backend.OpSub, z, v)
}

// Warmup runs a synthetic request of a first, a middle and a last chunk at
// output size w x h (from input frames of that size) through r and dit
// (nil: encode -> decode only), so that kernels are compiled and
// convolution algorithms and GEMM plans are chosen for those shapes before
// the first real request, with opt's settings (its size is w x h). It
// leaves no state behind: each request has its own Session.
func Warmup(ctx context.Context, r *ReAE, dit *DiT, w, h int, opt Options, f backend.PixelFormat) error {
	if opt.ClipLen == 0 {
		opt.ClipLen = 24
	}
	frames := 3*opt.ClipLen + 1
	opt.Width, opt.Height = w, h
	e, err := NewSession(r, dit, w, h, frames, opt)
	if err != nil {
		return fmt.Errorf("warmup at %dx%d: %w", w, h, err)
	}
	defer e.Close()
	plan, err := e.Plan(frames)
	if err != nil {
		return err
	}
	b, err := e.NewBatch(slices.Max(plan), w, h, backend.RGB24, f)
	if err != nil {
		return fmt.Errorf("warmup at %dx%d: %w", w, h, err)
	}
	defer b.Free()
	in := b.In()
	for i := range in {
		in[i] = byte(i * 7)
	}
	for _, n := range plan {
		if err := e.Start(ctx, b, n); err != nil {
			return fmt.Errorf("warmup at %dx%d: %w", w, h, err)
		}
		if err := b.Wait(); err != nil {
			return err
		}
	}
	return nil
}
