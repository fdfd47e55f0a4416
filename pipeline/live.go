package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// LiveRequest is one live stream: frames in from a source as they arrive,
// restored frames out to a sink, until the source ends, stalls or the
// context is cancelled.
type LiveRequest struct {
	Input  video.LiveInput
	Output video.LiveOutput // its Encode sets the encoder; the size is set here
	// Open makes the engine for frames of w x h; done frees it. A source
	// that reconnects gets a new engine: the model's state starts afresh.
	Open func(w, h int) (eng Engine, done func(), err error)
	// Batch is the frames handed to an engine that does not plan its own
	// batches (default 1: the lowest latency).
	Batch int
	// MaxLatency bounds the frames in flight between the source and the
	// sink to this many seconds of video (0: a second's, and at least
	// three batches: one filling, one computing, one writing).
	MaxLatency time.Duration
	// Drop drops whole input frames when the engine cannot keep up (the
	// output keeps the times of the frames it has, so it is re-timed),
	// instead of letting the source back up.
	Drop bool
	// IdleTimeout ends the stream when the source sends nothing for this
	// long (0: wait for ever).
	IdleTimeout time.Duration
	// Reconnect opens the source again when it ends, until it sends
	// nothing for IdleTimeout.
	Reconnect bool
	// MaxOutputPixels, when positive, bounds the restored frames, width x
	// height: a source that the engine restores to more is refused when
	// its frames' size is known (vsr serve --max-output-pixels). Sources
	// over video.DefaultLimits are refused by the decoder.
	MaxOutputPixels int64
	// Stats, if set, is called every StatsEvery (default 5 s) and once at
	// the end (Final).
	Stats      func(LiveStats)
	StatsEvery time.Duration
}

// LiveStats describe a live stream: totals, and rates and latencies over
// the last interval (over the last frames at the end).
type LiveStats struct {
	Seconds     float64 `json:"seconds"`
	Width       int     `json:"width"`
	Height      int     `json:"height"`
	InFrames    int     `json:"in_frames"`
	OutFrames   int     `json:"out_frames"`
	Dropped     int     `json:"dropped_frames"`
	InFPS       float64 `json:"in_fps"`
	OutFPS      float64 `json:"out_fps"`
	LatencyP50  float64 `json:"latency_p50_seconds"`
	LatencyP99  float64 `json:"latency_p99_seconds"`
	Connections int     `json:"connections"`
	Final       bool    `json:"final"`
	// Carried says what the output carries of the source besides the
	// picture, and what it drops and why.
	video.Carried
}

// liveMeter gathers a stream's statistics from its goroutines.
type liveMeter struct {
	mu                      sync.Mutex
	start                   time.Time
	in, out, dropped, conns int
	lastIn, lastOut         int
	last                    time.Time
	window, all             []float64 // latencies of the interval, and of the last frames
	w, h                    int
	carried                 video.Carried
}

const keptLatencies = 10000

func (m *liveMeter) written(lat time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.out++
	m.window = append(m.window, lat.Seconds())
	if m.all = append(m.all, lat.Seconds()); len(m.all) > 2*keptLatencies {
		m.all = append(m.all[:0], m.all[len(m.all)-keptLatencies:]...)
	}
}

func (m *liveMeter) count(f func(m *liveMeter)) {
	m.mu.Lock()
	f(m)
	m.mu.Unlock()
}

// snapshot returns the statistics now and starts a new interval.
func (m *liveMeter) snapshot(final bool) LiveStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	dt := now.Sub(m.last).Seconds()
	s := LiveStats{Seconds: now.Sub(m.start).Seconds(), Width: m.w, Height: m.h, InFrames: m.in, OutFrames: m.out, Dropped: m.dropped,
		Connections: m.conns, Final: final, Carried: m.carried}
	lat := m.window
	if final {
		lat = m.all
		dt = s.Seconds
		m.lastIn, m.lastOut = 0, 0
	}
	if dt > 0 {
		s.InFPS, s.OutFPS = float64(m.in-m.lastIn)/dt, float64(m.out-m.lastOut)/dt
	}
	if len(lat) > 0 {
		l := slices.Clone(lat)
		slices.Sort(l)
		s.LatencyP50 = l[len(l)/2]
		s.LatencyP99 = l[min(len(l)-1, int(math.Ceil(0.99*float64(len(l))))-1)]
	}
	m.window, m.last, m.lastIn, m.lastOut = m.window[:0], now, m.in, m.out
	return s
}

