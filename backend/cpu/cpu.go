// Package cpu is the pure-Go backend: float32 NHWC tensors in Go memory,
// convolutions as im2col times a packed weight matrix through an AVX2/FMA
// kernel (gemm_amd64.s) with a portable fallback, spread over every core.
//
// Every op computes each output element with the same sequence of float
// operations wherever it lies in the tensor, so running a frame in tiles
// (see model/compact) gives bitwise the same result as running it whole.
package cpu

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
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

// convWeights is a convolution's weights as a packed (kh*kw*in) x out
// matrix whose rows follow the im2col order (ky, kx, ci).
type convWeights struct {
	out, in, kh, kw int
	pb              *packedB
	bias            []float32
}

func (w *convWeights) Out() int { return w.out }
func (w *convWeights) In() int  { return w.in }
func (w *convWeights) Free()    {}

// PrepareConv repacks OIHW weights for the im2col GEMM.
func (b *Backend) PrepareConv(out, in, kh, kw int, w, bias []float32) (backend.Weights, error) {
	if err := check.ConvWeights(out, in, kh, kw, w, bias); err != nil {
		return nil, err
	}
	k := kh * kw * in
	m := make([]float32, k*out)
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			for y := 0; y < kh; y++ {
				for x := 0; x < kw; x++ {
					m[((y*kw+x)*in+i)*out+o] = w[((o*in+i)*kh+y)*kw+x]
				}
			}
		}
	}
	return &convWeights{out: out, in: in, kh: kh, kw: kw, pb: packB(k, out, m), bias: bias}, nil
}

// Conv2D computes a convolution one output row at a time: the row's im2col
// patch matrix times the packed weights, then the activation, on all cores.
func (b *Backend) Conv2D(xt backend.Tensor, wt backend.Weights, p backend.ConvParams, act backend.Activation) (backend.Tensor, error) {
	return b.Conv2DAdd(xt, wt, p, act, nil)
}

// Conv2DAdd adds res to each output row before the activation.
func (b *Backend) Conv2DAdd(xt backend.Tensor, wt backend.Weights, p backend.ConvParams, act backend.Activation, rest backend.Tensor) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	w, ok := wt.(*convWeights)
	if !ok {
		return nil, fmt.Errorf("cpu conv given %T weights", wt)
	}
	s := x.shape
	oh, ow, err := check.ConvOutput(s, p, w.in, w.kh, w.kw)
	if err != nil {
		return nil, err
	}
	var res *Tensor
	if rest != nil {
		if res, err = b.tensor(rest); err != nil {
			return nil, err
		}
		if want := (backend.Shape{N: s.N, H: oh, W: ow, C: w.out}); res.shape != want {
			return nil, fmt.Errorf("conv residual of shape %v, output %v", res.shape, want)
		}
	}
	out := b.alloc(backend.Shape{N: s.N, H: oh, W: ow, C: w.out})
	return out, b.conv(x, w, p, act, res, out, 0)
}

// CanSliceConv reports true: the CPU convolves any channel prefix into
// any channel slice.
func (b *Backend) CanSliceConv(backend.Weights, backend.ConvParams, backend.Activation, int, int) bool {
	return true
}

// SliceConv convolves channels [0, w.In()) of x into channels [at,
// at+w.Out()) of y. x and y may be the same tensor when the channels read
// and written do not overlap.
func (b *Backend) SliceConv(xt backend.Tensor, wt backend.Weights, p backend.ConvParams, act backend.Activation, yt backend.Tensor, at int) error {
	x, y, err := b.two(xt, yt)
	if err != nil {
		return err
	}
	w, ok := wt.(*convWeights)
	if !ok {
		return fmt.Errorf("cpu conv given %T weights", wt)
	}
	if err := check.SliceConv(x.shape, y.shape, p, w.in, w.out, w.kh, w.kw, at, x == y); err != nil {
		return err
	}
	return b.conv(x, w, p, act, nil, y, at)
}

