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

var _ backend.FP8 = (*Backend)(nil)

//go:embed fp8.cu
var fp8Code string

var fp8Source = &Source{Name: "fp8.cu", Code: fp8Code}

// fp8Weights is a linear layer in e4m3: W as out x in with one float32
// scale per output channel (row r of W is w[r] * scale[r]), and the bias
// in bf16.
type fp8Weights struct {
	out, in        int
	w, scale, bias *cu.Buffer
}

func (w *fp8Weights) Out() int { return w.out }
func (w *fp8Weights) In() int  { return w.in }
func (w *fp8Weights) Free() {
	for _, b := range []**cu.Buffer{&w.w, &w.scale, &w.bias} {
		if *b != nil {
			(*b).Free()
			*b = nil
		}
	}
}

// q8Tensor is a matrix in e4m3 with one float32 scale per row (row r is
// data[r] * scale[r]), made by LayerNormFP8 or by Linear from its input.
// Only Linear with fp8 weights, Rows and Free take it: every other op
// refuses it as a foreign tensor.
type q8Tensor struct {
	shape       backend.Shape
	data, scale *block
	row         int // first row of a view (see Rows)
	b           *Backend
}

func (t *q8Tensor) Shape() backend.Shape { return t.shape }

func (t *q8Tensor) Free() {
	for _, blk := range []**block{&t.data, &t.scale} {
		if *blk != nil {
			t.b.pool.put(*blk)
			*blk = nil
		}
	}
}

func (t *q8Tensor) ptr() cu.DevicePtr      { return t.data.ptr.Add(t.row * t.shape.C) }
func (t *q8Tensor) scalePtr() cu.DevicePtr { return t.scale.ptr.Add(t.row * 4) }

// fp8Check refuses fp8 where it cannot run: storage other than bf16, a GPU
// without e4m3 tensor cores, or a cuBLASLt without per-row scales. The
// answer is found once (LayerNormFP8 asks on every call).
func (b *Backend) fp8Check() error {
	b.fp8Once.Do(func() { b.fp8Err = b.fp8Support() })
	return b.fp8Err
}

func (b *Backend) fp8Support() error {
	if b.dtype != BF16 {
		return fmt.Errorf("fp8 linear layers need bf16 storage, not %v", b.dtype)
	}
	major, minor, err := b.dev.ComputeCapability()
	if err != nil {
		return err
	}
	if major*10+minor < 89 {
		return fmt.Errorf("fp8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell); %s is %d.%d: use bf16", b.name, major, minor)
	}
	if v, err := cublaslt.Version(); err != nil {
		return err
	} else if v < 120900 {
		return fmt.Errorf("fp8 needs cuBLASLt 12.9 or newer (per-row scales); %s is %s", cublaslt.LibraryPath(), cublaslt.VersionString(v))
	}
	return nil
}

// gemm8Runner returns the backend's fp8 GEMM, made on first use.
func (b *Backend) gemm8Runner() (*cublaslt.Gemm, error) {
	if b.gemm8 != nil {
		return b.gemm8, nil
	}
	if _, err := b.gemmRunner(); err != nil { // the handle
		return nil, err
	}
	g, err := cublaslt.NewGemm(b.blasHandle, cublaslt.Config{InputType: cublaslt.R8F_E4M3, OutputType: cublaslt.R16BF,
		Scale: cublaslt.ScaleOuterVec, FastAccum: !b.FP8ExactAccum})
	if err != nil {
		return nil, err
	}
	b.gemm8 = g
	return g, nil
}

// PrepareLinearFP8 uploads the weights in bf16 and quantises them on the
// GPU, a scale per output channel.
func (b *Backend) PrepareLinearFP8(out, in int, w, bias []float32) (backend.Weights, error) {
	if err := check.Linear(out, in, w, bias); err != nil {
		return nil, err
	}
	if err := b.fp8Check(); err != nil {
		return nil, err
	}
	if in%16 != 0 || out%16 != 0 {
		return nil, fmt.Errorf("fp8 linear layer %dx%d: both sizes must be multiples of 16", out, in)
	}
	if bias == nil {
		bias = make([]float32, out)
	}
	tmp, err := b.newWeights(out, in, cu.AsBytes(half.EncodeSlice(w, true)), cu.AsBytes(half.EncodeSlice(bias, true)))
	if err != nil {
		return nil, err
	}
	defer tmp.w.Free()
	lw := &fp8Weights{out: out, in: in, bias: tmp.bias}
	if lw.w, err = b.ctx.Alloc(out * in); err == nil {
		lw.scale, err = b.ctx.Alloc(out * 4)
	}
	if err == nil {
		err = b.rows8("quant_rows", out, in, tmp.w.Ptr(), lw.w.Ptr(), lw.scale.Ptr())
	}
	if err == nil {
		err = b.compute.Synchronize() // before tmp.w is freed
	}
	if err != nil {
		lw.Free()
		return nil, fmt.Errorf("fp8 linear layer %dx%d: %w", out, in, err)
	}
	return lw, nil
}

