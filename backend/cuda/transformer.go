package cuda

import (
	_ "embed"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	"github.com/vsr-dev/vsr/nvidia/cublaslt"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/tensor/half"
)

var _ backend.Transformer = (*Backend)(nil)

//go:embed transformer.cu
var transformerCode string

var transformerSource = &Source{Name: "transformer.cu", Code: transformerCode}

// Block sizes of the row kernels in transformer.cu, and the widest row the
// vectorised (*_vec) kernels take.
const (
	rowThreads = 256
	vecThreads = 128
	vecCols    = vecThreads * 4 * 8
	awMaxKeys  = 8 // AW_MAX_KEYS
)

// linearWeights is a linear layer in the storage type: W as out x in
// (the GEMM reads it transposed) and the bias, in exactly sized device
// buffers (the pool's size classes would waste up to 25% of 9 GiB).
type linearWeights struct {
	out, in int
	w, bias *cu.Buffer
}

func (w *linearWeights) Out() int { return w.out }
func (w *linearWeights) In() int  { return w.in }
func (w *linearWeights) Free() {
	for _, b := range []**cu.Buffer{&w.w, &w.bias} {
		if *b != nil {
			(*b).Free()
			*b = nil
		}
	}
}

// gemm returns the backend's cuBLASLt GEMM, made on first use.
func (b *Backend) gemmRunner() (*cublaslt.Gemm, error) {
	if b.gemm != nil {
		return b.gemm, nil
	}
	h, err := cublaslt.NewHandle(b.ctx)
	if err != nil {
		return nil, err
	}
	t := cublaslt.R16BF
	if b.dtype == F16 {
		t = cublaslt.R16F
	}
	g, err := cublaslt.NewGemm(h, cublaslt.Config{InputType: t, OutputType: t})
	if err != nil {
		h.Close()
		return nil, err
	}
	b.blasHandle, b.gemm = h, g
	return g, nil
}

// uploadBytes copies data into a new exactly sized buffer.
func (b *Backend) uploadBytes(data []byte) (*cu.Buffer, error) {
	buf, err := b.ctx.Alloc(len(data))
	if err != nil {
		return nil, fmt.Errorf("GPU out of memory loading %.1f MiB of weights: %w", float64(len(data))/(1<<20), err)
	}
	if err := b.compute.CopyHtoD(buf.Ptr(), data); err != nil {
		buf.Free()
		return nil, err
	}
	// The host slice must stay valid until the copy ran.
	if err := b.compute.Synchronize(); err != nil {
		buf.Free()
		return nil, err
	}
	return buf, nil
}

// PrepareLinear converts and uploads the weights and bias.
func (b *Backend) PrepareLinear(out, in int, w, bias []float32) (backend.Weights, error) {
	if err := check.Linear(out, in, w, bias); err != nil {
		return nil, err
	}
	if err := b.need16("linear layer"); err != nil {
		return nil, err
	}
	if bias == nil {
		bias = make([]float32, out)
	}
	bf := b.dtype == BF16
	lw, err := b.newWeights(out, in, cu.AsBytes(half.EncodeSlice(w, bf)), cu.AsBytes(half.EncodeSlice(bias, bf)))
	if err != nil {
		return nil, err
	}
	return &lw, nil
}

// newWeights copies a layer's weight and bias bytes into new exactly
// sized buffers.
func (b *Backend) newWeights(out, in int, w, bias []byte) (linearWeights, error) {
	lw := linearWeights{out: out, in: in}
	var err error
	if lw.w, err = b.uploadBytes(w); err == nil {
		lw.bias, err = b.uploadBytes(bias)
	}
	if err != nil {
		lw.Free()
	}
	return lw, err
}

// matrix unwraps a [1 1 rows cols] tensor (any cols when cols is 0).
func (b *Backend) matrix(t backend.Tensor, cols int) (*Tensor, error) {
	m, err := b.tensor(t)
	if err != nil {
		return nil, err
	}
	return m, check.Matrix(m.shape, cols)
}

