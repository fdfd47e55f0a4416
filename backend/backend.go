package backend

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Shape is the size of an NHWC tensor.
type Shape struct{ N, H, W, C int }

// Elems returns the number of elements of the shape.
func (s Shape) Elems() int { return s.N * s.H * s.W * s.C }

func (s Shape) String() string { return fmt.Sprintf("[%d %d %d %d]", s.N, s.H, s.W, s.C) }

// Tensor is a backend-owned NHWC array. Free releases its storage; a freed
// tensor must not be used again.
type Tensor interface {
	Shape() Shape
	Free()
}

// Weights is a convolution's weights and bias, repacked once for a backend.
type Weights interface {
	// Out and In are the output and input channel counts.
	Out() int
	In() int
	Free()
}

// ConvParams describes a 2-D convolution: kernel size, stride, dilation and
// zero padding on each side.
type ConvParams struct {
	KH, KW           int
	StrideH, StrideW int
	DilH, DilW       int
	PadT, PadL       int
	PadB, PadR       int
}

// OutSize returns the output height and width for an input of h x w.
func (p ConvParams) OutSize(h, w int) (int, int) {
	oh := (h+p.PadT+p.PadB-p.DilH*(p.KH-1)-1)/p.StrideH + 1
	ow := (w+p.PadL+p.PadR-p.DilW*(p.KW-1)-1)/p.StrideW + 1
	return oh, ow
}

// ActKind selects the activation fused after a convolution.
type ActKind int

const (
	ActNone      ActKind = iota
	ActReLU              // max(x, 0)
	ActLeaky             // x < 0 ? Alpha*x : x
	ActPReLU             // x < 0 ? Slope[c]*x : x, with a per-channel slope tensor
	ActSoftClamp         // Alpha * tanh(x / Alpha)
	ActSiLU              // x * sigmoid(x) (ncnn's Swish)
	ActSigmoid           // 1 / (1 + exp(-x))
	ActAddScalar         // x + Alpha (ncnn's BinaryOp add or sub with a scalar)
	ActMulScalar         // x * Alpha (ncnn's BinaryOp mul with a scalar)
	ActMish              // x * tanh(softplus(x)), softplus(x) = x above 20 (PyTorch's Mish)
)

// Activation is an activation function with its parameters.
type Activation struct {
	Kind  ActKind
	Alpha float32 // ActLeaky, ActSoftClamp, ActAddScalar, ActMulScalar
	Slope Tensor  // ActPReLU: shape [1 1 1 C]
}

// ResizeMode is an interpolation method.
type ResizeMode int

const (
	Nearest  ResizeMode = iota + 1 // floor(dst / scale), as ncnn and PyTorch "nearest"
	Bilinear                       // half-pixel centres, edge clamped (align_corners=false)
	Bicubic                        // Keys cubic, A = -0.75, half-pixel centres, edge clamped
)

func (m ResizeMode) String() string {
	switch m {
	case Nearest:
		return "nearest"
	case Bilinear:
		return "bilinear"
	case Bicubic:
		return "bicubic"
	}
	return fmt.Sprintf("resize(%d)", int(m))
}

// Tile places a tensor inside a larger image so that ops whose result
// depends on absolute position (resampling, edge clamping) compute exactly
// what they would on the whole image. The zero Tile means "the tensor is
// the whole image". (Windows, the transformer's attention windows, are
// another thing.)
type Tile struct {
	FullH, FullW int // size of the whole image
	Y, X         int // position of the tensor's first row and column in it
}

// Whole reports whether w describes an untiled tensor.
func (w Tile) Whole() bool { return w.FullH == 0 && w.FullW == 0 }

// BinaryOp is an elementwise operation of two tensors.
type BinaryOp int

const (
	OpAdd BinaryOp = iota
	OpSub
	OpMul
)

// ShuffleOrder is the channel order of a pixel shuffle.
type ShuffleOrder int

const (
	// ShuffleCRD is PyTorch's nn.PixelShuffle: out[c][y*r+i][x*r+j] = in[c*r*r+i*r+j][y][x].
	ShuffleCRD ShuffleOrder = iota
	// ShuffleDCR is TensorFlow's depth_to_space: in[(i*r+j)*C+c].
	ShuffleDCR
)

