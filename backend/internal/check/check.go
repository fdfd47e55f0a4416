// Package check holds what every backend implementation shares and model
// code never needs: the checks each op makes on its arguments (so that all
// backends accept and refuse the same calls with the same messages), the
// shapes ops produce, and the resize taps every backend samples with.
package check

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
)

// Checks every backend makes on its arguments, in one place so that all of
// them accept and refuse the same calls with the same messages.

// Activation checks that act is one of the kinds backend.ActKind lists.
func Activation(act backend.Activation) error {
	if act.Kind < backend.ActNone || act.Kind > backend.ActMish {
		return fmt.Errorf("unknown activation %d", act.Kind)
	}
	return nil
}

// ConvWeights validates PrepareConv's arguments.
func ConvWeights(out, in, kh, kw int, w, bias []float32) error {
	if out <= 0 || in <= 0 || kh <= 0 || kw <= 0 || len(w) != out*in*kh*kw {
		return fmt.Errorf("conv weights %dx%dx%dx%d: got %d values", out, in, kh, kw, len(w))
	}
	if bias != nil && len(bias) != out {
		return fmt.Errorf("conv bias: want %d values, got %d", out, len(bias))
	}
	return nil
}

// ConvOutput checks that an input of shape s fits a convolution with in
// input channels and a kh x kw kernel, and returns the output size.
func ConvOutput(s backend.Shape, p backend.ConvParams, in, kh, kw int) (oh, ow int, err error) {
	if s.C != in || p.KH != kh || p.KW != kw {
		return 0, 0, fmt.Errorf("conv: input has %d channels, kernel %dx%d; weights want %d channels, kernel %dx%d", s.C, p.KH, p.KW, in, kh, kw)
	}
	oh, ow = p.OutSize(s.H, s.W)
	if oh <= 0 || ow <= 0 {
		return 0, 0, fmt.Errorf("conv: input %dx%d is too small for a %dx%d kernel", s.H, s.W, p.KH, p.KW)
	}
	return oh, ow, nil
}

// SliceConv checks a SliceConv of the first in channels of an x-shaped
// tensor into channels [at, at+out) of a y-shaped one (same, when x and y
// are one tensor): the convolution keeps the frame size, and the channels
// read and written do not overlap in one tensor.
func SliceConv(x, y backend.Shape, p backend.ConvParams, in, out, kh, kw, at int, same bool) error {
	if x.C < in || p.KH != kh || p.KW != kw {
		return fmt.Errorf("slice conv: input has %d channels, kernel %dx%d; weights want %d channels, kernel %dx%d", x.C, p.KH, p.KW, in, kh, kw)
	}
	if oh, ow := p.OutSize(x.H, x.W); oh != x.H || ow != x.W || y.N != x.N || y.H != x.H || y.W != x.W {
		return fmt.Errorf("slice conv: a %dx%d kernel from a %v tensor into a %v one does not keep the frame size", kh, kw, x, y)
	}
	if at < 0 || at+out > y.C || same && at < in {
		return fmt.Errorf("slice conv: %d outputs do not fit channels from %d of a %v tensor that it reads %d channels of", out, at, y, in)
	}
	return nil
}

// Channels checks that src fits channels [at, at+src.C) of dst.
func Channels(dst backend.Shape, at int, src backend.Shape) error {
	if src.N != dst.N || src.H != dst.H || src.W != dst.W || src.C < 1 || at < 0 || at+src.C > dst.C {
		return fmt.Errorf("channels: a %v tensor does not fit channels from %d of a %v one", src, at, dst)
	}
	return nil
}

// Band reports whether a band of shape band fits rows [y, y+band.H) of
// a tensor of shape s (the same frames, width and channels); with outside,
// rows past s's top and bottom may be named too.
func Band(s backend.Shape, y int, band backend.Shape, outside bool) error {
	if band.N != s.N || band.W != s.W || band.C != s.C || band.H < 1 || !outside && (y < 0 || y+band.H > s.H) {
		return fmt.Errorf("band: rows [%d, %d) of a %v tensor as a %v one", y, y+band.H, s, band)
	}
	return nil
}

