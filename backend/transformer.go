package backend

import "fmt"

// Matrix is the shape of a rows x cols matrix as transformer ops take it:
// [1 1 rows cols].
func Matrix(rows, cols int) Shape { return Shape{N: 1, H: 1, W: rows, C: cols} }

// ActGELUTanh is GELU with the tanh approximation,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), for Linear.
const ActGELUTanh ActKind = 100

// Grid is the token layout of a chunk of video latents: F frames of H x W
// tokens; token (f, y, x) is row (f*H + y)*W + x.
type Grid struct{ F, H, W int }

// Tokens returns the number of tokens of the grid.
func (g Grid) Tokens() int { return g.F * g.H * g.W }

// Windows are the attention windows over a Grid. Window (i, j) spans every
// frame and the rows [YStarts[i], YStarts[i]+min(Size, H)) by the columns
// [XStarts[j], XStarts[j]+min(Size, W)); windows may overlap. A token at
// (y, x) takes its output from window (YOwner[y], XOwner[x]), which must
// contain it; owners are non-decreasing along each axis, so every window
// owns a rectangle.
type Windows struct {
	Size             int
	YStarts, XStarts []int
	YOwner, XOwner   []int
}

// Check reports whether w is a valid window set over g.
func (w Windows) Check(g Grid) error {
	if w.Size < 1 || len(w.YOwner) != g.H || len(w.XOwner) != g.W || len(w.YStarts) == 0 || len(w.XStarts) == 0 {
		return fmt.Errorf("windows: size %d, %d/%d owners for a %dx%d grid", w.Size, len(w.YOwner), len(w.XOwner), g.H, g.W)
	}
	for _, ax := range []struct {
		starts, owner []int
		n             int
	}{{w.YStarts, w.YOwner, g.H}, {w.XStarts, w.XOwner, g.W}} {
		size := min(w.Size, ax.n)
		for p, o := range ax.owner {
			if o < 0 || o >= len(ax.starts) || p < ax.starts[o] || p >= ax.starts[o]+size || ax.starts[o]+size > ax.n ||
				(p > 0 && o < ax.owner[p-1]) {
				return fmt.Errorf("windows: position %d owned by window %d of starts %v over %d", p, o, ax.starts, ax.n)
			}
		}
	}
	return nil
}

// RoPE is the rotary position embedding of a Grid: the HeadDim/2 pairs of
// consecutive values of every head are split into temporal, height and
// width parts of HeadDim/2 - 2*(HeadDim/6), HeadDim/6 and HeadDim/6 pairs
// (Wan's 44/42/42 dimensions for 128); pair j of a part of d dimensions is
// rotated by the angle pos * 10000^(-2j/d), where pos is Offset+f, y or x.
//
// The rows rotated are tokens First, First+1, ... of the grid: a slice of
// the sequence (a sequence-parallel rank's tokens) starts at First; rows
// past the grid's last token are padding, rotated as the last frame.
type RoPE struct {
	Grid    Grid
	Offset  int
	HeadDim int
	First   int
}