// conv computes a convolution of channels [0, w.in) of x into channels
// [at, at+w.out) of out, one output row at a time: the row's im2col patch
// matrix times the packed weights, then the residual and the activation,
// on all cores.
func (b *Backend) conv(x *Tensor, w *convWeights, p backend.ConvParams, act backend.Activation, res, out *Tensor, at int) error {
	slope, err := b.slope(act, w.out)
	if err != nil {
		return err
	}
	s, os := x.shape, out.shape
	oh, ow := os.H, os.W
	k := w.kh * w.kw * w.in
	strided := os.C != w.out
	for wk := range min(b.Workers, s.N*oh) { // grown here, not by the workers
		n := ow * k
		if strided {
			n += ow * w.out // the row's result before it goes into its slice
		}
		b.col(wk, n)
	}
	b.parallelW(s.N*oh, func(wk, r int) {
		n, oy := r/oh, r%oh
		col := b.cols[wk][:ow*k]
		im2colRow(col, x.Data[n*s.H*s.W*s.C:], s, w.in, p, oy, ow)
		var dst []float32
		if strided {
			dst = b.cols[wk][ow*k:][:ow*w.out]
		} else {
			dst = out.Data[(n*oh+oy)*ow*w.out:][:ow*w.out]
		}
		gemm(ow, col, k, w.pb, w.bias, dst, w.out)
		if res != nil {
			for i, v := range res.Data[(n*oh+oy)*ow*w.out:][:ow*w.out] {
				dst[i] += v
			}
		}
		activate(dst, w.out, act, slope)
		if strided {
			copyBlock(dst, out.Data[(n*oh+oy)*ow*os.C:], ow, w.out, w.out, 0, os.C, at)
		}
	})
	return nil
}

// im2colRow writes, for each output column ox of output row oy, the kh*kw*c
// input values of channels [0, c) under the kernel (zeros outside the
// image) into col.
func im2colRow(col, img []float32, s backend.Shape, c int, p backend.ConvParams, oy, ow int) {
	k := p.KH * p.KW * c
	for ox := 0; ox < ow; ox++ {
		dst := col[ox*k : (ox+1)*k]
		for ky := 0; ky < p.KH; ky++ {
			iy := oy*p.StrideH - p.PadT + ky*p.DilH
			for kx := 0; kx < p.KW; kx++ {
				ix := ox*p.StrideW - p.PadL + kx*p.DilW
				d := dst[(ky*p.KW+kx)*c:][:c]
				if iy < 0 || iy >= s.H || ix < 0 || ix >= s.W {
					clear(d)
					continue
				}
				copy(d, img[(iy*s.W+ix)*s.C:])
			}
		}
	}
}

func (b *Backend) slope(act backend.Activation, c int) ([]float32, error) {
	if act.Kind != backend.ActPReLU {
		return nil, nil
	}
	st, err := b.tensor(act.Slope)
	if err != nil {
		return nil, err
	}
	if len(st.Data) != c && len(st.Data) != 1 {
		return nil, fmt.Errorf("prelu: %d slopes for %d channels", len(st.Data), c)
	}
	return st.Data, nil
}

// activate applies act in place to rows of c channels.
func activate(d []float32, c int, act backend.Activation, slope []float32) {
	switch act.Kind {
	case backend.ActReLU:
		for i, v := range d {
			if v < 0 {
				d[i] = 0
			}
		}
	case backend.ActLeaky:
		for i, v := range d {
			if v < 0 {
				d[i] = v * act.Alpha
			}
		}
	case backend.ActSoftClamp:
		for i, v := range d {
			d[i] = softClamp(v, act.Alpha)
		}
	case backend.ActPReLU:
		if len(slope) == 1 {
			for i, v := range d {
				if v < 0 {
					d[i] = v * slope[0]
				}
			}
			return
		}
		for i := 0; i < len(d); i += c {
			row := d[i : i+c]
			for j, v := range row {
				if v < 0 {
					row[j] = v * slope[j]
				}
			}
		}
	}
}

// Activate applies an activation to a copy of x.
func (b *Backend) Activate(xt backend.Tensor, act backend.Activation) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	slope, err := b.slope(act, x.shape.C)
	if err != nil {
		return nil, err
	}
	out := b.alloc(x.shape)
	copy(out.Data, x.Data)
	rows := x.shape.N * x.shape.H
	rowLen := x.shape.W * x.shape.C
	b.parallel(rows, func(r int) {
		activate(out.Data[r*rowLen:(r+1)*rowLen], x.shape.C, act, slope)
	})
	return out, nil
}

// PixelShuffle moves groups of r*r channels into r x r pixel blocks.
func (b *Backend) PixelShuffle(xt backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	if r <= 0 || s.C%(r*r) != 0 {
		return nil, fmt.Errorf("pixel shuffle by %d: %d channels is not a multiple of %d", r, s.C, r*r)
	}
	oc := s.C / (r * r)
	os := backend.Shape{N: s.N, H: s.H * r, W: s.W * r, C: oc}
	out := b.alloc(os)
	b.parallel(s.N*s.H, func(row int) {
		n, y := row/s.H, row%s.H
		for xx := 0; xx < s.W; xx++ {
			src := x.Data[((n*s.H+y)*s.W+xx)*s.C:]
			for i := 0; i < r; i++ {
				for j := 0; j < r; j++ {
					dst := out.Data[((n*os.H+y*r+i)*os.W+xx*r+j)*oc:][:oc]
					for c := range dst {
						if order == backend.ShuffleCRD {
							dst[c] = src[c*r*r+i*r+j]
						} else {
							dst[c] = src[(i*r+j)*oc+c]
						}
					}
				}
			}
		}
	})
	return out, nil
}

