package cuda

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/nvidia/cudnn"
)

// convRunner runs convolutions through cuDNN: one handle on the compute
// stream, the algorithm chosen once per shape by timing the candidates,
// and one workspace, grown as needed and reused by every call.
type convRunner struct {
	b     *Backend
	h     *cudnn.Handle
	plans *cudnn.Cache
	ws    *block
	// fuse reports whether cuDNN can fuse the bias, a residual and ReLU
	// into the convolution (cudnnConvolutionBiasActivationForward).
	fuse bool
}

// epilogue is what cuDNN fuses after a convolution: y = act(conv + z +
// bias), with bias in the storage type, z (optional) of y's shape, and
// act ReLU or the identity.
type epilogue struct {
	bias cu.DevicePtr
	z    *Tensor
	relu bool
}

func newConvRunner(b *Backend) (*convRunner, error) {
	h, err := cudnn.NewHandle(b.ctx)
	if err != nil {
		return nil, fmt.Errorf("cuDNN: %w", err)
	}
	if err := h.SetStream(b.compute); err != nil {
		h.Close()
		return nil, err
	}
	return &convRunner{b: b, h: h, plans: cudnn.NewCache(h, cudnn.Options{}), fuse: cudnn.HasBiasActivation()}, nil
}

// forward computes y = conv(x, w), followed by epi when it is not nil.
func (c *convRunner) forward(x *Tensor, w *convWeights, p backend.ConvParams, y *Tensor, epi *epilogue) error {
	if p.PadT != p.PadB || p.PadL != p.PadR {
		return fmt.Errorf("conv: asymmetric padding %d/%d/%d/%d is not supported on the GPU", p.PadT, p.PadL, p.PadB, p.PadR)
	}
	// cuDNN's 4-D descriptors count elements in int32: split larger
	// batches into runs of frames that fit.
	s, ys := x.shape, y.shape
	perX, perY := int64(s.H*s.W*s.C), int64(ys.H*ys.W*ys.C)
	step := int(min(int64(s.N), math.MaxInt32/max(perX, perY)))
	es := int64(c.b.esize())
	if step < 1 {
		return fmt.Errorf("conv: one %dx%dx%d frame is too large for cuDNN", s.W, s.H, max(s.C, ys.C))
	}
	for n := 0; n < s.N; n += step {
		k := min(step, s.N-n)
		var z cu.DevicePtr
		if epi != nil && epi.z != nil {
			z = epi.z.ptr().Add(int(int64(n) * perY * es))
		}
		if err := c.run(s, k, w, p, x.ptr().Add(int(int64(n)*perX*es)), y.ptr().Add(int(int64(n)*perY*es)), epi, z); err != nil {
			return err
		}
	}
	return nil
}

// run convolves n frames of shape s at xp into yp, followed by epi with
// the residual at z (0: none) when epi is not nil.
func (c *convRunner) run(s backend.Shape, n int, w *convWeights, p backend.ConvParams, xp, yp cu.DevicePtr, epi *epilogue, z cu.DevicePtr) error {
	dt := [...]cudnn.DataType{F16: cudnn.DataHalf, BF16: cudnn.DataBFloat16, F32: cudnn.DataFloat}[c.b.dtype]
	plan, err := c.plans.Get(cudnn.Shape{DType: dt, N: n, H: s.H, W: s.W, C: s.C, K: w.out, KH: p.KH, KW: p.KW,
		PadH: p.PadT, PadW: p.PadL, StrideH: p.StrideH, StrideW: p.StrideW, DilationH: p.DilH, DilationW: p.DilW})
	if err != nil {
		return err
	}
	need := plan.WorkspaceSize()
	if epi != nil {
		if need, err = plan.BiasActWorkspaceSize(); err != nil {
			return err
		}
	}
	if need > 0 && (c.ws == nil || c.ws.size < int64(need)) {
		if c.ws != nil {
			c.b.pool.put(c.ws)
		}
		if c.ws, err = c.b.pool.get(int64(need)); err != nil {
			c.ws = nil
			return err
		}
	}
	var ws block
	if c.ws != nil {
		ws = *c.ws
	}
	if epi == nil {
		return plan.Forward(c.h, xp, w.w.ptr, yp, ws.ptr, int(ws.size))
	}
	alpha2 := float32(1)
	if z == 0 {
		z, alpha2 = yp, 0 // cuDNN wants a z tensor even when it adds none
	}
	return plan.ForwardBiasAct(c.h, xp, w.w.ptr, z, epi.bias, yp, ws.ptr, int(ws.size), alpha2, epi.relu)
}

