package cublaslt

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

// DefaultWorkspaceBytes is the workspace a Gemm allocates when
// Config.WorkspaceBytes is 0 (NVIDIA recommends 32 MiB on Hopper).
const DefaultWorkspaceBytes = 32 << 20

// DefaultAlignment is the pointer alignment, in bytes, algorithms may
// assume when Config.Alignment is 0 (cuBLASLt's own default; cuMemAlloc
// returns such addresses).
const DefaultAlignment = 256

// Config fixes a Gemm's types and resources.
type Config struct {
	// InputType is the type of A and B: R16BF or R16F (R32F also works),
	// or R8F_E4M3 (compute capability 8.9 and newer), whose products are
	// scaled as Scale says and whose problems need TransB and not TransA
	// (both operands contiguous along k).
	InputType DataType
	// Scale is how an R8F_E4M3 Gemm's scale factors apply (RunScaled).
	Scale ScaleMode
	// FastAccum lets fp8 GEMMs accumulate in the tensor cores' own
	// precision without periodic promotion to float32: faster, less exact.
	// It is a preference: a shape cuBLASLt has no such kernel for (seen on
	// Hopper with per-row scales, m 360, k 14336) is planned with exact
	// accumulation (Plan.FastAccum says which).
	FastAccum bool
	// OutputType is the type of C and D: R16BF, R16F or R32F.
	OutputType DataType
	// Compute is the compute type; 0 means Compute32F (fp32 accumulation).
	Compute ComputeType
	// WorkspaceBytes caps the workspace an algorithm may use; 0 means
	// DefaultWorkspaceBytes, negative none.
	WorkspaceBytes int
	// Workspace is a caller-owned workspace of WorkspaceBytes; when 0, NewGemm
	// allocates one in the handle's context and Close frees it.
	Workspace cuda.DevicePtr
	// Alignment is the byte alignment of A, B, C and D that the algorithms
	// may rely on (0: DefaultAlignment); Matmul refuses pointers that lack it.
	Alignment int
}

// Shape is one problem of a Gemm (row-major sizes; see the package doc).
// It is comparable and is the plan cache's key.
type Shape struct {
	M, N, K        int
	TransA, TransB bool
	// Epilogue is applied to the result: 0 (or EpilogueDefault) none;
	// EpilogueBias and EpilogueGELUBias add a bias of one value per column
	// of D (in D's type), given to RunBias, before GELU (tanh approximation).
	Epilogue Epilogue
}

func (s Shape) String() string {
	ta, tb := "N", "N"
	if s.TransA {
		ta = "T"
	}
	if s.TransB {
		tb = "T"
	}
	if s.Epilogue > EpilogueDefault {
		return fmt.Sprintf("m%d n%d k%d %s%s epilogue %d", s.M, s.N, s.K, ta, tb, s.Epilogue)
	}
	return fmt.Sprintf("m%d n%d k%d %s%s", s.M, s.N, s.K, ta, tb)
}

// Validate reports what is wrong with s, or nil.
func (s Shape) Validate() error {
	if s.M < 1 || s.N < 1 || s.K < 1 || s.M > math.MaxInt32 || s.N > math.MaxInt32 || s.K > math.MaxInt32 {
		return fmt.Errorf("cublaslt: shape %v is out of range", s)
	}
	return nil
}

// layout is a column-major matrix layout as cuBLASLt takes it.
type layout struct{ rows, cols, ld int }

// colMajorCall is the cuBLASLt (column-major) problem that computes a
// row-major Shape: cuBLASLt's A is the caller's B, its B the caller's A, and
// its C/D the caller's C/D seen as n×m.
type colMajorCall struct {
	opA, opB Operation
	a, b, c  layout
}

