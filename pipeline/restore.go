// Package pipeline runs one restore request as a stream: reader goroutines
// decode frames into batches, one goroutine per engine (a device) drives
// it from its own OS thread, and writer goroutines wait for each batch's
// results and encode them. Bounded queues sit between the stages, so memory stays flat however
// long the video is, and no stage waits on another except for real work.
// Files and live streams (Live) run in the same stage graph (stages.go).
//
// With Segments > 1 the output is cut into that many contiguous segments,
// each with its own decoder and encoder running in parallel, and joined
// losslessly at the end with the input's audio: CPU encoding then keeps up
// with a fast GPU. A causal engine (a model.Planner) reads the video as one
// stream; its output frames still go to several encoders (see fanout). A
// resumable run (Resume) cuts each segment further into parts, each
// recorded in a journal once encoded (parts.go, resume.go).
//
// The output file appears only when everything succeeded: encoders write
// temporary files beside it, renamed or joined at the end; on any error or
// cancellation they are removed.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// Source yields frames in order; Read returns io.EOF after the last.
type Source interface {
	Read(dst []byte) error
	Close() error
}

// Sink consumes frames; Close finishes the output, Abort discards it.
type Sink interface {
	Write(frame []byte) error
	Close() error
	Abort()
}

// Request is one restore job.
type Request struct {
	Input  string
	Output string
	Engine Engine
	// Batch is the number of frames handed to the engine at once (default 1).
	Batch int
	// Segments is the number of segments encoded in parallel (default 1).
	Segments int
	// MaxFrames limits the job to the first MaxFrames frames (0 = all).
	MaxFrames int
	// Encode sets the codec, quality and pixel format; size, fps, audio and
	// frame count are filled in from the input.
	Encode video.EncodeOptions
	// Progress, if set, is called with the frames handed to the encoders
	// so far: after each batch, or with a causal engine's several segments
	// after each frame (frames waiting in the fanout's queue do not count).
	// It may be called from several goroutines.
	Progress func(done, total int)
	// Info is the input's probe, if the caller already has it.
	Info *video.Info
	// Discard drops the results instead of encoding them (benchmarks of
	// everything but the encoder); Output is ignored.
	Discard bool
	// OnBatch, if set, is called from a writer goroutine after each batch's
	// results are ready, with the batch (for engine-specific timing).
	OnBatch func(b backend.Batch, frames int)
	// More are engines of the same model on other devices: the segments
	// spread over Engine and these (segment i on engine i mod 1+len(More)).
	// A causal engine (a model.Planner) reads the video as one stream and ignores
	// them.
	More []Engine
	// CFR, for a variable-frame-rate input (video.Info.VFR), spaces the
	// output's frames evenly over the input's duration instead of keeping
	// each frame's own time.
	CFR bool
	// Resume, if set, keeps the finished parts in a journal beside the
	// output and skips those of an earlier run of the same request (see
	// Resume).
	Resume *Resume
	// CheckpointEvery is the seconds of video of each part of a resumable
	// run (0: DefaultCheckpointEvery): a run stopped anywhere loses about
	// that much work at most. A causal engine's parts end where it saves
	// its state, at the batches closest after each such span.
	CheckpointEvery float64
}

// timing returns the output's frame rate and, when the output keeps
// variable frame times, the first total+1 of them.
func timing(info *video.Info, total int, cfr bool) (video.Rational, []float64) {
	if !info.VFR || len(info.Times) != info.Frames+1 {
		return info.FPS, nil
	}
	if cfr {
		us := int(math.Round(info.Span(total) * 1e6))
		return video.Rational{Num: total * 1000000, Den: max(us, 1)}.Reduced(), nil
	}
	return info.FPS, info.Times[:total+1]
}

// Result summarises a finished job.
type Result struct {
	Frames  int     `json:"frames"`
	FPS     float64 `json:"fps"`
	Seconds float64 `json:"seconds"`
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	Output  string  `json:"output"`
	// ResumedFrom is the frame the run resumed at: the frames before it
	// were restored by an earlier run (0 when nothing was resumed).
	ResumedFrom int `json:"resumed_from_frame,omitempty"`
	// Where the time went: starting the ffmpeg children, streaming the
	// frames, finishing the encoders, and joining the segments.
	Stages Stages `json:"stages"`
	// Carried says what the output carries of the input besides the
	// picture (audio, subtitles, chapters, metadata, colour tags, HDR
	// metadata, SAR) and what it drops, and why.
	video.Carried
}

