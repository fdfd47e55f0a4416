package swiftvr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/vsr-dev/vsr/backend"
)

// Resuming a video (model.Resumer, issue 38): Session and Parallel save
// the causal state after any batch but the last, and a new session of the
// same model, video and settings loads it and runs the batches after it,
// giving bitwise the output of a run never stopped.
//
// What crosses a chunk boundary, and so all that a state holds:
//
//   - each MemBlock's carried frame (State.Enc, State.Dec): the last frame
//     of the block's input in the chunk before, for the 9 MemBlocks of the
//     encoder (EncoderWidth channels at 1/4, 1/8 and 1/16 of the padded
//     output size, 3 each) and the 9 of the decoder (DecoderWidths[0..2]
//     channels at 1/16, 1/8 and 1/4). With --reae-bands there is one set a
//     band (Session.bandSt, each with the rows within reach around its
//     band), with sequence parallelism one a rank of a chunk group (its
//     band's rows); a Parallel's are the messages its last chunk of the
//     wave sent the next chunk's ranks (rankCarry), which SaveState takes
//     from the transport and keeps for them.
//   - the decoder's 3-frame lag: a chunk's decoder output begins 3 frames
//     before its input, so the frames a chunk held back are decoded by the
//     next chunk from its own latents and the decoder's carried frames
//     above; no output frame is held anywhere else.
//   - the DiT's history: the previous chunk's input latents, of which the
//     next chunk takes its DiTInput's Prefix from the end (historyTaken);
//     only those are saved.
//   - with EncodeProxy (Session only), the input frames kept for output
//     frames still to come (keepProxy, putProxy) and the index of the
//     first.
//   - the position: the batch last run and the chunk that begins the next.
//
// Nothing else crosses: the DiT is one deterministic step (no noise, no
// random numbers); its graphs and every weight belong to the resident
// model; the video's last frame, kept for padding, is read only by the
// last batch, after which no state is saved; the counters of halo and
// Shard only name messages, and start from 0 on every rank of a new
// session alike.
//
// A state is a small versioned binary (state.go): a header of the
// session's shape (the video's and the output's sizes, the chunk settings,
// the model's widths, the band layout, the value type), which LoadState
// checks, naming the first that differs; the tensors, each with its shape
// and its values exactly as the device stores them (bf16 and f16 widen to
// float32 exactly on Download and narrow back to the same bits); a
// CRC-32C. Its size is StateBytes plus a few hundred bytes.

// StateBytes is the size of the tensors of a state saved between chunks by
// a session of a model of dims d on whole frames at output size w x h, with
// values of valueBytes bytes (2 in bf16 or f16, 4 in f32) and history
// latents of the DiT's history (historyTaken of the next chunk; 0 without
// the DiT). Bands add the rows around each band, EncodeProxy its input
// frames, the header and the checksum a few hundred bytes.
func StateBytes(d Dims, w, h, history, valueBytes int) int64 {
	hp, wp := int64((h+31)&^31), int64((w+31)&^31)
	var n int64
	for s := range int64(3) { // 3 MemBlocks a stage
		n += 3 * (hp / (4 << s)) * (wp / (4 << s)) * int64(d.EncoderWidth)
		n += 3 * (hp / (16 >> s)) * (wp / (16 >> s)) * int64(d.DecoderWidths[s])
	}
	n += int64(history) * (hp / 16) * (wp / 16) * int64(d.LatentChannels)
	return n * int64(valueBytes)
}

// checkpoint answers Checkpoint for a video of frames frames cut into
// chunks cs and run in batches of one chunk per each of groups chunk
// groups: a state can be saved after every batch but the last, and the
// batches up to i output the frames before the next chunk's output.
func checkpoint(cs []Chunk, frames, groups, i int) (out int, ok bool) {
	bs := batches(cs, frames, groups)
	if i < 0 || i+1 >= len(bs) {
		return 0, false
	}
	from, _ := cs[bs[i+1][0]].OutputRange(frames)
	return from, true
}

// after returns the batch that ends just before chunk next, of batches bs.
func after(bs [][]int, next int) (int, bool) {
	for i := 1; i < len(bs); i++ {
		if bs[i][0] == next {
			return i - 1, true
		}
	}
	return 0, false
}

