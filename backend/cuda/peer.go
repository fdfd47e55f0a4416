package cuda

import (
	"fmt"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

var _ backend.Peer = (*Backend)(nil)

// peers records the pairs of devices whose peer access was enabled.
var peers struct {
	sync.Mutex
	ok map[[2]cu.Device]bool
}

// CanPeer reports whether b can copy other's tensors device to device:
// both CUDA backends of the same storage type, on one GPU, or on two with
// peer access (enabled here the first time it is asked).
func (b *Backend) CanPeer(other backend.Backend) bool {
	o, ok := other.(*Backend)
	if !ok || o.dtype != b.dtype {
		return false
	}
	if o.dev == b.dev {
		return true
	}
	peers.Lock()
	defer peers.Unlock()
	key := [2]cu.Device{o.dev, b.dev}
	if v, ok := peers.ok[key]; ok {
		return v
	}
	can, err := b.dev.CanAccessPeer(o.dev)
	if err == nil && can {
		// Both directions: the copy engine of either side may move it.
		err = b.ctx.EnablePeerAccess(o.ctx)
		if err == nil {
			err = o.ctx.EnablePeerAccess(b.ctx)
		}
	}
	if peers.ok == nil {
		peers.ok = map[[2]cu.Device]bool{}
	}
	peers.ok[key] = err == nil && can
	return peers.ok[key]
}

// loan is a tensor lent to another CUDA backend: a reference to its
// memory, the event after which its contents are ready, and the event
// after which the borrower's copy has read them.
type loan struct {
	t           *Tensor // a shared reference (see share)
	ready, read *cu.Event
	borrowed    chan struct{}
}

func (l *loan) Shape() backend.Shape { return l.t.shape }

// Return waits until the loan was borrowed (or done closed), then frees the
// reference in the lender's stream order, after the borrower's copy.
func (l *loan) Return(done <-chan struct{}) {
	b := l.t.b
	select {
	case <-l.borrowed:
		b.compute.WaitEvent(l.read)
	case <-done:
		// Never borrowed: nothing reads the memory but possibly a copy
		// queued before done closed, which read records.
		select {
		case <-l.borrowed:
			b.compute.WaitEvent(l.read)
		default:
		}
	}
	l.t.Free()
	l.ready.Close()
	l.read.Close()
}

// Lend makes a loan of t's current contents.
func (b *Backend) Lend(tt backend.Tensor) (backend.Loan, error) {
	t, err := b.tensor(tt)
	if err != nil {
		return nil, err
	}
	ready, err := b.ctx.NewEvent(cu.EventDisableTiming)
	if err != nil {
		return nil, err
	}
	read, err := b.ctx.NewEvent(cu.EventDisableTiming)
	if err != nil {
		ready.Close()
		return nil, err
	}
	if err := ready.Record(b.compute); err != nil {
		ready.Close()
		read.Close()
		return nil, err
	}
	return &loan{t: b.share(t), ready: ready, read: read, borrowed: make(chan struct{})}, nil
}

// Borrow copies a loan of another CUDA backend into a new tensor: the
// compute stream waits for the lender's event, copies (device to device,
// or peer to peer across GPUs) and records the event the lender waits for
// before it reuses the memory.
func (b *Backend) Borrow(ll backend.Loan) (backend.Tensor, error) {
	l, ok := ll.(*loan)
	if !ok {
		return nil, fmt.Errorf("cuda backend given a %T loan", ll)
	}
	src := l.t.b
	if !b.CanPeer(src) {
		return nil, fmt.Errorf("%s cannot copy from %s device to device", b.name, src.name)
	}
	y, err := b.alloc(l.t.shape)
	if err != nil {
		return nil, err
	}
	n := l.t.shape.Elems() * b.esize()
	err = b.compute.WaitEvent(l.ready)
	if err == nil {
		if src.dev == b.dev {
			err = b.compute.CopyDtoD(y.ptr(), l.t.ptr(), n)
		} else {
			err = b.compute.CopyPeer(y.ptr(), b.ctx, l.t.ptr(), src.ctx, n)
		}
	}
	if err == nil {
		err = l.read.Record(b.compute)
	}
	if err != nil {
		y.Free()
		// The lender must not wait for a copy that was never queued.
		b.compute.Synchronize()
		l.read.Record(src.compute)
	}
	close(l.borrowed)
	return y, err
}
