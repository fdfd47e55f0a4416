// Package parallel runs one job on several devices at once. A Rank is a
// goroutine locked to its OS thread that owns one backend (its context,
// streams and memory pool): everything that touches the backend runs
// there. A Transport moves tensors between ranks: point to point (Send,
// Recv, the halo exchange of SwiftVR's chunk parallelism) and the
// collectives built on them (AllGather, AllToAll).
//
// Local is the transport of one process. Between two backends that can
// copy device to device (backend.Peer: CUDA peer copies over NVLink or
// PCIe, or a plain device-to-device copy when both ranks share a GPU) a
// tensor moves without the host and without waiting for the device: the
// copy is ordered by events. Anywhere else (the CPU, GPUs without peer
// access, mixed kinds) it is staged through host memory. Both give the
// same values, so N ranks give what one rank gives.
package parallel

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"github.com/vsr-dev/vsr/backend"
)

// Rank is one device's worker: a goroutine locked to its OS thread.
type Rank struct {
	// ID is the rank's index in its group.
	ID   int
	jobs chan func()
	done chan struct{}
	once sync.Once
}

// NewRanks starts n ranks.
func NewRanks(n int) []*Rank {
	rs := make([]*Rank, n)
	for i := range rs {
		r := &Rank{ID: i, jobs: make(chan func(), 64), done: make(chan struct{})}
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer close(r.done)
			for f := range r.jobs {
				f()
			}
		}()
		rs[i] = r
	}
	return rs
}

// ErrStopped is returned for work given to a stopped rank.
var ErrStopped = errors.New("parallel: the rank was stopped")

// Go queues f on the rank's thread (in order with the rank's other work)
// and returns at once.
func (r *Rank) Go(f func()) (err error) {
	defer func() {
		if recover() != nil { // a closed queue: the rank was stopped
			err = ErrStopped
		}
	}()
	r.jobs <- f
	return nil
}

// Do runs f on the rank's thread and returns its error.
func (r *Rank) Do(f func() error) error {
	ch := make(chan error, 1)
	if err := r.Go(func() { ch <- f() }); err != nil {
		return err
	}
	return <-ch
}

// Stop ends the rank after the work queued so far and waits for it.
func (r *Rank) Stop() {
	r.once.Do(func() { close(r.jobs) })
	<-r.done
}

// Transport moves tensors between the ranks of one group. Send and Recv
// are called on the sending and the receiving rank's goroutine; messages
// between two ranks arrive in the order they were sent, and tag (checked
// on arrival) names what each one is, so that a protocol error is an
// error, not wrong output.
type Transport interface {
	// Send hands t (the sender's; it stays the sender's to free) to rank
	// to, without waiting for it to arrive.
	Send(ctx context.Context, from, to int, tag string, t backend.Tensor) error
	// Recv returns the next tensor rank from sent to rank to, as a tensor
	// of rank to's backend.
	Recv(ctx context.Context, to, from int, tag string) (backend.Tensor, error)
}
