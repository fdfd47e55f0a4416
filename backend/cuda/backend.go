// Package cuda is the NVIDIA GPU backend: NHWC tensors in fp16 (or bf16,
// or float32 for exact comparisons) device memory, convolutions through cuDNN on tensor cores, and the other
// ops as kernels from kernels.cu compiled at first use with NVRTC.
//
// Everything a Backend queues runs in order on one compute stream; two copy
// streams carry frame uploads and downloads for Slots (see backend.Streaming), with
// events as the barriers between the two. Device memory comes from a
// stream-ordered memory pool of the backend's own (cuMemAllocFromPoolAsync;
// a size-class cache of cuMemAlloc buffers where the driver lacks it), so
// ops never synchronize with the host except to hand results back.
//
// A convolution takes the first of these paths that applies, chosen per
// call by Conv2DAdd (convchoose.go): the fused tensor-core 3x3 kernel
// (convfused.go, convfused.cu), a 1x1 convolution as one cuBLASLt GEMM or
// a 3x3 one with few outputs as a GEMM and tap_sum (convgemm.go), else
// cuDNN (conv.go), with its fused bias, residual and ReLU where it
// applies and a bias/activation pass where not. SliceConv is the fused
// kernel's dense-block build (convslice.go, convslice.cu). PrepareConv
// packs the weights for all of them (convweights.go). The other ops sit
// by concern: elementwise.go, layout.go and frames.go (copies between
// channels, rows and frames), resize.go, shuffleadd.go, colour.go (pixel
// formats), upload.go and slot.go (transfers), motion.go, attention.go,
// transformer.go, fp8.go, wide.go, peer.go, record.go (CUDA graphs), with
// memory in pool.go and pacing in pace.go.
//
// Environment variables for diagnosis and comparison: VSR_CUDA_MEMTRACE=1
// prints each new high-water mark of device memory in use with the calls
// that reached it; VSR_CUDA_POOL=cache selects the size-class cache, and
// VSR_CUDA_POOL_IDLE_MIB sets how much idle memory that cache keeps;
// VSR_CUDA_GRAPHS=0 turns off recording CUDA graphs (see Record) and
// VSR_CUDA_PACE=0 the host's pacing (see pacer).
package cuda

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/nvidia/cublaslt"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/nvidia/nvrtc"
)

//go:embed kernels.cu
var kernelSource string

// fusedConvSource is the tensor-core 3x3 conv + bias + PReLU kernel.
//
//go:embed convfused.cu
var fusedConvSource string

// sliceConvCode is the fused kernel generalised to strided inputs and
// outputs and to channel groups (see convslice.cu), compiled on first use
// (sliceSource).
//
//go:embed convslice.cu
var sliceConvCode string

// Launch shape of conv3x3_bias_prelu_f16 (see convfused.cu).
const (
	fusedBlock = 320
	fusedSmem  = 206976
)

func init() {
	backend.Register("cuda", func(device string, opt backend.Options) (backend.Backend, error) {
		if err := opt.Unknown(device, "dtype", "fused_conv", "fp8_accum"); err != nil {
			return nil, err
		}
		dt := F16
		switch opt["dtype"] {
		case "", "f16", "fp16":
		case "bf16":
			dt = BF16
		case "f32", "fp32":
			dt = F32
		default:
			return nil, fmt.Errorf("device %s: dtype=%q: want f16, bf16 or f32", device, opt["dtype"])
		}
		noFused := false
		switch opt["fused_conv"] {
		case "", "on":
		case "off":
			noFused = true
		default:
			return nil, fmt.Errorf("device %s: fused_conv=%q: want on or off", device, opt["fused_conv"])
		}
		exact := false
		switch opt["fp8_accum"] {
		case "", "fast":
		case "exact":
			exact = true
		default:
			return nil, fmt.Errorf("device %s: fp8_accum=%q: want fast or exact", device, opt["fp8_accum"])
		}
		b, err := Open(device, dt)
		if err != nil {
			return nil, err
		}
		b.NoFusedConv, b.FP8ExactAccum = noFused, exact
		return b, nil
	})
}

var _ backend.GPU = (*Backend)(nil)
var _ backend.SliceConver = (*Backend)(nil)

// DType is the storage type of activations and weights.
type DType int