// Stages splits a job's wall time.
type Stages struct {
	Start  float64 `json:"start_seconds"`
	Stream float64 `json:"stream_seconds"`
	Finish float64 `json:"finish_seconds"`
	Join   float64 `json:"join_seconds"`
	// During Stream, the time a writer goroutine (one per stream) spent
	// waiting for the model's results and writing to its encoder (blocked
	// while the encoder is busy), averaged over the writers: which of the
	// two is near Stream says whether the model or the encoders set the
	// pace.
	WaitModel   float64 `json:"wait_model_seconds"`
	WaitEncoder float64 `json:"wait_encoder_seconds"`
	// Latency is how long a batch's frames took from the decoder to the
	// encoder: its first frame read to its first output frame written.
	Latency Latency `json:"latency"`
	// Checkpoint is the time spent keeping work for a resume beyond the
	// parts' syncs: saving the model's state (the model waits) and
	// writing state files (the goroutine recording a part waits). Its
	// share of the wall time bounds what checkpointing costs.
	Checkpoint float64 `json:"checkpoint_seconds"`
	// Streams times each stream's writer (one per segment, or the one
	// stream of a causal engine), in seconds since the request started:
	// how evenly the encoders' work was spread, and when each ended.
	Streams []StreamTimes `json:"streams,omitempty"`
}

// StreamTimes are the times of one stream's writer, in seconds since the
// request started.
type StreamTimes struct {
	// First is when its first frame went to its encoder.
	First float64 `json:"first_seconds"`
	// Last is when its last frame was handed to its encoder.
	Last float64 `json:"last_seconds"`
	// End is when its writer ended: a segment's last part's encoder
	// closes when that part's last frame is written, so End is when that
	// encoder had finished (with a causal engine's several segments,
	// whose frames a fanout queues for their encoders, when the last
	// frame was queued).
	End float64 `json:"end_seconds"`
}

// Latency summarises the batches' latencies (for a causal model, a batch
// is a chunk).
type Latency struct {
	// First is the first batch written's: for one stream, from the
	// video's first frame in to its first restored frame out.
	First float64 `json:"first_seconds"`
	// Steady is the median of the later batches' (0 with one batch).
	Steady float64 `json:"steady_seconds"`
	// Batches counts the batches measured.
	Batches int `json:"batches"`
}

func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	l := Latency{First: ds[0].Seconds(), Batches: len(ds)}
	if rest := slices.Clone(ds[1:]); len(rest) > 0 {
		slices.Sort(rest)
		l.Steady = rest[len(rest)/2].Seconds()
	}
	return l
}

