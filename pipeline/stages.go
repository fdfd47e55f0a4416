package pipeline

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/backend"
)

// The stage graph of a restore, shared by files (run, one stream per
// segment) and live streams (liveRun.stream, one stream):
//
//	reader (per stream) -> work (per engine) -> driver (per engine, on a locked OS thread) -> done (per stream) -> writer (per stream)
//	   ^                                                                                                                |
//	   +------------------------------------------ free (per stream: its batches) <------------------------------------+
//
// A reader fills batches taken from its stream's free queue and queues
// them for its engine: stream i runs on engine i mod len(engines). An
// engine is driven from one goroutine only, on one OS thread (a GPU
// context is current per thread), which starts each batch and hands it to
// its stream's writer. A writer waits for a batch's results, writes them
// and puts the batch back on the free queue. The first error of any stage
// cancels the context with it as the cause, and every stage then ends.
// The readers and writers are the callers'; stages owns the queues, the
// batches and the drivers.

// job is a batch in flight.
type job struct {
	seg  int // its stream
	b    backend.Batch
	n    int       // frames given to it
	read time.Time // when its first frame was read
	// end, when > 0, marks the batch after which a live stream ends: the
	// driver first tells a Streamer the stream's length (End).
	end int
}

// stages holds the queues and batches of a stage graph.
type stages struct {
	engs    []Engine
	depth   int                  // batches per stream
	free    []chan backend.Batch // per stream: its batches not in use
	work    []chan job           // per engine: batches to start
	done    []chan job           // per stream: batches started
	batches []backend.Batch      // every batch, to free
}

// newStages makes the queues of streams streams on engs: depth batches per
// stream (free and done) and work jobs per engine.
func newStages(engs []Engine, streams, depth, work int) *stages {
	g := &stages{engs: engs, depth: depth, work: make([]chan job, len(engs)), done: make([]chan job, streams), free: make([]chan backend.Batch, streams)}
	for e := range g.work {
		g.work[e] = make(chan job, work)
	}
	for i := range streams {
		g.done[i] = make(chan job, depth)
		g.free[i] = make(chan backend.Batch, depth)
	}
	return g
}

// alloc makes the depth batches of each stream (newStages's) on its
// engine, of batch frames of w x h in the format in, out in format, and
// puts them on its free queue. Those made before an error are freed by
// release.
func (g *stages) alloc(batch, w, h int, in, format backend.PixelFormat) error {
	for i := range g.free {
		for range g.depth {
			b, err := g.engs[i%len(g.engs)].NewBatch(batch, w, h, in, format)
			if err != nil {
				return err
			}
			g.batches = append(g.batches, b)
			g.free[i] <- b
		}
	}
	return nil
}

// release frees the batches, each once the engine is done with it: after
// an error a batch may still be in use (Wait returns at once for one
// already waited for or never started).
func (g *stages) release() {
	for _, b := range g.batches {
		b.Wait()
		b.Free()
	}
}

// run runs reader i and writer i of each stream i on goroutines of their
// own, the first engine's driver on the calling goroutine and the others'
// on goroutines of their own, and returns when the drivers and writers
// have ended. There is one reader and one writer per stream: it panics
// unless len(readers) == len(writers) == the streams of newStages. The
// work queues close when every reader has returned (a driver then ends),
// the done queues when every driver has (a writer that ranges over its
// done queue then ends). start, if set, is asked before a batch is
// started whether to start it (false: it has dealt with the batch).
func (g *stages) run(ctx context.Context, cancel context.CancelCauseFunc, readers, writers []func(), start func(j job) bool) {
	if len(readers) != len(g.free) || len(writers) != len(g.free) {
		panic(fmt.Sprintf("pipeline: %d readers and %d writers for %d streams", len(readers), len(writers), len(g.free)))
	}
	var rs, ws sync.WaitGroup
	for i := range readers {
		rs.Add(1)
		go func() {
			defer rs.Done()
			readers[i]()
		}()
		ws.Add(1)
		go func() {
			defer ws.Done()
			writers[i]()
		}()
	}
	go func() {
		rs.Wait()
		for _, w := range g.work {
			close(w)
		}
	}()
	var drivers sync.WaitGroup
	for e := 1; e < len(g.engs); e++ {
		drivers.Add(1)
		go func() {
			defer drivers.Done()
			g.drive(ctx, cancel, e, start)
		}()
	}
	g.drive(ctx, cancel, 0, start)
	drivers.Wait()
	for _, d := range g.done {
		close(d)
	}
	ws.Wait()
}

// drive starts the batches of engine e's work queue on it, from the
// calling goroutine locked to its OS thread, and hands each to its
// stream's done queue.
func (g *stages) drive(ctx context.Context, cancel context.CancelCauseFunc, e int, start func(j job) bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for j := range g.work[e] {
		if ctx.Err() != nil {
			continue // drain so the readers can finish
		}
		if start != nil && !start(j) {
			continue
		}
		if err := g.engs[e].Start(ctx, j.b, j.n); err != nil {
			cancel(err)
			continue
		}
		select {
		case g.done[j.seg] <- j:
		case <-ctx.Done():
		}
	}
}