// ResizeTiles checks a Resize of an s-shaped tensor to oh x ow and
// returns its tiles with zero ones filled in as whole images.
func ResizeTiles(s backend.Shape, mode backend.ResizeMode, oh, ow int, src, dst backend.Tile) (backend.Tile, backend.Tile, error) {
	if mode < backend.Nearest || mode > backend.Bicubic {
		return src, dst, fmt.Errorf("resize: unsupported mode %v", mode)
	}
	if oh <= 0 || ow <= 0 {
		return src, dst, fmt.Errorf("resize %dx%d to %dx%d: empty output", s.W, s.H, ow, oh)
	}
	if src.Whole() {
		src = backend.Tile{FullH: s.H, FullW: s.W}
	}
	if dst.Whole() {
		dst = backend.Tile{FullH: oh, FullW: ow}
	}
	return src, dst, nil
}

// FramesShape checks Frames(x, start, n) on an s-shaped x.
func FramesShape(s backend.Shape, start, n int) (backend.Shape, error) {
	if start < 0 || n <= 0 || start+n > s.N {
		return backend.Shape{}, fmt.Errorf("frames [%d, %d) of a %d-frame tensor", start, start+n, s.N)
	}
	return backend.Shape{N: n, H: s.H, W: s.W, C: s.C}, nil
}

// ConcatShape checks ConcatFrames of tensors of the given shapes.
func ConcatShape(shapes []backend.Shape) (backend.Shape, error) {
	if len(shapes) == 0 {
		return backend.Shape{}, fmt.Errorf("concat of no tensors")
	}
	out := shapes[0]
	for _, p := range shapes[1:] {
		if p.H != out.H || p.W != out.W || p.C != out.C {
			return backend.Shape{}, fmt.Errorf("concat of frames %v and %v", shapes[0], p)
		}
		out.N += p.N
	}
	return out, nil
}

// CopyFrames checks CopyFrames(dst, at, src) on tensors of these shapes.
func CopyFrames(dst backend.Shape, at int, src backend.Shape) error {
	if src.H != dst.H || src.W != dst.W || src.C != dst.C || at < 0 || at+src.N > dst.N {
		return fmt.Errorf("copy of frames %v into frames [%d, %d) of %v", src, at, at+src.N, dst)
	}
	return nil
}

// ConcatPrevShape checks ConcatPrev(x, prev); prev may be nil.
func ConcatPrevShape(s backend.Shape, prev *backend.Shape) (backend.Shape, error) {
	if prev != nil && *prev != (backend.Shape{N: 1, H: s.H, W: s.W, C: s.C}) {
		return backend.Shape{}, fmt.Errorf("previous frame %v does not fit frames %v", *prev, s)
	}
	return backend.Shape{N: s.N, H: s.H, W: s.W, C: 2 * s.C}, nil
}

// FoldShape checks FoldFrames(x, st).
func FoldShape(s backend.Shape, st int) (backend.Shape, error) {
	if st <= 0 || s.N%st != 0 {
		return backend.Shape{}, fmt.Errorf("fold %d frames by %d", s.N, st)
	}
	return backend.Shape{N: s.N / st, H: s.H, W: s.W, C: s.C * st}, nil
}

// UnfoldShape checks UnfoldFrames(x, st).
func UnfoldShape(s backend.Shape, st int) (backend.Shape, error) {
	if st <= 0 || s.C%st != 0 {
		return backend.Shape{}, fmt.Errorf("unfold %d channels by %d", s.C, st)
	}
	return backend.Shape{N: s.N * st, H: s.H, W: s.W, C: s.C / st}, nil
}

