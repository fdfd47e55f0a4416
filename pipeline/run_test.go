package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
)

// Frames carry their index in their first 4 bytes, so every stage can check
// order.

type fakeSource struct {
	next, end int
	delay     time.Duration
	failAt    int // frame index whose read fails (-1 = never)
	read      *atomic.Int64
}

func (s *fakeSource) Read(dst []byte) error {
	if s.next == s.end {
		return io.EOF
	}
	if s.next == s.failAt {
		return fmt.Errorf("decoder broke at frame %d", s.next)
	}
	time.Sleep(s.delay)
	binary.LittleEndian.PutUint32(dst, uint32(s.next))
	s.next++
	s.read.Add(1)
	return nil
}

func (s *fakeSource) Close() error { return nil }

type fakeSink struct {
	mu      sync.Mutex
	got     []int
	delay   time.Duration
	failAt  int
	written *atomic.Int64
	block   chan struct{} // if set, Write waits on it
	closed  bool
	aborted bool
}

func (s *fakeSink) Write(f []byte) error {
	if s.block != nil {
		<-s.block
	}
	time.Sleep(s.delay)
	i := int(binary.LittleEndian.Uint32(f))
	if i == s.failAt {
		return fmt.Errorf("encoder broke at frame %d", i)
	}
	s.mu.Lock()
	s.got = append(s.got, i)
	s.mu.Unlock()
	s.written.Add(1)
	return nil
}

func (s *fakeSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *fakeSink) Abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborted = true
}

// fakeEngine "upscales" by copying each frame's index into a larger output
// frame, asynchronously, after a delay.
type fakeEngine struct {
	delay  time.Duration
	failAt int // first frame of the batch whose Start fails
}

type fakeBatch struct {
	in, out []byte
	done    chan struct{}
}

func (b *fakeBatch) In() []byte  { return b.in }
func (b *fakeBatch) Out() []byte { return b.out }
func (b *fakeBatch) Wait() error {
	if b.done != nil {
		<-b.done
	}
	return nil
}
func (b *fakeBatch) Free() {}

const fw, fh = 4, 2 // input frame size; output is 2x

func (e *fakeEngine) OutputSize(w, h int) (int, int) { return 2 * w, 2 * h }

func (e *fakeEngine) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	return &fakeBatch{in: make([]byte, n*in.FrameBytes(w, h)), out: make([]byte, n*f.FrameBytes(2*w, 2*h))}, nil
}

func (e *fakeEngine) Start(ctx context.Context, bt backend.Batch, k int) error {
	b := bt.(*fakeBatch)
	if first := int(binary.LittleEndian.Uint32(b.in)); first == e.failAt {
		return fmt.Errorf("GPU out of memory at frame %d", first)
	}
	b.done = make(chan struct{})
	go func() {
		time.Sleep(e.delay)
		ifs, ofs := fw*fh*3, backend.RGB24.FrameBytes(2*fw, 2*fh)
		for i := 0; i < k; i++ {
			copy(b.out[i*ofs:i*ofs+4], b.in[i*ifs:i*ifs+4])
		}
		close(b.done)
	}()
	return nil
}

type setup struct {
	streams []stream
	sinks   []*fakeSink
	read    atomic.Int64
	written atomic.Int64
}

// sinkCfg configures the fake encoders of a setup.
type sinkCfg struct {
	delay  time.Duration
	failAt int
	block  chan struct{}
}

func newSetup(total, nseg int, src fakeSource, sink sinkCfg) *setup {
	s := &setup{}
	for _, p := range segmentRanges(total, nseg) {
		fs := src
		fs.next, fs.end, fs.read = p.start, p.start+p.count, &s.read
		k := &fakeSink{delay: sink.delay, failAt: sink.failAt, written: &s.written, block: sink.block}
		s.sinks = append(s.sinks, k)
		s.streams = append(s.streams, stream{src: &fs, sink: k, frames: p.count})
	}
	return s
}

func (s *setup) run(ctx context.Context, eng Engine, total, batch int) error {
	_, err := s.runWaits(ctx, eng, total, batch)
	return err
}

func (s *setup) runWaits(ctx context.Context, eng Engine, total, batch int) (*writerWaits, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	return run(ctx, cancel, s.streams, []Engine{eng}, config{w: fw, h: fh, ow: 2 * fw, oh: 2 * fh, batch: batch, format: backend.RGB24, total: total})
}

// noLeaks fails if goroutines started during the test are still running.
func noLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		for i := 0; i < 100; i++ {
			if runtime.NumGoroutine() <= before {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	})
}