const (
	F16 DType = iota
	BF16
	// F32 stores float32 and runs cuDNN's convolutions without TF32: for
	// comparisons against float32 references, and the compact and
	// CDA-VSR models only (the transformer ops need f16 or bf16).
	F32
)

func (d DType) String() string { return [...]string{"f16", "bf16", "f32"}[d] }

// need16 refuses op on float32 storage: the transformer ops (the lazily
// compiled sources, cuBLASLt's GEMMs) have f16 and bf16 kernels only.
func (b *Backend) need16(op string) error {
	if b.dtype == F32 {
		return fmt.Errorf("%s: the GPU's transformer ops run in f16 or bf16, not f32", op)
	}
	return nil
}

// size is the bytes of one value.
func (d DType) size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// esize is the bytes of one stored value.
func (b *Backend) esize() int { return b.dtype.size() }

// lanes is how many stored values the 16-byte data-movement kernels move
// at a time (see vec8).
func (b *Backend) lanes() int { return 16 / b.esize() }

// moves names the data-movement kernel for the storage width (kernels.cu's
// MOVES).
func (b *Backend) moves(name string) string { return movesOf(name, b.esize()) }

// movesOf names the data-movement kernel for values of es bytes.
func movesOf(name string, es int) string { return fmt.Sprintf("%s_w%d", name, es) }

// Backend runs ops on one GPU. Like every backend it is used by one
// goroutine at a time; Slot.Wait may be called from others.
type Backend struct {
	name  string
	dtype DType
	ctx   *cu.Context
	dev   cu.Device
	sms   int

	compute *cu.Stream
	upload  *cu.Stream // host-to-device frame copies
	down    *cu.Stream // device-to-host frame copies
	mod     *cu.Module
	fns     map[string]*cu.Function
	// fused is the fused conv kernel, nil where it cannot run (not enough
	// shared memory on this GPU, or it failed to compile).
	fusedMod *cu.Module
	fused    *cu.Function
	// slice is the fused kernel's dense-block build (sliceSource), nil
	// until first used.
	slice *cu.Function
	// fusedMin is the fewest tiles a convolution's output needs for the
	// fused kernel (minFusedWaves per multiprocessor; tests set 0).
	fusedMin int
	// comp compiles the kernel sources loaded on first use (see kernel).
	comp    *nvrtc.Compiler
	lazyMod map[string]*cu.Module
	// gemm runs the transformer ops' matrix products (made on first use).
	blasHandle *cublaslt.Handle
	gemm       *cublaslt.Gemm
	gemm8      *cublaslt.Gemm // fp8 inputs (see fp8.go)
	fp8Once    sync.Once      // fp8Check's answer, found once
	fp8Err     error
	// NoFusedConv sends every convolution through cuDNN and a separate
	// bias/activation pass (for comparison).
	NoFusedConv bool
	// FP8ExactAccum makes fp8 GEMMs promote their partial sums to float32
	// periodically, as bf16 GEMMs do, instead of accumulating in the
	// tensor cores' own precision (fast accumulation, the default; device
	// option fp8_accum=exact|fast).
	FP8ExactAccum bool
	// noChannelPad, scalarMoves, noConvFusion, scalarRows and
	// noStagedMatch turn off the padded convolutions, the vectorised and
	// per-pixel data-movement kernels, cuDNN's fused bias/residual/ReLU,
	// the vectorised row kernels and block matching's staged search, for
	// the tests' and benchmarks' comparisons.
	noChannelPad, scalarMoves, noConvFusion, scalarRows, noStagedMatch bool

	pool *pool
	pace *pacer
	conv *convRunner

	tapCache  map[string]*taps
	ropeCache map[backend.RoPE]*block // see ropeTable
	slopes    map[float32]*block      // see sharedSlope
	rec       *recording              // the recording being captured (see Record)
	closeMu   sync.Mutex
	closed    bool

	slotMu sync.Mutex
	slots  map[[2]int][]*Slot // freed slots kept for reuse, by sizes

	epoch  *cu.Event // timed event recorded at open: the origin of Spans
	spanMu sync.Mutex
	spans  []Span
}

// Span is the interval the compute stream spent on one batch, measured
// with CUDA events from the backend's opening.
type Span = backend.Span

// Spans returns the compute spans of the batches waited for since the last
// call, and forgets them.
func (b *Backend) Spans() []Span {
	b.spanMu.Lock()
	defer b.spanMu.Unlock()
	s := b.spans
	b.spans = nil
	return s
}

