package swiftvr

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/parallel"
)

// Rank is SwiftVR resident on one device of a chunk-parallel group: its
// ReAE and its DiT (nil: encode -> decode only).
type Rank struct {
	R   *ReAE
	DiT *DiT
}

// Parallel streams one video through SwiftVR on several ranks at once
// (LightX2V's causal chunk parallelism, ../shared/SWIFTVR.md): chunk i
// runs on rank i mod P, so the ranks work in waves of P chunks. At every
// MemBlock of the encoder and the decoder a chunk hands the last frame of
// that layer's input to the next chunk's rank and takes the previous
// chunk's from the rank before it (the exchange of Carry; the last rank's
// goes to rank 0 for the next wave); after encoding, a chunk whose
// successor's DiT needs history sends it its latents; the DiT runs on each
// rank on its own. Every rank computes exactly what one rank would, so the
// output is bitwise the one of a Session on one device of the same kind.
//
// It is a pipeline engine like Session: one batch per wave, whose output
// frames are the wave's chunks' in order. Each rank is a goroutine locked
// to its OS thread (package parallel); Start hands a wave's chunks to
// their ranks and returns, and the batch's Wait waits for all of them. A
// failure on one rank stops every rank.
type Parallel struct {
	ranks   []Rank
	workers []*parallel.Rank
	tr      *parallel.Local
	opt     Options
	frames  int
	inW     int
	inH     int
	chunks  []Chunk
	waves   [][]int // chunk indices of each batch
	next    int     // next wave
	last    []byte  // the video's last real frame (RGB24), for padding

	ctx    context.Context // cancelled by the first failure or Close
	cancel context.CancelCauseFunc
	jobs   sync.WaitGroup
	links  []func() bool // stop propagating the requests' cancellation
}

// NewParallel prepares a request for a video of frames frames of inW x
// inH on ranks (at least two, all of one device kind and storage type).
func NewParallel(ranks []Rank, inW, inH, frames int, opt Options) (*Parallel, error) {
	if len(ranks) < 2 {
		return nil, fmt.Errorf("swiftvr: chunk parallelism needs at least 2 ranks, not %d", len(ranks))
	}
	devs := make([]backend.Backend, len(ranks))
	views := make([]Rank, len(ranks))
	var cs []Chunk
	for i, rk := range ranks {
		if (rk.DiT == nil) != (ranks[0].DiT == nil) {
			return nil, errors.New("swiftvr: some ranks have the DiT and some do not")
		}
		// NewSession checks the request and makes the rank's view of its
		// ReAE; the session itself is not used.
		s, err := NewSession(rk.R, rk.DiT, inW, inH, frames, opt)
		if err != nil {
			return nil, err
		}
		views[i] = Rank{R: s.r, DiT: rk.DiT}
		opt, cs = s.opt, s.chunks
		s.Close()
		devs[i] = rk.R.b
	}
	e := &Parallel{ranks: views, workers: parallel.NewRanks(len(ranks)), tr: parallel.NewLocal(devs),
		opt: opt, frames: frames, inW: inW, inH: inH, chunks: cs}
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
	// Waves of P chunks; a chunk made only of padding joins the wave
	// before it (a batch needs input frames).
	p := len(ranks)
	for _, c := range cs {
		if c.Index%p == 0 && c.realFrames(frames) > 0 {
			e.waves = append(e.waves, nil)
		}
		e.waves[len(e.waves)-1] = append(e.waves[len(e.waves)-1], c.Index)
	}
	return e, nil
}

// Exchanged returns what each rank sent and waited for so far.
func (e *Parallel) Exchanged() []parallel.Stats { return e.tr.Stats() }

// Close stops every rank and frees the request's state; the batches must
// have been freed.
func (e *Parallel) Close() {
	e.cancel(errors.New("swiftvr: session closed"))
	for _, stop := range e.links {
		stop()
	}
	e.jobs.Wait()
	for i, w := range e.workers {
		w.Do(func() error {
			e.tr.Flush(i, e.ctx.Done())
			return nil
		})
		w.Stop()
	}
}

// OutputSize returns the output size.
func (e *Parallel) OutputSize(w, h int) (int, int) { return e.opt.Width, e.opt.Height }

// Plan returns the input frames of each batch: one batch per wave.
func (e *Parallel) Plan(total int) ([]int, error) {
	if total != e.frames {
		return nil, fmt.Errorf("swiftvr: planned for %d frames, asked for %d", e.frames, total)
	}
	plan := make([]int, len(e.waves))
	for i, w := range e.waves {
		plan[i] = e.realFrames(w)
	}
	return plan, nil
}

// realFrames is how many input frames the chunks ids take from the video.
func (e *Parallel) realFrames(ids []int) int {
	n := 0
	for _, c := range ids {
		n += e.chunks[c].realFrames(e.frames)
	}
	return n
}