// Restore runs req to completion or to the first error. The output keeps
// the input's fps, frame count and audio.
func Restore(ctx context.Context, req Request) (_ *Result, err error) {
	start := time.Now()
	info := req.Info
	if info == nil {
		var err error
		if info, err = video.Probe(ctx, req.Input); err != nil {
			return nil, err
		}
	}
	total := info.Frames
	if req.MaxFrames > 0 && req.MaxFrames < total {
		total = req.MaxFrames
	}
	w, h := info.Width, info.Height
	ow, oh := req.Engine.OutputSize(w, h)
	if ow <= 0 || oh <= 0 {
		return nil, fmt.Errorf("%s: a %dx%d video is too small for this model", req.Input, w, h)
	}
	fps, times := timing(info, total, req.CFR)
	nseg := min(max(req.Segments, 1), total) // encoders
	if times != nil || req.Encode.AlphaFrom != nil {
		nseg = 1 // one encoder keeps the frames' times, as they are, and reads the alpha from the first frame on
	}
	nstream := nseg // decoders and batch queues
	var plan []int
	rsm, _ := req.Engine.(model.Resumer)
	if p, ok := req.Engine.(model.Planner); ok {
		var err error
		if plan, err = p.Plan(total); err != nil {
			return nil, err
		}
		nstream = 1 // a causal stream cannot be cut into independent parts
	} else {
		rsm = nil
	}
	if req.Discard {
		req.Output = ""
		nseg = nstream
	}

	// The output keeps the input's colour description, HDR metadata and
	// display aspect ratio.
	enc := req.Encode
	enc.Colour, enc.HDR, enc.SAR = outputColour(info), info.HDR, outputSAR(info.SAR, w, h, ow, oh)
	// Frames travel in the encoder's pixel format when a backend writes it
	// (yuv420p: half the bytes of RGB), converted where the model runs; an
	// input deeper than 8 bits is decoded and restored at 16 bits.
	var reduced *video.Drop
	if enc.PixFmt == "" {
		enc.PixFmt = DefaultPixFmt(info)
		if !req.Discard {
			// The default follows the input, as deep as the encoder
			// takes; what it cannot take at all is refused before any
			// work, as for a pixel format asked for.
			var err error
			if enc.PixFmt, reduced, err = EncodablePixFmt(ctx, filepath.Ext(req.Output), enc, info); err != nil {
				return nil, err
			}
		}
	}
	fmts := frameFormats(info, enc.PixFmt, ow, oh)
	format := fmts.out
	enc.InputPixFmt = format.Name()
	enc.Width, enc.Height, enc.FPS, enc.Times = ow, oh, fps, times
	carry := enc.CarryOptions // the streams go in with the video, or at the join
	carry.StreamsFrom, carry.StreamsAllowPlaylists = req.Input, info.AllowPlaylists
	if total < info.Frames { // an excerpt carries the streams of its own span only
		carry.StreamsDuration = info.Span(total)
	}
	var carried video.Carried
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The parts (parts.go): one per segment, or with a journal, about
	// CheckpointEvery seconds each.
	parts := segmentRanges(total, nseg)
	var cps []checkpoint // a causal engine's, with a journal
	resumable := req.Resume != nil && !req.Discard && times == nil && req.Encode.AlphaFrom == nil && (plan == nil || rsm != nil)
	if resumable {
		var ps []part
		if ps, cps = resumableParts(total, nseg, partFrames(req.CheckpointEvery, fps.Float()), plan, rsm); len(ps) > 1 && (plan == nil || len(cps) > 0) {
			parts = ps
		} else {
			// One part, or a causal engine that can save its state
			// after no batch: nothing a rerun could resume from.
			resumable, cps = false, nil
		}
	}

	// On any failure: stop the children, discard every output, keep the
	// journal unless the input itself failed.
	streams := make([]stream, nstream)
	var sinks []Sink          // the encoders, until streams own them
	var segDir *video.Workdir // where the parts are, until joined
	var rj *resumer           // or the journal, with the parts finished
	ok := false
	defer func() {
		if ok {
			return
		}
		cancel(errAborted)
		for _, s := range sinks {
			s.Abort()
		}
		for _, s := range streams {
			if s.sink != nil {
				s.sink.Abort()
			}
			if s.src != nil {
				s.src.Close()
			}
		}
		if segDir != nil {
			segDir.Remove()
		}
		if rj != nil {
			// A decoder that fails because the run was stopped (Ctrl-C
			// reaches ffmpeg too) is no fault of the input: the caller's
			// context is cancelled by then.
			var ie *inputError
			if rj.done() == 0 || errors.As(err, &ie) && parent.Err() == nil {
				rj.remove() // nothing worth keeping, or an input that cannot be restored
			} else {
				rj.close() // the finished parts wait for a rerun
				if req.Resume.Kept != nil {
					req.Resume.Kept(int(rj.j.Done()))
				}
			}
		}
	}()

	// Encoders first: they check the output directory before any work.
	skip, resumed := 0, 0 // parts and output frames finished by an earlier run
	var from checkpoint   // a causal engine's checkpoint resumed after
	if resumable {
		w, err := video.NewWorkdir(req.Output) // checks the output's place
		if err != nil {
			return nil, err
		}
		w.Remove()
		if rj, from, err = openResume(&req, info, enc, parts, total, cps, rsm); err != nil {
			return nil, err
		}
		if skip = rj.done(); skip > 0 {
			resumed = parts[skip-1].start + parts[skip-1].count
		}
	} else if len(parts) > 1 && !req.Discard {
		var err error
		if segDir, err = video.NewWorkdir(req.Output); err != nil {
			return nil, err
		}
	}
	var files []string // the parts' files, to join
	for i := range parts {
		switch {
		case rj != nil:
			files = append(files, rj.file(i))
		case segDir != nil:
			files = append(files, segDir.Path(fmt.Sprintf("part%04d%s", i, filepath.Ext(req.Output))))
		}
	}
	open := func(i int) (Sink, error) {
		if partStarted != nil {
			partStarted(i)
		}
		if req.Discard {
			return discard{}, nil
		}
		e := enc
		e.ExpectFrames = parts[i].count
		out := req.Output
		if len(parts) > 1 { // the streams are muxed in when the parts are joined
			out = files[i]
			e.Intermediate = true // the joined file is synced
			e.NoReplace = false   // a hidden name of its own; the join checks the output
		} else {
			e.CarryOptions = carry
		}
		sink, err := video.NewEncoder(ctx, out, e)
		if err != nil {
			return nil, err
		}
		return sink, nil
	}
	var partDone func(i int) error
	if rj != nil {
		partDone = rj.finished
	}
	segs := group(parts[skip:], nseg) // each segment's first part, from skip
	for k := range len(segs) - 1 {
		s, err := newPartSink(parts, skip+segs[k], skip+segs[k+1], open, partDone)
		if s.cur != nil {
			sinks = append(sinks, s)
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			if c, ok := s.cur.(interface{ Carried() video.Carried }); ok {
				carried = c.Carried()
			}
		}
	}
	segRange := func(k int) part { // segment k's frames
		a, b := parts[skip+segs[k]], parts[skip+segs[k+1]-1]
		return part{a.start, b.start + b.count - a.start}
	}
	progress := req.Progress
	if p := progress; p != nil && resumed > 0 {
		progress = func(n, _ int) { p(resumed+n, total) }
	}
	if nstream == 1 && plan != nil { // one causal stream, the segments' encoders
		streams[0] = stream{frames: total - from.in, out: total - resumed}
		if len(sinks) == 1 {
			streams[0].sink = sinks[0]
		} else {
			counts := make([]int, len(sinks))
			for k := range counts {
				counts[k] = segRange(k).count
			}
			var fp func(int)
			if p := progress; p != nil {
				fp = func(n int) { p(n, total-resumed) }
				progress = nil // the fanout reports frames encoded, not queued
			}
			streams[0].sink = newFanout(sinks, counts, min(max(fanoutBytes/format.FrameBytes(ow, oh), 2), total), fp)
		}
	} else {
		streams = streams[:len(sinks)]
		for k := range streams {
			streams[k] = stream{frames: segRange(k).count, sink: sinks[k]}
		}
	}
	sinks = nil
	for i := range streams {
		start := from.in
		if plan == nil {
			start = parts[skip+segs[i]].start
		}
		dec, err := video.NewDecoder(ctx, info, video.DecodeOptions{StartFrame: start, MaxFrames: streams[i].frames, PixFmt: fmts.decode})
		if err != nil {
			return nil, err
		}
		streams[i].src = dec
	}
	// The audio the join would re-encode is encoded beside the video
	// (video.AudioAhead), started here so that its probe does not hold up
	// the first frames; it is stopped and removed when Restore returns.
	var audio *video.AudioAhead
	audioReady := make(chan struct{})
	if len(parts) > 1 && !req.Discard {
		go func() {
			defer close(audioReady)
			audio, _ = video.StartAudio(ctx, carry, req.Output) // none, or failed: the join encodes it
		}()
	} else {
		close(audioReady)
	}
	defer func() {
		<-audioReady
		audio.Close()
	}()
	var st Stages
	mark := func(d *float64) func() {
		t := time.Now()
		return func() { *d = time.Since(t).Seconds() }
	}
	st.Start = time.Since(start).Seconds()
	cfg := config{w: w, h: h, ow: ow, oh: oh, batch: max(req.Batch, 1), plan: plan, in: fmts.in, format: format, total: total - resumed, progress: progress, onBatch: req.OnBatch}
	engines := []Engine{req.Engine}
	if plan != nil {
		if resumed > 0 {
			cfg.plan = plan[from.batch+1:]
		}
		if rj != nil && len(cps) > 0 {
			sv := &saver{Engine: req.Engine, r: rsm, next: len(plan) - len(cfg.plan), at: map[int]checkpoint{}}
			for _, c := range cps {
				sv.at[c.batch] = c
			}
			sv.save = func(c checkpoint, state []byte) error {
				return rj.saved(slices.Index(cps, c), c.out, state)
			}
			engines[0] = sv
		}
	} else {
		engines = append(engines, req.More...)
	}
	done := mark(&st.Stream)
	if len(streams) > 0 {
		waits, err := run(ctx, cancel, streams, engines[:min(len(engines), len(streams))], cfg)
		if err != nil {
			return nil, err
		}
		st.WaitModel, st.WaitEncoder = waits.model.Seconds()/float64(len(streams)), waits.encoder.Seconds()/float64(len(streams))
		st.Latency = latency(waits.latency)
		st.Streams = waits.times(start)
	}
	if sv, ok := engines[0].(*saver); ok {
		st.Checkpoint += sv.spent.Seconds()
	}
	if rj != nil {
		st.Checkpoint += rj.spent().Seconds()
	}
	done()
	done = mark(&st.Finish)
	for i := range streams {
		s := &streams[i]
		s.src.Close()
		var err error
		if s.sink != nil {
			err = s.sink.Close()
		}
		s.sink, s.src = nil, nil
		if err != nil {
			return nil, err
		}
	}
	done()
	if len(parts) > 1 && !req.Discard {
		done = mark(&st.Join)
		counts := make([]int, len(parts))
		for i, p := range parts {
			counts[i] = p.count
		}
		<-audioReady
		joined, err := video.Concat(ctx, files, req.Output, video.ConcatOptions{CarryOptions: carry, NoReplace: enc.NoReplace,
			Frames: counts, FPS: fps, Audio: audio})
		if err != nil {
			return nil, err
		}
		carried.Add(joined)
		if rj != nil {
			rj.remove()
			rj = nil
		} else {
			segDir.Remove()
		}
		done()
	}
	switch {
	case info.Deinterlace != "":
		carried.Carried = append(carried.Carried, "progressive (deinterlaced with "+string(info.Deinterlace)+")")
	case info.Interlaced() != "":
		carried.Dropped = append(carried.Dropped, video.Drop{What: "interlacing", Why: "deinterlacing is off: the frames went to the model as they are, and the output is flagged progressive"})
	}
	if reduced != nil {
		carried.Dropped = append(carried.Dropped, *reduced)
	}
	ok = true
	if !req.Discard { // lists, never null, in JSON
		carried.Carried, carried.Dropped = append([]string{}, carried.Carried...), append([]video.Drop{}, carried.Dropped...)
	}
	sec := time.Since(start).Seconds()
	return &Result{Frames: total, FPS: float64(total) / sec, Seconds: sec, Width: ow, Height: oh, Output: req.Output, ResumedFrom: resumed, Stages: st, Carried: carried}, nil
}

