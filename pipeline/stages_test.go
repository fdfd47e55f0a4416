package pipeline

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
)

// The stage graph alone (stages.go), with readers and writers of the
// test's own: a batch carries one frame, whose first 4 bytes tag it with
// its stream and sequence number (stream*1000 + k).

// stageEngine copies a batch's tag to its output after delay times its
// sequence number plus one (so the later batches of a stream are still in
// use when its writer is done with the first), and records what it
// started.
type stageEngine struct {
	delay   time.Duration
	failAt  int // tag whose Start fails (-1: none)
	mu      sync.Mutex
	started []int // tags, in the order started
	batches []*stageBatch
	busy    atomic.Int32 // Starts in progress
	overlap atomic.Bool  // two Starts at once: two drivers
}

type stageBatch struct {
	in, out []byte
	done    chan struct{} // closed when the work started ends
	freed   atomic.Bool
	early   atomic.Bool // freed while the engine still used it
}

func (b *stageBatch) In() []byte  { return b.in }
func (b *stageBatch) Out() []byte { return b.out }
func (b *stageBatch) Wait() error {
	if b.done != nil {
		<-b.done
	}
	return nil
}
func (b *stageBatch) Free() {
	if b.done != nil {
		select {
		case <-b.done:
		default:
			b.early.Store(true)
		}
	}
	b.freed.Store(true)
}

func (e *stageEngine) OutputSize(w, h int) (int, int) { return w, h }

func (e *stageEngine) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	b := &stageBatch{in: make([]byte, 4*n), out: make([]byte, 4*n)}
	e.mu.Lock()
	e.batches = append(e.batches, b)
	e.mu.Unlock()
	return b, nil
}

func (e *stageEngine) Start(ctx context.Context, bt backend.Batch, k int) error {
	if e.busy.Add(1) > 1 {
		e.overlap.Store(true)
	}
	defer e.busy.Add(-1)
	b := bt.(*stageBatch)
	tag := int(binary.LittleEndian.Uint32(b.in))
	if tag == e.failAt {
		return fmt.Errorf("engine failed at %d", tag)
	}
	e.mu.Lock()
	e.started = append(e.started, tag)
	e.mu.Unlock()
	done := make(chan struct{})
	b.done = done
	go func() {
		time.Sleep(e.delay * time.Duration(tag%1000+1))
		copy(b.out, b.in)
		close(done)
	}()
	return nil
}

// stagesRun runs n batches per stream through engs, stream i on engine
// i mod len(engs), with depth batches per stream, and returns the tags
// each stream's writer got and the run's error. last, if set, makes the
// reader end each stream with a job of no frames marked end (a live
// stream's end); start is the drivers' hook. A writer ends when its done
// queue closes, or at the first error, leaving the batches started to
// release.
func stagesRun(t *testing.T, engs []*stageEngine, streams, n, depth int, last bool, start func(g *stages, j job) bool) (*stages, [][]int, error) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	es := make([]Engine, len(engs))
	for i, e := range engs {
		es[i] = e
	}
	g := newStages(es, streams, depth, streams)
	if err := g.alloc(1, 1, 1, backend.RGB24, backend.RGB24); err != nil {
		t.Fatal(err)
	}
	got := make([][]int, streams)
	readers := make([]func(), streams)
	writers := make([]func(), streams)
	for i := range streams {
		readers[i] = func() {
			send := func(tag int, j job) bool {
				select {
				case j.b = <-g.free[i]:
				case <-ctx.Done():
					return false
				}
				binary.LittleEndian.PutUint32(j.b.In(), uint32(tag))
				select {
				case g.work[i%len(engs)] <- j:
					return true
				case <-ctx.Done():
					return false
				}
			}
			for k := range n {
				if !send(i*1000+k, job{seg: i, n: 1}) {
					return
				}
			}
			if last {
				send(i*1000+n, job{seg: i, n: 0, end: n})
			}
		}
		writers[i] = func() {
			for j := range g.done[i] { // ends when every driver has
				if ctx.Err() != nil {
					return // the batches started are left to release
				}
				if err := j.b.Wait(); err != nil {
					cancel(err)
					return
				}
				got[i] = append(got[i], int(binary.LittleEndian.Uint32(j.b.Out())))
				g.free[i] <- j.b
			}
		}
	}
	var hook func(j job) bool
	if start != nil {
		hook = func(j job) bool { return start(g, j) }
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		g.run(ctx, cancel, readers, writers, hook)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stage graph did not end")
	}
	g.release()
	for _, e := range engs {
		for _, b := range e.batches {
			if !b.freed.Load() || b.early.Load() {
				t.Errorf("a batch not freed, or freed while in use")
			}
		}
		if e.overlap.Load() {
			t.Errorf("an engine started two batches at once")
		}
	}
	return g, got, context.Cause(ctx)
}