// audioQueue holds the source's audio packets until the frames of their
// time are written, so the sink gets both in time order.
type audioQueue struct {
	mu sync.Mutex
	q  []*video.LivePacket
}

func (a *audioQueue) push(p *video.LivePacket) {
	a.mu.Lock()
	a.q = append(a.q, p)
	a.mu.Unlock()
}

// flush writes the packets up to ns (all with math.MaxInt64).
func (a *audioQueue) flush(enc *video.LiveEncoder, ns int64) error {
	a.mu.Lock()
	n := 0
	for n < len(a.q) && a.q[n].NS <= ns {
		n++
	}
	due := a.q[:n:n]
	a.q = a.q[n:]
	a.mu.Unlock()
	for _, p := range due {
		if err := enc.WriteAudio(p.NS, p.Key, p.Data); err != nil {
			return err
		}
	}
	return nil
}

// Live runs req until the source ends (or stalls for IdleTimeout), then
// finishes the sink; it returns the final statistics. Cancelling ctx stops
// the stream: the sink is finished as at the source's end, and the error
// is ctx's.
func Live(ctx context.Context, req LiveRequest) (*LiveStats, error) {
	now := time.Now()
	f := liveFormats(req.Output.Encode.PixFmt, video.Colour{}, 2, 2)
	req.Input.PixFmt = f.decode
	r := &liveRun{req: req, m: &liveMeter{start: now, last: now}, lastNS: -1, in: f.in}
	defer func() {
		if r.enc != nil {
			r.enc.Abort()
		}
	}()
	stopStats := r.report()
	err := r.run(ctx)
	if r.enc != nil && (err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		// The source ended, or the stream was stopped: finish the sink.
		ferr := r.audio.flush(r.enc, math.MaxInt64)
		if cerr := r.enc.Close(); ferr == nil {
			ferr = cerr
		}
		r.enc = nil
		if err == nil {
			err = ferr
		}
	}
	stopStats()
	s := r.m.snapshot(true)
	if req.Stats != nil {
		req.Stats(s)
	}
	return &s, err
}

// liveRun is a live stream's state across its source's connections.
type liveRun struct {
	req    LiveRequest
	m      *liveMeter
	enc    *video.LiveEncoder  // the sink, opened at the first connection
	in     backend.PixelFormat // of the frames decoded
	format backend.PixelFormat // of the frames it takes
	audio  audioQueue
	// The output's clock: the packets of a source that reconnected are
	// shifted by offset to follow lastNS, the last frame written, by
	// frameDur.
	offset, lastNS, frameDur int64
}

