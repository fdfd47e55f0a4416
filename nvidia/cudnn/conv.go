package cudnn

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

// Shape is one 2-D convolution: an NHWC input of N×H×W×C, K filters of
// KH×KW×C (KRSC), zero padding, stride and dilation. Zero strides and
// dilations mean 1. Shape is comparable and is the [Cache] key.
type Shape struct {
	DType                DataType // DataHalf, DataBFloat16 or DataFloat
	N, H, W, C           int
	K                    int
	KH, KW               int
	PadH, PadW           int
	StrideH, StrideW     int
	DilationH, DilationW int
}

// Normalized returns s with zero strides and dilations set to 1.
func (s Shape) Normalized() Shape {
	if s.StrideH == 0 {
		s.StrideH = 1
	}
	if s.StrideW == 0 {
		s.StrideW = 1
	}
	if s.DilationH == 0 {
		s.DilationH = 1
	}
	if s.DilationW == 0 {
		s.DilationW = 1
	}
	return s
}

// String is a compact key, e.g. "f16 n2 37x37x64 -> k64 3x3 p1,1 s1,1 d1,1".
func (s Shape) String() string {
	s = s.Normalized()
	return fmt.Sprintf("%v n%d %dx%dx%d -> k%d %dx%d p%d,%d s%d,%d d%d,%d",
		s.DType, s.N, s.H, s.W, s.C, s.K, s.KH, s.KW, s.PadH, s.PadW, s.StrideH, s.StrideW, s.DilationH, s.DilationW)
}

// OutHW returns the output height and width:
// (H + 2·PadH − DilationH·(KH−1) − 1)/StrideH + 1, and likewise for W.
func (s Shape) OutHW() (ho, wo int) {
	s = s.Normalized()
	ho = (s.H+2*s.PadH-s.DilationH*(s.KH-1)-1)/s.StrideH + 1
	wo = (s.W+2*s.PadW-s.DilationW*(s.KW-1)-1)/s.StrideW + 1
	return ho, wo
}

// XElems, WElems and YElems are the element counts of x, w and y.
func (s Shape) XElems() int { return s.N * s.H * s.W * s.C }

// WElems is K·KH·KW·C.
func (s Shape) WElems() int { return s.K * s.KH * s.KW * s.C }

// YElems is N·Ho·Wo·K.
func (s Shape) YElems() int { ho, wo := s.OutHW(); return s.N * ho * wo * s.K }

// XBytes, WBytes and YBytes are the buffer sizes of x, w and y.
func (s Shape) XBytes() int { return s.XElems() * s.DType.Size() }

// WBytes is the filter's size in bytes.
func (s Shape) WBytes() int { return s.WElems() * s.DType.Size() }

// YBytes is the output's size in bytes.
func (s Shape) YBytes() int { return s.YElems() * s.DType.Size() }

// Validate reports what is wrong with s, or nil.
func (s Shape) Validate() error {
	s = s.Normalized()
	switch s.DType {
	case DataHalf, DataBFloat16, DataFloat:
	default:
		return fmt.Errorf("cudnn: shape %v: data type %v is not one of f16, bf16, f32", s, s.DType)
	}
	for _, v := range []struct {
		name string
		v    int
		min  int
	}{
		{"N", s.N, 1}, {"H", s.H, 1}, {"W", s.W, 1}, {"C", s.C, 1}, {"K", s.K, 1},
		{"KH", s.KH, 1}, {"KW", s.KW, 1}, {"PadH", s.PadH, 0}, {"PadW", s.PadW, 0},
		{"StrideH", s.StrideH, 1}, {"StrideW", s.StrideW, 1},
		{"DilationH", s.DilationH, 1}, {"DilationW", s.DilationW, 1},
	} {
		if v.v < v.min || v.v > math.MaxInt32 {
			return fmt.Errorf("cudnn: shape %v: %s = %d is out of range", s, v.name, v.v)
		}
	}
	if ho, wo := s.OutHW(); ho < 1 || wo < 1 {
		return fmt.Errorf("cudnn: shape %v: output would be %dx%d", s, ho, wo)
	}
	for _, n := range []int{s.XElems(), s.WElems(), s.YElems()} {
		if n > math.MaxInt32 {
			return fmt.Errorf("cudnn: shape %v: a tensor has %d elements, more than the 4-D descriptors take", s, n)
		}
	}
	return nil
}