// Open opens device "cuda" or "cuda:N" with the given storage type.
func Open(device string, dt DType) (*Backend, error) {
	ord := 0
	if _, n, ok := strings.Cut(device, ":"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("device %q: want cuda or cuda:N", device)
		}
		ord = v
	} else if device != "cuda" {
		return nil, fmt.Errorf("device %q: want cuda or cuda:N", device)
	}
	if err := cu.Init(); err != nil {
		return nil, fmt.Errorf("no usable NVIDIA GPU: %w", err)
	}
	count, err := cu.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ord >= count {
		return nil, fmt.Errorf("device %q: this machine has %d GPU(s)", device, count)
	}
	dev, err := cu.GetDevice(ord)
	if err != nil {
		return nil, err
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return nil, err
	}
	if major < 8 {
		return nil, fmt.Errorf("GPU %d has compute capability %d.%d; vsr's CUDA backend needs 8.0 (Ampere) or newer", ord, major, minor)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		return nil, err
	}
	b := &Backend{name: fmt.Sprintf("cuda:%d", ord), dtype: dt, ctx: ctx, dev: dev, fns: map[string]*cu.Function{}, tapCache: map[string]*taps{}, ropeCache: map[backend.RoPE]*block{}, slopes: map[float32]*block{}, slots: map[[2]int][]*Slot{}}
	if err := b.init(major, minor); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) init(major, minor int) error {
	var err error
	if b.sms, err = b.dev.SMCount(); err != nil {
		return err
	}
	b.fusedMin = minFusedWaves * b.sms
	if b.compute, err = b.ctx.NewStream(); err != nil {
		return err
	}
	// Two copy streams, so that the next batch's upload does not queue
	// behind the last batch's download (which waits for compute).
	if b.upload, err = b.ctx.NewStream(); err != nil {
		return err
	}
	if b.down, err = b.ctx.NewStream(); err != nil {
		return err
	}
	b.pool, b.pace = newPool(b.ctx, b.dev, b.compute), newPacer()
	if b.epoch, err = b.ctx.NewEvent(cu.EventDefault); err != nil {
		return err
	}
	if err := b.epoch.Record(b.compute); err != nil {
		return err
	}
	comp, err := nvrtc.NewCompiler(major, minor)
	if err != nil {
		return err
	}
	b.comp, b.lazyMod = comp, map[string]*cu.Module{}
	// --fmad=false: no contraction into FMAs, so elementwise results match
	// the CPU backend's float32 arithmetic exactly.
	out, err := comp.Compile(nvrtc.Program{Name: "vsr_kernels.cu", Source: kernelSource, Options: []string{"--fmad=false", "-default-device"}})
	if err != nil {
		return fmt.Errorf("compile vsr kernels: %w", err)
	}
	if b.mod, err = b.ctx.LoadModule(out.Image); err != nil {
		return err
	}
	b.loadFusedConv(comp)
	b.conv, err = newConvRunner(b)
	return err
}

// Name returns "cuda:N".
func (b *Backend) Name() string { return b.name }

// DType returns the storage type.
func (b *Backend) DType() DType { return b.dtype }

// StorageType names the storage type: "f16", "bf16" or "f32".
func (b *Backend) StorageType() string { return b.dtype.String() }

// DeviceName is the GPU's model ("NVIDIA H200"), or "" when the driver
// does not say.
func (b *Backend) DeviceName() string {
	n, _ := b.dev.Name()
	return n
}

// UUID is the device's UUID, as NVML names it.
func (b *Backend) UUID() (string, error) { return b.dev.UUID() }

// Context returns the CUDA context (for samplers and tests).
func (b *Backend) Context() *cu.Context { return b.ctx }

// PeakBytes returns the high-water mark of the backend's device memory pool.
func (b *Backend) PeakBytes() int64 { return b.pool.peakBytes() }

// InUse is the memory the backend's tensors (and recordings) hold now;
// PeakInUse its high-water mark since the last ResetPeak: PeakBytes less
// what the pool kept cached.
func (b *Backend) InUse() int64 {
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	return b.pool.inUse
}

func (b *Backend) PeakInUse() int64 {
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	return b.pool.peak
}

// ResetPeak gives the pool's unused memory back to the driver and starts
// PeakBytes' high-water mark again from the memory in use.
func (b *Backend) ResetPeak() { b.pool.resetPeak() }

