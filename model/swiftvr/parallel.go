package swiftvr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/parallel"
)

// Replica is SwiftVR resident on one device of a chunk-parallel group: its
// ReAE and its DiT (nil: encode -> decode only). NewParallel runs the i-th
// replica as rank i (a parallel.Rank, the goroutine that drives the device).
type Replica struct {
	R   *ReAE
	DiT *DiT
}

// Parallel streams one video through SwiftVR on several ranks at once.
//
// Chunk parallelism (LightX2V's causal chunk parallelism,
// docs/SWIFTVR.md): chunk i runs on chunk group i mod A, so the
// groups work in waves of A chunks. At every MemBlock of the encoder and
// the decoder a chunk hands the last frame of that layer's input to the
// next chunk's group and takes the previous chunk's from the group before
// it (the exchange of Carry; the last group's goes to group 0 for the
// next wave); after encoding, a chunk whose successor's DiT needs history
// sends it its latents.
//
// Sequence parallelism (Options.Sequence = B ranks per group): the B
// ranks of a group run one chunk together. The ReAE splits every frame
// into B height bands of whole latent rows, one per rank, exchanging halo
// rows before each spatial convolution (see halo); the bands' latents are
// gathered, the DiT runs on the B ranks split by tokens and heads (see
// Shard), and each rank decodes its band of the restored latents; the
// group's first rank stacks the bands into frames. The causal state and
// the DiT's history pass between groups band by band.
//
// Every rank computes exactly what one rank would, so the output is
// bitwise the one of a Session on one device of the same kind, with one
// exception: a height band is a convolution input of another shape, for
// which a GPU library may choose another algorithm that rounds
// differently (docs/BENCHMARKS.md); on the CPU sequence parallelism is
// bitwise too.
//
// It is a pipeline engine like Session: one batch per wave, whose output
// frames are the wave's chunks' in order. Each rank is a goroutine locked
// to its OS thread (package parallel); Start hands a wave's chunks to
// their ranks and returns, and the batch's Wait waits for all of them. A
// failure on one rank stops every rank. It resumes as a Session does,
// after a wave (resume.go).
type Parallel struct {
	ranks   []Replica
	workers []*parallel.Rank
	tr      *parallel.Local
	seq     int   // ranks per chunk group
	bands   []int // latent rows of each rank's band (bandRows)
	opt     Options
	frames  int
	inW     int
	inH     int
	chunks  []Chunk
	waves   [][]int                     // chunk indices of each batch
	next    int                         // next wave
	last    []byte                      // the video's last real frame (as input), for padding
	kept    []map[string]backend.Tensor // what a rank hands to itself (one chunk group)

	ctx    context.Context // cancelled by the first failure or Close
	cancel context.CancelCauseFunc
	jobs   sync.WaitGroup
	links  []func() bool // stop propagating the requests' cancellation
}

// NewParallel prepares a request for a video of frames frames of inW x
// inH on ranks, one per replica (at least two, all of one device kind and
// storage type), in chunk groups of opt.Sequence ranks.
func NewParallel(ranks []Replica, inW, inH, frames int, opt Options) (*Parallel, error) {
	seq := max(opt.Sequence, 1)
	if len(ranks) < 2 {
		return nil, fmt.Errorf("swiftvr: chunk parallelism needs at least 2 ranks, not %d", len(ranks))
	}
	if len(ranks)%seq != 0 {
		return nil, fmt.Errorf("swiftvr: %d ranks do not make chunk groups of %d", len(ranks), seq)
	}
	devs := make([]backend.Backend, len(ranks))
	views := make([]Replica, len(ranks))
	var cs []Chunk
	for i, rk := range ranks {
		if (rk.DiT == nil) != (ranks[0].DiT == nil) {
			return nil, errors.New("swiftvr: some ranks have the DiT and some do not")
		}
		if rk.DiT != nil && rk.DiT.d.Heads%seq != 0 {
			return nil, fmt.Errorf("swiftvr: the DiT's %d heads do not split over %d sequence-parallel ranks (use a divisor of %d)", rk.DiT.d.Heads, seq, rk.DiT.d.Heads)
		}
		// NewSession checks the request and makes the rank's view of its
		// ReAE; the session itself is not used.
		s, err := NewSession(rk.R, rk.DiT, inW, inH, frames, opt)
		if err != nil {
			return nil, err
		}
		view := *s.r // this request's own: a band view holds its exchange
		views[i] = Replica{R: &view, DiT: rk.DiT}
		opt, cs = s.opt, s.chunks
		s.Close()
		devs[i] = rk.R.b
	}
	e := &Parallel{ranks: views, workers: parallel.NewRanks(len(ranks)), tr: parallel.NewLocal(devs), seq: seq,
		opt: opt, frames: frames, inW: inW, inH: inH, chunks: cs, kept: make([]map[string]backend.Tensor, len(ranks))}
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
	if seq > 1 {
		rows := (opt.Height + 31) &^ 31 / 16
		if rows < seq {
			e.Close()
			return nil, fmt.Errorf("swiftvr: %d latent rows (output height %d) do not make %d height bands", rows, opt.Height, seq)
		}
		e.bands = bandRows(rows, seq)
		for i := range views {
			views[i].R.halo = &halo{Group: e.group(i), ctx: e.ctx}
		}
	}
	e.waves = batches(cs, frames, e.groups())
	return e, nil
}