// check refuses a state whose position is not a batch boundary of bs (a
// plan of other batches: another device list) or whose history is not
// what the chunk after it takes (want latents).
func (s *savedState) check(bs [][]int, want int) error {
	if s.batch < 0 || s.batch+1 >= len(bs) || bs[s.batch+1][0] != s.chunk {
		return fmt.Errorf("swiftvr state: saved after batch %d, before chunk %d, which this session's batches do not end at (another device list or --parallel layout): start over", s.batch, s.chunk)
	}
	got := 0
	if s.hist != nil {
		got = s.hist.shape.N
	}
	if got != want {
		return fmt.Errorf("swiftvr state: %w: %d history latents, chunk %d takes %d", errBadState, got, s.chunk, want)
	}
	return nil
}

// downloadAll copies ts from b to the host; a nil one is an error.
func downloadAll(b backend.Backend, what string, ts []backend.Tensor) ([]hostTensor, error) {
	out := make([]hostTensor, len(ts))
	for i, t := range ts {
		if t == nil {
			return nil, fmt.Errorf("swiftvr: save state: %s %d is missing", what, i)
		}
		var err error
		if out[i], err = toHost(b, t); err != nil {
			return nil, fmt.Errorf("swiftvr: save state: %w", err)
		}
	}
	return out, nil
}

// downloadTail copies the last n frames of t from b to the host.
func downloadTail(b backend.Backend, t backend.Tensor, n int) (*hostTensor, error) {
	if t == nil || t.Shape().N < n {
		return nil, fmt.Errorf("swiftvr: save state: the DiT's history lacks the %d latents the next chunk takes", n)
	}
	tail, err := b.Frames(t, t.Shape().N-n, n)
	if err != nil {
		return nil, err
	}
	defer tail.Free()
	h, err := toHost(b, tail)
	if err != nil {
		return nil, fmt.Errorf("swiftvr: save state: %w", err)
	}
	return &h, nil
}