// DefaultWorkspaceLimit caps the workspace an algorithm may use when
// Options.WorkspaceLimit is 0.
const DefaultWorkspaceLimit = 256 << 20

// Options says how a [Conv] chooses its algorithm.
type Options struct {
	// Heuristic takes the first algorithm of the
	// cudnnGetConvolutionForwardAlgorithm_v7 heuristic instead of timing
	// the candidates with cudnnFindConvolutionForwardAlgorithmEx (the
	// default, which allocates scratch x, w, y and workspace buffers in the
	// handle's context for the search and frees them after, and runs the
	// benchmark twice, keeping the warm second pass). A timed ranking is
	// kept for the life of the process and on disk (see algocache.go) and
	// reused for the same shape on the same kind of device, so every Conv
	// of one shape runs one algorithm.
	Heuristic bool
	// WorkspaceLimit is the most workspace, in bytes, the chosen algorithm
	// may need: 0 means DefaultWorkspaceLimit, a negative value none.
	WorkspaceLimit int
	// AllowConversion selects CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION instead
	// of CUDNN_TENSOR_OP_MATH. Float32 data always runs CUDNN_FMA_MATH: no
	// TF32 and no conversion, so that it matches a float32 reference.
	AllowConversion bool
	// Buffers, when set, are the device buffers the benchmark runs on
	// instead of scratch ones (Y is overwritten).
	Buffers *FindBuffers
}

// FindBuffers are caller-owned buffers for the algorithm benchmark: x, w
// and y of the shape's sizes, and a workspace whose size caps the
// algorithms tried.
type FindBuffers struct {
	X, W, Y       cuda.DevicePtr
	Workspace     cuda.DevicePtr
	WorkspaceSize int
}

func (o Options) limit() int {
	switch {
	case o.WorkspaceLimit == 0:
		return DefaultWorkspaceLimit
	case o.WorkspaceLimit < 0:
		return 0
	}
	return o.WorkspaceLimit
}

// algoPerf mirrors cudnnConvolutionFwdAlgoPerf_t (48 bytes on 64-bit).
type algoPerf struct {
	algo        int32
	status      int32
	time        float32
	memory      uintptr // size_t, at offset 16
	determinism int32
	mathType    int32
	reserved    [3]int32
}

// AlgoPerf is one candidate algorithm as cuDNN reported it.
type AlgoPerf struct {
	Algo        FwdAlgo
	Status      Status
	Time        time.Duration // measured (Find) or estimated (-1 for heuristics)
	Memory      int           // workspace bytes
	Determinism Determinism
	MathType    MathType
}

func (p AlgoPerf) String() string {
	t := "n/a"
	if p.Time >= 0 {
		t = p.Time.String()
	}
	return fmt.Sprintf("%v/%v %s ws=%d %s", p.Algo, p.MathType, t, p.Memory, p.Status.Name())
}

// Conv is a prepared convolution of one [Shape]: its descriptors, algorithm
// and workspace size. Its methods may be called from several goroutines,
// each with its own Handle.
type Conv struct {
	shape      Shape
	xd, wd, yd uintptr // tensor, filter, tensor descriptors
	cd         uintptr // convolution descriptor
	ho, wo     int

	algo       FwdAlgo
	mathType   MathType
	ws         int
	heuristic  bool
	candidates []AlgoPerf
	searchTime time.Duration

	// ForwardBiasAct (optional).
	bd       uintptr    // bias tensor descriptor
	ad       [2]uintptr // identity and ReLU activation descriptors
	biasAlgo FwdAlgo    // IMPLICIT_PRECOMP_GEMM
	biasWS   int        // and its workspace
	biasErr  error

	mu     sync.Mutex
	closed bool
}