// outputSAR is the sample aspect ratio that shows an ow x oh output at
// the display aspect ratio of a w x h input of sample aspect ratio sar:
// sar itself when the model scales both sides alike. An input that states
// none (square pixels) gives none.
func outputSAR(sar video.Rational, w, h, ow, oh int) video.Rational {
	if !sar.Valid() {
		return video.Rational{}
	}
	return video.Rational{Num: sar.Num * w * oh, Den: sar.Den * h * ow}.Reduced()
}

// discard is a Sink that drops frames.
type discard struct{}

func (discard) Write([]byte) error { return nil }
func (discard) Close() error       { return nil }
func (discard) Abort()             {}

type part struct{ start, count int }

// segmentRanges splits total frames into n contiguous parts of near-equal
// size.
func segmentRanges(total, n int) []part {
	ps := make([]part, n)
	for i := range ps {
		a, b := total*i/n, total*(i+1)/n
		ps[i] = part{a, b - a}
	}
	return ps
}

// stream is one segment: its input frames, decoder and encoder, and its
// output frames when not as many (a causal stream resumed after a
// checkpoint, whose batches before it read frames that were output
// later).
type stream struct {
	src    Source
	sink   Sink
	frames int
	out    int // 0: frames
}

// outFrames returns the frames the stream's writer writes.
func (s *stream) outFrames() int {
	if s.out > 0 {
		return s.out
	}
	return s.frames
}