// rows8 launches the fp8.cu row kernel name over rows x cols: its
// arguments are the bf16 input, the e4m3 output, the scales, the columns
// and then more.
func (b *Backend) rows8(name string, rows, cols int, x, q, scale cu.DevicePtr, more ...any) error {
	if cols%8 != 0 || x%16 != 0 {
		return fmt.Errorf("%s: rows of %d columns (a multiple of 8, 16-byte aligned, wanted)", name, cols)
	}
	f, err := b.kernel(fp8Source, name)
	if err != nil {
		return err
	}
	return f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(rows)}, Block: cu.Dim3{X: rowThreads}, Stream: b.compute},
		append([]any{x, q, scale, int32(cols)}, more...)...)
}

// alloc8 returns a q8Tensor of shape s with undefined contents.
func (b *Backend) alloc8(s backend.Shape) (*q8Tensor, error) {
	if err := b.pace.step(b); err != nil {
		return nil, err
	}
	rows := s.W
	data, err := b.pool.get(int64(rows * s.C))
	if err != nil {
		return nil, err
	}
	scale, err := b.pool.get(int64(rows * 4))
	if err != nil {
		b.pool.put(data)
		return nil, err
	}
	return &q8Tensor{shape: s, data: data, scale: scale, b: b}, nil
}

// quantize returns the rows of x through the fp8.cu kernel name (with
// more arguments after the columns) as a new q8Tensor.
func (b *Backend) quantize(x *Tensor, name string, more ...any) (*q8Tensor, error) {
	q, err := b.alloc8(x.shape)
	if err != nil {
		return nil, err
	}
	if err := b.rows8(name, x.shape.W, x.shape.C, x.ptr(), q.ptr(), q.scalePtr(), more...); err != nil {
		q.Free()
		return nil, err
	}
	return q, nil
}

// LayerNormFP8 normalises each row and quantises it in one kernel.
func (b *Backend) LayerNormFP8(xt backend.Tensor, eps float32) (backend.Tensor, error) {
	x, err := b.matrix(xt, 0)
	if err != nil {
		return nil, err
	}
	if err := b.fp8Check(); err != nil {
		return nil, err
	}
	q, err := b.quantize(x, "layer_norm_q8", eps)
	if err != nil {
		return nil, fmt.Errorf("fp8 layer norm: %w", err)
	}
	return q, nil
}

// rows8View is Rows for a q8Tensor.
func (b *Backend) rows8View(x *q8Tensor, start, n int) (backend.Tensor, error) {
	if x.data == nil {
		return nil, fmt.Errorf("cuda backend given a freed tensor")
	}
	if err := check.Rows(x.shape, start, n); err != nil {
		return nil, err
	}
	b.pool.retain(x.data)
	b.pool.retain(x.scale)
	return &q8Tensor{shape: backend.Matrix(n, x.shape.C), data: x.data, scale: x.scale, row: x.row + start, b: b}, nil
}

// input8 returns x as e4m3 rows for an fp8 Linear of in columns, and
// whether the caller frees it (x was quantised here).
func (b *Backend) input8(xt backend.Tensor, in int) (*q8Tensor, bool, error) {
	if q, ok := xt.(*q8Tensor); ok {
		if q.data == nil {
			return nil, false, fmt.Errorf("cuda backend given a freed tensor")
		}
		return q, false, check.Matrix(q.shape, in)
	}
	x, err := b.matrix(xt, in)
	if err != nil {
		return nil, false, err
	}
	q, err := b.quantize(x, "quant_rows")
	return q, true, err
}