// wave is a batch: the host input of a wave's frames and, for each of its
// chunks, the Slot of its rank that holds the chunk's output.
type wave struct {
	e    *Parallel
	in   []byte
	f    backend.PixelFormat
	jobs []*chunkJob
	// slots are the wave's staging on each rank, made on first use by the
	// rank's goroutine: a rank runs one chunk of a wave, two when the last
	// chunk (padding only) joined it.
	mu     sync.Mutex
	slots  map[[2]int]backend.Slot
	waited bool
	err    error
}

// chunkJob is one chunk of a wave on its rank.
type chunkJob struct {
	rank int
	slot backend.Slot
	out  int // output frames
	done chan error
}

// NewBatch allocates the host input for up to n frames; the ranks' staging
// is made when a wave first runs there.
func (e *Parallel) NewBatch(n, w, h int, f backend.PixelFormat) (backend.Batch, error) {
	if f == backend.YUV420P && (e.opt.Width%2 != 0 || e.opt.Height%2 != 0) {
		return nil, fmt.Errorf("yuv420p needs an even output size")
	}
	return &wave{e: e, in: make([]byte, n*w*h*3), f: f, slots: map[[2]int]backend.Slot{}, waited: true}, nil
}

func (w *wave) In() []byte { return w.in }

// OutFrames is the number of output frames the wave holds.
func (w *wave) OutFrames() int {
	n := 0
	for _, j := range w.jobs {
		n += j.out
	}
	return n
}

// OutFrame returns output frame k of the wave (valid after Wait).
func (w *wave) OutFrame(k int) []byte {
	fs := w.f.FrameBytes(w.e.opt.Width, w.e.opt.Height)
	for _, j := range w.jobs {
		if k < j.out {
			return j.slot.Out()[k*fs : (k+1)*fs]
		}
		k -= j.out
	}
	return nil
}

// Out returns a copy of the wave's output frames (OutFrame gives them
// without copying).
func (w *wave) Out() []byte {
	var out []byte
	for k := range w.OutFrames() {
		out = append(out, w.OutFrame(k)...)
	}
	return out
}

// Wait waits for every chunk of the wave and its copies to the host, and
// returns the first failure.
func (w *wave) Wait() error {
	if w.waited {
		return w.err
	}
	w.waited = true
	for _, j := range w.jobs {
		err := <-j.done
		if err == nil {
			err = j.slot.Wait()
		}
		if w.err == nil {
			w.err = err
		}
	}
	return w.err
}

// Free releases the ranks' staging, each on its rank's goroutine.
func (w *wave) Free() {
	w.Wait()
	for k, s := range w.slots {
		if w.e.workers[k[0]].Do(func() error { s.Free(); return nil }) != nil {
			s.Free() // the rank has stopped: nothing else uses its backend
		}
	}
	w.slots = map[[2]int]backend.Slot{}
}

// Start hands the next wave's chunks to their ranks: the first k frames of
// b's input are the wave's real frames.
func (e *Parallel) Start(ctx context.Context, bt backend.Batch, k int) error {
	w, ok := bt.(*wave)
	if !ok || w.e != e {
		return fmt.Errorf("swiftvr: batch %T was not made by this session", bt)
	}
	if e.next >= len(e.waves) {
		return fmt.Errorf("swiftvr: more batches than waves")
	}
	if err := context.Cause(e.ctx); err != nil {
		return err
	}
	ids := e.waves[e.next]
	e.next++
	e.links = append(e.links, context.AfterFunc(ctx, func() { e.cancel(context.Cause(ctx)) }))
	fs := e.inW * e.inH * 3
	if want := e.realFrames(ids); k != want {
		return fmt.Errorf("swiftvr: wave %d has %d input frames, given %d", e.next-1, want, k)
	}
	w.jobs, w.waited, w.err = nil, false, nil
	at, seen := 0, map[int]int{}
	for _, id := range ids {
		c := e.chunks[id]
		n := c.realFrames(e.frames)
		frames := w.in[at*fs : (at+n)*fs]
		at += n
		if n > 0 && c.Start+n == e.frames {
			e.last = append([]byte(nil), frames[(n-1)*fs:]...)
		}
		pad := c.N - n
		if c.Last {
			pad += 3 // the encoder sees 3 more copies of the final frame
		}
		if pad > 0 && e.last == nil {
			return fmt.Errorf("swiftvr: padding chunk %d before the last frame was seen", c.Index)
		}
		rk := id % len(e.ranks)
		key := [2]int{rk, seen[rk]}
		seen[rk]++
		j := &chunkJob{rank: rk, done: make(chan error, 1)}
		w.jobs = append(w.jobs, j)
		last := e.last
		e.jobs.Add(1)
		err := e.workers[rk].Go(func() {
			defer e.jobs.Done()
			err := e.runChunk(w, key, j, c, frames, last, pad)
			if err != nil {
				e.cancel(fmt.Errorf("rank %d (%s), chunk %d: %w", rk, e.ranks[rk].R.b.Name(), c.Index, err))
				err = context.Cause(e.ctx)
			}
			j.done <- err
		})
		if err != nil {
			e.jobs.Done()
			j.done <- err
		}
	}
	return nil
}