// Shape returns the convolution's shape (normalized).
func (c *Conv) Shape() Shape { return c.shape }

// Algo returns the chosen forward algorithm.
func (c *Conv) Algo() FwdAlgo { return c.algo }

// MathType returns the math type the algorithm runs with.
func (c *Conv) MathType() MathType { return c.mathType }

// WorkspaceSize returns the workspace bytes Forward needs.
func (c *Conv) WorkspaceSize() int { return c.ws }

// OutHW returns the output height and width, as cuDNN computed them.
func (c *Conv) OutHW() (ho, wo int) { return c.ho, c.wo }

// Heuristic reports whether the algorithm came from the heuristic rather
// than from timing.
func (c *Conv) Heuristic() bool { return c.heuristic }

// Candidates returns the algorithms cuDNN reported, best first.
func (c *Conv) Candidates() []AlgoPerf { return append([]AlgoPerf(nil), c.candidates...) }

// SearchTime returns how long choosing the algorithm took.
func (c *Conv) SearchTime() time.Duration { return c.searchTime }

// String summarizes the plan for logs.
func (c *Conv) String() string {
	how := "find"
	if c.heuristic {
		how = "heuristic"
	}
	return fmt.Sprintf("%v: %v/%v ws=%d (%s, %v)", c.shape, c.algo, c.mathType, c.ws, how, c.searchTime.Round(time.Microsecond))
}

// NewConv prepares a convolution of shape s with h: it builds the
// descriptors, asks cuDNN for the output size and chooses the algorithm as
// opt says. The Conv is independent of h afterwards: Forward takes any
// Handle of the same device.
func NewConv(h *Handle, s Shape, opt Options) (*Conv, error) {
	s = s.Normalized()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if h == nil || h.h == 0 {
		return nil, errClosed
	}
	c := &Conv{shape: s}
	start := time.Now()
	err := h.do(func() error { return c.build(h, opt) })
	if err != nil {
		c.destroy()
		return nil, fmt.Errorf("cudnn: preparing conv %v: %w", s, err)
	}
	c.searchTime = time.Since(start)
	return c, nil
}

// build runs with the handle's context current.
func (c *Conv) build(h *Handle, opt Options) error {
	s := c.shape
	dt := int32(s.DType)
	if err := check("cudnnCreateTensorDescriptor", lib.cudnnCreateTensorDesc(&c.xd)); err != nil {
		return err
	}
	if err := check("cudnnCreateTensorDescriptor", lib.cudnnCreateTensorDesc(&c.yd)); err != nil {
		return err
	}
	if err := check("cudnnCreateFilterDescriptor", lib.cudnnCreateFilterDesc(&c.wd)); err != nil {
		return err
	}
	if err := check("cudnnCreateConvolutionDescriptor", lib.cudnnCreateConvDesc(&c.cd)); err != nil {
		return err
	}
	if err := check("cudnnSetTensor4dDescriptor(x)", lib.cudnnSetTensor4dDesc(c.xd, int32(TensorNHWC), dt,
		int32(s.N), int32(s.C), int32(s.H), int32(s.W))); err != nil {
		return err
	}
	if err := check("cudnnSetFilter4dDescriptor", lib.cudnnSetFilter4dDesc(c.wd, dt, int32(TensorNHWC),
		int32(s.K), int32(s.C), int32(s.KH), int32(s.KW))); err != nil {
		return err
	}
	if err := check("cudnnSetConvolution2dDescriptor", lib.cudnnSetConv2dDesc(c.cd,
		int32(s.PadH), int32(s.PadW), int32(s.StrideH), int32(s.StrideW), int32(s.DilationH), int32(s.DilationW),
		int32(CrossCorrelation), int32(DataFloat))); err != nil {
		return err
	}
	mt := TensorOpMath
	switch {
	case s.DType == DataFloat:
		mt = FMAMath // float32 stays float32: no TF32
	case opt.AllowConversion:
		mt = TensorOpMathAllowConversion
	}
	if err := check("cudnnSetConvolutionMathType", lib.cudnnSetConvMathType(c.cd, int32(mt))); err != nil {
		return err
	}
	c.mathType = mt
	var n, k, ho, wo int32
	if err := check("cudnnGetConvolution2dForwardOutputDim", lib.cudnnGetConv2dFwdOutDim(c.cd, c.xd, c.wd, &n, &k, &ho, &wo)); err != nil {
		return err
	}
	if eh, ew := s.OutHW(); int(n) != s.N || int(k) != s.K || int(ho) != eh || int(wo) != ew {
		return fmt.Errorf("cudnn: output dims %dx%dx%dx%d (NKHW) differ from the expected %dx%dx%dx%d", n, k, ho, wo, s.N, s.K, eh, ew)
	}
	c.ho, c.wo = int(ho), int(wo)
	if err := check("cudnnSetTensor4dDescriptor(y)", lib.cudnnSetTensor4dDesc(c.yd, int32(TensorNHWC), dt, n, k, ho, wo)); err != nil {
		return err
	}
	if err := c.choose(h, opt); err != nil {
		return err
	}
	c.prepareBias(h)
	return nil
}