// Backend computes tensors on one device. Implementations are safe for use
// by one goroutine at a time per Backend value unless they say otherwise.
// Ops return new tensors unless they say otherwise.
//
// On a Wide backend (see WideOf), the ops take tensors of the storage type
// only, except those whose doc has a "Wide:" note, which says what they do
// with float32 tensors.
type Backend interface {
	// Name is the device name, e.g. "cpu" or "cuda:0".
	Name() string

	// Upload makes a float32 tensor of shape s from host data (len s.Elems()).
	Upload(s Shape, data []float32) (Tensor, error)
	// Download copies a tensor to the host as float32.
	// Wide: t may be float32.
	Download(t Tensor) ([]float32, error)
	// PrepareConv repacks OIHW float32 weights (out x in x kh x kw) and an
	// optional bias (len out, or nil) for Conv2D.
	PrepareConv(out, in, kh, kw int, w, bias []float32) (Weights, error)

	// Conv2D convolves x (N H W in) with w and applies act.
	Conv2D(x Tensor, w Weights, p ConvParams, act Activation) (Tensor, error)
	// Conv2DAdd is Conv2D with res, a tensor of the output's shape, added
	// before the activation: act(conv(x, w) + bias + res), a residual
	// connection in the convolution's own pass where the backend can. It
	// stands for
	//
	//	y, _ := b.Conv2D(x, w, p, Activation{})
	//	z, _ := b.Binary(OpAdd, y, res)
	//	out, _ := b.Activate(z, act)
	//
	// which a backend without a fused pass may run.
	Conv2DAdd(x Tensor, w Weights, p ConvParams, act Activation, res Tensor) (Tensor, error)
	// Activate applies an activation elementwise.
	Activate(x Tensor, act Activation) (Tensor, error)
	// PixelShuffle rearranges (N H W C*r*r) to (N H*r W*r C).
	PixelShuffle(x Tensor, r int, order ShuffleOrder) (Tensor, error)
	// Resize resamples x to oh x ow. src and dst place x and the result in
	// their whole images (see Tile); both zero for whole images.
	// Wide: x may be float32; the result is of x's type.
	Resize(x Tensor, mode ResizeMode, oh, ow int, src, dst Tile) (Tensor, error)
	// Binary combines two tensors of the same shape elementwise.
	// Wide: a and b may both be float32; the result is of their type.
	Binary(op BinaryOp, a, b Tensor) (Tensor, error)
	// AddScaled computes ca*a + cb*b elementwise for tensors of the same
	// shape (ncnn's Eltwise sum with coefficients).
	// Wide: a and b may both be float32; the result is of their type.
	AddScaled(a Tensor, ca float32, b Tensor, cb float32) (Tensor, error)
	// CopyChannels copies src into channels [at, at+C) of dst, a tensor of
	// the same N, H and W with at least at+C channels: concatenation along
	// channels is Empty and a CopyChannels per part.
	// Wide: dst and src may be of different types; the values are
	// converted to dst's.
	CopyChannels(dst Tensor, at int, src Tensor) error
	// Channels returns channels [at, at+n) of x: the inverse of
	// CopyChannels (the heads of a sequence-parallel DiT's exchange).
	// Wide: x may be float32; the result is of x's type.
	Channels(x Tensor, at, n int) (Tensor, error)
	// Band returns rows [y, y+h) of every frame of x (a height band of a
	// frame, or its halo rows), zeros where they fall outside x.
	Band(x Tensor, y, h int) (Tensor, error)
	// CopyBand copies src into rows [y, y+src.H) of every frame of dst, a
	// tensor of the same N, W and C: bands assemble into frames as parts
	// into channels with CopyChannels.
	CopyBand(dst Tensor, y int, src Tensor) error

	// PixelUnshuffle rearranges (N H W C) to (N H/r W/r C*r*r), the inverse
	// of PixelShuffle in PyTorch's channel order.
	PixelUnshuffle(x Tensor, r int) (Tensor, error)
	// CropPad returns the top-left h x w of x, zero-filled where x is
	// smaller.
	CropPad(x Tensor, h, w int) (Tensor, error)

	// The batch dimension of video tensors is time. These ops move data
	// between frames.

	// Frames copies n frames of x starting at frame start.
	// Wide: x may be float32; the result is of x's type.
	Frames(x Tensor, start, n int) (Tensor, error)
	// ConcatFrames stacks tensors of equal frame shape along time.
	ConcatFrames(ts ...Tensor) (Tensor, error)
	// Empty returns a tensor of shape s with undefined contents, for
	// CopyFrames to fill: results computed piece by piece go straight into
	// it, without holding every piece for a ConcatFrames.
	Empty(s Shape) (Tensor, error)
	// CopyFrames copies all frames of src into dst from frame at on.
	// Wide: dst and src may both be float32 (not one of each).
	CopyFrames(dst Tensor, at int, src Tensor) error
	// ConcatPrev returns (N H W 2C): each frame t of x followed, along
	// channels, by frame t-1 of x; frame 0 is followed by prev (a 1-frame
	// tensor), or zeros when prev is nil.
	ConcatPrev(x, prev Tensor) (Tensor, error)
	// FoldFrames folds s consecutive frames into channels:
	// (N H W C) -> (N/s H W s*C), frame j of each group in channels [j*C, (j+1)*C).
	FoldFrames(x Tensor, s int) (Tensor, error)
	// UnfoldFrames is the inverse of FoldFrames: (N H W s*C) -> (N*s H W C).
	UnfoldFrames(x Tensor, s int) (Tensor, error)

	// FromRGB8 converts n packed RGB24 frames of h x w to an (n h w 3)
	// tensor with values in [0,1].
	FromRGB8(rgb []byte, n, h, w int) (Tensor, error)
	// ToRGB8 converts an (n h w 3) tensor in [0,1] to packed RGB24, rounding
	// to nearest and clamping to [0,255].
	ToRGB8(t Tensor, dst []byte) error
	// FromRGB16 is FromRGB8 for RGB48 (16-bit little-endian samples,
	// divided by 65535).
	FromRGB16(rgb []byte, n, h, w int) (Tensor, error)
	// ToRGB16 is ToRGB8 for RGB48: v * 65535 rounded to nearest (half up)
	// and clamped to [0,65535], little-endian.
	ToRGB16(t Tensor, dst []byte) error

	// Close releases the backend's resources.
	Close() error
}