// two unwraps two operands.
func (b *Backend) two(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, err := b.tensor(at)
	if err != nil {
		return nil, nil, err
	}
	y, err := b.tensor(bt)
	return x, y, err
}

// pair unwraps the two operands of an elementwise op, of one shape.
func (b *Backend) pair(at, bt backend.Tensor) (*Tensor, *Tensor, error) {
	x, y, err := b.two(at, bt)
	if err == nil && x.shape != y.shape {
		err = fmt.Errorf("elementwise op on shapes %v and %v", x.shape, y.shape)
	}
	return x, y, err
}

// Binary combines a and b elementwise.
func (b *Backend) Binary(op backend.BinaryOp, at, bt backend.Tensor) (backend.Tensor, error) {
	x, y, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	out := b.alloc(x.shape)
	rows := x.shape.N * x.shape.H
	rowLen := x.shape.W * x.shape.C
	b.parallel(rows, func(r int) {
		o := out.Data[r*rowLen : (r+1)*rowLen]
		p := x.Data[r*rowLen : (r+1)*rowLen]
		q := y.Data[r*rowLen : (r+1)*rowLen]
		switch op {
		case backend.OpAdd:
			for i := range o {
				o[i] = p[i] + q[i]
			}
		case backend.OpSub:
			for i := range o {
				o[i] = p[i] - q[i]
			}
		case backend.OpMul:
			for i := range o {
				o[i] = p[i] * q[i]
			}
		}
	})
	return out, nil
}

// AddScaled computes ca*a + cb*b elementwise.
func (b *Backend) AddScaled(at backend.Tensor, ca float32, bt backend.Tensor, cb float32) (backend.Tensor, error) {
	x, y, err := b.pair(at, bt)
	if err != nil {
		return nil, err
	}
	out := b.alloc(x.shape)
	rowLen := x.shape.W * x.shape.C
	b.parallel(x.shape.N*x.shape.H, func(r int) {
		o := out.Data[r*rowLen : (r+1)*rowLen]
		p := x.Data[r*rowLen : (r+1)*rowLen]
		q := y.Data[r*rowLen : (r+1)*rowLen]
		for i := range o {
			o[i] = ca*p[i] + cb*q[i]
		}
	})
	return out, nil
}

