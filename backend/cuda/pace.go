package cuda

import (
	"os"

	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// Pacing: how far the host may queue work ahead of the GPU, in op outputs
// allocated (one a kernel launch or GEMM, roughly).
const (
	paceOps   = 32 // ops between two pacing events
	paceDepth = 4  // pacing events in flight
)

// pacer keeps the host from queueing more than paceOps x paceDepth ops
// ahead of the compute stream. A host that runs further ahead fills the
// driver's launch queue, and cuLaunchKernel then spins until the GPU frees
// an entry; waiting on a blocking-sync event instead sleeps. The GPU still
// has paceOps x (paceDepth-1) ops queued when the host wakes.
// VSR_CUDA_PACE=0 turns it off, for comparisons.
type pacer struct {
	off    bool
	n      int
	events [paceDepth]*cu.Event // ring of events, each recorded after paceOps ops
	next   int
}

func newPacer() *pacer { return &pacer{off: os.Getenv("VSR_CUDA_PACE") == "0"} }

// step counts one op queued on the compute stream of b and, every paceOps
// ops, waits for the event recorded paceDepth events ago and records it
// anew. It does nothing while recording a graph.
func (p *pacer) step(b *Backend) error {
	if p.off || b.rec != nil {
		return nil
	}
	if p.n++; p.n%paceOps != 0 {
		return nil
	}
	e := p.events[p.next]
	if e == nil {
		var err error
		if e, err = b.ctx.NewEvent(cu.EventDisableTiming | cu.EventBlockingSync); err != nil {
			return err
		}
		p.events[p.next] = e
	} else if err := e.Synchronize(); err != nil {
		return err
	}
	p.next = (p.next + 1) % paceDepth
	return e.Record(b.compute)
}

func (p *pacer) close() {
	for _, e := range p.events {
		if e != nil {
			e.Close()
		}
	}
}