// TestStagesEngines: streams spread over several engines, stream i on
// engine i mod len(engines), each engine started from one driver, every
// stream in order; the writers end when the done queues close.
func TestStagesEngines(t *testing.T) {
	noLeaks(t)
	engs := []*stageEngine{{delay: time.Millisecond, failAt: -1}, {failAt: -1}, {delay: 200 * time.Microsecond, failAt: -1}}
	_, got, err := stagesRun(t, engs, 5, 20, 3, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want := make([]int, 20)
		for k := range want {
			want[k] = i*1000 + k
		}
		if !slices.Equal(got[i], want) {
			t.Errorf("stream %d wrote %v", i, got[i])
		}
	}
	for e, eng := range engs {
		for _, tag := range eng.started {
			if tag/1000%len(engs) != e {
				t.Errorf("engine %d started stream %d's batch", e, tag/1000)
			}
		}
	}
}

// TestStagesStartError: a failing Start cancels the run with its error;
// every stage ends, on every engine, and the batches still in use are
// waited for before they are freed.
func TestStagesStartError(t *testing.T) {
	noLeaks(t)
	engs := []*stageEngine{{delay: time.Millisecond, failAt: 2}, {delay: 10 * time.Millisecond, failAt: -1}}
	_, got, err := stagesRun(t, engs, 4, 500, 3, false, nil)
	if err == nil || !strings.Contains(err.Error(), "engine failed at 2") {
		t.Fatalf("got %v, want the engine's error", err)
	}
	if len(got[0]) > 2 {
		t.Errorf("stream 0 wrote %d batches past its engine's failure", len(got[0])-2)
	}
	for i := range got {
		if len(got[i]) == 500 {
			t.Errorf("stream %d ran to its end after the failure", i)
		}
	}
}

// TestStagesSkip: a batch the start hook deals with itself (a live
// stream's end with nothing to flush, put back on the free queue) is
// neither started nor written, and the run still ends.
func TestStagesSkip(t *testing.T) {
	noLeaks(t)
	eng := &stageEngine{failAt: -1}
	var skipped atomic.Int32
	g, got, err := stagesRun(t, []*stageEngine{eng}, 1, 4, 3, true, func(g *stages, j job) bool {
		if j.end > 0 && j.n == 0 {
			skipped.Add(1)
			g.free[j.seg] <- j.b
			return false
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0], []int{0, 1, 2, 3}) || skipped.Load() != 1 || len(eng.started) != 4 {
		t.Errorf("wrote %v, %d skipped, %d started", got[0], skipped.Load(), len(eng.started))
	}
	if len(g.free[0]) != g.depth {
		t.Errorf("%d of %d batches back on the free queue", len(g.free[0]), g.depth)
	}
}

// TestStagesMismatch: run wants one reader and one writer per stream.
func TestStagesMismatch(t *testing.T) {
	g := newStages([]Engine{&stageEngine{failAt: -1}}, 2, 1, 1)
	defer func() {
		if recover() == nil {
			t.Error("run took 1 reader and 2 writers for 2 streams")
		}
	}()
	g.run(context.Background(), func(error) {}, []func(){func() {}}, []func(){func() {}, func() {}}, nil)
}