// Available is the device memory a new working set can take: what the
// driver has free and what the pool holds without using it.
func (b *Backend) Available() (int64, error) {
	free, _, err := b.ctx.MemInfo()
	b.pool.mu.Lock()
	idle := b.pool.reservedNow() - b.pool.inUse
	b.pool.mu.Unlock()
	return int64(free) + max(idle, 0), err
}

// Synchronize waits for all queued work.
func (b *Backend) Synchronize() error { return b.compute.Synchronize() }

// Close waits for queued work and releases everything the backend owns.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if b.compute != nil {
		b.compute.Synchronize()
	}
	for _, s := range []*cu.Stream{b.upload, b.down} {
		if s != nil {
			s.Synchronize()
		}
	}
	b.slotMu.Lock()
	for _, l := range b.slots {
		for _, s := range l {
			s.release()
		}
	}
	b.slots = nil
	b.slotMu.Unlock()
	if b.conv != nil {
		b.conv.close()
	}
	if b.gemm8 != nil {
		b.gemm8.Close()
	}
	if b.gemm != nil {
		b.gemm.Close()
		b.blasHandle.Close()
	}
	for _, t := range b.tapCache {
		t.free()
	}
	for _, k := range b.slopes {
		b.pool.put(k)
	}
	for _, t := range b.ropeCache {
		b.pool.put(t)
	}
	if b.pace != nil {
		b.pace.close()
	}
	if b.pool != nil {
		b.pool.close()
	}
	if b.mod != nil {
		b.mod.Close()
	}
	if b.fusedMod != nil {
		b.fusedMod.Close()
	}
	for _, m := range b.lazyMod {
		m.Close()
	}
	if b.epoch != nil {
		b.epoch.Close()
	}
	for _, s := range []*cu.Stream{b.compute, b.upload, b.down} {
		if s != nil {
			s.Close()
		}
	}
	return b.ctx.Close()
}

// fn returns kernel name, specialised for the storage type when typed.
func (b *Backend) fn(name string, typed bool) (*cu.Function, error) {
	if typed {
		name += "_" + b.dtype.String()
	}
	if f, ok := b.fns[name]; ok {
		return f, nil
	}
	f, err := b.mod.Function(name)
	if err != nil {
		return nil, err
	}
	b.fns[name] = f
	return f, nil
}

// Source is a kernel source file that is compiled and loaded the first time
// one of its kernels is used, so that models which never need it (the
// compact model never runs the DiT) do not pay for it.
type Source struct {
	Name, Code string
	Options    []string
}

// kernel returns kernel name from src, compiling and loading src on first
// use (NVRTC's on-disk cache makes later processes fast).
func (b *Backend) kernel(src *Source, name string) (*cu.Function, error) {
	if err := b.need16(name); err != nil {
		return nil, err
	}
	key := src.Name + "/" + name
	if f, ok := b.fns[key]; ok {
		return f, nil
	}
	mod, ok := b.lazyMod[src.Name]
	if !ok {
		opts := append([]string{"-default-device"}, src.Options...)
		out, err := b.comp.Compile(nvrtc.Program{Name: src.Name, Source: src.Code, Options: opts})
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", src.Name, err)
		}
		if mod, err = b.ctx.LoadModule(out.Image); err != nil {
			return nil, fmt.Errorf("load %s: %w", src.Name, err)
		}
		b.lazyMod[src.Name] = mod
	}
	f, err := mod.Function(name)
	if err != nil {
		return nil, err
	}
	b.fns[key] = f
	return f, nil
}

// launchAs is launch of the kernel name specialised for type dt (of
// tensors that may be float32 beside the storage type: see wide.go).
func (b *Backend) launchAs(name string, dt DType, n int64, args ...any) error {
	return b.launch(name+"_"+dt.String(), false, n, args...)
}

// launch runs a grid-stride kernel over n items on the compute stream.
func (b *Backend) launch(name string, typed bool, n int64, args ...any) error {
	return b.launchOn(b.compute, name, typed, n, args...)
}

func (b *Backend) launchOn(s *cu.Stream, name string, typed bool, n int64, args ...any) error {
	f, err := b.fn(name, typed)
	if err != nil {
		return err
	}
	if n <= 0 {
		return nil
	}
	blocks := min((n+255)/256, int64(b.sms)*16)
	return f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(blocks)}, Block: cu.Dim3{X: 256}, Stream: s}, args...)
}