// choose picks the algorithm, sets its math type on the descriptor and
// asks for its workspace size.
func (c *Conv) choose(h *Handle, opt Options) error {
	limit := opt.limit()
	var maxN int32
	if err := check("cudnnGetConvolutionForwardAlgorithmMaxCount", lib.cudnnGetConvFwdAlgoMax(h.h, &maxN)); err != nil {
		return err
	}
	if maxN < 1 {
		maxN = int32(AlgoCount)
	}
	perf := make([]algoPerf, maxN)
	var got int32
	err := check("cudnnGetConvolutionForwardAlgorithm_v7", lib.cudnnGetConvFwdAlgoV7(h.h, c.xd, c.wd, c.cd, c.yd,
		maxN, &got, unsafe.Pointer(&perf[0])))
	runtime.KeepAlive(perf)
	if err != nil {
		return err
	}
	cands := convertPerf(perf[:got], false)
	c.heuristic = true
	if !opt.Heuristic {
		key := foundKey{shape: c.shape, limit: limit, conv: opt.AllowConversion}
		if h.ctx != nil {
			key.dev = int(h.ctx.Device())
		}
		found, ok := foundAlgos.Load(key)
		if !ok {
			// One search at a time in the process: handles of several
			// ranks sharing a GPU would otherwise time their candidates
			// against each other's and could rank them differently than
			// one handle alone (and another rank waits for this shape's
			// choice anyway).
			findMu.Lock()
			if found, ok = foundAlgos.Load(key); !ok {
				dk := diskKey(h, key)
				f, ok := diskLoad(dk)
				if !ok {
					var err error
					if f, err = c.find(h, cands, limit, maxN, opt.Buffers); err != nil {
						findMu.Unlock()
						return err
					}
					diskStore(dk, f)
				}
				found, _ = foundAlgos.LoadOrStore(key, f)
			}
			findMu.Unlock()
		}
		cands = found.([]AlgoPerf)
		c.heuristic = false
	}
	c.candidates = cands
	best := -1
	for i, p := range cands {
		if p.Status == StatusSuccess && p.Memory <= limit && p.Algo >= 0 && p.Algo < AlgoCount &&
			(c.shape.DType != DataFloat || p.MathType == FMAMath || p.MathType == DefaultMath) {
			best = i
			break
		}
	}
	if best < 0 {
		return fmt.Errorf("cudnn: no forward algorithm fits a %d-byte workspace (candidates: %s)", limit, perfList(cands))
	}
	p := cands[best]
	if c.shape.DType == DataFloat {
		p.MathType = FMAMath
	}
	if err := check("cudnnSetConvolutionMathType", lib.cudnnSetConvMathType(c.cd, int32(p.MathType))); err != nil {
		return err
	}
	c.algo, c.mathType = p.Algo, p.MathType
	var ws uintptr
	if err := check("cudnnGetConvolutionForwardWorkspaceSize", lib.cudnnGetConvFwdWorkspace(h.h, c.xd, c.wd, c.cd, c.yd,
		int32(c.algo), &ws)); err != nil {
		return err
	}
	c.ws = int(ws)
	return nil
}