// Linear runs one cuBLASLt GEMM with the bias (and GELU) in its epilogue;
// accumulation is the GEMM's beta = 1 on acc. With fp8 weights the input
// is quantised per row first, unless it is already (LayerNormFP8).
func (b *Backend) Linear(xt backend.Tensor, wt backend.Weights, act backend.ActKind, acct backend.Tensor) (backend.Tensor, error) {
	var (
		run     func(p *cublaslt.Plan, y *Tensor, beta float32) error
		g       *cublaslt.Gemm
		out, in int
		rows    int
		err     error
	)
	switch w := wt.(type) {
	case *linearWeights:
		x, err := b.matrix(xt, w.in)
		if err != nil {
			return nil, err
		}
		if g, err = b.gemmRunner(); err != nil {
			return nil, err
		}
		out, in, rows = w.out, w.in, x.shape.W
		run = func(p *cublaslt.Plan, y *Tensor, beta float32) error {
			return g.RunBias(p, b.compute.Handle(), x.ptr(), w.w.Ptr(), y.ptr(), y.ptr(), w.bias.Ptr(), 1, beta)
		}
	case *fp8Weights:
		x, owned, err := b.input8(xt, w.in)
		if err != nil {
			return nil, err
		}
		if owned {
			defer x.Free()
		}
		if g, err = b.gemm8Runner(); err != nil {
			return nil, err
		}
		out, in, rows = w.out, w.in, x.shape.W
		run = func(p *cublaslt.Plan, y *Tensor, beta float32) error {
			return g.RunScaled(p, b.compute.Handle(), x.ptr(), w.w.Ptr(), y.ptr(), y.ptr(), w.bias.Ptr(), x.scalePtr(), w.scale.Ptr(), 1, beta)
		}
	default:
		return nil, fmt.Errorf("cuda linear given %T weights", wt)
	}
	ep := cublaslt.EpilogueBias
	switch {
	case act == backend.ActGELUTanh && acct == nil:
		ep = cublaslt.EpilogueGELUBias
	case act != backend.ActNone:
		return nil, fmt.Errorf("linear: activation %d with accumulation %v is not supported", act, acct != nil)
	}
	var y *Tensor
	beta := float32(0)
	if acct != nil {
		if y, err = b.matrix(acct, out); err != nil {
			return nil, err
		}
		if y.shape.W != rows {
			return nil, fmt.Errorf("linear: accumulator %v for %d rows", y.shape, rows)
		}
		beta = 1
	} else if y, err = b.alloc(backend.Matrix(rows, out)); err != nil {
		return nil, err
	}
	p, err := g.Plan(cublaslt.Shape{M: rows, N: out, K: in, TransB: true, Epilogue: ep})
	if err == nil {
		err = run(p, y, beta)
	}
	if err != nil {
		if acct == nil {
			y.Free()
		}
		return nil, fmt.Errorf("linear %dx%d by %dx%d: %w", rows, in, in, out, err)
	}
	return y, nil
}

// rowKernel launches a transformer.cu row kernel with one block per row
// of x: the vectorised variant when x's rows (and the other tensors, all
// of the same width) suit it.
func (b *Backend) rowKernel(name string, x *Tensor, others []*Tensor, args ...any) error {
	cols, threads := x.shape.C, rowThreads
	vec := cols%8 == 0 && cols <= vecCols && !b.scalarRows
	for _, t := range append(others, x) {
		vec = vec && t.ptr()%16 == 0
	}
	if vec {
		name, threads = name+"_vec", vecThreads
	}
	f, err := b.kernel(transformerSource, name+"_"+b.dtype.String())
	if err != nil {
		return err
	}
	return f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(x.shape.W)}, Block: cu.Dim3{X: uint32(threads)}, Stream: b.compute}, args...)
}

// LayerNorm normalises each row (float32 statistics).
func (b *Backend) LayerNorm(xt backend.Tensor, eps float32) (backend.Tensor, error) {
	x, err := b.matrix(xt, 0)
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(x.shape)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.rowKernel("layer_norm", x, []*Tensor{y}, x.ptr(), y.ptr(), int32(x.shape.C), eps))
}

// RMSNormRoPE normalises and rotates each row in place, the rotary
// angles' cosines and sines coming from a table made once per token grid
// and offset (see ropeTable).
func (b *Backend) RMSNormRoPE(xt, wt backend.Tensor, eps float32, rope *backend.RoPE) error {
	x, err := b.matrix(xt, 0)
	if err != nil {
		return err
	}
	w, err := b.matrix(wt, x.shape.C)
	if err != nil {
		return err
	}
	// Without rope, one frame of one row per token: the kernel divides by
	// the grid's sizes anyway.
	hd, g, parts, first := x.shape.C, backend.Grid{F: x.shape.W, H: 1, W: 1}, [3]int{}, 0
	var tab cu.DevicePtr
	if rope != nil {
		if err := check.RoPE(*rope, x.shape.W, x.shape.C); err != nil {
			return err
		}
		hd, g, parts, first = rope.HeadDim, rope.Grid, check.RoPEParts(rope.HeadDim), rope.First
		table := *rope
		table.First = 0 // one table for every slice of the grid
		if tab, err = b.ropeTable(table, parts); err != nil {
			return err
		}
	}
	return b.rowKernel("rms_norm_rope", x, []*Tensor{w}, x.ptr(), w.ptr(), int32(x.shape.C), eps,
		int32(hd), int32(g.F), int32(g.H), int32(g.W), int32(parts[0]), int32(parts[1]), tab, int32(first))
}