// Owner is implemented by backends that tell their own tensors from
// others' (another GPU's, another kind of backend's), for models that
// check their inputs before touching any state.
type Owner interface {
	// Owns reports whether t is a live or freed tensor of this backend.
	Owns(t Tensor) bool
}

// SliceConver is implemented by backends that convolve a channel prefix of
// one tensor into a channel slice of another, so that the concatenations
// of a dense block (realesrgan-x4plus's) are views of one buffer that each
// convolution reads a prefix of and writes its part into, not copies.
// SliceConv(x, w, p, act, y, at) stands for
//
//	in, _ := b.Channels(x, 0, w.In()) // x itself when it has w.In() channels
//	out, _ := b.Conv2D(in, w, p, act)
//	b.CopyChannels(y, at, out)
//
// Without it (or where CanSliceConv says no), model/compact keeps the
// block's concatenations: each part is computed by Conv2D and copied into
// every later concatenation (Empty and a CopyChannels per part).
type SliceConver interface {
	// CanSliceConv reports whether SliceConv runs w with p and act from a
	// tensor of inC channels into one of outC channels as fast as Conv2D:
	// models use it only then.
	CanSliceConv(w Weights, p ConvParams, act Activation, inC, outC int) bool
	// SliceConv writes act(conv(x[..., :w.In()], w) + bias) into channels
	// [at, at+w.Out()) of y, a tensor of x's frames and size (p keeps the
	// size). x and y may be one tensor when the channels read and written
	// do not overlap.
	SliceConv(x Tensor, w Weights, p ConvParams, act Activation, y Tensor, at int) error
}

// GPU is implemented by backends that run on a GPU. It answers what the
// service and the benchmarks ask of a device without importing its
// package.
type GPU interface {
	Backend
	// UUID identifies the device ("GPU-..."), as NVML names it.
	UUID() (string, error)
	// DeviceName is the GPU's model ("NVIDIA H200").
	DeviceName() string
	// StorageType is the storage type of activations and weights ("f16",
	// "bf16").
	StorageType() string
	// PeakBytes is the high-water mark of the device memory the backend
	// allocated; ResetPeak starts it again from what is in use.
	PeakBytes() int64
	ResetPeak()
	// Available is the device memory a new working set can take now.
	Available() (int64, error)
	// Spans returns the intervals the compute stream spent on the batches
	// waited for since the last call, and forgets them.
	Spans() []Span
}

// PadMode is what Pad fills new pixels with.
type PadMode int

const (
	// PadZero fills with zeros.
	PadZero PadMode = iota
	// PadReflect mirrors the image about its edge pixel, which is not
	// repeated (PyTorch's "reflect"): each pad must be less than the side
	// it mirrors.
	PadReflect
)