// inputError is an error of the input itself: its decoder failed, or it
// ended early. It discards a resumable run's journal.
type inputError struct{ error }

func (e *inputError) Unwrap() error { return e.error }

type config struct {
	w, h, ow, oh int
	batch        int
	plan         []int               // batch sizes, when the engine chooses them
	in           backend.PixelFormat // of the frames decoded
	format       backend.PixelFormat // of the frames encoded
	total        int
	progress     func(done, total int)
	onBatch      func(b backend.Batch, frames int)
}

// depth is the number of batches per segment: one filling, one computing,
// one writing.
const depth = 3

// writerWaits sums the writers' time waiting for results and in Write.
type writerWaits struct {
	mu             sync.Mutex
	model, encoder time.Duration
	latency        []time.Duration // per batch, in the order written
	streams        []streamTimes
}

// streamTimes are a writer's first frame, last frame and end.
type streamTimes struct{ first, last, end time.Time }

// times returns the writers' times relative to start.
func (w *writerWaits) times(start time.Time) []StreamTimes {
	since := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start).Seconds()
	}
	out := make([]StreamTimes, len(w.streams))
	for i, t := range w.streams {
		out[i] = StreamTimes{First: since(t.first), Last: since(t.last), End: since(t.end)}
	}
	return out
}

