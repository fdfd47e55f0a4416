package cuda

import (
	"os"
	"strconv"

	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// Pacing: how far the host may queue work ahead of the GPU, in op outputs
// allocated (one a kernel launch or GEMM, roughly): 256, chosen by the
// measurements in docs/BENCHMARKS.md ("Notes moved from code comments").
const (
	paceOps   = 64 // ops between two pacing events
	paceDepth = 4  // pacing events in flight
)

// pacer keeps the host from queueing more than paceOps x paceDepth ops
// ahead of the compute stream. A host that runs further ahead fills the
// driver's queue and then waits inside the driver's calls, spinning;
// waiting on a blocking-sync event instead sleeps.
// The GPU still has 3/4 of the bound queued when the host wakes.
// VSR_CUDA_PACE=0 turns it off and VSR_CUDA_PACE=N sets the bound to N
// ops (rounded down to a multiple of paceDepth, at least paceDepth), for
// comparisons.
type pacer struct {
	off    bool
	every  int // ops between two pacing events
	n      int
	events [paceDepth]*cu.Event // ring of events, one recorded every `every` ops
	next   int
}

func newPacer() *pacer {
	p := &pacer{every: paceOps}
	if v, err := strconv.Atoi(os.Getenv("VSR_CUDA_PACE")); err == nil {
		p.off, p.every = v <= 0, max(1, v/paceDepth)
	}
	return p
}

// step counts one op queued on the compute stream of b and, every p.every
// ops, waits for the event recorded paceDepth events ago and records it
// anew. It does nothing while recording a graph.
func (p *pacer) step(b *Backend) error {
	if p.off || b.rec != nil {
		return nil
	}
	if p.n++; p.n%p.every != 0 {
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