// uploadAll makes hs on b; on an error it frees what it made.
func uploadAll(b backend.Backend, hs []hostTensor) ([]backend.Tensor, error) {
	var ts []backend.Tensor
	for _, h := range hs {
		t, err := h.upload(b)
		if err != nil {
			freeAll(ts)
			return nil, fmt.Errorf("swiftvr: load state: %w", err)
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// Session's Resumer.

// shape is the session's stateShape.
func (e *Session) shape() stateShape {
	layout, bands := layoutWhole, 1
	if e.bands != nil {
		layout, bands = layoutBands, len(e.bandSt)
	}
	return shapeOf(e.r, e.dit != nil, e.frames, e.inW, e.inH, e.opt, layout, bands)
}

// loadable is the shape of the states the session loads, given the shape
// saved of one: its own, but with AutoBands the state's bands (on whole
// frames or in bands of their own rows within reach: not sequence
// parallelism's).
func (e *Session) loadable(saved []field) stateShape {
	sh := e.shape()
	if !e.opt.AutoBands {
		return sh
	}
	var layout, n int64 = -1, -1
	for _, f := range saved {
		switch f.name {
		case "band layout":
			layout = f.value
		case "bands":
			n = f.value
		}
	}
	switch {
	case layout == int64(layoutWhole) && n == 1:
		sh.layout, sh.bands = layoutWhole, 1
	case layout == int64(layoutBands) && n > 1 && n <= int64(latentRows(e.opt.Height)):
		sh.layout, sh.bands = layoutBands, int(n)
	}
	return sh
}

// history is how many latents of the DiT's history chunk c takes.
func (e *Session) history(c Chunk) int {
	if e.dit == nil {
		return 0
	}
	return historyTaken(c, e.opt)
}

// states returns the session's MemBlock states, one set a band.
func (e *Session) states() []*State {
	if e.bandSt != nil {
		return e.bandSt
	}
	return []*State{e.state}
}

// Checkpoint reports whether a state can be saved after batch i of a video
// of total frames (every batch but the last; a live stream's, never), and
// the output frames batches 0..i give (model.Resumer).
func (e *Session) Checkpoint(total, i int) (out int, ok bool) {
	if e.live || total != e.frames {
		return 0, false
	}
	return checkpoint(e.chunks, e.frames, 1, i)
}

// SaveState writes the state after the batches started so far (see the
// top of this file); it waits for their work on the device.
func (e *Session) SaveState(w io.Writer) error {
	if e.live {
		return errors.New("swiftvr: a live stream's state cannot be saved (a live source cannot be replayed)")
	}
	batch, ok := after(batches(e.chunks, e.frames, 1), e.next)
	if !ok {
		return fmt.Errorf("swiftvr: no state to save before chunk %d of %d: save after a batch other than the last", e.next, len(e.chunks))
	}
	s := &savedState{shape: e.shape(), batch: batch, chunk: e.next, proxyFrom: e.proxyFrom}
	for _, st := range e.states() {
		band, err := downloadAll(e.r.b, "MemBlock state", append(slices.Clone(st.Enc), st.Dec...))
		if err != nil {
			return err
		}
		s.bands = append(s.bands, band)
	}
	var err error
	if n := e.history(e.chunks[e.next]); n > 0 {
		if s.hist, err = downloadTail(e.r.b, e.hist, n); err != nil {
			return err
		}
	}
	if s.proxy, err = downloadAll(e.r.b, "proxy frame", e.proxy); err != nil {
		return err
	}
	return s.write(w)
}

// LoadState loads a state SaveState wrote into this new session, whose
// next Start runs the batch after the state's; it refuses a state of
// another shape or position, and a damaged one, leaving the session as it
// was. A session whose bands were chosen for the memory free (AutoBands)
// takes the state's bands (or whole frames).
func (e *Session) LoadState(r io.Reader) error {
	if e.next > 0 || e.live {
		return errors.New("swiftvr: load a state into a new session, before its first batch (and not a live one)")
	}
	s, err := readState(r, e.loadable)
	if err != nil {
		return err
	}
	if err := s.check(batches(e.chunks, e.frames, 1), e.history(e.chunks[min(max(s.chunk, 0), len(e.chunks)-1)])); err != nil {
		return err
	}
	if len(s.proxy) > 0 && s.proxyFrom < 0 {
		return fmt.Errorf("swiftvr state: %w: proxy frames from frame %d", errBadState, s.proxyFrom)
	}
	var made [][]backend.Tensor
	upload := func(hs []hostTensor) []backend.Tensor {
		if err != nil {
			return nil
		}
		var ts []backend.Tensor
		if ts, err = uploadAll(e.r.b, hs); err == nil {
			made = append(made, ts)
		}
		return ts
	}
	var bands [][]backend.Tensor
	for _, band := range s.bands {
		bands = append(bands, upload(band))
	}
	var hist []backend.Tensor
	if s.hist != nil {
		hist = upload([]hostTensor{*s.hist})
	}
	proxy := upload(s.proxy)
	if n := s.shape.bands; err == nil && n != len(e.states()) { // AutoBands: the state's bands
		err = e.setBands(n)
	}
	if err != nil {
		for _, ts := range made {
			freeAll(ts)
		}
		return err
	}
	for i, st := range e.states() {
		st.Free()
		n := len(st.Enc)
		copy(st.Enc, bands[i][:n])
		copy(st.Dec, bands[i][n:])
	}
	if hist != nil {
		e.hist = hist[0]
	}
	e.proxy, e.proxyFrom = proxy, s.proxyFrom
	e.next = s.chunk
	return nil
}

// Parallel's Resumer.

// shape is the session's stateShape.
func (e *Parallel) shape() stateShape {
	layout := layoutWhole
	if e.seq > 1 {
		layout = layoutSequence
	}
	return shapeOf(e.ranks[0].R, e.ranks[0].DiT != nil, e.frames, e.inW, e.inH, e.opt, layout, e.seq)
}

// history is how many latents of the DiT's history chunk c takes.
func (e *Parallel) history(c Chunk) int {
	if e.ranks[0].DiT == nil {
		return 0
	}
	return historyTaken(c, e.opt)
}

// carried returns the tags of what chunk c hands the next chunk's rank of
// each band, in the order it sends them: the encoder's MemBlock states,
// the DiT's history when the next chunk takes it, the decoder's.
func (e *Parallel) carried(c int) []string {
	st := e.ranks[0].R.NewState()
	var tags []string
	for k := range st.Enc {
		tags = append(tags, stateTag(c, false, k))
	}
	if e.history(e.chunks[c+1]) > 0 {
		tags = append(tags, histTag(c))
	}
	for k := range st.Dec {
		tags = append(tags, stateTag(c, true, k))
	}
	return tags
}

// Checkpoint reports whether a state can be saved after wave i of a video
// of total frames (every wave but the last), and the output frames waves
// 0..i give (model.Resumer).
func (e *Parallel) Checkpoint(total, i int) (out int, ok bool) {
	if total != e.frames {
		return 0, false
	}
	return checkpoint(e.chunks, e.frames, e.groups(), i)
}

// SaveState writes the state after the waves started so far (see the top
// of this file): it waits for their chunks, then takes what the wave's
// last chunk sent the next chunk's ranks from the transport, keeps it for
// them and saves a copy, each rank on its own goroutine.
func (e *Parallel) SaveState(w io.Writer) error {
	e.jobs.Wait()
	if err := context.Cause(e.ctx); err != nil {
		return err
	}
	if e.next == 0 || e.next >= len(e.waves) {
		return fmt.Errorf("swiftvr: no state to save before wave %d of %d: save after a wave other than the last", e.next, len(e.waves))
	}
	next := e.waves[e.next][0]
	prev, hist := next-1, e.history(e.chunks[next])
	s := &savedState{shape: e.shape(), batch: e.next - 1, chunk: next}
	for band := range e.seq {
		from, to := e.rankOf(prev, band), e.rankOf(next, band)
		err := e.workers[to].Do(func() error {
			var states []backend.Tensor
			for _, tag := range e.carried(prev) {
				t, err := e.recv(to, from, tag)
				if err != nil {
					return err
				}
				e.keep(to, tag, t)
				if tag != histTag(prev) {
					states = append(states, t)
				}
			}
			b := e.ranks[to].R.b
			ts, err := downloadAll(b, "MemBlock state", states)
			if err != nil {
				return err
			}
			s.bands = append(s.bands, ts)
			if hist > 0 && band == 0 { // every band takes the same history
				s.hist, err = downloadTail(b, e.kept[to][histTag(prev)], hist)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("rank %d: %w", to, err)
		}
	}
	return s.write(w)
}

// LoadState loads a state SaveState wrote into this new session: each
// rank of the next chunk's group keeps its band's part, as if the chunk
// before had sent it, and the next Start runs the wave after the state's.
// It refuses a state of another shape or position, and a damaged one,
// leaving the session as it was.
func (e *Parallel) LoadState(r io.Reader) error {
	if e.next > 0 {
		return errors.New("swiftvr: load a state into a new session, before its first batch")
	}
	s, err := readState(r, func([]field) stateShape { return e.shape() })
	if err != nil {
		return err
	}
	if err := s.check(e.waves, e.history(e.chunks[min(max(s.chunk, 0), len(e.chunks)-1)])); err != nil {
		return err
	}
	prev := s.chunk - 1
	var tags []string
	for _, tag := range e.carried(prev) {
		if tag != histTag(prev) {
			tags = append(tags, tag)
		}
	}
	loaded := 0
	for band := range e.seq {
		to := e.rankOf(s.chunk, band)
		err = e.workers[to].Do(func() error {
			b := e.ranks[to].R.b
			ts, err := uploadAll(b, s.bands[band])
			if err != nil {
				return err
			}
			if s.hist != nil {
				h, err := s.hist.upload(b)
				if err != nil {
					freeAll(ts)
					return fmt.Errorf("swiftvr: load state: %w", err)
				}
				e.keep(to, histTag(prev), h)
			}
			for i, t := range ts {
				e.keep(to, tags[i], t)
			}
			return nil
		})
		if err != nil {
			break
		}
		loaded++
	}
	if err != nil { // take back what the bands before kept
		for band := range loaded {
			to := e.rankOf(s.chunk, band)
			e.workers[to].Do(func() error {
				for _, tag := range append(tags, histTag(prev)) {
					if t, ok := e.kept[to][tag]; ok {
						t.Free()
						delete(e.kept[to], tag)
					}
				}
				return nil
			})
		}
		return err
	}
	e.next = s.batch + 1
	return nil
}