func TestOrdering(t *testing.T) {
	noLeaks(t)
	for _, c := range []struct{ total, seg, batch int }{{1, 1, 1}, {7, 1, 3}, {50, 3, 4}, {50, 4, 1}, {9, 2, 8}} {
		s := newSetup(c.total, c.seg, fakeSource{failAt: -1, delay: 100 * time.Microsecond}, sinkCfg{failAt: -1})
		if err := s.run(context.Background(), &fakeEngine{delay: time.Millisecond, failAt: -1}, c.total, c.batch); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		for i, p := range segmentRanges(c.total, c.seg) {
			got := s.sinks[i].got
			if len(got) != p.count {
				t.Fatalf("%+v: segment %d got %d frames, want %d", c, i, len(got), p.count)
			}
			for j, f := range got {
				if f != p.start+j {
					t.Fatalf("%+v: segment %d frame %d is %d", c, i, j, f)
				}
			}
		}
	}
}

// TestBackPressure runs a fast decoder into a slow encoder: the decoder
// may run ahead by at most the batches in flight.
func TestBackPressure(t *testing.T) {
	noLeaks(t)
	const total, batch = 40, 2
	s := newSetup(total, 1, fakeSource{failAt: -1}, sinkCfg{failAt: -1, delay: 2 * time.Millisecond})
	var maxAhead int64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			maxAhead = max(maxAhead, s.read.Load()-s.written.Load())
			time.Sleep(200 * time.Microsecond)
		}
	}()
	err := s.run(context.Background(), &fakeEngine{failAt: -1}, total, batch)
	close(stop)
	<-stopped
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(depth * batch); maxAhead > limit {
		t.Errorf("decoder ran %d frames ahead of the encoder, limit %d", maxAhead, limit)
	}
	if maxAhead < batch {
		t.Errorf("decoder never ran ahead (%d): stages are not overlapping", maxAhead)
	}
}

// TestWaits: the writers' timings tell a slow model from slow encoders.
func TestWaits(t *testing.T) {
	noLeaks(t)
	const total = 20
	for _, c := range []struct {
		name        string
		model, sink time.Duration
	}{{"slow model", 5 * time.Millisecond, 0}, {"slow encoder", 0, 2 * time.Millisecond}} {
		s := newSetup(total, 1, fakeSource{failAt: -1}, sinkCfg{failAt: -1, delay: c.sink})
		w, err := s.runWaits(context.Background(), &fakeEngine{delay: c.model, failAt: -1}, total, 1)
		if err != nil {
			t.Fatal(err)
		}
		if slowModel := c.model > 0; (w.model > w.encoder) != slowModel || w.model+w.encoder < 15*time.Millisecond {
			t.Errorf("%s: writers waited %v for the model and %v on the encoder", c.name, w.model, w.encoder)
		}
		// Every batch's latency, at least the model's time for it.
		l := latency(w.latency)
		if l.Batches != total || l.First < c.model.Seconds() || l.Steady < c.model.Seconds() {
			t.Errorf("%s: latency %+v for %d batches", c.name, l, total)
		}
	}
}

// TestStreamTimes: each segment's writer reports when its first and last
// frames went to its encoder and when it ended, in order, the encoders'
// time between them.
func TestStreamTimes(t *testing.T) {
	noLeaks(t)
	const total, seg, delay = 30, 3, 2 * time.Millisecond
	s := newSetup(total, seg, fakeSource{failAt: -1}, sinkCfg{failAt: -1, delay: delay})
	start := time.Now()
	w, err := s.runWaits(context.Background(), &fakeEngine{failAt: -1}, total, 2)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start).Seconds()
	ts := w.times(start)
	if len(ts) != seg {
		t.Fatalf("%d stream times for %d segments", len(ts), seg)
	}
	for i, x := range ts {
		// 10 frames a segment: at least 9 writes' delay between the
		// first and the last, and the last's before the end.
		if !(x.First > 0 && x.Last-x.First >= 9*delay.Seconds() && x.End-x.Last >= delay.Seconds() && x.End <= elapsed) {
			t.Errorf("stream %d: %+v (run took %.3f s)", i, x, elapsed)
		}
	}
}

func TestCancel(t *testing.T) {
	noLeaks(t)
	block := make(chan struct{})
	s := newSetup(100, 2, fakeSource{failAt: -1}, sinkCfg{failAt: -1, block: block})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, &fakeEngine{failAt: -1}, 100, 2) }()
	select {
	case err := <-done:
		t.Fatalf("run ended before the encoder was released: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The sink is stuck in Write (as a real encoder blocked on a full
	// pipe would be until its process is killed); release it.
	close(block)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled run returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop after cancellation")
	}
}