// Tensor is an NHWC tensor in device memory in the backend's storage type.
type Tensor struct {
	shape backend.Shape
	buf   *block
	off   int // byte offset of a view into buf (see Rows)
	b     *Backend
	// f32 holds float32 values for per-channel parameters (PReLU slopes),
	// which kernels read in full precision.
	f32 *block
	// lazy, when set, is a fused shuffle-add not yet computed: an op that
	// needs the values materialises it, and frame outputs compute it
	// straight into 8-bit frames.
	lazy *lazyShuffle
	// wide marks float32 values in a backend whose storage type is
	// narrower (backend.Wide): only the ops that take them unwrap it.
	wide bool
}

// dt is the type of t's values.
func (t *Tensor) dt() DType {
	if t.wide {
		return F32
	}
	return t.b.dtype
}

// Shape returns the tensor's shape.
func (t *Tensor) Shape() backend.Shape { return t.shape }

// Free returns the tensor's memory to the pool, in stream order.
func (t *Tensor) Free() {
	if t.buf != nil {
		t.b.pool.put(t.buf)
		t.buf = nil
	}
	if t.f32 != nil {
		t.b.pool.put(t.f32)
		t.f32 = nil
	}
	if t.lazy != nil {
		t.lazy.x.Free()
		t.lazy.base.Free()
		t.lazy = nil
	}
}

func (t *Tensor) ptr() cu.DevicePtr { return t.buf.ptr.Add(t.off) }

// alloc returns a tensor with undefined contents, for an op's output: it
// also paces the host (see pacer).
func (b *Backend) alloc(s backend.Shape) (*Tensor, error) { return b.allocAs(s, b.dtype) }

// allocAs is alloc for values of type dt: the storage type, or float32
// beside it.
func (b *Backend) allocAs(s backend.Shape, dt DType) (*Tensor, error) {
	if dt != b.dtype && dt != F32 {
		return nil, fmt.Errorf("cuda: %s tensors beside %s storage", dt, b.dtype)
	}
	if err := b.pace.step(b); err != nil {
		return nil, err
	}
	blk, err := b.pool.get(int64(s.Elems()) * int64(dt.size()))
	if err != nil {
		return nil, err
	}
	return &Tensor{shape: s, buf: blk, b: b, wide: dt != b.dtype}, nil
}

// tensor unwraps t, computing it first if it is lazy. It refuses float32
// tensors beside a narrower storage type: the ops that take them use
// anyTensor.
func (b *Backend) tensor(t backend.Tensor) (*Tensor, error) {
	ct, err := b.anyTensor(t)
	if err == nil && ct.wide {
		err = fmt.Errorf("cuda: a float32 tensor given to an op that takes %s tensors", b.dtype)
	}
	return ct, err
}

// anyTensor is tensor for the ops that take float32 tensors too.
func (b *Backend) anyTensor(t backend.Tensor) (*Tensor, error) {
	ct, ok := t.(*Tensor)
	if !ok {
		return nil, fmt.Errorf("cuda backend given a %T tensor", t)
	}
	if ct.lazy != nil {
		if err := b.materialize(ct); err != nil {
			return nil, err
		}
	}
	if ct.buf == nil {
		return nil, fmt.Errorf("cuda backend given a freed tensor")
	}
	return ct, nil
}

// loadFusedConv compiles the fused conv kernel. It is an optimisation: when
// it cannot be used (a GPU with less shared memory per block than it needs,
// for one), convolutions go through cuDNN and a separate bias/activation
// pass instead.
func (b *Backend) loadFusedConv(comp *nvrtc.Compiler) {
	out, err := comp.Compile(nvrtc.Program{Name: "convfused.cu", Source: fusedConvSource, Options: []string{"-default-device"}})
	if err != nil {
		return
	}
	mod, err := b.ctx.LoadModule(out.Image)
	if err != nil {
		return
	}
	f, err := mod.Function("conv3x3_bias_prelu_f16")
	if err == nil {
		err = f.SetAttribute(cu.FuncMaxDynamicSharedSizeBytes, fusedSmem)
	}
	if err != nil {
		mod.Close()
		return
	}
	b.fusedMod, b.fused = mod, f
}
