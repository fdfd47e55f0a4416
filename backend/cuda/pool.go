package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
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

// pool hands out device buffers. All users queue their work on the
// backend's compute stream, so a buffer put back can be handed out again at
// once: the next user's kernels run after the last user's in stream order.
//
// Where the driver has stream-ordered allocation (CUDA 11.2 and later),
// buffers come from a memory pool of the backend's own in the compute
// stream's order: the driver suballocates any size from what the pool has
// reserved, so memory freed by one phase of a model (the DiT's token
// matrices) serves the next (the decoder's frames) without a
// synchronization, and the pool reserves little more than the peak in use.
// Elsewhere it falls back to caching cuMemAlloc buffers by size class.
// Pool memory is not mapped for other GPUs: code that lets a peer's
// kernels read it must grant access to the pool first.
type pool struct {
	ctx    *cu.Context
	mp     *cu.MemPool // nil: the size-class cache below
	stream *cu.Stream

	mu       sync.Mutex
	free     map[int64][]*block
	inUse    int64
	reserved int64
	peak     int64 // high-water mark of bytes in use
	peakRes  int64 // high-water mark of bytes reserved from the driver
	// trace, set by the environment variable VSR_CUDA_MEMTRACE, prints each
	// new high-water mark (in steps of 16 MiB) with the calls that reached it.
	trace  bool
	traced int64
	// maxIdle is defaultMaxIdle unless the environment says otherwise.
	maxIdle int64
	closed  bool // memory put back after close stays with the driver
	// capturing is set while the stream is captured into a graph, where
	// synchronizing (to release memory) is not allowed.
	capturing bool
}

func newPool(ctx *cu.Context, dev cu.Device, s *cu.Stream) *pool {
	p := &pool{ctx: ctx, stream: s, free: map[int64][]*block{}, trace: os.Getenv("VSR_CUDA_MEMTRACE") != "", maxIdle: defaultMaxIdle}
	if v, err := strconv.Atoi(os.Getenv("VSR_CUDA_POOL_IDLE_MIB")); err == nil && v >= 0 {
		p.maxIdle = int64(v) << 20
	}
	if os.Getenv("VSR_CUDA_POOL") != "cache" {
		if mp, err := cu.NewMemPool(dev); err == nil {
			// Keep what was reserved across synchronizations, as the
			// cache does: requests of one size then reserve nothing new.
			if mp.SetReleaseThreshold(math.MaxUint64) == nil {
				p.mp = mp
			} else {
				mp.Close()
			}
		}
	}
	return p
}

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

// defaultMaxIdle is how much cached, unused memory a miss in the
// size-class cache may leave in place; beyond it the cache is emptied (a
// synchronization) before allocating anew. Steady streams of equal batches
// never miss; SwiftVR's phases (encoder, DiT, decoder) use different sizes,
// so a smaller limit trims many times a chunk (what that cost:
// docs/BENCHMARKS.md, "Notes moved from code comments").
// VSR_CUDA_POOL_IDLE_MIB overrides it.
const defaultMaxIdle = 2 << 30

func (p *pool) get(n int64) (*block, error) {
	if p.mp != nil {
		return p.getAsync(n)
	}
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
	if p.reserved-p.inUse > p.maxIdle {
		p.trim()
	}
	buf, err := p.ctx.Alloc(int(n))
	if errors.Is(err, cu.ErrOutOfMemory) {
		p.trim() // give cached buffers back and try once more
		buf, err = p.ctx.Alloc(int(n))
	}
	if err != nil {
		return nil, p.allocErr(n, err)
	}
	p.reserved += n
	p.peakRes = max(p.peakRes, p.reserved)
	p.use(n)
	return &block{buf: buf, ptr: buf.Ptr(), size: n, refs: 1}, nil
}

