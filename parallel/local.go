package parallel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/backend"
)

// Local is the Transport between ranks of one process, each with its own
// backend (see the package comment for how tensors move).
type Local struct {
	devs  []backend.Backend
	links [][]chan message // links[from][to]
	// pending are each sender's loans not yet given back (a sender's own
	// goroutine returns them: the memory is its backend's).
	pending [][]pendingLoan
	stats   []Stats
	mu      sync.Mutex // guards stats
}

// queueDepth bounds the messages in flight from one rank to another;
// Send blocks beyond it.
const queueDepth = 256

type message struct {
	tag   string
	loan  backend.Loan // device to device
	shape backend.Shape
	host  []float32 // staged through the host
	taken chan struct{}
}

type pendingLoan struct {
	loan  backend.Loan
	taken chan struct{}
}

// Stats are what one rank exchanged.
type Stats struct {
	// Sent counts the messages and values this rank sent; SentBytes the
	// values at the storage size of its device.
	Sent, SentValues, SentBytes int64
	// Staged counts the messages that went through host memory.
	Staged int64
	// RecvWait is the time the rank spent in Recv waiting for a message to
	// arrive.
	RecvWait time.Duration
}

// NewLocal makes the transport between ranks 0..len(devs)-1, rank i on
// devs[i].
func NewLocal(devs []backend.Backend) *Local {
	n := len(devs)
	l := &Local{devs: devs, links: make([][]chan message, n), pending: make([][]pendingLoan, n), stats: make([]Stats, n)}
	for i := range l.links {
		l.links[i] = make([]chan message, n)
		for j := range l.links[i] {
			l.links[i][j] = make(chan message, queueDepth)
		}
	}
	return l
}

// Peer reports whether tensors from rank from reach rank to device to
// device.
func (l *Local) Peer(from, to int) bool {
	p, ok := l.devs[to].(backend.Peer)
	if !ok {
		return false
	}
	_, ok = l.devs[from].(backend.Peer)
	return ok && p.CanPeer(l.devs[from])
}

func (l *Local) check(from, to int) error {
	if from < 0 || to < 0 || from >= len(l.devs) || to >= len(l.devs) || from == to {
		return fmt.Errorf("parallel: a message from rank %d to rank %d in a group of %d", from, to, len(l.devs))
	}
	return nil
}

// Send hands t to rank to: a loan of its memory when the two can copy
// device to device, else its values on the host.
func (l *Local) Send(ctx context.Context, from, to int, tag string, t backend.Tensor) error {
	if err := l.check(from, to); err != nil {
		return err
	}
	l.reap(from)
	m := message{tag: tag, shape: t.Shape(), taken: make(chan struct{})}
	staged := !l.Peer(from, to)
	if staged {
		v, err := l.devs[from].Download(t)
		if err != nil {
			return err
		}
		m.host = v
	} else {
		ln, err := l.devs[from].(backend.Peer).Lend(t)
		if err != nil {
			return err
		}
		m.loan = ln
		l.pending[from] = append(l.pending[from], pendingLoan{ln, m.taken})
	}
	select {
	case l.links[from][to] <- m:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	n := int64(m.shape.Elems())
	l.mu.Lock()
	s := &l.stats[from]
	s.Sent++
	s.SentValues += n
	s.SentBytes += n * int64(valueBytes(l.devs[from]))
	if staged {
		s.Staged++
	}
	l.mu.Unlock()
	return nil
}

// Recv returns the next tensor from rank from, on rank to's backend.
func (l *Local) Recv(ctx context.Context, to, from int, tag string) (backend.Tensor, error) {
	if err := l.check(from, to); err != nil {
		return nil, err
	}
	start := time.Now()
	var m message
	select {
	case m = <-l.links[from][to]:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	l.mu.Lock()
	l.stats[to].RecvWait += time.Since(start)
	l.mu.Unlock()
	defer close(m.taken)
	if m.tag != tag {
		return nil, fmt.Errorf("parallel: rank %d expected %q from rank %d, got %q", to, tag, from, m.tag)
	}
	if m.loan != nil {
		return l.devs[to].(backend.Peer).Borrow(m.loan)
	}
	return l.devs[to].Upload(m.shape, m.host)
}

// reap gives back the sender's loans that were borrowed.
func (l *Local) reap(from int) {
	keep := l.pending[from][:0]
	for _, p := range l.pending[from] {
		select {
		case <-p.taken:
			p.loan.Return(p.taken)
		default:
			keep = append(keep, p)
		}
	}
	l.pending[from] = keep
}

// Flush gives back every loan rank from made, waiting until each was
// borrowed or done closes (a job that failed). It runs on rank from's
// goroutine, before its backend frees anything else or closes.
func (l *Local) Flush(from int, done <-chan struct{}) {
	for _, p := range l.pending[from] {
		select {
		case <-p.taken:
			p.loan.Return(p.taken)
		case <-done:
			p.loan.Return(done)
		}
	}
	l.pending[from] = nil
}

// Stats returns what each rank exchanged so far.
func (l *Local) Stats() []Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Stats(nil), l.stats...)
}

// valueBytes is the size of one stored value on b: 2 on GPUs in f16 or
// bf16, else 4.
func valueBytes(b backend.Backend) int {
	if g, ok := b.(backend.GPU); ok && g.StorageType() != "f32" {
		return 2
	}
	return 4
}

// Group is the ranks of a Transport that take part in one collective
// (the ranks that run one chunk together in sequence parallelism): their
// ids in the transport, and this rank's index among them.
type Group struct {
	Tr    Transport
	Ranks []int
	Me    int
}

// Size is the number of ranks in the group.
func (g Group) Size() int { return len(g.Ranks) }

// AllGather returns every rank's t, in group order, on this rank's
// backend (its own entry is t itself). Every rank of the group calls it.
func (g Group) AllGather(ctx context.Context, tag string, t backend.Tensor) ([]backend.Tensor, error) {
	parts := make([]backend.Tensor, g.Size())
	for i := range parts {
		parts[i] = t
	}
	return g.AllToAll(ctx, tag, parts)
}

// AllToAll sends parts[j] to the group's rank j and returns what each
// rank sent to this one, in group order (its own entry is parts[Me]
// itself). Every rank of the group calls it. On an error the tensors
// received so far are freed.
func (g Group) AllToAll(ctx context.Context, tag string, parts []backend.Tensor) ([]backend.Tensor, error) {
	if len(parts) != g.Size() {
		return nil, fmt.Errorf("parallel: %d parts for %d ranks", len(parts), g.Size())
	}
	me := g.Ranks[g.Me]
	for j, r := range g.Ranks {
		if j != g.Me {
			if err := g.Tr.Send(ctx, me, r, tag, parts[j]); err != nil {
				return nil, err
			}
		}
	}
	out := make([]backend.Tensor, g.Size())
	out[g.Me] = parts[g.Me]
	for j, r := range g.Ranks {
		if j == g.Me {
			continue
		}
		t, err := g.Tr.Recv(ctx, me, r, tag)
		if err != nil {
			for k, o := range out {
				if k != g.Me && o != nil {
					o.Free()
				}
			}
			return nil, err
		}
		out[j] = t
	}
	return out, nil
}