// batches returns the chunk indices of each batch of a video of frames
// frames cut into chunks cs, run in waves of one chunk per each of groups
// chunk groups (1: one chunk a batch); a chunk made only of padding joins
// the batch before it (a batch needs input frames).
func batches(cs []Chunk, frames, groups int) [][]int {
	var bs [][]int
	for _, c := range cs {
		if c.Index%groups == 0 && c.realFrames(frames) > 0 {
			bs = append(bs, nil)
		}
		bs[len(bs)-1] = append(bs[len(bs)-1], c.Index)
	}
	return bs
}

// batchFrames is how many input frames the chunks ids of cs take from a
// video of frames frames.
func batchFrames(cs []Chunk, ids []int, frames int) int {
	n := 0
	for _, c := range ids {
		n += cs[c].realFrames(frames)
	}
	return n
}

// groups is the number of chunk groups.
func (e *Parallel) groups() int { return len(e.ranks) / e.seq }

// group returns the chunk group of rank i.
func (e *Parallel) group(i int) parallel.Group {
	g := parallel.Group{Tr: e.tr, Me: i % e.seq}
	for b := range e.seq {
		g.Ranks = append(g.Ranks, i-i%e.seq+b)
	}
	return g
}

// rankOf returns the rank of chunk c's group that holds band b.
func (e *Parallel) rankOf(c, b int) int { return c%e.groups()*e.seq + b }

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
			for _, t := range e.kept[i] {
				t.Free()
			}
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
		plan[i] = batchFrames(e.chunks, w, e.frames)
	}
	return plan, nil
}

// wave is a batch: the host input of a wave's frames and, for each of its
// chunks, the Slot of its rank that holds the chunk's output.
type wave struct {
	e    *Parallel
	in   []byte
	inf  backend.PixelFormat // of in
	f    backend.PixelFormat // of the output
	jobs []*chunkJob
	// slots are the wave's staging on each rank, made on first use by the
	// rank's goroutine: a rank runs one chunk of a wave, two when the last
	// chunk (padding only) joined it.
	mu     sync.Mutex
	slots  map[[2]int]backend.Slot
	waited bool
	err    error
}

// chunkJob is one chunk of a wave on its group's ranks: rank (the group's
// first) holds its output in slot.
type chunkJob struct {
	rank int
	slot backend.Slot
	out  int        // output frames
	done chan error // one result per rank of the group
}