// Transformer is implemented by backends that run transformer layers (the
// SwiftVR DiT), beside Backend. Activations are matrices (see Matrix) of
// rows = tokens; a head is headDim consecutive columns. Like Backend, ops
// return new tensors unless they say otherwise.
type Transformer interface {
	// PrepareLinear packs a linear layer's weights (out x in, PyTorch's
	// layout) and bias (len out, or nil).
	PrepareLinear(out, in int, w, bias []float32) (Weights, error)
	// Linear returns act(x Wᵀ + b) for x of rows x in; act is ActNone or
	// ActGELUTanh. With acc non-nil (rows x out) it adds x Wᵀ + b to acc in
	// place and returns acc; act must then be ActNone: the residual add
	// Binary(OpAdd, acc, Linear(x, w, ActNone, nil)), written into acc, in
	// the product's own pass where the backend can.
	Linear(x Tensor, w Weights, act ActKind, acc Tensor) (Tensor, error)
	// Rows returns rows [start, start+n) of the matrix x as a view that
	// shares x's storage: writes through either show in both. Use it only
	// while x lives; freeing the view does not free x.
	Rows(x Tensor, start, n int) (Tensor, error)
	// Reshape returns a copy of x with shape s of as many elements.
	Reshape(x Tensor, s Shape) (Tensor, error)
	// LayerNorm normalises every row to zero mean and unit variance (no
	// affine; fold one into the next Linear).
	LayerNorm(x Tensor, eps float32) (Tensor, error)
	// RMSNormRoPE divides every row of x, in place, by its root mean square
	// (+eps) and multiplies by w (1 x cols); then, when rope is non-nil,
	// rotates every head of every row (row r is token rope.First + r).
	RMSNormRoPE(x, w Tensor, eps float32, rope *RoPE) error
	// WindowAttention returns softmax(q kᵀ / sqrt(headDim)) v for every
	// head, each token attending to the tokens of its owner window and
	// taking its output from it (see Windows). q, k and v are tokens x cols.
	WindowAttention(q, k, v Tensor, headDim int, g Grid, w Windows) (Tensor, error)
	// Attention returns softmax(q kᵀ / sqrt(headDim)) v for every head,
	// every row of q attending to every row of k and v.
	Attention(q, k, v Tensor, headDim int) (Tensor, error)
	// PrepareKeys packs n fixed attention keys (n x cols, heads of any
	// headDim) and a bias per key (len n; -Inf leaves a key out) for
	// AttentionWeights.
	PrepareKeys(n, cols int, k, bias []float32) (Weights, error)
	// AttentionWeights returns, for every row of q (rows x cols) and every
	// head h, softmax_j(q̂_h · k_jh + bias_j) over the n prepared keys,
	// where q̂ is the row of q divided by its root mean square (+eps): a
	// rows x (heads·n) matrix whose column h·n + j is key j of head h.
	// These are the weights of an attention to fixed keys that fold in the
	// queries' RMSNorm weight and the 1/sqrt(headDim) scale; a Linear with
	// the values folded into its weights finishes it.
	AttentionWeights(q Tensor, k Weights, headDim int, eps float32) (Tensor, error)
}

// FP8 is implemented by backends that run linear layers in 8-bit floating
// point (e4m3, on GPUs of compute capability 8.9 and newer): weights with
// a scale per output channel, inputs with a scale per row, float32
// accumulation, output (and accumulator, bias and GELU) in the storage
// type.
type FP8 interface {
	// PrepareLinearFP8 is PrepareLinear for e4m3 weights, each output
	// channel scaled by its largest magnitude; Linear quantises its input
	// per row (unless LayerNormFP8 made it). It refuses where the device
	// cannot run fp8, saying why.
	PrepareLinearFP8(out, in int, w, bias []float32) (Weights, error)
	// LayerNormFP8 is LayerNorm with its output quantised per row to e4m3,
	// in one pass: a tensor that only Linear with fp8 weights, Rows and
	// Free take.
	LayerNormFP8(x Tensor, eps float32) (Tensor, error)
}

// Recorder is implemented by backends that can record the ops a function
// queues once and replay them at a fraction of the host's cost (CUDA
// graphs). A recording refers to tensors by their storage: replays read
// and write the tensors f used, which must outlive the recording, and f
// must free every tensor it makes and no other. Nothing runs while
// recording, so f must not wait for results or move data to or from the
// host (Upload, Download, Synchronize, frame slots), and where a backend
// cannot record an op, Record fails.
type Recorder interface {
	// Record calls f, recording instead of running the ops it queues. The
	// Offset of any RoPE the ops use is not recorded: Replay gives it.
	Record(f func() error) (Recording, error)
}

// Recording is work recorded by Recorder.Record.
type Recording interface {
	// Replay queues the recorded ops again, with offset as the Offset of
	// every RoPE they use.
	Replay(offset int) error
	// Free releases the recording (replays already queued still run).
	Free()
}

// MaxKeys is the most keys PrepareKeys takes.
const MaxKeys = 64