// foundAlgos holds every timed search's ranking for the life of the
// process, so that each shape on a device gets one algorithm however many
// handles and caches ask: different algorithms round differently, and two
// backends of one process must give the same bytes for the same work. The
// rankings are kept on disk too (see algocache.go).
var foundAlgos sync.Map // foundKey -> []AlgoPerf

// findMu serialises the timed searches (see choose).
var findMu sync.Mutex

type foundKey struct {
	dev   int
	shape Shape
	limit int
	conv  bool
}

// find times the candidates on scratch buffers with
// cudnnFindConvolutionForwardAlgorithmEx. Its workspace is the largest any
// heuristic candidate asked for, up to limit.
func (c *Conv) find(h *Handle, heur []AlgoPerf, limit int, maxN int32, fb *FindBuffers) ([]AlgoPerf, error) {
	if fb != nil {
		ws := fb.WorkspaceSize
		if ws > limit {
			ws = limit
		}
		return c.findOn(h, fb.X, fb.W, fb.Y, fb.Workspace, ws, maxN)
	}
	if h.ctx == nil {
		return nil, errors.New("cudnn: benchmarking algorithms needs a Handle made with a context (or Options.Heuristic)")
	}
	wsSize := 0
	for _, p := range heur {
		if p.Status == StatusSuccess && p.Memory <= limit && p.Memory > wsSize {
			wsSize = p.Memory
		}
	}
	s := c.shape
	var bufs []*cuda.Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	alloc := func(n int) (cuda.DevicePtr, error) {
		if n == 0 {
			return 0, nil
		}
		b, err := h.ctx.Alloc(n)
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, b)
		return b.Ptr(), nil
	}
	x, err := alloc(s.XBytes())
	if err != nil {
		return nil, err
	}
	w, err := alloc(s.WBytes())
	if err != nil {
		return nil, err
	}
	y, err := alloc(s.YBytes())
	if err != nil {
		return nil, err
	}
	ws, err := alloc(wsSize)
	if err != nil {
		return nil, err
	}
	// Zeroed inputs: timing is what is wanted, and zeros are never NaN.
	if err := zero(h, x, s.XBytes()); err != nil {
		return nil, err
	}
	if err := zero(h, w, s.WBytes()); err != nil {
		return nil, err
	}
	return c.findOn(h, x, w, y, ws, wsSize, maxN)
}

// findPasses is how many times findOn runs the benchmark, keeping the
// last. The first pass pays for loading each candidate's kernels (CUDA
// loads modules lazily) and timed small shapes at several times their
// warm cost, which could rank a slower algorithm first.
const findPasses = 2

func (c *Conv) findOn(h *Handle, x, w, y, ws cuda.DevicePtr, wsSize int, maxN int32) ([]AlgoPerf, error) {
	perf := make([]algoPerf, maxN)
	var got int32
	for pass := 0; pass < findPasses; pass++ {
		got = 0
		err := check("cudnnFindConvolutionForwardAlgorithmEx", lib.cudnnFindConvFwdAlgoEx(h.h,
			c.xd, uintptr(x), c.wd, uintptr(w), c.cd, c.yd, uintptr(y), maxN, &got, unsafe.Pointer(&perf[0]),
			uintptr(ws), uintptr(wsSize)))
		runtime.KeepAlive(perf)
		if err != nil {
			return nil, err
		}
	}
	return convertPerf(perf[:got], true), nil
}