func (w *writerWaits) add(model, encoder time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.model += model
	w.encoder += encoder
}

// run moves all frames of all streams through engs, in the stage graph
// (stages.go). It returns the first error of any stage; every goroutine
// has ended when it returns.
func run(ctx context.Context, cancel context.CancelCauseFunc, streams []stream, engs []Engine, c config) (*writerWaits, error) {
	inFS := c.in.FrameBytes(c.w, c.h)
	outFS := c.format.FrameBytes(c.ow, c.oh)
	g := newStages(engs, len(streams), depth, len(streams))
	defer g.release()
	work, done, free := g.work, g.done, g.free
	size := func(i int) int { return c.batch }
	if c.plan != nil {
		size = func(i int) int { return c.plan[i] }
		c.batch = 0
		for _, n := range c.plan {
			c.batch = max(c.batch, n)
		}
	}
	if err := g.alloc(c.batch, c.w, c.h, c.in, c.format); err != nil {
		return nil, err
	}
	fail := func(err error) { cancel(err) }
	waits := &writerWaits{streams: make([]streamTimes, len(streams))}
	var written atomic.Int64
	readers := make([]func(), len(streams))
	writers := make([]func(), len(streams))
	for i, s := range streams {
		readers[i] = func() { // reader: decode into free batches
			for read, nb := 0, 0; read < s.frames; nb++ {
				var b backend.Batch
				select {
				case b = <-free[i]:
				case <-ctx.Done():
					return
				}
				in := b.In()
				n := 0
				var first time.Time
				for n < size(nb) && read < s.frames {
					if err := s.src.Read(in[n*inFS : (n+1)*inFS]); err != nil {
						if errors.Is(err, io.EOF) {
							err = fmt.Errorf("the input ended after %d of %d frames", read, s.frames)
						}
						fail(&inputError{err})
						return
					}
					if n == 0 {
						first = time.Now()
					}
					n++
					read++
				}
				select {
				case work[i%len(engs)] <- job{seg: i, b: b, n: n, read: first}:
				case <-ctx.Done():
					return
				}
			}
		}
		writers[i] = func() { // writer: wait for results, encode, recycle
			var modelWait, encoder time.Duration
			tm := &waits.streams[i] // this writer's alone
			defer func() {
				tm.end = time.Now()
				waits.add(modelWait, encoder)
			}()
			left := s.outFrames()
			for left > 0 {
				var j job
				t := time.Now()
				select {
				case jj, ok := <-done[i]:
					if !ok {
						// Every driver has ended and the engine gave
						// fewer frames than the segment holds (its
						// OutCounter counts fall short): run then
						// reports the frames missing.
						return
					}
					j = jj
				case <-ctx.Done():
					return
				}
				err := j.b.Wait()
				modelWait += time.Since(t)
				if err != nil {
					fail(err)
					return
				}
				if c.onBatch != nil {
					c.onBatch(j.b, j.n)
				}
				nout := j.n
				if oc, ok := j.b.(model.OutCounter); ok {
					nout = oc.OutFrames()
				}
				frame := func(k int) []byte { return j.b.Out()[k*outFS : (k+1)*outFS] }
				if fo, ok := j.b.(model.FrameOuter); ok {
					frame = fo.OutFrame
				}
				if nout > 0 {
					waits.mu.Lock()
					waits.latency = append(waits.latency, time.Since(j.read))
					waits.mu.Unlock()
				}
				t = time.Now()
				for k := 0; k < nout; k++ {
					if tm.first.IsZero() {
						tm.first = time.Now()
					}
					if k == nout-1 && left == nout {
						tm.last = time.Now()
					}
					if err := s.sink.Write(frame(k)); err != nil {
						fail(err)
						return
					}
				}
				encoder += time.Since(t)
				left -= nout
				if n := written.Add(int64(nout)); c.progress != nil {
					c.progress(int(n), c.total)
				}
				free[i] <- j.b
			}
		}
	}
	g.run(ctx, cancel, readers, writers, nil)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if n := int(written.Load()); n != c.total {
		return nil, fmt.Errorf("wrote %d of %d frames", n, c.total)
	}
	return waits, nil
}