// UnshuffleShape checks PixelUnshuffle(x, r).
func UnshuffleShape(s backend.Shape, r int) (backend.Shape, error) {
	if r <= 0 || s.H%r != 0 || s.W%r != 0 {
		return backend.Shape{}, fmt.Errorf("pixel unshuffle by %d: %dx%d is not a multiple", r, s.W, s.H)
	}
	return backend.Shape{N: s.N, H: s.H / r, W: s.W / r, C: s.C * r * r}, nil
}

// CropPadShape checks CropPad(x, h, w).
func CropPadShape(s backend.Shape, h, w int) (backend.Shape, error) {
	if h <= 0 || w <= 0 {
		return backend.Shape{}, fmt.Errorf("crop/pad to %dx%d", w, h)
	}
	return backend.Shape{N: s.N, H: h, W: w, C: s.C}, nil
}

// PadShape checks Pad(x, top, bottom, left, right, mode) on a tensor of
// shape s and returns the result's shape.
func PadShape(s backend.Shape, top, bottom, left, right int, mode backend.PadMode) (backend.Shape, error) {
	os := backend.Shape{N: s.N, H: s.H + top + bottom, W: s.W + left + right, C: s.C}
	if os.H <= 0 || os.W <= 0 || max(-top, 0)+max(-bottom, 0) >= s.H || max(-left, 0)+max(-right, 0) >= s.W {
		return backend.Shape{}, fmt.Errorf("pad %d/%d/%d/%d (top/bottom/left/right) of a %dx%d frame leaves nothing", top, bottom, left, right, s.W, s.H)
	}
	switch mode {
	case backend.PadZero:
	case backend.PadReflect:
		// Reflection mirrors the frame left after the crops.
		h := s.H - max(-top, 0) - max(-bottom, 0)
		w := s.W - max(-left, 0) - max(-right, 0)
		if max(top, bottom) >= h || max(left, right) >= w {
			return backend.Shape{}, fmt.Errorf("reflection pad %d/%d/%d/%d (top/bottom/left/right) of a %dx%d frame: each pad must be less than the side it mirrors", top, bottom, left, right, w, h)
		}
	default:
		return backend.Shape{}, fmt.Errorf("unknown pad mode %d", mode)
	}
	return os, nil
}

// PadSource maps an output coordinate i of Pad along an axis of n input
// pixels, lo and hi added before and after (negative: cropped), to the
// input coordinate it reads, or -1 for a zero.
func PadSource(i, n, lo, hi int, mode backend.PadMode) int {
	a := max(-lo, 0)         // first pixel kept
	m := n - a - max(-hi, 0) // pixels kept
	j := i - max(lo, 0)
	switch {
	case j >= 0 && j < m:
	case mode == backend.PadZero:
		return -1
	case j < 0:
		j = -j
	default:
		j = 2*(m-1) - j
	}
	return a + j
}

// NormAdd checks GroupNorm's residual's shape r against x's, s.
func NormAdd(s, r backend.Shape) error {
	if r != s {
		return fmt.Errorf("norm: a residual of shape %v for a tensor %v", r, s)
	}
	return nil
}

// Norm checks GroupNorm(x, groups, scale, shift) (ChannelNorm: groups 1)
// on a tensor of shape s with scale and shift of shapes a and b.
func Norm(s backend.Shape, groups int, a, b backend.Shape) error {
	if groups < 1 || s.C%groups != 0 {
		return fmt.Errorf("norm: %d groups of %d channels", groups, s.C)
	}
	want := backend.Shape{N: 1, H: 1, W: 1, C: s.C}
	if a != want || b != want {
		return fmt.Errorf("norm: scale %v and shift %v for %d channels, want %v", a, b, s.C, want)
	}
	return nil
}

// ScaleChannelsShapes checks ScaleChannels(x, s).
func ScaleChannelsShapes(x, s backend.Shape) error {
	if s.N != x.N || s.H != 1 || s.W != 1 || s.C != x.C {
		return fmt.Errorf("scale channels: factors %v for a tensor %v, want (%d 1 1 %d)", s, x, x.N, x.C)
	}
	return nil
}

