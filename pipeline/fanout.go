package pipeline

import (
	"errors"
	"fmt"
	"sync"
)

// fanoutBytes bounds the frames a fanout holds: how far a causal engine may
// run ahead of its encoders (1 GiB is 194 frames of 2560x1440 yuv420p).
const fanoutBytes = 1 << 30

var errAborted = errors.New("aborted")

// fanout is the Sink of a causal engine's single stream when the output is
// encoded as several segments: frames go, in order, to the encoder of the
// segment that holds them. Each encoder has its own goroutine fed by a
// queue of frame copies, so the encoders of later segments start as soon as
// their frames exist while the earlier ones are still busy, and a segment's
// encoder is closed as soon as it has all its frames. All queues together
// hold at most limit frames; Write blocks beyond that. Progress counts the
// frames handed to the encoders, not those queued.
type fanout struct {
	sinks  []Sink
	counts []int
	queues []chan []byte
	free   chan []byte // frame buffers, nil until first used
	seg    int         // segment receiving frames; queues from seg on are open
	sent   int         // frames given to it
	wg     sync.WaitGroup

	mu       sync.Mutex
	err      error
	failed   chan struct{} // closed with the first error
	written  int           // frames handed to the encoders
	progress func(written int)
}

// newFanout starts one goroutine per sink; counts[i] frames go to sinks[i].
// progress, if set, is called after each frame an encoder took.
func newFanout(sinks []Sink, counts []int, limit int, progress func(written int)) *fanout {
	f := &fanout{sinks: sinks, counts: counts, queues: make([]chan []byte, len(sinks)),
		free: make(chan []byte, limit), failed: make(chan struct{}), progress: progress}
	for range limit {
		f.free <- nil
	}
	for i := range sinks {
		f.queues[i] = make(chan []byte, limit)
		f.wg.Add(1)
		go f.drain(i)
	}
	return f
}

// drain feeds segment i's encoder, then closes it (or aborts it after a
// failure anywhere). Only this goroutine touches sinks[i].
func (f *fanout) drain(i int) {
	defer f.wg.Done()
	s := f.sinks[i]
	for buf := range f.queues[i] {
		if f.failure() == nil {
			if err := s.Write(buf); err != nil {
				f.fail(err)
			} else {
				f.wrote()
			}
		}
		f.free <- buf
	}
	if f.failure() == nil {
		if err := s.Close(); err != nil {
			f.fail(err)
		}
		return
	}
	s.Abort()
}

// wrote counts a frame an encoder took and reports it, in order.
func (f *fanout) wrote() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written++
	if f.progress != nil {
		f.progress(f.written)
	}
}

func (f *fanout) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fanout) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
		close(f.failed)
	}
}

// Write queues a copy of frame for its segment's encoder.
func (f *fanout) Write(frame []byte) error {
	if err := f.failure(); err != nil {
		return err
	}
	if f.seg == len(f.queues) {
		return fmt.Errorf("more frames than the %d segments hold", len(f.queues))
	}
	var buf []byte
	select {
	case buf = <-f.free:
	case <-f.failed:
		return f.failure()
	}
	buf = append(buf[:0], frame...)
	f.queues[f.seg] <- buf // never blocks: every queue can hold every buffer
	if f.sent++; f.sent == f.counts[f.seg] {
		close(f.queues[f.seg])
		f.seg, f.sent = f.seg+1, 0
	}
	return nil
}

// Close waits for every encoder to finish and returns the first error.
func (f *fanout) Close() error {
	f.stop()
	return f.failure()
}

// Abort discards every segment's output.
func (f *fanout) Abort() {
	f.fail(errAborted)
	f.stop()
}

// stop closes the open queues and waits for the goroutines.
func (f *fanout) stop() {
	for ; f.seg < len(f.queues); f.seg++ {
		close(f.queues[f.seg])
	}
	f.wg.Wait()
}