// zero clears n bytes at p. The handle's stream is not a *cuda.Stream, so
// this uses a temporary stream and waits for it.
func zero(h *Handle, p cuda.DevicePtr, n int) error {
	s, err := h.ctx.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Memset8(p, 0, n); err != nil {
		return err
	}
	return s.Synchronize()
}

func convertPerf(in []algoPerf, timed bool) []AlgoPerf {
	out := make([]AlgoPerf, len(in))
	for i, p := range in {
		t := time.Duration(-1)
		if timed && p.time >= 0 {
			t = time.Duration(float64(p.time) * float64(time.Millisecond))
		}
		out[i] = AlgoPerf{
			Algo: FwdAlgo(p.algo), Status: Status(p.status), Time: t, Memory: int(p.memory),
			Determinism: Determinism(p.determinism), MathType: MathType(p.mathType),
		}
	}
	return out
}

func perfList(ps []AlgoPerf) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// prepareBias sets up ForwardBiasAct: a 1×K×1×1 bias descriptor, the
// identity and ReLU activations, and IMPLICIT_PRECOMP_GEMM, the only
// algorithm cuDNN runs the identity with, and the one ForwardBiasAct uses
// for ReLU too: a fixed choice, so that results do not depend on which
// algorithm won a timing. A failure is kept for ForwardBiasAct to report.
func (c *Conv) prepareBias(h *Handle) {
	if !lib.hasBiasActivation {
		c.biasErr = errors.New("cudnn: this libcudnn lacks cudnnConvolutionBiasActivationForward")
		return
	}
	// The bias has the data type: cuDNN 9.14 answers a float bias for
	// f16/bf16 data with CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE.
	bt := c.shape.DType
	if c.biasErr = check("cudnnCreateTensorDescriptor", lib.cudnnCreateTensorDesc(&c.bd)); c.biasErr != nil {
		return
	}
	if c.biasErr = check("cudnnSetTensor4dDescriptor(bias)", lib.cudnnSetTensor4dDesc(c.bd, int32(TensorNHWC), int32(bt),
		1, int32(c.shape.K), 1, 1)); c.biasErr != nil {
		return
	}
	for i, mode := range []ActivationMode{ActivationIdentity, ActivationReLU} {
		if c.biasErr = check("cudnnCreateActivationDescriptor", lib.cudnnCreateActDesc(&c.ad[i])); c.biasErr != nil {
			return
		}
		if c.biasErr = check("cudnnSetActivationDescriptor", lib.cudnnSetActDesc(c.ad[i], int32(mode),
			notPropagateNaN, 0)); c.biasErr != nil {
			return
		}
	}
	c.biasAlgo = AlgoImplicitPrecompGemm
	var ws uintptr
	c.biasErr = check("cudnnGetConvolutionForwardWorkspaceSize", lib.cudnnGetConvFwdWorkspace(h.h, c.xd, c.wd, c.cd, c.yd,
		int32(c.biasAlgo), &ws))
	c.biasWS = int(ws)
}

// BiasActWorkspaceSize returns the workspace bytes ForwardBiasAct needs,
// or the reason it cannot run.
func (c *Conv) BiasActWorkspaceSize() (int, error) { return c.biasWS, c.biasErr }

// Host scalars for alpha = 1, beta = 0 (float, the compute type). They are
// package variables so that their addresses stay valid during every call.
var (
	scaleOne  float32 = 1
	scaleZero float32 = 0
)

// Forward computes y = conv(x, w) (alpha 1, beta 0) on h's stream. x, w and
// y are device addresses of NHWC, KRSC and NHWC data of the Conv's data
// type; workspace holds wsSize >= WorkspaceSize() bytes (0 and 0 when
// WorkspaceSize is 0). It only queues the work.
func (c *Conv) Forward(h *Handle, x, w, y, workspace cuda.DevicePtr, wsSize int) error {
	return c.forward(h, x, w, y, workspace, wsSize, unsafe.Pointer(&scaleOne), unsafe.Pointer(&scaleZero))
}