// colMajor maps s to cuBLASLt's view. A row-major r×c matrix with row
// stride c is the column-major c×r matrix with ld = c, so
// Dᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m):
//   - cuBLASLt's A is B: stored k×n row-major = n×k column-major (ld n),
//     op N; or, with transB, stored n×k = k×n column-major (ld k), op T;
//   - cuBLASLt's B is A: stored m×k = k×m column-major (ld k), op N; or,
//     with transA, stored k×m = m×k column-major (ld m), op T;
//   - C and D: m×n row-major = n×m column-major (ld n).
func (s Shape) colMajor() colMajorCall {
	c := colMajorCall{opA: OpN, opB: OpN,
		a: layout{s.N, s.K, s.N}, b: layout{s.K, s.M, s.K}, c: layout{s.N, s.M, s.N}}
	if s.TransB {
		c.opA, c.a = OpT, layout{s.K, s.N, s.K}
	}
	if s.TransA {
		c.opB, c.b = OpT, layout{s.M, s.K, s.M}
	}
	return c
}

// heuristicResult mirrors cublasLtMatmulHeuristicResult_t (96 bytes).
type heuristicResult struct {
	algo          [8]uint64 // cublasLtMatmulAlgo_t
	workspaceSize uintptr
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

// Plan is a prepared matmul of one Shape: descriptors and the algorithm
// the heuristic chose.
type Plan struct {
	shape       Shape
	desc        uintptr
	la, lb, lc  uintptr // cuBLASLt's A (our B), B (our A), C=D
	algo        *[8]uint64
	ws          int
	waves       float32
	nAlgos      int
	fast        bool     // planned with fast accumulation
	alpha, beta *float32 // host scalars, heap-allocated per plan
	mu          sync.Mutex
	closed      bool
}

// Shape returns the plan's shape.
func (p *Plan) Shape() Shape { return p.shape }

// FastAccum reports whether the plan accumulates fp8 products without
// promotion (Config.FastAccum, where cuBLASLt has a kernel for the shape).
func (p *Plan) FastAccum() bool { return p.fast }

// WorkspaceSize returns the workspace bytes the chosen algorithm uses.
func (p *Plan) WorkspaceSize() int { return p.ws }

// Waves returns the heuristic's device-utilization estimate (1.0: one full wave).
func (p *Plan) Waves() float32 { return p.waves }

// Candidates returns how many algorithms the heuristic returned.
func (p *Plan) Candidates() int { return p.nAlgos }

func (p *Plan) String() string {
	return fmt.Sprintf("%v: ws=%d waves=%.2f (%d candidates)", p.shape, p.ws, p.waves, p.nAlgos)
}

// Gemm multiplies row-major matrices of fixed types with one handle and
// one workspace, keeping one Plan per Shape. It is safe for use by one
// goroutine at a time (the workspace is shared by its calls).
type Gemm struct {
	h      *Handle
	cfg    Config
	ws     cuda.DevicePtr
	wsSize int
	owned  *cuda.Buffer
	align  int

	mu           sync.Mutex
	plans        map[Shape]*Plan
	hits, misses int
}

// NewGemm prepares a Gemm on h with cfg's types and workspace.
func NewGemm(h *Handle, cfg Config) (*Gemm, error) {
	if h == nil || h.h == 0 {
		return nil, errClosed
	}
	if cfg.Compute == 0 {
		cfg.Compute = Compute32F
	}
	for i, t := range []DataType{cfg.InputType, cfg.OutputType} {
		if t != R16BF && t != R16F && t != R32F && (i > 0 || t != R8F_E4M3) {
			return nil, fmt.Errorf("cublaslt: data type %v is not bf16, f16 or f32 (or e4m3 for the inputs)", t)
		}
	}
	switch {
	case cfg.InputType != R8F_E4M3 && (cfg.Scale != ScaleScalar || cfg.FastAccum):
		return nil, fmt.Errorf("cublaslt: scale modes and fast accumulation are for e4m3 inputs, not %v", cfg.InputType)
	case cfg.Scale != ScaleScalar && cfg.Scale != ScaleOuterVec:
		return nil, fmt.Errorf("cublaslt: scale mode %d: want ScaleScalar or ScaleOuterVec", cfg.Scale)
	}
	if cfg.Scale != ScaleScalar && cfg.WorkspaceBytes < 0 {
		return nil, errors.New("cublaslt: vector scales need a workspace")
	}
	g := &Gemm{h: h, cfg: cfg, plans: map[Shape]*Plan{}, align: cfg.Alignment}
	if g.align <= 0 {
		g.align = DefaultAlignment
	}
	switch {
	case cfg.WorkspaceBytes < 0:
	case cfg.Workspace != 0:
		g.ws, g.wsSize = cfg.Workspace, cfg.WorkspaceBytes
	default:
		n := cfg.WorkspaceBytes
		if n == 0 {
			n = DefaultWorkspaceBytes
		}
		if h.ctx == nil {
			return nil, errors.New("cublaslt: a Handle without a context needs Config.Workspace")
		}
		b, err := h.ctx.Alloc(n)
		if err != nil {
			return nil, fmt.Errorf("cublaslt: workspace: %w", err)
		}
		g.owned, g.ws, g.wsSize = b, b.Ptr(), n
	}
	return g, nil
}

// Config returns the Gemm's configuration, defaults filled in.
func (g *Gemm) Config() Config { return g.cfg }

// WorkspaceSize returns the workspace size in bytes.
func (g *Gemm) WorkspaceSize() int { return g.wsSize }

// Stats returns how many Plan lookups found a plan (hits) and how many
// made one (misses).
func (g *Gemm) Stats() (hits, misses int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hits, g.misses
}

// fp8 reports whether the Gemm's inputs are 8-bit floats.
func (g *Gemm) fp8() bool { return g.cfg.InputType == R8F_E4M3 }

// Plan returns the prepared plan for s, making it (and running the
// heuristic) on first use.
func (g *Gemm) Plan(s Shape) (*Plan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if g.fp8() && (s.TransA || !s.TransB || s.K%16 != 0 || s.N%16 != 0) {
		return nil, fmt.Errorf("cublaslt: fp8 shape %v: want A m×k, B n×k (transB) and k, n multiples of 16", s)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.plans[s]; ok {
		g.hits++
		return p, nil
	}
	g.misses++
	p := &Plan{shape: s, algo: new([8]uint64), alpha: new(float32), beta: new(float32), fast: g.cfg.FastAccum}
	err := g.h.do(func() error { return g.build(p) })
	if p.fast && errors.Is(err, ErrNotSupported) {
		p.destroy()
		p.fast = false
		err = g.h.do(func() error { return g.build(p) })
	}
	if err != nil {
		p.destroy()
		return nil, fmt.Errorf("cublaslt: planning %v %v×%v->%v: %w", s, g.cfg.InputType, g.cfg.InputType, g.cfg.OutputType, err)
	}
	g.plans[s] = p
	return p, nil
}

func setAttr[T any](op string, f func(uintptr, int32, unsafe.Pointer, uintptr) int32, d uintptr, attr int32, v T) error {
	err := check(op, f(d, attr, unsafe.Pointer(&v), unsafe.Sizeof(v)))
	runtime.KeepAlive(&v)
	return err
}

// build runs with the context current. See the package doc for the
// row-major to column-major mapping.
func (g *Gemm) build(p *Plan) error {
	s := p.shape
	in, out := int32(g.cfg.InputType), int32(g.cfg.OutputType)
	if err := check("cublasLtMatmulDescCreate", lib.cublasLtMatmulDescCreate(&p.desc, int32(g.cfg.Compute), int32(R32F))); err != nil {
		return err
	}
	cm := s.colMajor()
	if s.Epilogue > EpilogueDefault {
		if err := setAttr("cublasLtMatmulDescSetAttribute(EPILOGUE)", lib.cublasLtMatmulDescSetAttribute, p.desc, descEpilogue, uint32(s.Epilogue)); err != nil {
			return err
		}
	}
	if g.cfg.Scale != ScaleScalar {
		// Vector scales need pointers before the heuristic: a placeholder
		// (any aligned device address) until RunScaled sets the real ones.
		for _, a := range []int32{descAScaleMode, descBScaleMode} {
			if err := setAttr("cublasLtMatmulDescSetAttribute(SCALE_MODE)", lib.cublasLtMatmulDescSetAttribute, p.desc, a, int32(g.cfg.Scale)); err != nil {
				return err
			}
		}
		for _, a := range []int32{descAScalePtr, descBScalePtr} {
			if err := setAttr("cublasLtMatmulDescSetAttribute(SCALE_POINTER)", lib.cublasLtMatmulDescSetAttribute, p.desc, a, uintptr(g.ws)); err != nil {
				return err
			}
		}
	}
	if p.fast {
		if err := setAttr("cublasLtMatmulDescSetAttribute(FAST_ACCUM)", lib.cublasLtMatmulDescSetAttribute, p.desc, descFastAccum, int8(1)); err != nil {
			return err
		}
	}
	if err := setAttr("cublasLtMatmulDescSetAttribute(TRANSA)", lib.cublasLtMatmulDescSetAttribute, p.desc, descTransA, int32(cm.opA)); err != nil {
		return err
	}
	if err := setAttr("cublasLtMatmulDescSetAttribute(TRANSB)", lib.cublasLtMatmulDescSetAttribute, p.desc, descTransB, int32(cm.opB)); err != nil {
		return err
	}
	if err := check("cublasLtMatrixLayoutCreate(A)", lib.cublasLtMatrixLayoutCreate(&p.la, in, uint64(cm.a.rows), uint64(cm.a.cols), int64(cm.a.ld))); err != nil {
		return err
	}
	if err := check("cublasLtMatrixLayoutCreate(B)", lib.cublasLtMatrixLayoutCreate(&p.lb, in, uint64(cm.b.rows), uint64(cm.b.cols), int64(cm.b.ld))); err != nil {
		return err
	}
	if err := check("cublasLtMatrixLayoutCreate(C)", lib.cublasLtMatrixLayoutCreate(&p.lc, out, uint64(cm.c.rows), uint64(cm.c.cols), int64(cm.c.ld))); err != nil {
		return err
	}
	var pref uintptr
	if err := check("cublasLtMatmulPreferenceCreate", lib.cublasLtMatmulPreferenceCreate(&pref)); err != nil {
		return err
	}
	defer lib.cublasLtMatmulPreferenceDestroy(pref)
	if err := setAttr("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", lib.cublasLtMatmulPreferenceSetAttribute,
		pref, prefMaxWorkspaceBytes, uint64(g.wsSize)); err != nil {
		return err
	}
	for _, a := range []int32{prefMinAlignmentA, prefMinAlignmentB, prefMinAlignmentC, prefMinAlignmentD} {
		if err := setAttr("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)", lib.cublasLtMatmulPreferenceSetAttribute,
			pref, a, uint32(g.align)); err != nil {
			return err
		}
	}
	res := make([]heuristicResult, 8)
	var got int32
	err := check("cublasLtMatmulAlgoGetHeuristic", lib.cublasLtMatmulAlgoGetHeuristic(g.h.h, p.desc, p.la, p.lb, p.lc, p.lc, pref,
		int32(len(res)), unsafe.Pointer(&res[0]), &got))
	runtime.KeepAlive(res)
	if err != nil {
		return err
	}
	p.nAlgos = int(got)
	for _, r := range res[:got] {
		if r.state == 0 && int(r.workspaceSize) <= g.wsSize {
			*p.algo = r.algo
			p.ws = int(r.workspaceSize)
			p.waves = r.wavesCount
			return nil
		}
	}
	return &Error{Op: "cublasLtMatmulAlgoGetHeuristic", Code: StatusNotSupported, Name: StatusNotSupported.Name(),
		Msg: fmt.Sprintf("no algorithm among %d candidates", got)}
}

// Matmul queues D = alpha·op(A)·op(B) + beta·C on stream (nil: the legacy
// default stream), all matrices row-major as the package doc describes:
// A is m×k (k×m if transA), B is k×n (n×k if transB), C and D are m×n.
// C may equal D, or be 0 when beta is 0. The plan for (m, n, k, transA,
// transB) is made on first use and reused after.
func (g *Gemm) Matmul(stream *cuda.Stream, A, B, C, D cuda.DevicePtr, m, n, k int, transA, transB bool, alpha, beta float32) error {
	p, err := g.Plan(Shape{M: m, N: n, K: k, TransA: transA, TransB: transB})
	if err != nil {
		return err
	}
	var sh uintptr
	if stream != nil {
		sh = stream.Handle()
	}
	return g.Run(p, sh, A, B, C, D, alpha, beta)
}

// Run is Matmul with a prepared plan and a raw CUstream.
func (g *Gemm) Run(p *Plan, stream uintptr, A, B, C, D cuda.DevicePtr, alpha, beta float32) error {
	return g.RunBias(p, stream, A, B, C, D, 0, alpha, beta)
}

// RunBias is Run for a plan whose Shape has a bias epilogue: bias holds N
// values of D's type.
func (g *Gemm) RunBias(p *Plan, stream uintptr, A, B, C, D, bias cuda.DevicePtr, alpha, beta float32) error {
	return g.RunScaled(p, stream, A, B, C, D, bias, 0, 0, alpha, beta)
}

// RunScaled is RunBias for an fp8 Gemm: D = alpha·(sa·A)·(sb·B)ᵀ + beta·C,
// where with ScaleOuterVec sa holds M float32 (one per row of A) and sb N
// (one per row of B, a column of D), and with ScaleScalar each holds one;
// all on the device, 16-byte aligned.
func (g *Gemm) RunScaled(p *Plan, stream uintptr, A, B, C, D, bias, sa, sb cuda.DevicePtr, alpha, beta float32) error {
	if g.fp8() != (sa != 0 && sb != 0) || uint64(sa)%16 != 0 || uint64(sb)%16 != 0 {
		return fmt.Errorf("cublaslt: %v inputs given scales %#x and %#x", g.cfg.InputType, uint64(sa), uint64(sb))
	}
	if needs := p.shape.Epilogue&EpilogueBias != 0; needs != (bias != 0) {
		return fmt.Errorf("cublaslt: plan %v given bias %#x", p.shape, uint64(bias))
	}
	if C == 0 {
		if beta != 0 {
			return errors.New("cublaslt: beta != 0 needs a C matrix")
		}
		C = D
	}
	for _, ptr := range []cuda.DevicePtr{A, B, C, D} {
		if ptr == 0 || uint64(ptr)%uint64(g.align) != 0 {
			return fmt.Errorf("cublaslt: matrix address %#x is not %d-byte aligned (Config.Alignment)", uint64(ptr), g.align)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("cublaslt: plan is closed")
	}
	*p.alpha, *p.beta = alpha, beta
	return g.h.do(func() error {
		if sa != 0 { // cuBLASLt's A is the caller's B (see colMajor)
			if err := setAttr("cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)", lib.cublasLtMatmulDescSetAttribute, p.desc, descAScalePtr, uintptr(sb)); err != nil {
				return err
			}
			if err := setAttr("cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)", lib.cublasLtMatmulDescSetAttribute, p.desc, descBScalePtr, uintptr(sa)); err != nil {
				return err
			}
		}
		if bias != 0 {
			if err := setAttr("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", lib.cublasLtMatmulDescSetAttribute, p.desc, descBiasPointer, uintptr(bias)); err != nil {
				return err
			}
		}
		return check("cublasLtMatmul", lib.cublasLtMatmul(g.h.h, p.desc, unsafe.Pointer(p.alpha),
			uintptr(B), p.la, uintptr(A), p.lb, unsafe.Pointer(p.beta),
			uintptr(C), p.lc, uintptr(D), p.lc, unsafe.Pointer(p.algo), uintptr(g.ws), uintptr(g.wsSize), stream))
	})
}

func (p *Plan) destroy() {
	if p.desc != 0 {
		lib.cublasLtMatmulDescDestroy(p.desc)
		p.desc = 0
	}
	for _, l := range []*uintptr{&p.la, &p.lb, &p.lc} {
		if *l != 0 {
			lib.cublasLtMatrixLayoutDestroy(*l)
			*l = 0
		}
	}
}

// Close destroys the plans and frees a workspace NewGemm allocated. Work
// queued with the Gemm must have finished. The handle is the caller's.
func (g *Gemm) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, p := range g.plans {
		p.mu.Lock()
		p.closed = true
		p.destroy()
		p.mu.Unlock()
		delete(g.plans, k)
	}
	var err error
	if g.owned != nil {
		err = g.owned.Free()
		g.owned = nil
	}
	g.ws, g.wsSize = 0, 0
	return err
}