// ShuffleAddShape checks ShuffleAddNearest(x, base, r).
func ShuffleAddShape(x, base backend.Shape, r int) (backend.Shape, error) {
	if r <= 0 || x.C != base.C*r*r || x.N != base.N || x.H != base.H || x.W != base.W {
		return backend.Shape{}, fmt.Errorf("shuffle-add: shapes %v and %v do not fit r=%d", x, base, r)
	}
	return backend.Shape{N: x.N, H: x.H * r, W: x.W * r, C: base.C}, nil
}

// Taps holds, for each output index along one axis of a resize, up to
// four source indices (local to the input tensor) and their weights. Every
// backend resamples with these, so they agree exactly on where samples
// come from.
type Taps struct {
	N   int // taps per output index
	Idx []int
	Wt  []float32
}

// cubic returns the Keys cubic convolution weights (A = -0.75) for the four
// taps around a sample at fraction t past the second tap, as ncnn and
// PyTorch compute them.
func cubic(t float32) [4]float32 {
	const A = -0.75
	x0, x1, x2 := t+1, t, 1-t
	var c [4]float32
	c[0] = ((A*x0-5*A)*x0+8*A)*x0 - 4*A
	c[1] = ((A+2)*x1-(A+3))*x1*x1 + 1
	c[2] = ((A+2)*x2-(A+3))*x2*x2 + 1
	c[3] = 1 - c[0] - c[1] - c[2]
	return c
}

// MakeTaps computes the taps for out output samples starting at global
// index dstOff of a dstFull-long axis, reading a local input of srcLen
// samples placed at global index srcOff of a srcFull-long axis. All
// arithmetic uses global indices, so a tile computes exactly the values of
// the whole image.
func MakeTaps(mode backend.ResizeMode, out, dstOff, dstFull, srcLen, srcOff, srcFull int) Taps {
	n := map[backend.ResizeMode]int{backend.Nearest: 1, backend.Bilinear: 2, backend.Bicubic: 4}[mode]
	a := Taps{N: n, Idx: make([]int, out*n), Wt: make([]float32, out*n)}
	local := func(g int) int { // clamp to the whole image, then to the tile
		g = min(max(g, 0), srcFull-1) - srcOff
		return min(max(g, 0), srcLen-1)
	}
	scale := float64(srcFull) / float64(dstFull)
	for i := 0; i < out; i++ {
		g := dstOff + i
		idx, wt := a.Idx[i*n:(i+1)*n], a.Wt[i*n:(i+1)*n]
		switch mode {
		case backend.Nearest:
			idx[0], wt[0] = local(g*srcFull/dstFull), 1
		case backend.Bilinear:
			f := max(float32((float64(g)+0.5)*scale-0.5), 0)
			s := int(math.Floor(float64(f)))
			f -= float32(s)
			idx[0], idx[1] = local(s), local(s+1)
			wt[0], wt[1] = 1-f, f
		case backend.Bicubic:
			f := float32((float64(g)+0.5)*scale - 0.5)
			s := int(math.Floor(float64(f)))
			c := cubic(f - float32(s))
			for k := 0; k < 4; k++ {
				idx[k], wt[k] = local(s-1+k), c[k]
			}
		}
	}
	return a
}

// Keys validates PrepareKeys' arguments.
func Keys(n, cols int, k, bias []float32) error {
	if n < 1 || n > backend.MaxKeys || cols < 1 || len(k) != n*cols || len(bias) != n {
		return fmt.Errorf("keys: %d keys (at most %d) of %d columns, %d values, %d biases", n, backend.MaxKeys, cols, len(k), len(bias))
	}
	return nil
}

// AttentionWeights reports whether q (rows x cols) suits keys of
// cols columns in heads of headDim.
func AttentionWeights(q backend.Shape, cols, headDim int) error {
	if err := Matrix(q, cols); err != nil {
		return fmt.Errorf("attention weights: %w", err)
	}
	if headDim < 1 || cols%headDim != 0 {
		return fmt.Errorf("attention weights: %d columns are not heads of %d", cols, headDim)
	}
	return nil
}