// ForwardScaled computes y = alpha·conv(x, w) + beta·y; beta 1 accumulates
// into y (a residual add).
func (c *Conv) ForwardScaled(h *Handle, x, w, y, workspace cuda.DevicePtr, wsSize int, alpha, beta float32) error {
	ab := &[2]float32{alpha, beta}
	err := c.forward(h, x, w, y, workspace, wsSize, unsafe.Pointer(&ab[0]), unsafe.Pointer(&ab[1]))
	runtime.KeepAlive(ab)
	return err
}

func (c *Conv) forward(h *Handle, x, w, y, workspace cuda.DevicePtr, wsSize int, alpha, beta unsafe.Pointer) error {
	if c.cd == 0 {
		return errors.New("cudnn: conv is closed")
	}
	if wsSize < c.ws || (wsSize > 0 && workspace == 0) {
		return fmt.Errorf("cudnn: conv %v needs a %d-byte workspace, got %d bytes at %#x", c.shape, c.ws, wsSize, uint64(workspace))
	}
	return h.do(func() error {
		return check("cudnnConvolutionForward", lib.cudnnConvFwd(h.h, alpha, c.xd, uintptr(x), c.wd, uintptr(w), c.cd,
			int32(c.algo), uintptr(workspace), uintptr(wsSize), beta, c.yd, uintptr(y)))
	})
}

// ForwardBiasAct computes y = act(conv(x, w) + alpha2·z + bias) in one
// call (cudnnConvolutionBiasActivationForward) with IMPLICIT_PRECOMP_GEMM:
// act is ReLU when relu is set and the identity otherwise. z has y's
// layout (pass y and alpha2 = 0 for none); bias holds K values of the data
// type; wsSize must be at least BiasActWorkspaceSize().
func (c *Conv) ForwardBiasAct(h *Handle, x, w, z, bias, y, workspace cuda.DevicePtr, wsSize int, alpha2 float32, relu bool) error {
	if c.cd == 0 {
		return errors.New("cudnn: conv is closed")
	}
	if c.biasErr != nil {
		return c.biasErr
	}
	ad := c.ad[0]
	if relu {
		ad = c.ad[1]
	}
	if wsSize < c.biasWS || (wsSize > 0 && workspace == 0) {
		return fmt.Errorf("cudnn: conv %v with bias needs a %d-byte workspace, got %d bytes", c.shape, c.biasWS, wsSize)
	}
	a2 := &alpha2
	err := h.do(func() error {
		return check("cudnnConvolutionBiasActivationForward", lib.cudnnConvBiasActFwd(h.h,
			unsafe.Pointer(&scaleOne), c.xd, uintptr(x), c.wd, uintptr(w), c.cd, int32(c.biasAlgo),
			uintptr(workspace), uintptr(wsSize), unsafe.Pointer(a2), c.yd, uintptr(z),
			c.bd, uintptr(bias), ad, c.yd, uintptr(y)))
	})
	runtime.KeepAlive(a2)
	return err
}

// Close destroys the descriptors. It is idempotent; the Conv must not be
// in use.
func (c *Conv) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.destroy()
	return nil
}

func (c *Conv) destroy() {
	if lib.cudnnDestroyTensorDesc == nil {
		return
	}
	for _, d := range []*uintptr{&c.xd, &c.yd, &c.bd} {
		if *d != 0 {
			lib.cudnnDestroyTensorDesc(*d)
			*d = 0
		}
	}
	if c.wd != 0 {
		lib.cudnnDestroyFilterDesc(c.wd)
		c.wd = 0
	}
	if c.cd != 0 {
		lib.cudnnDestroyConvDesc(c.cd)
		c.cd = 0
	}
	for i, d := range c.ad {
		if d != 0 && lib.cudnnDestroyActDesc != nil {
			lib.cudnnDestroyActDesc(d)
			c.ad[i] = 0
		}
	}
}
