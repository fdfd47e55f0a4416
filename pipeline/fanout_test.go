package pipeline

import (
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fanoutFrames writes frames 0..n-1 to f and returns the first error.
func fanoutFrames(f *fanout, n int) error {
	buf := make([]byte, 16)
	for i := range n {
		binary.LittleEndian.PutUint32(buf, uint32(i))
		if err := f.Write(buf); err != nil {
			return err
		}
		clear(buf) // the fanout must have copied the frame
	}
	return nil
}

func newFakeSinks(n int, written *atomic.Int64) ([]Sink, []*fakeSink) {
	var sinks []Sink
	var fakes []*fakeSink
	for range n {
		k := &fakeSink{failAt: -1, written: written}
		sinks, fakes = append(sinks, k), append(fakes, k)
	}
	return sinks, fakes
}

// TestFanout checks that every encoder gets its segment's frames in order
// and is closed, that later encoders work while earlier ones are busy, and
// that the queue bound holds.
func TestFanout(t *testing.T) {
	noLeaks(t)
	var written atomic.Int64
	sinks, fakes := newFakeSinks(3, &written)
	counts := []int{4, 5, 3}
	// Segment 0's encoder is stuck until segment 1's has its first frame:
	// a fanout that fed the encoders one after the other would hang.
	fakes[0].block = make(chan struct{})
	fakes[1].block = make(chan struct{})
	go func() {
		fakes[1].block <- struct{}{} // segment 1 reached its first Write
		close(fakes[0].block)
		close(fakes[1].block)
	}()
	var reported []int
	f := newFanout(sinks, counts, 6, func(n int) { reported = append(reported, n) })
	errc := make(chan error, 1)
	go func() {
		err := fanoutFrames(f, 12)
		if err == nil {
			err = f.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("segment 1's encoder never started while segment 0's was busy")
	}
	for i, n := range reported {
		if n != i+1 || len(reported) != 12 {
			t.Fatalf("progress reported %v, want 1..12", reported)
		}
	}
	next := 0
	for i, k := range fakes {
		if len(k.got) != counts[i] || !k.closed || k.aborted {
			t.Fatalf("segment %d: frames %v, closed %v, aborted %v", i, k.got, k.closed, k.aborted)
		}
		for _, g := range k.got {
			if g != next {
				t.Fatalf("segment %d got frame %d, want %d", i, g, next)
			}
			next++
		}
	}

	// Bound: with slow encoders, the writer is at most limit frames ahead.
	written.Store(0)
	sinks, fakes = newFakeSinks(2, &written)
	for _, k := range fakes {
		k.delay = time.Millisecond
	}
	f = newFanout(sinks, []int{20, 20}, 3, nil)
	buf := make([]byte, 16)
	for i := range 40 {
		if err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
		if ahead := int64(i+1) - written.Load(); ahead > 3 {
			t.Fatalf("after frame %d the encoders are %d frames behind, limit 3", i, ahead)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFanoutErrors: a failing encoder fails the writer and the others are
// aborted; Abort discards everything.
func TestFanoutErrors(t *testing.T) {
	noLeaks(t)
	var written atomic.Int64
	sinks, fakes := newFakeSinks(3, &written)
	fakes[1].failAt = 6
	f := newFanout(sinks, []int{4, 4, 4}, 2, nil)
	err := fanoutFrames(f, 12)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil || !strings.Contains(err.Error(), "encoder broke at frame 6") {
		t.Fatalf("got %v", err)
	}
	if !fakes[2].aborted || fakes[2].closed || fakes[1].closed {
		t.Errorf("after a failure: segment 1 closed %v, segment 2 closed %v aborted %v", fakes[1].closed, fakes[2].closed, fakes[2].aborted)
	}

	sinks, fakes = newFakeSinks(2, &written)
	f = newFanout(sinks, []int{5, 5}, 4, nil)
	if err := fanoutFrames(f, 7); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	f.Abort() // idempotent
	if !fakes[1].aborted || fakes[1].closed {
		t.Errorf("Abort: segment 1 closed %v aborted %v", fakes[1].closed, fakes[1].aborted)
	}
	if err := f.Write(make([]byte, 16)); err == nil {
		t.Error("Write after Abort succeeded")
	}
	if err := fanoutFrames(newFanout(nil, nil, 1, nil), 1); err == nil {
		t.Error("a frame beyond the segments was accepted")
	}
}