func (c *convRunner) close() {
	if c.plans != nil {
		c.plans.Close()
	}
	if c.ws != nil {
		c.b.pool.put(c.ws)
	}
	c.h.Close()
}

// minFusedPixels is the fewest output pixels a bf16 or f32 convolution
// needs for cuDNN's fused epilogue; smaller outputs take the unfused
// convolution and a pass of their own. fp16 has no such limit. (Why:
// docs/BENCHMARKS.md, "Notes moved from code comments".)
const minFusedPixels = 1 << 16

// convCuDNN computes y = act(conv(x, w) + bias + res) through cuDNN, res
// optional: with a bias and ReLU on a large enough output, in cuDNN's
// fused epilogue; otherwise the bias and activation take one pass of
// their own, and res another two.
func (b *Backend) convCuDNN(x *Tensor, w *convWeights, p backend.ConvParams, act backend.Activation, res, y *Tensor) error {
	cw, in, out := w, x, y
	if w.padded != nil && !b.noChannelPad {
		cw = w.padded
		var err error
		if in, err = b.padChannels(x, cw.in); err != nil {
			return err
		}
		if in != x {
			defer in.Free()
		}
		if cw.out != w.out {
			var err error
			if out, err = b.alloc(backend.Shape{N: y.shape.N, H: y.shape.H, W: y.shape.W, C: cw.out}); err != nil {
				return err
			}
			defer out.Free()
		}
	}
	// cuDNN's epilogue: bias, residual and ReLU; or bias and a residual
	// without activation (a residual block's second convolution); in fp16
	// also the bias alone.
	if out == y && b.conv.fuse && !b.noConvFusion && w.biasT != nil &&
		(act.Kind == backend.ActReLU || act.Kind == backend.ActNone && (res != nil || b.dtype == F16)) &&
		(b.dtype == F16 || y.shape.N*y.shape.H*y.shape.W >= minFusedPixels) {
		return b.conv.forward(in, cw, p, y, &epilogue{bias: w.biasT.ptr, z: res, relu: act.Kind == backend.ActReLU})
	}
	if err := b.conv.forward(in, cw, p, out, nil); err != nil {
		return err
	}
	post := act // the activation comes after res, when there is one
	if res != nil {
		post = backend.Activation{}
	}
	if out != y || w.bias != nil || post.Kind != backend.ActNone {
		kind, alpha, slope, nslope, err := b.actArgs(post)
		if err != nil {
			return err
		}
		var bias cu.DevicePtr
		if w.bias != nil {
			bias = w.bias.ptr
		}
		if err := b.biasAct(out, y, bias, kind, alpha, slope, nslope); err != nil {
			return err
		}
	}
	if res == nil {
		return nil
	}
	n := int64(y.shape.Elems())
	if err := b.launch("binary", true, n, y.ptr(), res.ptr(), y.ptr(), n, int32(backend.OpAdd)); err != nil {
		return err
	}
	if act.Kind == backend.ActNone {
		return nil
	}
	kind, alpha, slope, nslope, err := b.actArgs(act)
	if err != nil {
		return err
	}
	return b.biasAct(y, y, 0, kind, alpha, slope, nslope)
}

// padChannels returns x with zero channels up to c (x itself when it has
// c channels), for a filter padded for the tensor cores.
func (b *Backend) padChannels(x *Tensor, c int) (*Tensor, error) {
	s := x.shape
	if s.C == c {
		return x, nil
	}
	in, err := b.alloc(backend.Shape{N: s.N, H: s.H, W: s.W, C: c})
	if err != nil {
		return nil, err
	}
	px := int64(s.N * s.H * s.W)
	if err := b.launch(b.moves("pad_channels"), false, px*int64(c), x.ptr(), in.ptr(), px, int32(s.C), int32(c)); err != nil {
		in.Free()
		return nil, err
	}
	return in, nil
}