func TestErrors(t *testing.T) {
	noLeaks(t)
	cases := []struct {
		name   string
		src    fakeSource
		sink   sinkCfg
		eng    fakeEngine
		expect string
	}{
		{"decoder", fakeSource{failAt: 13}, sinkCfg{failAt: -1}, fakeEngine{failAt: -1}, "decoder broke at frame 13"},
		{"engine", fakeSource{failAt: -1}, sinkCfg{failAt: -1}, fakeEngine{failAt: 8}, "GPU out of memory at frame 8"},
		{"encoder", fakeSource{failAt: -1}, sinkCfg{failAt: 21}, fakeEngine{failAt: -1}, "encoder broke at frame 21"},
	}
	for _, c := range cases {
		s := newSetup(40, 2, c.src, c.sink)
		err := s.run(context.Background(), &c.eng, 40, 4)
		if err == nil || !strings.Contains(err.Error(), c.expect) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.expect)
		}
	}
	// A source that ends early is an error, not a short output.
	s := newSetup(10, 1, fakeSource{failAt: -1}, sinkCfg{failAt: -1})
	s.streams[0].src.(*fakeSource).end = 6
	if err := s.run(context.Background(), &fakeEngine{failAt: -1}, 10, 4); err == nil || !strings.Contains(err.Error(), "ended after 6 of 10") {
		t.Errorf("short input: %v", err)
	}
}

func TestSegmentRanges(t *testing.T) {
	for _, c := range []struct{ total, n int }{{1, 1}, {10, 3}, {361, 4}, {5, 5}} {
		ps := segmentRanges(c.total, c.n)
		next := 0
		for _, p := range ps {
			if p.start != next || p.count < c.total/c.n || p.count > c.total/c.n+1 {
				t.Errorf("%+v: bad part %+v", c, p)
			}
			next += p.count
		}
		if next != c.total {
			t.Errorf("%+v: parts cover %d frames", c, next)
		}
	}
}

// TestEngines: segments spread over several engines (ranks) keep their
// order, and a failure on one rank stops all of them.
func TestEngines(t *testing.T) {
	noLeaks(t)
	runWith := func(s *setup, engs []Engine, total, batch int) error {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		_, err := run(ctx, cancel, s.streams, engs, config{w: fw, h: fh, ow: 2 * fw, oh: 2 * fh, batch: batch, format: backend.RGB24, total: total})
		return err
	}
	s := newSetup(50, 5, fakeSource{failAt: -1}, sinkCfg{failAt: -1})
	engs := []Engine{&fakeEngine{delay: time.Millisecond, failAt: -1}, &fakeEngine{delay: 2 * time.Millisecond, failAt: -1}, &fakeEngine{failAt: -1}}
	if err := runWith(s, engs, 50, 3); err != nil {
		t.Fatal(err)
	}
	for i, p := range segmentRanges(50, 5) {
		for j, f := range s.sinks[i].got {
			if f != p.start+j || len(s.sinks[i].got) != p.count {
				t.Fatalf("segment %d frame %d is %d (%d frames)", i, j, f, len(s.sinks[i].got))
			}
		}
	}
	// Rank 1 (segments 1 and 3) fails at frame 30 (segment 3's first).
	s = newSetup(50, 5, fakeSource{failAt: -1}, sinkCfg{failAt: -1})
	engs = []Engine{&fakeEngine{delay: time.Millisecond, failAt: -1}, &fakeEngine{failAt: 30}}
	if err := runWith(s, engs, 50, 5); err == nil || !strings.Contains(err.Error(), "at frame 30") {
		t.Errorf("a failing rank: %v", err)
	}
}

// shortEngine's batches give one frame fewer than they were given (an
// OutCounter that falls short).
type shortEngine struct{ fakeEngine }

type shortBatch struct {
	*fakeBatch
	n int
}

func (b *shortBatch) OutFrames() int { return max(b.n-1, 0) }

func (e *shortEngine) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	b, err := e.fakeEngine.NewBatch(n, w, h, in, f)
	return &shortBatch{fakeBatch: b.(*fakeBatch)}, err
}

func (e *shortEngine) Start(ctx context.Context, bt backend.Batch, k int) error {
	b := bt.(*shortBatch)
	b.n = k
	return e.fakeEngine.Start(ctx, b.fakeBatch, k)
}

// TestShortOutput: an engine that gives fewer frames than the segments
// hold ends the run with an error (the writers stop when the drivers
// have ended), not a hang.
func TestShortOutput(t *testing.T) {
	noLeaks(t)
	s := newSetup(20, 2, fakeSource{failAt: -1}, sinkCfg{failAt: -1})
	done := make(chan error, 1)
	go func() { done <- s.run(context.Background(), &shortEngine{fakeEngine{failAt: -1}}, 20, 4) }()
	select {
	case err := <-done:
		// 2 segments of 10 frames in batches of 4, 4 and 2: 6 batches.
		if err == nil || !strings.Contains(err.Error(), "wrote 14 of 20 frames") {
			t.Errorf("short output: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end when the engine gave too few frames")
	}
}