// report calls req.Stats every StatsEvery until the returned stop.
func (r *liveRun) report() (stop func()) {
	if r.req.Stats == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(cmpOr(r.req.StatsEvery, 5*time.Second))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.req.Stats(r.m.snapshot(false))
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// run streams each connection of the source: one, or with Reconnect as
// long as the source comes back within IdleTimeout.
func (r *liveRun) run(ctx context.Context) error {
	for conn := 0; conn == 0 || r.req.Reconnect && ctx.Err() == nil; conn++ {
		var until time.Time // how long a source that went away may take to come back
		if conn > 0 {
			until = time.Now().Add(r.req.IdleTimeout)
			if r.req.IdleTimeout <= 0 {
				until = time.Now().Add(math.MaxInt64)
			}
		}
		dec, idle, err := connect(ctx, r.req, until)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && conn == 0:
			return err
		case err != nil:
			return nil // the source did not come back: the stream is over
		}
		err = r.connection(ctx, dec, idle, conn == 0)
		idle.stop()
		dec.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// connection streams one connection of the source, with an engine of its
// own (warmed up first, on the first connection).
func (r *liveRun) connection(ctx context.Context, dec *video.LiveDecoder, idle *idleWatch, first bool) error {
	w, h := dec.Size()
	idle.timeout.Store(0) // the source waits while the model gets ready
	if first {
		if err := warmup(ctx, r.req, w, h); err != nil {
			return err
		}
	}
	eng, done, err := r.req.Open(w, h)
	if err != nil {
		return err
	}
	defer done()
	ow, oh := eng.OutputSize(w, h)
	if err := fits(r.req, w, h, ow, oh); err != nil {
		return err
	}
	idle.touch()
	idle.timeout.Store(int64(r.req.IdleTimeout))
	switch {
	case r.enc == nil:
		if err := r.openSink(dec, w, h, ow, oh); err != nil {
			return err
		}
	case ow != r.m.w || oh != r.m.h:
		return fmt.Errorf("live input %s came back at %dx%d, which restores to %dx%d, not the stream's %dx%d", r.req.Input.URL, w, h, ow, oh, r.m.w, r.m.h)
	}
	r.m.count(func(m *liveMeter) { m.conns++ })
	rebase := r.lastNS >= 0
	err = r.stream(ctx, dec, idle, eng, w, h, func(ns int64) int64 {
		if rebase {
			r.offset, rebase = r.lastNS+max(r.frameDur, 1e6)-ns, false
		}
		return ns + r.offset
	})
	if d := dec.FrameDuration(); d > 0 {
		r.frameDur = d
	}
	return err
}

// openSink starts the encoder for frames of ow x oh, with the source's
// audio.
func (r *liveRun) openSink(dec *video.LiveDecoder, w, h, ow, oh int) error {
	if ow <= 0 || oh <= 0 {
		return fmt.Errorf("live input %s: a %dx%d video is too small for this model", r.req.Input.URL, w, h)
	}
	o := r.req.Output
	o.Encode.Width, o.Encode.Height, o.Audio = ow, oh, dec.AudioTrack()
	o.Encode.Colour, o.Encode.SAR = liveColour(dec.Colour()), outputSAR(dec.SAR(), w, h, ow, oh)
	r.format = liveFormats(o.Encode.PixFmt, o.Encode.Colour, ow, oh).out
	o.Encode.InputPixFmt = r.format.Name()
	// The sink outlives a cancelled stream, to be finished.
	enc, err := video.NewLiveEncoder(context.Background(), o)
	if err != nil {
		return err
	}
	r.enc = enc
	r.m.count(func(m *liveMeter) { m.w, m.h, m.carried = ow, oh, enc.Carried() })
	return nil
}

// warmup runs a batch of black frames (a first and a middle chunk for a
// model.Streamer) through a session of its own,
// so that the stream's first frames do not wait for kernels to compile
// and convolution algorithms to be chosen (a queue's worth of frames
// would be dropped or back up meanwhile). The session is then closed: the
// stream's starts with no state.
func warmup(ctx context.Context, req LiveRequest, w, h int) error {
	eng, done, err := req.Open(w, h)
	if err != nil {
		return err
	}
	defer done()
	sizes := []int{max(req.Batch, 1)}
	if st, ok := eng.(model.Streamer); ok {
		sizes = []int{st.LiveBatch(0), st.LiveBatch(1)} // a first and a middle chunk
	}
	ow, oh := eng.OutputSize(w, h)
	if err := fits(req, w, h, ow, oh); err != nil {
		return err
	}
	if ow <= 0 || oh <= 0 {
		return nil // refused with its message later
	}
	f := liveFormats(req.Output.Encode.PixFmt, video.Colour{}, ow, oh)
	b, err := eng.NewBatch(slices.Max(sizes), w, h, f.in, f.out)
	if err != nil {
		return err
	}
	defer b.Free()
	runtime.LockOSThread() // as the stream will drive it
	defer runtime.UnlockOSThread()
	for _, n := range sizes {
		if err := eng.Start(ctx, b, n); err != nil {
			return err
		}
		if err := b.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// fits refuses frames of w x h that the engine restores to ow x oh when
// that is more than req.MaxOutputPixels.
func fits(req LiveRequest, w, h, ow, oh int) error {
	if req.MaxOutputPixels <= 0 || ow <= 0 || oh <= 0 || int64(ow)*int64(oh) <= req.MaxOutputPixels {
		return nil
	}
	return fmt.Errorf("live input %s: its %dx%d frames restore to %dx%d = %d pixels, over the limit of %d (vsr serve --max-output-pixels): send a smaller source, or ask for a smaller size or sr_ratio",
		req.Input.URL, w, h, ow, oh, int64(ow)*int64(oh), req.MaxOutputPixels)
}

// connect opens the source and reads its header, trying again until the
// time until.
func connect(ctx context.Context, req LiveRequest, until time.Time) (*video.LiveDecoder, *idleWatch, error) {
	for {
		dec, err := video.OpenLive(ctx, req.Input)
		if err != nil {
			return nil, nil, err
		}
		// Before its header, a source gets time to connect and ffmpeg to
		// probe it; one that went away has until to come back.
		wait := max(req.IdleTimeout, startWait)
		if !until.IsZero() {
			wait = max(time.Until(until), 100*time.Millisecond)
		}
		if req.IdleTimeout <= 0 {
			wait = 0
		}
		idle := watchIdle(dec, wait)
		if err = dec.Header(); err == nil {
			idle.timeout.Store(int64(req.IdleTimeout))
			return dec, idle, nil
		}
		idle.stop()
		dec.Close()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("live input %s: nothing arrived within %v", req.Input.URL, wait)
		}
		if ctx.Err() != nil || time.Now().After(until) {
			return nil, nil, err
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// DefaultIdleTimeout is the silence that ends a stream unless the caller
// says otherwise (vsr restore --idle-timeout, a live session's
// idle_timeout).
const DefaultIdleTimeout = 10 * time.Second

// startWait is the least time a source has to send its header.
const startWait = 10 * time.Second

// idleWatch stops a decoder whose source sends nothing for a while.
type idleWatch struct {
	last    atomic.Int64 // unix nanoseconds of the last packet
	timeout atomic.Int64 // a time.Duration
	quit    chan struct{}
}

func watchIdle(dec *video.LiveDecoder, timeout time.Duration) *idleWatch {
	w := &idleWatch{quit: make(chan struct{})}
	w.touch()
	w.timeout.Store(int64(timeout))
	if timeout <= 0 {
		return w
	}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if to := time.Duration(w.timeout.Load()); to > 0 && time.Since(time.Unix(0, w.last.Load())) > to {
					dec.Stop()
					return
				}
			case <-w.quit:
				return
			}
		}
	}()
	return w
}

func (w *idleWatch) touch() { w.last.Store(time.Now().UnixNano()) }
func (w *idleWatch) stop()  { close(w.quit) }

// liveFrame is a frame handed to the engine: its time and when it arrived.
type liveFrame struct {
	ns   int64
	read time.Time
}

// stream moves the frames of one connection of the source through eng
// into the sink, in the stage graph (stages.go) of one stream, clock
// turning the source's times into the output's.
func (r *liveRun) stream(ctx context.Context, dec *video.LiveDecoder, idle *idleWatch, eng Engine, w, h int, clock func(int64) int64) error {
	req, m, enc, audio := r.req, r.m, r.enc, &r.audio
	_, planner := eng.(model.Planner)
	st, streamer := eng.(model.Streamer)
	if planner && !streamer {
		return errors.New("this model cannot restore a live stream (it needs the video's length)")
	}
	size := func(i int) int { return max(req.Batch, 1) }
	if streamer {
		size = st.LiveBatch
	}
	most := max(size(0), size(1))
	fps := 25.0
	if d := dec.FrameDuration(); d > 0 {
		fps = 1e9 / float64(d)
	}
	// Batches in flight: MaxLatency's worth of video (at least one
	// filling and one computing), by default a second's (at least one
	// filling, one computing, one writing), which absorbs the bursts in
	// which network sources deliver frames.
	depth := max(3, min(32, int(fps)/most))
	if req.MaxLatency > 0 {
		depth = max(2, min(32, int(req.MaxLatency.Seconds()*fps)/most))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g := newStages([]Engine{eng}, 1, depth, depth)
	defer g.release()
	if err := g.alloc(most, w, h, r.in, r.format); err != nil {
		return err
	}
	free, work, done := g.free[0], g.work[0], g.done[0]
	inFS := r.in.FrameBytes(w, h)
	outFS := enc.FrameSize()
	var mu sync.Mutex
	var fifo []liveFrame // frames given to the engine, not yet written
	reader := func() {
		var b backend.Batch
		n, total, nb := 0, 0, 0
		send := func(end int) bool {
			select {
			case work <- job{b: b, n: n, end: end}:
				b, n = nil, 0
				nb++
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			p, err := dec.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				cancel(err)
				return
			}
			idle.touch()
			p.NS = clock(p.NS)
			if p.Audio {
				audio.push(p)
				continue
			}
			m.count(func(m *liveMeter) { m.in++ })
			if b == nil {
				if req.Drop {
					select {
					case b = <-free:
					default:
						m.count(func(m *liveMeter) { m.dropped++ })
						continue
					}
				} else {
					select {
					case b = <-free:
					case <-ctx.Done():
						return
					}
				}
			}
			copy(b.In()[n*inFS:(n+1)*inFS], p.Data)
			mu.Lock()
			fifo = append(fifo, liveFrame{p.NS, time.Now()})
			mu.Unlock()
			n++
			total++
			if n == size(nb) && !send(0) {
				return
			}
		}
		switch {
		case streamer && total > 0:
			if b == nil {
				select {
				case b = <-free:
				case <-ctx.Done():
					return
				}
			}
			send(total)
		case n > 0:
			send(0)
		}
	}
	writer := func() {
		for j := range done {
			if err := j.b.Wait(); err != nil {
				cancel(err)
				return
			}
			nout := j.n
			if oc, ok := j.b.(model.OutCounter); ok {
				nout = oc.OutFrames()
			}
			frame := func(k int) []byte { return j.b.Out()[k*outFS : (k+1)*outFS] }
			if fo, ok := j.b.(model.FrameOuter); ok {
				frame = fo.OutFrame
			}
			for k := range nout {
				mu.Lock()
				if len(fifo) == 0 {
					mu.Unlock()
					cancel(errors.New("the model wrote more frames than it was given"))
					return
				}
				f := fifo[0]
				fifo = fifo[1:]
				mu.Unlock()
				if err := audio.flush(enc, f.ns); err != nil {
					cancel(err)
					return
				}
				if err := enc.WriteFrame(f.ns, frame(k)); err != nil {
					cancel(err)
					return
				}
				r.lastNS = f.ns
				m.written(time.Since(f.read))
			}
			free <- j.b
		}
	}
	// The batch after which the stream ends first tells the Streamer its
	// length.
	g.run(ctx, cancel, []func(){reader}, []func(){writer}, func(j job) bool {
		if j.end > 0 {
			flush, err := st.End(j.end)
			if err != nil {
				cancel(err)
				return false
			}
			if j.n == 0 && !flush {
				free <- j.b
				return false
			}
		}
		return true
	})
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if len(fifo) > 0 {
		return fmt.Errorf("the model kept %d frames at the end of the stream", len(fifo))
	}
	return nil
}