// getAsync allocates from the memory pool in the compute stream's order.
func (p *pool) getAsync(n int64) (*block, error) {
	n = (max(n, 1) + 511) &^ 511
	p.mu.Lock()
	defer p.mu.Unlock()
	ptr, err := p.stream.AllocAsync(p.mp, int(n))
	if errors.Is(err, cu.ErrOutOfMemory) && !p.capturing {
		p.release() // give reserved memory back and try once more
		ptr, err = p.stream.AllocAsync(p.mp, int(n))
	}
	if err != nil {
		return nil, p.allocErr(n, err)
	}
	p.use(n)
	return &block{ptr: ptr, size: n, refs: 1}, nil
}

func (p *pool) allocErr(n int64, err error) error {
	if errors.Is(err, cu.ErrOutOfMemory) {
		return fmt.Errorf("GPU out of memory allocating %.1f MiB (%.1f MiB in use): use a smaller --batch or a smaller output size", float64(n)/(1<<20), float64(p.inUse)/(1<<20))
	}
	return err
}

func (p *pool) use(n int64) {
	p.inUse += n
	p.peak = max(p.peak, p.inUse)
	if p.trace && p.inUse >= p.traced+16<<20 {
		p.traced = p.inUse
		fmt.Fprintf(os.Stderr, "vsr memtrace: %.0f MiB in use, %.0f MiB reserved, +%.1f MiB at %s\n",
			float64(p.inUse)/(1<<20), float64(p.reservedNow())/(1<<20), float64(n)/(1<<20), callers())
	}
}

// callers names the model and op functions on the stack, innermost first.
func callers() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(4, pcs)])
	var names []string
	for {
		f, more := frames.Next()
		if i := strings.LastIndex(f.Function, "/"); i >= 0 && strings.Contains(f.Function, "vsr-dev/vsr/") {
			names = append(names, f.Function[i+1:])
		}
		if !more || len(names) == 8 {
			return strings.Join(names, " < ")
		}
	}
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
	p.inUse -= b.size
	if p.mp != nil {
		if !p.closed {
			p.stream.FreeAsync(b.ptr)
		}
		return
	}
	p.free[b.size] = append(p.free[b.size], b)
}

// trim frees every cached buffer, or returns the memory pool's unused
// memory to the driver; the caller holds mu.
func (p *pool) trim() {
	if p.trace {
		fmt.Fprintf(os.Stderr, "vsr memtrace: trim %.0f MiB reserved (%.0f MiB in use) at %s\n",
			float64(p.reservedNow())/(1<<20), float64(p.inUse)/(1<<20), callers())
	}
	p.ctx.Synchronize()
	if p.mp != nil {
		p.mp.TrimTo(0)
		return
	}
	for n, l := range p.free {
		for _, b := range l {
			b.buf.Free()
			p.reserved -= b.size
		}
		delete(p.free, n)
	}
}

func (p *pool) setCapturing(on bool) {
	p.mu.Lock()
	p.capturing = on
	p.mu.Unlock()
}

// release gives the driver back all memory that is reserved and unused:
// the pool's and the graphs' (see Backend.Record); the caller holds mu.
func (p *pool) release() {
	p.trim()
	p.ctx.TrimGraphMemory()
}

// reservedNow is the memory reserved from the driver.
func (p *pool) reservedNow() int64 {
	if p.mp != nil {
		now, _, _ := p.mp.Reserved()
		return int64(now)
	}
	return p.reserved
}

// peakBytes is the high-water mark of memory reserved from the driver.
func (p *pool) peakBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mp != nil {
		_, high, _ := p.mp.Reserved()
		return int64(high)
	}
	return p.peakRes
}

// resetPeak returns unused memory to the driver and starts the high-water
// marks again from what is in use.
func (p *pool) resetPeak() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trim()
	p.peak, p.peakRes = p.inUse, p.reserved
	if p.mp != nil {
		p.mp.ResetHigh()
	}
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trim()
	if p.mp != nil {
		p.mp.Close()
	}
	p.closed = true
}
