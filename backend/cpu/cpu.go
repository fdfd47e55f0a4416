// Package cpu is the pure-Go backend: float32 NHWC tensors in Go memory,
// convolutions as im2col times a packed weight matrix through an AVX2/FMA
// kernel (gemm_amd64.s) with a portable fallback, spread over every core.
//
// Every op computes each output element with the same sequence of float
// operations wherever it lies in the tensor, so running a frame in tiles
// (see model/compact) gives bitwise the same result as running it whole.
package cpu

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/vsr-dev/vsr/backend"
)

func init() {
	backend.Register("cpu", func(device string, opt backend.Options) (backend.Backend, error) {
		if device != "cpu" {
			return nil, fmt.Errorf("device %q: the CPU backend is named just \"cpu\"", device)
		}
		if err := opt.Unknown(device, "threads"); err != nil {
			return nil, err
		}
		n := 0
		if v, ok := opt["threads"]; ok {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				return nil, fmt.Errorf("device cpu: threads=%q: want a positive number", v)
			}
		}
		return New(n), nil
	})
}

// Tensor is a float32 NHWC tensor in Go memory.
type Tensor struct {
	shape backend.Shape
	Data  []float32
	b     *Backend
}

// Shape returns the tensor's shape.
func (t *Tensor) Shape() backend.Shape { return t.shape }

var _ backend.Owner = (*Backend)(nil)
var _ backend.SliceConver = (*Backend)(nil)
var _ backend.Trimmer = (*Backend)(nil)
var _ backend.UNet = (*Backend)(nil)
var _ backend.Norm = (*Backend)(nil)

// Owns reports whether t is a CPU tensor: any CPU backend reads any of
// them.
func (b *Backend) Owns(t backend.Tensor) bool {
	_, ok := t.(*Tensor)
	return ok
}

// Free returns the tensor's storage to its backend's pool.
func (t *Tensor) Free() {
	if t.Data != nil && t.b != nil {
		t.b.put(t.Data)
	}
	t.Data = nil
}

// Backend is the CPU backend. Its ops may be called from one goroutine at a
// time; each op uses Workers goroutines internally.
type Backend struct {
	Workers int

	mu   sync.Mutex
	pool map[int][][]float32
	// cols holds each worker's im2col rows, reused by every convolution
	// (ops run one at a time, so worker w's buffer is its own).
	cols [][]float32
}

// New returns a CPU backend using workers goroutines (0 = GOMAXPROCS).
func New(workers int) *Backend {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Backend{Workers: workers, pool: map[int][][]float32{}, cols: make([][]float32, workers)}
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Close drops the buffer pool.
func (b *Backend) Close() error {
	b.Trim()
	return nil
}

// Trim drops the buffers kept for reuse (the tensor pool and the im2col
// scratch), so that memory can return to the system between jobs.
func (b *Backend) Trim() {
	b.mu.Lock()
	b.pool = map[int][][]float32{}
	b.mu.Unlock()
	clear(b.cols)
}

// alloc returns a tensor whose contents are undefined.
func (b *Backend) alloc(s backend.Shape) *Tensor {
	n := s.Elems()
	b.mu.Lock()
	var d []float32
	if l := b.pool[n]; len(l) > 0 {
		d = l[len(l)-1]
		b.pool[n] = l[:len(l)-1]
	}
	b.mu.Unlock()
	if d == nil {
		d = make([]float32, n)
	}
	return &Tensor{shape: s, Data: d, b: b}
}

func (b *Backend) put(d []float32) {
	b.mu.Lock()
	if l := b.pool[len(d)]; len(l) < 4 {
		b.pool[len(d)] = append(l, d)
	}
	b.mu.Unlock()
}

func (b *Backend) tensor(t backend.Tensor) (*Tensor, error) {
	ct, ok := t.(*Tensor)
	if !ok {
		return nil, fmt.Errorf("cpu backend given a %T tensor", t)
	}
	if ct.Data == nil {
		return nil, fmt.Errorf("cpu backend given a freed tensor")
	}
	return ct, nil
}

// parallel runs f(i) for i in [0, n) on the backend's workers.
func (b *Backend) parallel(n int, f func(i int)) {
	b.parallelW(n, func(_, i int) { f(i) })
}

// parallelW runs f(w, i) for i in [0, n) on the backend's workers, w being
// the index (below Workers) of the worker that runs it.
func (b *Backend) parallelW(n int, f func(w, i int)) {
	nw := min(b.Workers, n)
	if nw <= 1 {
		for i := 0; i < n; i++ {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(nw)
	for w := range nw {
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(w, i)
			}
		}()
	}
	wg.Wait()
}

// col returns worker w's scratch of n values.
func (b *Backend) col(w, n int) []float32 {
	if len(b.cols) <= w {
		b.cols = append(b.cols, make([][]float32, w+1-len(b.cols))...)
	}
	if cap(b.cols[w]) < n {
		b.cols[w] = make([]float32, n)
	}
	return b.cols[w][:n]
}

// Upload copies host data into a new tensor.
func (b *Backend) Upload(s backend.Shape, data []float32) (backend.Tensor, error) {
	if len(data) != s.Elems() {
		return nil, fmt.Errorf("upload %v: got %d values", s, len(data))
	}
	t := b.alloc(s)
	copy(t.Data, data)
	return t, nil
}

// Download copies a tensor's values out.
func (b *Backend) Download(t backend.Tensor) ([]float32, error) {
	ct, err := b.tensor(t)
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), ct.Data...), nil
}