// NewBatch allocates the host input for up to n frames in format in (RGB24
// or RGB48), whose outputs come out in format f; the ranks' staging is
// made when a wave first runs there.
func (e *Parallel) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	if err := f.CheckSize(e.opt.Width, e.opt.Height); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if err := in.CheckInput(); err != nil {
		return nil, err
	}
	return &wave{e: e, in: make([]byte, n*in.FrameBytes(w, h)), inf: in, f: f, slots: map[[2]int]backend.Slot{}, waited: true}, nil
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
		var err error
		for range cap(j.done) {
			err = cmp.Or(err, <-j.done)
		}
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
	fs := w.inf.FrameBytes(e.inW, e.inH)
	if want := batchFrames(e.chunks, ids, e.frames); k != want {
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
		j := &chunkJob{rank: e.rankOf(id, 0), done: make(chan error, e.seq)}
		w.jobs = append(w.jobs, j)
		last := e.last
		for b := range e.seq {
			rk := e.rankOf(id, b)
			key := [2]int{rk, seen[rk]}
			seen[rk]++
			e.jobs.Add(1)
			err := e.workers[rk].Go(func() {
				defer e.jobs.Done()
				err := e.runChunk(w, key, j, rk, c, frames, last, pad)
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
	}
	return nil
}

// maxIn is the most input frames a chunk takes: its frames and the 3
// copies of the last frame the encoder adds to the last chunk.
func (e *Parallel) maxIn() int { return e.opt.ClipLen + 4 + 3 }

// runChunk runs chunk c on rank me (this goroutine), one of its group's:
// real frames, then pad copies of the video's last frame, encoded,
// restored and decoded with the state exchanged with the neighbouring
// chunks. The group's first rank holds the output in its slot.
func (e *Parallel) runChunk(w *wave, key [2]int, j *chunkJob, me int, c Chunk, frames, last []byte, pad int) error {
	rk := e.ranks[me]
	b := rk.R.b
	fs := w.inf.FrameBytes(e.inW, e.inH)
	n := len(frames) / fs
	input := func(in []byte) []byte {
		copy(in, frames)
		for i := 0; i < pad; i++ {
			copy(in[(n+i)*fs:], last)
		}
		return in[:(n+pad)*fs]
	}
	var x backend.Tensor
	var err error
	if me == j.rank {
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
		input(j.slot.In())
		x, err = j.slot.Input(n+pad, e.inH, e.inW, w.inf)
	} else { // another band of the chunk: the same frames, without staging
		x, err = backend.FromFrames(b, input(make([]byte, (n+pad)*fs)), w.inf, n+pad, e.inH, e.inW)
	}
	if err != nil {
		return err
	}
	st := rk.R.NewState()
	defer st.Free()
	band := me % e.seq
	carry := &rankCarry{e: e, rank: me, band: band, chunk: c.Index}
	z, err := rk.R.EncodeCarried(x, st, func(x backend.Tensor) (backend.Tensor, error) {
		p, err := prepare(b, x, e.inW, e.inH, e.opt)
		if err != nil || e.seq == 1 {
			return p, err
		}
		defer p.Free()
		return b.Band(p, 16*e.bands[band], 16*(e.bands[band+1]-e.bands[band]))
	}, carry)
	x.Free()
	if err != nil {
		return err
	}
	if e.seq > 1 && rk.DiT != nil { // the DiT takes the whole latents
		whole, err := e.gatherBands(me, z, fmt.Sprintf("chunk %d latent bands", c.Index))
		z.Free()
		if err != nil {
			return err
		}
		z = whole
	}
	if rk.DiT != nil {
		restored, err := e.denoise(rk, me, c, z)
		z.Free()
		if err != nil {
			return err
		}
		z = restored
		if e.seq > 1 {
			mine, err := b.Band(z, e.bands[band], e.bands[band+1]-e.bands[band])
			z.Free()
			if err != nil {
				return err
			}
			z = mine
		}
	}
	defer z.Free()
	lo, hi := c.OutputRange(e.frames)
	if hi <= lo {
		return fmt.Errorf("swiftvr: chunk %d writes no frames", c.Index)
	}
	out, groups := 0, 0
	err = rk.R.DecodeCarried(z, st, lo-(c.Start-3), hi-lo, carry, func(y backend.Tensor, _ int) error {
		groups++
		if e.seq > 1 {
			tag := fmt.Sprintf("chunk %d frames %d", c.Index, groups)
			if me != j.rank {
				return e.tr.Send(e.ctx, me, j.rank, tag, y)
			}
			whole, err := e.gatherOut(me, y, tag)
			if err != nil {
				return err
			}
			defer whole.Free()
			y = whole
		}
		crop, err := b.CropPad(y, e.opt.Height, e.opt.Width)
		if err != nil {
			return err
		}
		defer crop.Free()
		err = j.slot.Put(crop, w.f, out)
		out += crop.Shape().N
		return err
	})
	if err != nil || me != j.rank {
		return err
	}
	j.out = out
	_, err = j.slot.Send(out, e.opt.Width, e.opt.Height, w.f)
	return err
}

// gatherBands returns the whole of what the ranks of me's group hold a
// band of, on every one of them.
func (e *Parallel) gatherBands(me int, t backend.Tensor, tag string) (backend.Tensor, error) {
	return allGather(e.ctx, e.group(me), tag, t, func(parts []backend.Tensor) (backend.Tensor, error) {
		return stackRows(e.ranks[me].R.b, parts)
	})
}

// gatherOut returns the frames whose top band is y, on the group's first
// rank me, with the other bands the group's ranks sent it.
func (e *Parallel) gatherOut(me int, y backend.Tensor, tag string) (backend.Tensor, error) {
	parts := []backend.Tensor{y}
	defer func() {
		for _, p := range parts[1:] {
			p.Free()
		}
	}()
	for _, r := range e.group(me).Ranks[1:] {
		p, err := e.tr.Recv(e.ctx, me, r, tag)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return stackRows(e.ranks[me].R.b, parts)
}

// send hands t from rank from to rank to (a rank that hands itself the
// next chunk's state, the only chunk group, keeps a copy).
func (e *Parallel) send(from, to int, tag string, t backend.Tensor) error {
	if from != to {
		return e.tr.Send(e.ctx, from, to, tag, t)
	}
	c, err := e.ranks[from].R.b.Frames(t, 0, t.Shape().N)
	if err != nil {
		return err
	}
	e.keep(from, tag, c)
	return nil
}

// recv takes what send handed rank to from rank from: what the rank
// kept (its own, or a saved state's: resume.go), else the transport's.
func (e *Parallel) recv(to, from int, tag string) (backend.Tensor, error) {
	if t, ok := e.kept[to][tag]; ok {
		delete(e.kept[to], tag)
		return t, nil
	}
	if from == to {
		return nil, fmt.Errorf("swiftvr: rank %d kept no %s", to, tag)
	}
	return e.tr.Recv(e.ctx, to, from, tag)
}

// keep makes t what rank to's next recv of tag takes (on rank to's
// goroutine).
func (e *Parallel) keep(to int, tag string, t backend.Tensor) {
	if e.kept[to] == nil {
		e.kept[to] = map[string]backend.Tensor{}
	}
	e.kept[to][tag] = t
}

// denoise runs the DiT on chunk c's latents z on rank me: it first sends
// z to the next chunk's rank if that chunk's DiT takes history, and takes
// its own history from the previous chunk's rank. With sequence
// parallelism the group's ranks run it together, each with the whole z.
func (e *Parallel) denoise(rk Replica, me int, c Chunk, z backend.Tensor) (backend.Tensor, error) {
	band := me % e.seq
	if next := c.Index + 1; next < len(e.chunks) && historyTaken(e.chunks[next], e.opt) > 0 {
		if err := e.send(me, e.rankOf(next, band), histTag(c.Index), z); err != nil {
			return nil, err
		}
	}
	plan := c.DiTInput(e.opt.ClipLen, e.opt.DiTOverlap)
	var hist backend.Tensor
	if historyTaken(c, e.opt) > 0 {
		var err error
		if hist, err = e.recv(me, e.rankOf(c.Index-1, band), histTag(c.Index-1)); err != nil {
			return nil, err
		}
		defer hist.Free()
	}
	var sh *Shard
	if e.seq > 1 {
		sh = &Shard{Group: e.group(me), Ctx: e.ctx}
	}
	return denoise(rk.R.b, rk.DiT, sh, c, plan, z, hist)
}

func histTag(chunk int) string { return fmt.Sprintf("chunk %d latents", chunk) }

// rankCarry is the Carry of one chunk's band: the state comes from the
// previous chunk's rank of the band and goes to the next chunk's.
type rankCarry struct {
	e     *Parallel
	rank  int
	band  int
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
	return c.e.recv(c.rank, c.e.rankOf(c.chunk-1, c.band), stateTag(c.chunk-1, dec, k))
}

func (c *rankCarry) Next(dec bool, k int, last backend.Tensor) error {
	if c.chunk+1 >= len(c.e.chunks) {
		return nil
	}
	return c.e.send(c.rank, c.e.rankOf(c.chunk+1, c.band), stateTag(c.chunk, dec, k), last)
}