// RoPEParts returns the number of rotated pairs per head for the temporal,
// height and width positions.
func RoPEParts(headDim int) [3]int {
	hw := headDim / 6
	return [3]int{headDim/2 - 2*hw, hw, hw}
}

// Matrix reports whether s is a matrix (see backend.Matrix) with cols
// columns (any number when cols is 0).
func Matrix(s backend.Shape, cols int) error {
	if s.N != 1 || s.H != 1 || s.W < 1 || s.C < 1 || cols > 0 && s.C != cols {
		return fmt.Errorf("tensor %v is not a matrix of %d columns", s, cols)
	}
	return nil
}

// Linear validates PrepareLinear's arguments.
func Linear(out, in int, w, bias []float32) error {
	if out < 1 || in < 1 || len(w) != out*in || bias != nil && len(bias) != out {
		return fmt.Errorf("linear %dx%d: %d weights, %d biases", out, in, len(w), len(bias))
	}
	return nil
}

// RoPE reports whether r fits a matrix of rows x cols: rows from token
// r.First on, the rows past the grid's last token being padding.
func RoPE(r backend.RoPE, rows, cols int) error {
	n := r.Grid.Tokens()
	if r.HeadDim < 6 || r.HeadDim%2 != 0 || cols%r.HeadDim != 0 || n < 1 || rows < 1 || r.First < 0 || r.First >= n {
		return fmt.Errorf("rope: head dim %d over %d columns, grid %+v for %d rows from token %d", r.HeadDim, cols, r.Grid, rows, r.First)
	}
	return nil
}

// Reshape reports whether a tensor of shape from can be reshaped to s.
func Reshape(from, s backend.Shape) error {
	if s.Elems() != from.Elems() || s.N < 1 || s.H < 1 || s.W < 1 || s.C < 1 {
		return fmt.Errorf("reshape %v to %v", from, s)
	}
	return nil
}

// Rows reports whether rows [start, start+n) exist in the matrix s.
func Rows(s backend.Shape, start, n int) error {
	if err := Matrix(s, 0); err != nil {
		return err
	}
	if start < 0 || n < 1 || start+n > s.W {
		return fmt.Errorf("rows [%d, %d) of a %d-row matrix", start, start+n, s.W)
	}
	return nil
}

// Attention reports whether q (Lq x cols), k and v (both Lk x cols)
// are attention operands whose columns are heads of headDim.
func Attention(q, k, v backend.Shape, headDim int) error {
	if err := Matrix(q, 0); err != nil {
		return fmt.Errorf("attention queries: %w", err)
	}
	if headDim < 2 || headDim%2 != 0 || q.C%headDim != 0 {
		return fmt.Errorf("attention: %d columns are not heads of %d", q.C, headDim)
	}
	if err := Matrix(k, q.C); err != nil {
		return fmt.Errorf("attention keys: %w", err)
	}
	if k != v {
		return fmt.Errorf("attention: keys %v and values %v differ", k, v)
	}
	return nil
}

// WindowAttention is CheckAttention for attention in the windows w
// of the grid g, whose tokens are the rows of q, k and v.
func WindowAttention(q, k, v backend.Shape, headDim int, g backend.Grid, w backend.Windows) error {
	if err := Attention(q, k, v, headDim); err != nil {
		return err
	}
	if q.W != g.Tokens() || k.W != g.Tokens() {
		return fmt.Errorf("window attention: %d query and %d key rows for a grid of %d tokens", q.W, k.W, g.Tokens())
	}
	return w.Check(g)
}

// Motion checks a motion field or per-pixel map m of c channels against x.
func Motion(x, m backend.Shape, c int, what string) error {
	if m.N != x.N || m.H != x.H || m.W != x.W || m.C != c {
		return fmt.Errorf("%s of shape %v for a %v tensor: want [%d %d %d %d]", what, m, x, x.N, x.H, x.W, c)
	}
	return nil
}
