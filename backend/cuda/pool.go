package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// block is a piece of device memory from the pool.
type block struct {
	buf  *cu.Buffer
	ptr  cu.DevicePtr
	size int64
	refs int // owners; the block returns to the pool when the last lets go
}

// pool caches device buffers by size. All users queue their work on the
// backend's compute stream, so a buffer put back can be handed out again at
// once: the next user's kernels run after the last user's in stream order.
type pool struct {
	ctx *cu.Context

	mu       sync.Mutex
	free     map[int64][]*block
	inUse    int64
	reserved int64
	peak     int64 // high-water mark of bytes in use
	peakRes  int64 // high-water mark of bytes reserved from the driver
}

func newPool(ctx *cu.Context) *pool { return &pool{ctx: ctx, free: map[int64][]*block{}} }

// sizeClass rounds a request up to its size class: 512-byte steps up to
// 1 MiB, then four classes per power of two (at most 25% slack), so that
// tensors of nearby sizes share cached blocks.
func sizeClass(n int64) int64 {
	n = (n + 511) &^ 511
	if n <= 1<<20 {
		return n
	}
	step := int64(1) << (bits.Len64(uint64(n-1)) - 3)
	return (n + step - 1) / step * step
}

// maxIdle is how much cached, unused memory a miss may leave in place;
// beyond it the cache is emptied before allocating anew.
const maxIdle = 2 << 30

func (p *pool) get(n int64) (*block, error) {
	n = sizeClass(max(n, 1))
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[n] = l[:len(l)-1]
		p.use(n)
		b.refs = 1
		return b, nil
	}
	if p.reserved-p.inUse > maxIdle {
		p.trim()
	}
	buf, err := p.ctx.Alloc(int(n))
	if errors.Is(err, cu.ErrOutOfMemory) {
		p.trim() // give cached buffers back and try once more
		buf, err = p.ctx.Alloc(int(n))
	}
	if err != nil {
		if errors.Is(err, cu.ErrOutOfMemory) {
			return nil, fmt.Errorf("GPU out of memory allocating %.1f MiB (%.1f MiB in use): use a smaller --batch or a smaller output size", float64(n)/(1<<20), float64(p.inUse)/(1<<20))
		}
		return nil, err
	}
	p.reserved += n
	p.peakRes = max(p.peakRes, p.reserved)
	p.use(n)
	return &block{buf: buf, ptr: buf.Ptr(), size: n, refs: 1}, nil
}

func (p *pool) use(n int64) {
	p.inUse += n
	p.peak = max(p.peak, p.inUse)
}

// retain adds an owner to b.
func (p *pool) retain(b *block) {
	p.mu.Lock()
	b.refs++
	p.mu.Unlock()
}

// put drops one owner of b; the last returns it to the pool.
func (p *pool) put(b *block) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.refs--; b.refs > 0 {
		return
	}
	p.free[b.size] = append(p.free[b.size], b)
	p.inUse -= b.size
}

// trim frees every cached buffer; the caller holds mu.
func (p *pool) trim() {
	p.ctx.Synchronize()
	for n, l := range p.free {
		for _, b := range l {
			b.buf.Free()
			p.reserved -= b.size
		}
		delete(p.free, n)
	}
}

// peakBytes is the high-water mark of memory reserved from the driver.
func (p *pool) peakBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peakRes
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trim()
}
