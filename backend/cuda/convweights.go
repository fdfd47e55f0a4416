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
	// cuDNN's tensor-core kernels, which need 16-byte pixels.
	padded *convWeights
	// small, for a 3x3 fp16 filter of fewer than 8 inputs and up to 64
	// outputs (a multiple of 8), is the same filter with zero inputs up
	// to 16 (no bias), for the fused kernel (canFuseSmall).
	small *convWeights
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
	for _, p := range []**convWeights{&w.padded, &w.small} {
		if *p != nil {
			(*p).Free()
			*p = nil
		}
	}
}

// PrepareConv converts OIHW float32 weights to a KRSC filter.
func (b *Backend) PrepareConv(out, in, kh, kw int, w, bias []float32) (backend.Weights, error) {
	if err := check.ConvWeights(out, in, kh, kw, w, bias); err != nil {
		return nil, err
	}
	cw, err := b.filter(out, in, kh, kw, out, in, w)
	if err != nil {
		return nil, err
	}
	if pout, pin := (out+7)/8*8, (in+7)/8*8; pout != out || pin != in {
		if cw.padded, err = b.filter(out, in, kh, kw, pout, pin, w); err != nil {
			cw.Free()
			return nil, err
		}
	}
	if b.dtype == F16 && in < 8 && kh == 3 && kw == 3 && out%8 == 0 && out <= 64 { // see canFuseSmall
		if cw.small, err = b.filter(out, in, kh, kw, out, 16, w); err != nil {
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