// UNet is implemented by backends with the ops of convolutional U-Nets
// with squeeze-excitation blocks (Real-CUGAN): padding and cropping each
// side of a frame, global average pooling and per-channel gates.
type UNet interface {
	// Pad adds top, bottom, left and right pixels around each frame of x,
	// filled as mode says; a negative count crops that many pixels from
	// that side instead (crops apply before pads).
	Pad(x Tensor, top, bottom, left, right int, mode PadMode) (Tensor, error)
	// ChannelMean returns (N 1 1 C): the mean of each channel of each
	// frame over its pixels, summed in at least float32.
	ChannelMean(x Tensor) (Tensor, error)
	// ScaleChannels returns x (N H W C) times s (N 1 1 C): each channel
	// of each frame times its own factor.
	ScaleChannels(x, s Tensor) (Tensor, error)
}

// Norm is implemented by backends with the normalisations of
// convolutional networks (RealPLKSR). scale and shift are (1 1 1 C)
// tensors from Upload: each channel's values are normalised (to zero
// mean and unit variance, the variance biased, eps added to it), then
// times its scale plus its shift.
type Norm interface {
	// GroupNorm normalises each frame's channels in groups consecutive
	// groups, each over all of the frame's pixels (PyTorch's GroupNorm).
	// res, when not nil, is a tensor of x's shape added to the result in
	// the same pass (a block's skip connection: GroupNorm(x) + res, the
	// sum rounded once to the storage type).
	GroupNorm(x Tensor, groups int, scale, shift Tensor, eps float32, res Tensor) (Tensor, error)
	// ChannelNorm normalises each pixel's channels (a LayerNorm over
	// channels, channels-first).
	ChannelNorm(x Tensor, scale, shift Tensor, eps float32) (Tensor, error)
}

// Stored is implemented by backends whose storage type may be narrower
// than float32 (GPU's StorageType): it moves a tensor's values between
// the host and the device as the device stores them, little-endian, with
// no widening to float32 and back (half the bytes in f16 and bf16, and no
// conversion on the host). Absent: Download and Upload, whose float32
// values narrow back to the stored bits.
type Stored interface {
	// DownloadStored copies t to the host in the storage type; a tensor
	// of another type (Wide's float32) is refused.
	DownloadStored(t Tensor) ([]byte, error)
	// UploadStored makes a tensor of shape s from bytes DownloadStored
	// gave (len(data) is s.Elems() values of the storage type).
	UploadStored(s Shape, data []byte) (Tensor, error)
}

// Trimmer is implemented by backends that keep buffers for reuse (the CPU
// backend's tensor pool and im2col scratch): Trim drops them, so that
// memory can return to the system between jobs. The service trims after
// each task where the backend has it; without it nothing is dropped.
type Trimmer interface {
	Trim()
}

// Span is an interval of a device's compute stream, from the backend's
// opening.
type Span struct{ Start, End time.Duration }

// Options are a device configuration's settings: "cuda:0?dtype=bf16"
// gives {"dtype": "bf16"}. A backend refuses settings it does not know.
type Options map[string]string

// Opener creates a backend for a device name such as "cpu" or "cuda:1",
// with the settings of its configuration string.
type Opener func(device string, opt Options) (Backend, error)

var (
	mu       sync.Mutex
	registry = map[string]Opener{}
)

// Register makes a backend available under a device kind ("cpu", "cuda").
// It is called from the init function of each backend package, and panics
// when the kind is taken.
func Register(kind string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[kind]; dup {
		panic("backend: Register called twice for " + kind)
	}
	registry[kind] = open
}

// Unknown returns an error for settings other than those known.
func (o Options) Unknown(device string, known ...string) error {
	for k := range o {
		if !slices.Contains(known, k) {
			return fmt.Errorf("device %s: unknown setting %q (known: %s)", device, k, strings.Join(known, ", "))
		}
	}
	return nil
}

// Kinds lists the registered device kinds.
func Kinds() []string {
	mu.Lock()
	defer mu.Unlock()
	var ks []string
	for k := range registry {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Open opens a backend from a configuration string: a device name ("cpu",
// "cuda", "cuda:1") and optional settings after "?" in query form, e.g.
// "cuda:0?dtype=bf16". (A comma separates devices in lists; it never
// appears here.)
func Open(config string) (Backend, error) {
	device, query, _ := strings.Cut(config, "?")
	opt := Options{}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("device %q: settings: %v", config, err)
		}
		for k, v := range q {
			opt[k] = v[len(v)-1]
		}
	}
	kind, _, _ := strings.Cut(device, ":")
	mu.Lock()
	open, ok := registry[kind]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown device %q (available: %s)", device, strings.Join(Kinds(), ", "))
	}
	return open(device, opt)
}