// ropeTable returns the device table of rope's cosines and sines (see
// rope_table in transformer.cu), made on the compute stream on first use
// and kept for the calls of the same grid and offset that follow (the
// queries and keys of every block of a DiT chunk). While recording, the
// graph makes its own table, whose offset it reads at each replay.
func (b *Backend) ropeTable(rope backend.RoPE, parts [3]int) (cu.DevicePtr, error) {
	cache, offsetAt := b.ropeCache, cu.DevicePtr(0)
	if b.rec != nil {
		rope.Offset = 0
		cache, offsetAt = b.rec.tables, b.rec.offset.ptr
	}
	if t, ok := cache[rope]; ok {
		return t.ptr, nil
	}
	g := rope.Grid
	n := g.F*parts[0] + g.H*parts[1] + g.W*parts[2]
	t, err := b.pool.get(int64(n) * 8)
	if err != nil {
		return 0, err
	}
	f, err := b.kernel(transformerSource, "rope_table")
	if err == nil {
		err = f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32((n + 255) / 256)}, Block: cu.Dim3{X: 256}, Stream: b.compute},
			t.ptr, int32(g.F), int32(g.H), int32(g.W), int32(rope.Offset), offsetAt, int32(parts[0]), int32(parts[1]), int32(parts[2]))
	}
	if err != nil {
		b.pool.put(t)
		return 0, err
	}
	if b.rec == nil && len(cache) >= 16 { // chunks move on; older offsets are not seen again
		for k, old := range cache {
			b.pool.put(old)
			delete(cache, k)
		}
	}
	cache[rope] = t
	return t.ptr, nil
}

// keys are PrepareKeys' fixed attention keys (w: n x cols) and biases,
// float32 on the device.
type keys struct{ linearWeights }

// PrepareKeys uploads the keys and biases in float32.
func (b *Backend) PrepareKeys(n, cols int, k, bias []float32) (backend.Weights, error) {
	if err := check.Keys(n, cols, k, bias); err != nil {
		return nil, err
	}
	lw, err := b.newWeights(n, cols, cu.AsBytes(k), cu.AsBytes(bias))
	if err != nil {
		return nil, err
	}
	return &keys{lw}, nil
}

// AttentionWeights runs attention_weights, one block per row of q.
func (b *Backend) AttentionWeights(qt backend.Tensor, kw backend.Weights, headDim int, eps float32) (backend.Tensor, error) {
	k, ok := kw.(*keys)
	if !ok {
		return nil, fmt.Errorf("cuda attention weights given %T keys", kw)
	}
	n, cols := k.out, k.in
	q, err := b.matrix(qt, cols)
	if err != nil {
		return nil, err
	}
	if err := check.AttentionWeights(q.shape, cols, headDim); err != nil {
		return nil, err
	}
	rows, heads := q.shape.W, cols/headDim
	smem := 4 * (cols + heads*n)
	if smem > 48<<10 {
		return nil, fmt.Errorf("attention weights: rows of %d columns and %d scores exceed 48 KiB of shared memory", cols, heads*n)
	}
	p, err := b.alloc(backend.Matrix(rows, heads*n))
	if err != nil {
		return nil, err
	}
	// The vectorised kernel holds the row in registers; it takes heads of
	// 8 x (a power of two up to 32) columns and at most awMaxKeys keys.
	name, threads, lanes := "attention_weights_", rowThreads, headDim/8
	if cols%8 == 0 && cols <= vecCols && headDim%8 == 0 && lanes&(lanes-1) == 0 && lanes <= 32 &&
		n <= awMaxKeys && q.ptr()%16 == 0 && !b.scalarRows {
		name, threads, smem = "attention_weights_vec_", vecThreads, 0
	}
	f, err := b.kernel(transformerSource, name+b.dtype.String())
	if err == nil {
		err = f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(rows)}, Block: cu.Dim3{X: uint32(threads)}, SharedMem: uint32(smem), Stream: b.compute},
			q.ptr(), k.w.Ptr(), k.bias.Ptr(), p.ptr(), int32(cols), int32(headDim), int32(n), eps)
	}
	return b.finish(p, err)
}

// Rows returns rows [start, start+n) of the matrix x as a view sharing its
// storage (and holding a reference to it).
func (b *Backend) Rows(xt backend.Tensor, start, n int) (backend.Tensor, error) {
	if q, ok := xt.(*q8Tensor); ok {
		return b.rows8View(q, start, n)
	}
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	if err := check.Rows(x.shape, start, n); err != nil {
		return nil, err
	}
	v := b.share(x)
	v.shape = backend.Matrix(n, x.shape.C)
	v.off += start * x.shape.C * b.esize()
	return v, nil
}

// Reshape copies x into a tensor of shape s.
func (b *Backend) Reshape(xt backend.Tensor, s backend.Shape) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	if err := check.Reshape(x.shape, s); err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	return b.finish(y, b.compute.CopyDtoD(y.ptr(), x.ptr(), s.Elems()*b.esize()))
}
