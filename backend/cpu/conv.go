package cpu

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

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
