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