// maxIn is the most input frames a chunk takes: its frames and the 3
// copies of the last frame the encoder adds to the last chunk.
func (e *Parallel) maxIn() int { return e.opt.ClipLen + 4 + 3 }

// runChunk runs chunk c on its rank (this goroutine): real frames, then
// pad copies of the video's last frame, encoded, restored and decoded with
// the state exchanged with the neighbouring chunks.
func (e *Parallel) runChunk(w *wave, key [2]int, j *chunkJob, c Chunk, frames, last []byte, pad int) error {
	rk := e.ranks[j.rank]
	b := rk.R.b
	fs := e.inW * e.inH * 3
	w.mu.Lock()
	j.slot = w.slots[key]
	w.mu.Unlock()
	if j.slot == nil {
		s, err := backend.NewSlot(b, e.maxIn()*fs, (e.opt.ClipLen+4)*w.f.FrameBytes(e.opt.Width, e.opt.Height))
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.slots[key] = s
		w.mu.Unlock()
		j.slot = s
	}
	in := j.slot.In()
	copy(in, frames)
	n := len(frames) / fs
	for i := 0; i < pad; i++ {
		copy(in[(n+i)*fs:], last)
	}
	x, err := j.slot.Input(n+pad, e.inH, e.inW)
	if err != nil {
		return err
	}
	st := rk.R.NewState()
	defer st.Free()
	carry := &rankCarry{e: e, rank: j.rank, chunk: c.Index}
	z, err := rk.R.EncodeCarried(x, st, func(x backend.Tensor) (backend.Tensor, error) {
		return prepare(b, x, e.inW, e.inH, e.opt)
	}, carry)
	x.Free()
	if err != nil {
		return err
	}
	if rk.DiT != nil {
		restored, err := e.denoise(rk, c, z)
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
	out := 0
	err = rk.R.DecodeCarried(z, st, lo-(c.Start-3), hi-lo, carry, func(y backend.Tensor, _ int) error {
		crop, err := b.CropPad(y, e.opt.Height, e.opt.Width)
		if err != nil {
			return err
		}
		defer crop.Free()
		err = j.slot.Put(crop, w.f, out)
		out += crop.Shape().N
		return err
	})
	if err != nil {
		return err
	}
	j.out = out
	_, err = j.slot.Send(out, e.opt.Width, e.opt.Height, w.f)
	return err
}

// denoise runs the DiT on chunk c's latents z: it first sends z to the
// next chunk's rank if that chunk's DiT takes history, and takes its own
// history from the previous chunk's rank.
func (e *Parallel) denoise(rk Rank, c Chunk, z backend.Tensor) (backend.Tensor, error) {
	me := c.Index % len(e.ranks)
	if next := c.Index + 1; next < len(e.chunks) {
		if p := e.chunks[next].DiTInput(e.opt.ClipLen, e.opt.DiTOverlap); p.Prefix > 0 && !p.ZeroPrefix {
			if err := e.tr.Send(e.ctx, me, next%len(e.ranks), histTag(c.Index), z); err != nil {
				return nil, err
			}
		}
	}
	plan := c.DiTInput(e.opt.ClipLen, e.opt.DiTOverlap)
	var hist backend.Tensor
	if plan.Prefix > 0 && !plan.ZeroPrefix {
		var err error
		if hist, err = e.tr.Recv(e.ctx, me, (c.Index-1)%len(e.ranks), histTag(c.Index-1)); err != nil {
			return nil, err
		}
		defer hist.Free()
	}
	return denoise(rk.R.b, rk.DiT, c, plan, z, hist)
}

func histTag(chunk int) string { return fmt.Sprintf("chunk %d latents", chunk) }

// rankCarry is the Carry of one chunk: the state comes from the previous
// chunk's rank and goes to the next chunk's.
type rankCarry struct {
	e     *Parallel
	rank  int
	chunk int
}

func stateTag(chunk int, dec bool, k int) string {
	part := "encoder"
	if dec {
		part = "decoder"
	}
	return fmt.Sprintf("chunk %d %s MemBlock %d", chunk, part, k)
}

func (c *rankCarry) Prev(dec bool, k int) (backend.Tensor, error) {
	if c.chunk == 0 {
		return nil, nil // the video's start: zeros
	}
	p := len(c.e.ranks)
	return c.e.tr.Recv(c.e.ctx, c.rank, (c.chunk-1)%p, stateTag(c.chunk-1, dec, k))
}

func (c *rankCarry) Next(dec bool, k int, last backend.Tensor) error {
	if c.chunk+1 >= len(c.e.chunks) {
		return nil
	}
	return c.e.tr.Send(c.e.ctx, c.rank, (c.chunk+1)%len(c.e.ranks), stateTag(c.chunk, dec, k), last)
}
