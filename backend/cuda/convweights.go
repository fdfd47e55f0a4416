package cuda

import (
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/tensor/half"
)

// convWeights is a convolution's filter in KRSC (NHWC) layout in the
// storage type, and its bias in float32 and (biasT, for cuDNN's fused
// epilogue) in the storage type.
type convWeights struct {
	out, in, kh, kw int
	w, bias, biasT  *block
	b               *Backend
	// padded, when in or out is not a multiple of 8, is the same filter
	// with zero channels up to the next multiple of 8 (no bias), for
	// cuDNN's tensor-core kernels, which need 16-byte pixels; fewer than
	// 8 inputs are padded to padSmallIn.
	padded *convWeights
}

func (w *convWeights) Out() int { return w.out }
func (w *convWeights) In() int  { return w.in }
func (w *convWeights) Free() {
	if w.w != nil {
		w.b.pool.put(w.w)
		w.w = nil
	}
	for _, p := range []**block{&w.bias, &w.biasT} {
		if *p != nil {
			w.b.pool.put(*p)
			*p = nil
		}
	}
	if w.padded != nil {
		w.padded.Free()
		w.padded = nil
	}
}

// padSmallIn is the input channels of the padded filter of a convolution
// with fewer than 8: 16, the fused kernel's least (see canFuseSmall).
const padSmallIn = 16

// PrepareConv converts OIHW float32 weights to a KRSC filter.
func (b *Backend) PrepareConv(out, in, kh, kw int, w, bias []float32) (backend.Weights, error) {
	if err := check.ConvWeights(out, in, kh, kw, w, bias); err != nil {
		return nil, err
	}
	cw, err := b.filter(out, in, kh, kw, out, in, w)
	if err != nil {
		return nil, err
	}
	pout, pin := (out+7)/8*8, (in+7)/8*8
	if in < 8 {
		pin = padSmallIn
	}
	if pout != out || pin != in {
		if cw.padded, err = b.filter(out, in, kh, kw, pout, pin, w); err != nil {
			cw.Free()
			return nil, err
		}
	}
	if bias != nil {
		if cw.bias, err = b.upload32(bias); err != nil {
			cw.Free()
			return nil, err
		}
		if cw.biasT, err = b.uploadBlock(b.encode(bias)); err != nil {
			cw.Free()
			return nil, err
		}
	}
	return cw, b.compute.Synchronize()
}

// filter uploads OIHW weights (out x in x kh x kw) as a KRSC filter of
// pout x kh x kw x pin, zero beyond out and in.
func (b *Backend) filter(out, in, kh, kw, pout, pin int, w []float32) (*convWeights, error) {
	krsc := make([]float32, pout*kh*kw*pin)
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			for y := 0; y < kh; y++ {
				for x := 0; x < kw; x++ {
					krsc[((o*kh+y)*kw+x)*pin+i] = w[((o*in+i)*kh+y)*kw+x]
				}
			}
		}
	}
	blk, err := b.uploadBlock(b.encode(krsc))
	if err != nil {
		return nil, err
	}
	return &convWeights{out: pout, in: pin, kh: kh, kw: kw, w: blk, b: b}, nil
}

// encode converts float32 values to the storage type's bytes, rounding to
// nearest even.
func (b *Backend) encode(v []float32) []byte {
	if b.dtype == F32 {
		return cu.AsBytes(v)
	}
	return cu.AsBytes(half.EncodeSlice(v, b.dtype == BF16))
}