// CopyChannels copies src into channels [at, at+src.C) of dst.
func (b *Backend) CopyChannels(dstt backend.Tensor, at int, srct backend.Tensor) error {
	dst, src, err := b.two(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Channels(dst.shape, at, src.shape); err != nil {
		return err
	}
	s := src.shape
	copyBlock(src.Data, dst.Data, s.N*s.H*s.W, s.C, s.C, 0, dst.shape.C, at)
	return nil
}

// Channels returns channels [at, at+n) of x.
func (b *Backend) Channels(xt backend.Tensor, at, n int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.C = n
	if err := check.Channels(x.shape, at, s); err != nil {
		return nil, err
	}
	y := b.alloc(s)
	copyBlock(x.Data, y.Data, s.N*s.H*s.W, n, x.shape.C, at, n, 0)
	return y, nil
}

// Band returns rows [y, y+h) of every frame of x, zeros outside it.
func (b *Backend) Band(xt backend.Tensor, y0, h int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	s := x.shape
	s.H = h
	if err := check.Band(x.shape, y0, s, true); err != nil {
		return nil, err
	}
	y := b.alloc(s)
	row := s.W * s.C
	for f := range s.N {
		for r := range h {
			out := y.Data[(f*h+r)*row:][:row]
			if sy := y0 + r; sy >= 0 && sy < x.shape.H {
				copy(out, x.Data[(f*x.shape.H+sy)*row:][:row])
			} else {
				clear(out)
			}
		}
	}
	return y, nil
}

// CopyBand copies src into rows [y, y+src.H) of every frame of dst.
func (b *Backend) CopyBand(dstt backend.Tensor, y0 int, srct backend.Tensor) error {
	dst, src, err := b.two(dstt, srct)
	if err != nil {
		return err
	}
	if err := check.Band(dst.shape, y0, src.shape, false); err != nil {
		return err
	}
	s := src.shape
	row := s.W * s.C
	copyBlock(src.Data, dst.Data, s.N, s.H*row, s.H*row, 0, dst.shape.H*row, y0*row)
	return nil
}

// copyBlock copies rows blocks of n values, block r from src[r*ss+so:] to
// dst[r*ds+d0:].
func copyBlock(src, dst []float32, rows, n, ss, so, ds, d0 int) {
	for r := range rows {
		copy(dst[r*ds+d0:][:n], src[r*ss+so:][:n])
	}
}

// FromRGB8 converts packed RGB24 frames to floats in [0,1].
func (b *Backend) FromRGB8(rgb []byte, n, h, w int) (backend.Tensor, error) {
	s := backend.Shape{N: n, H: h, W: w, C: 3}
	if len(rgb) != s.Elems() {
		return nil, fmt.Errorf("rgb frames %dx%dx%d: got %d bytes", n, w, h, len(rgb))
	}
	t := b.alloc(s)
	for i, v := range rgb {
		t.Data[i] = float32(v) / 255
	}
	return t, nil
}

// ToRGB8 converts floats in [0,1] to RGB24, rounding and clamping.
func (b *Backend) ToRGB8(xt backend.Tensor, dst []byte) error {
	x, err := b.tensor(xt)
	if err != nil {
		return err
	}
	if x.shape.C != 3 || len(dst) != len(x.Data) {
		return fmt.Errorf("to rgb: tensor %v, buffer of %d bytes", x.shape, len(dst))
	}
	for i, v := range x.Data {
		dst[i] = quantize(v)
	}
	return nil
}

// FromRGB16 converts packed RGB48 (little-endian) frames to floats in
// [0,1].
func (b *Backend) FromRGB16(rgb []byte, n, h, w int) (backend.Tensor, error) {
	s := backend.Shape{N: n, H: h, W: w, C: 3}
	if len(rgb) != 2*s.Elems() {
		return nil, fmt.Errorf("rgb48 frames %dx%dx%d: got %d bytes", n, w, h, len(rgb))
	}
	t := b.alloc(s)
	for i := range t.Data {
		t.Data[i] = float32(binary.LittleEndian.Uint16(rgb[2*i:])) / 65535
	}
	return t, nil
}

// ToRGB16 converts floats in [0,1] to RGB48 (little-endian), rounding and
// clamping.
func (b *Backend) ToRGB16(xt backend.Tensor, dst []byte) error {
	x, err := b.tensor(xt)
	if err != nil {
		return err
	}
	if x.shape.C != 3 || len(dst) != 2*len(x.Data) {
		return fmt.Errorf("to rgb48: tensor %v, buffer of %d bytes", x.shape, len(dst))
	}
	for i, v := range x.Data {
		binary.LittleEndian.PutUint16(dst[2*i:], quantize16(v))
	}
	return nil
}

// quantize16 maps [0,1] to 16 bits: round half up, clamp, NaN -> 0.
func quantize16(v float32) uint16 {
	v = v*65535 + 0.5
	if !(v > 0) {
		return 0
	}
	if v >= 65535 {
		return 65535
	}
	return uint16(v)
}

func quantize(v float32) byte {
	v = v*255 + 0.5
	if !(v > 0) { // also NaN
		return 0
	}
	if v >= 255 {
		return 255
	}
	return byte(v)
}

// ShuffleAddNearest computes PixelShuffle(x, r) + NearestUpsample(base, r)
// in one pass, with the same float operations as the separate ops.
func (b *Backend) ShuffleAddNearest(xt, baset backend.Tensor, r int, order backend.ShuffleOrder) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	base, err := b.tensor(baset)
	if err != nil {
		return nil, err
	}
	xs, bs := x.shape, base.shape
	os, err := check.ShuffleAddShape(xs, bs, r)
	if err != nil {
		return nil, err
	}
	oc := bs.C
	out := b.alloc(os)
	b.parallel(xs.N*xs.H, func(row int) {
		n, y := row/xs.H, row%xs.H
		for xx := 0; xx < xs.W; xx++ {
			p := (n*xs.H+y)*xs.W + xx
			src, bv := x.Data[p*xs.C:], base.Data[p*oc:]
			for i := 0; i < r; i++ {
				for j := 0; j < r; j++ {
					dst := out.Data[((n*os.H+y*r+i)*os.W+xx*r+j)*oc:][:oc]
					for c := range dst {
						ic := (i*r+j)*oc + c
						if order == backend.ShuffleCRD {
							ic = c*r*r + i*r + j
						}
						dst[c] = src[ic] + bv[c]
					}
				}
			}
		}
	})
	return out, nil
}
