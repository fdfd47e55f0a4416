// Package compact runs small feed-forward super-resolution networks stored
// as ncnn graphs, such as Real-ESRGAN's realesr-animevideov3 (SRVGGNetCompact:
// a stack of 3x3 conv + PReLU, a pixel shuffle, and a nearest-upsampled copy
// of the input added on top).
//
// A Graph binds an ncnn graph to a backend once; Upscale then runs frames
// through it, whole or in tiles with enough overlap that the tiled result is
// bitwise the same as the whole one. The package registers itself as the
// model family "compact" (family.go): the bundled model, whose x2, x3 and
// x4 graphs load at first use, and ncnn graphs from disk.
package compact

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/checkpoint/ncnn"
)

// Supported lists the ncnn layer types this package runs.
const Supported = "Input, Split, Convolution, Deconvolution, PReLU, ReLU, PixelShuffle, Reorg, Interp, BinaryOp, Concat, Eltwise, Sigmoid, Swish, Mish, Padding, Crop, Pooling, GroupNorm, ChannelNorm"

// rat is a positive rational scale factor.
type rat struct{ num, den int }

func (r rat) mul(o rat) rat { return reduce(r.num*o.num, r.den*o.den) }

// at scales a coordinate; ok is false when the result is not an integer.
func (r rat) at(x int) (int, bool) { return x * r.num / r.den, x*r.num%r.den == 0 }

func reduce(n, d int) rat {
	g := gcd(n, d)
	return rat{n / g, d / g}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// toRat finds a rational with a small denominator equal to f, if any.
func toRat(f float32) (rat, bool) {
	for d := 1; d <= 64; d++ {
		n := math.Round(float64(f) * float64(d))
		if n >= 1 && math.Abs(n/float64(d)-float64(f)) < 1e-6 {
			return reduce(int(n), d), true
		}
	}
	return rat{}, false
}

type opKind int

const (
	opConv opKind = iota
	opAct
	opShuffle
	opResize
	opBinary
	opShuffleAdd // PixelShuffle(in[0]) + Nearest(in[1]), on a ShuffleAdder backend
	opConcat     // along channels
	opEltwise    // sum (with coefficients) or product of its inputs
	opBuffer     // a dense block's buffer, with in[0] copied into its first channels (see denseBuffers)
	opPad        // pad or crop each side (backend.UNet)
	opMean       // global average pooling: each channel's mean (backend.UNet)
	opScaleCh    // in[0] times the per-channel factors in[1], a pooled blob (backend.UNet)
	opChannels   // channels [at, at+n) of its input
	opNorm       // GroupNorm (groups > 0) or ChannelNorm (backend.Norm)
	opPatch      // in[0] with in[1] written over its channels from at, in place (see patchConcats)
)

// op is one executable layer. Blobs are numbered; Split layers are resolved
// away at load time, so a blob may feed several ops. A convolution with a
// second input adds it before its activation (a folded Eltwise sum).
type op struct {
	layer *ncnn.Layer
	kind  opKind
	in    []int
	out   int

	raw   *rawConv // until the weights are prepared
	w     backend.Weights
	conv  backend.ConvParams
	act   backend.Activation
	r     int
	order backend.ShuffleOrder
	mode  backend.ResizeMode
	hs    float32 // resize scales as written in the graph
	ws    float32
	binop backend.BinaryOp
	coef  []float32 // Eltwise sum coefficients, nil for all ones
	into  *sliceOut // a convolution writing into a dense block's buffer
	// opPad: pixels added to the top, bottom, left and right (negative:
	// cropped), and how. With multiple > 1 the bottom and right grow
	// further to make the input's height and width multiples of it; with
	// fit the bottom and right are cropped to the graph input's size
	// times the output's scale. fullSizes gives the sizes; forward pads
	// the difference.
	pad      [4]int
	padMode  backend.PadMode
	multiple int
	fit      bool
	// opChannels: the first channel and the count; opNorm: the groups (0
	// for a ChannelNorm), eps, and the scale and shift (owned by the
	// graph).
	at, n        int
	groups       int
	eps          float32
	scale, shift backend.Tensor
}

// Graph is an ncnn graph bound to a backend.
type Graph struct {
	Name string

	b      backend.Backend
	ops    []*op
	nblobs int
	input  int
	output int
	uses   []int // how many ops read each blob
	scaleH []rat // each blob's size relative to the input, per axis
	scaleW []rat
	chans  []int  // each blob's channel count
	pooled []bool // each blob's: one pixel per frame (after global pooling)
	tileOK bool   // every op is local and position-exact, so tiles are exact
	why    string // why not, when !tileOK
	halo   int    // input pixels of context a tile needs on each side
	align  int    // tile origins are multiples of this
	owned  []backend.Tensor
	opt    Options
}

// Options change how a graph is bound to a backend.
type Options struct {
	// SeparateTail keeps the pixel shuffle, the nearest upsample and their
	// sum as separate ops instead of the fused ShuffleAdder kernel (for
	// testing the fused kernel against them).
	SeparateTail bool
	// CopyConcat keeps a dense block's concatenations as copies instead of
	// views of one buffer (for testing the buffers against them).
	CopyConcat bool
}

// Load parses an ncnn graph and its weights and uploads them to b.
func Load(b backend.Backend, name string, param io.Reader, bin []byte) (*Graph, error) {
	return LoadWith(b, name, param, bin, Options{})
}

// LoadWith is Load with options.
func LoadWith(b backend.Backend, name string, param io.Reader, bin []byte, opt Options) (*Graph, error) {
	net, err := ncnn.ParseParam(param)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	m := &Graph{Name: name, b: b, input: -1, tileOK: true, align: 1, opt: opt}
	if err := m.build(net, ncnn.NewWeightReader(bin)); err != nil {
		m.Close()
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	return m, nil
}

// LoadFiles is Load on the bytes of a .param and a .bin file.
func LoadFiles(b backend.Backend, name string, param, bin []byte) (*Graph, error) {
	return Load(b, name, bytes.NewReader(param), bin)
}

func (m *Graph) build(net *ncnn.Net, wr *ncnn.WeightReader) error {
	blob := map[string]int{}
	ref := func(l *ncnn.Layer, name string) (int, error) {
		id, ok := blob[name]
		if !ok {
			return 0, fmt.Errorf("%s reads blob %q, which no earlier layer produces", l, name)
		}
		return id, nil
	}
	def := func(l *ncnn.Layer, name string, id int) error {
		if _, dup := blob[name]; dup {
			return fmt.Errorf("%s writes blob %q a second time", l, name)
		}
		blob[name] = id
		return nil
	}
	newBlob := func() int {
		m.nblobs++
		m.scaleH = append(m.scaleH, rat{1, 1})
		m.scaleW = append(m.scaleW, rat{1, 1})
		m.chans = append(m.chans, 3)
		m.pooled = append(m.pooled, false)
		return m.nblobs - 1
	}
	// emit adds o, reading in, and returns its output blob.
	emit := func(o *op, in ...int) (int, error) {
		o.in = in
		o.out = newBlob()
		if err := m.propagateScale(o); err != nil {
			return 0, err
		}
		if err := m.needs(o); err != nil {
			return 0, err
		}
		m.ops = append(m.ops, o)
		return o.out, nil
	}
	arity := func(l *ncnn.Layer, nin, nout int) error {
		if len(l.Bottoms) != nin || len(l.Tops) != nout {
			return fmt.Errorf("%s: want %d input(s) and %d output(s), has %d and %d", l, nin, nout, len(l.Bottoms), len(l.Tops))
		}
		return nil
	}
	for _, l := range net.Layers {
		if l.Type == "Input" {
			if m.input >= 0 {
				return fmt.Errorf("%s: the graph has more than one Input; vsr runs single-input models", l)
			}
			if err := arity(l, 0, 1); err != nil {
				return err
			}
			m.input = newBlob()
			if err := def(l, l.Tops[0], m.input); err != nil {
				return err
			}
			continue
		}
		if l.Type == "Split" {
			if len(l.Bottoms) != 1 {
				return fmt.Errorf("%s: want 1 input, has %d", l, len(l.Bottoms))
			}
			src, err := ref(l, l.Bottoms[0])
			if err != nil {
				return err
			}
			for _, t := range l.Tops {
				if err := def(l, t, src); err != nil {
					return err
				}
			}
			continue
		}
		if l.Type == "Deconvolution" {
			if err := arity(l, 1, 1); err != nil {
				return err
			}
			in, err := ref(l, l.Bottoms[0])
			if err != nil {
				return err
			}
			out, err := m.deconv(l, wr, in, emit)
			if err != nil {
				return fmt.Errorf("%s: %w", l, err)
			}
			if err := def(l, l.Tops[0], out); err != nil {
				return err
			}
			continue
		}
		o := &op{layer: l}
		var err error
		switch l.Type {
		case "Convolution":
			err = m.convOp(o, wr)
		case "PReLU":
			err = m.preluOp(o, wr)
		case "PixelShuffle":
			err = shuffleOp(o)
		case "Reorg":
			err = reorgOp(o)
		case "Interp":
			err = resizeOp(o)
		case "BinaryOp":
			err = binaryOp(o)
		case "Sigmoid":
			err = pointwiseOp(o, backend.ActSigmoid)
		case "Swish":
			err = pointwiseOp(o, backend.ActSiLU)
		case "Mish":
			err = pointwiseOp(o, backend.ActMish)
		case "GroupNorm", "ChannelNorm":
			err = m.normOp(o, wr)
		case "Concat":
			err = concatOp(o)
		case "Eltwise":
			err = eltwiseOp(o)
		case "ReLU":
			err = reluOp(o)
		case "Padding":
			err = padOp(o)
		case "Crop":
			err = cropOp(o)
		case "Pooling":
			err = poolOp(o)
		default:
			return fmt.Errorf("%s: unsupported op %q (vsr supports %s)", l, l.Type, Supported)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
		nin := 1
		switch o.kind {
		case opBinary:
			nin = 2
		case opConcat, opEltwise:
			nin = max(len(l.Bottoms), 1)
			if o.kind == opEltwise {
				nin = max(nin, 2)
			}
		}
		if err := arity(l, nin, 1); err != nil {
			return err
		}
		for _, bn := range l.Bottoms {
			id, err := ref(l, bn)
			if err != nil {
				return err
			}
			o.in = append(o.in, id)
		}
		if o.kind == opConv && o.raw == nil { // a Reorg, now that its input's channels are known
			c, s := m.chans[o.in[0]], o.conv.StrideH
			if c*s*s > 1<<12 {
				return fmt.Errorf("%s: a reorg of %d channels by %d: vsr runs reorgs of up to 4096 output channels", l, c, s)
			}
			o.raw = reorgWeights(c, s, o.layer.Int(1, 0))
		}
		out, err := emit(o, o.in...)
		if err != nil {
			return err
		}
		if err := def(l, l.Tops[0], out); err != nil {
			return err
		}
	}
	if m.input < 0 {
		return fmt.Errorf("the graph has no Input layer")
	}
	if len(m.ops) == 0 {
		return fmt.Errorf("the graph has no layers after its Input")
	}
	if n := wr.Remaining(); n != 0 {
		return fmt.Errorf("weight file has %d bytes more than the graph reads: it does not belong to this .param", n)
	}
	m.countUses()
	m.output = -1
	for _, o := range m.ops {
		if m.uses[o.out] == 0 {
			if m.output >= 0 {
				return fmt.Errorf("the graph has several outputs (%s and another); vsr runs single-output models", o.layer)
			}
			m.output = o.out
		}
	}
	m.planTiles()
	return m.fuse()
}

// propagateScale records the output blob's scale and checks what the op
// needs of its inputs.
func (m *Graph) propagateScale(o *op) error {
	in := o.in[0]
	sh, sw := m.scaleH[in], m.scaleW[in]
	c := m.chans[in]
	switch o.kind {
	case opShuffle:
		sh, sw = sh.mul(rat{o.r, 1}), sw.mul(rat{o.r, 1})
		c /= o.r * o.r
	case opResize:
		rh, okh := toRat(o.hs)
		rw, okw := toRat(o.ws)
		if !okh || !okw {
			return fmt.Errorf("%s: scale %gx%g is not a simple fraction", o.layer, o.ws, o.hs)
		}
		sh, sw = sh.mul(rh), sw.mul(rw)
	case opPad:
		m.untile("%s pads or crops the image", o.layer)
	case opMean:
		m.untile("%s averages the whole image", o.layer)
		m.pooled[o.out] = true
	case opChannels:
		if o.at+o.n > c {
			return fmt.Errorf("%s: channels %d to %d of %d", o.layer, o.at, o.at+o.n, c)
		}
		c = o.n
	case opNorm:
		if o.scale.Shape().C != c || (o.groups > 0 && c%o.groups != 0) {
			return fmt.Errorf("%s: a norm of %d channels (%d groups) of a blob of %d", o.layer, o.scale.Shape().C, o.groups, c)
		}
		if o.groups > 0 {
			m.untile("%s normalises over the whole image", o.layer)
		}
	case opBinary, opEltwise:
		if len(o.in) == 2 && m.pooled[o.in[0]] != m.pooled[o.in[1]] {
			// A product with a pooled blob: a gate per channel.
			if o.binop != backend.OpMul {
				return fmt.Errorf("%s: only a product takes a pooled input beside a whole image", o.layer)
			}
			if m.pooled[o.in[0]] {
				o.in[0], o.in[1] = o.in[1], o.in[0]
			}
			if m.chans[o.in[1]] != m.chans[o.in[0]] {
				return fmt.Errorf("%s: %d factors for %d channels", o.layer, m.chans[o.in[1]], m.chans[o.in[0]])
			}
			o.kind = opScaleCh
			sh, sw, c = m.scaleH[o.in[0]], m.scaleW[o.in[0]], m.chans[o.in[0]]
			break
		}
		fallthrough
	case opConcat:
		total := 0
		for _, b := range o.in {
			if m.scaleH[b] != sh || m.scaleW[b] != sw {
				return fmt.Errorf("%s: its inputs have different sizes", o.layer)
			}
			if o.kind == opEltwise && m.chans[b] != c {
				return fmt.Errorf("%s: its inputs have %d and %d channels", o.layer, c, m.chans[b])
			}
			total += m.chans[b]
		}
		if o.kind == opConcat {
			c = total
		}
	case opConv:
		c = o.raw.out
		switch {
		case samePadded(o.conv):
		case blockwise(o.conv):
			sh, sw = sh.mul(rat{1, o.conv.StrideH}), sw.mul(rat{1, o.conv.StrideW})
		default:
			m.untile("%s changes the image size", o.layer)
		}
	}
	m.scaleH[o.out], m.scaleW[o.out], m.chans[o.out] = sh, sw, c
	if o.kind != opScaleCh && o.kind != opMean {
		m.pooled[o.out] = m.pooled[in]
	}
	m.align = lcm(m.align, lcm(sh.den, sw.den))
	return nil
}

func lcm(a, b int) int { return a / gcd(a, b) * b }

// needs refuses an op whose capability the backend lacks.
func (m *Graph) needs(o *op) error {
	var ok bool
	switch o.kind {
	case opPad, opMean, opScaleCh:
		_, ok = m.b.(backend.UNet)
	case opNorm:
		_, ok = m.b.(backend.Norm)
	default:
		return nil
	}
	if !ok {
		return fmt.Errorf("%s: device %s lacks the op (padding, pooling or normalisation)", o.layer, m.b.Name())
	}
	return nil
}

// untile records that tiles are not exact, and the first reason why.
func (m *Graph) untile(format string, args ...any) {
	if m.tileOK {
		m.tileOK, m.why = false, fmt.Sprintf(format, args...)
	}
}

// fuse folds a PReLU/ReLU that is the only reader of a convolution's output
// into the convolution, an Eltwise sum a*conv(x) + y into the
// convolution (its weights scaled by a, y added before the activation),
// and a sum GroupNorm(x) + y into the GroupNorm (RealPLKSR's blocks).
// It then prepares the weights, and, on backends that have the kernel,
// fuses a pixel shuffle plus nearest-upsampled skip connection into one
// op.
func (m *Graph) fuse() error {
	var out []*op
	producer := map[int]*op{}
	pos := map[int]int{m.input: -1} // where each blob is computed in out
	for _, o := range m.ops {
		if o.kind == opAct && len(out) > 0 {
			prev := out[len(out)-1]
			if prev.kind == opConv && prev.act.Kind == backend.ActNone && prev.out == o.in[0] && m.uses[prev.out] == 1 {
				prev.act = o.act
				prev.out = o.out
				producer[o.out], pos[o.out] = prev, len(out)-1
				continue
			}
		}
		c := m.foldSum(o, producer, pos)
		if c == nil {
			c = m.foldNormAdd(o, producer, pos)
		}
		if c != nil {
			producer[o.out], pos[o.out] = c, pos[c.out]
			c.out = o.out
			continue
		}
		out = append(out, o)
		producer[o.out], pos[o.out] = o, len(out)-1
	}
	for _, o := range out {
		if o.raw != nil {
			r := o.raw
			w, err := m.b.PrepareConv(r.out, r.in, r.kh, r.kw, r.w, r.bias)
			if err != nil {
				return fmt.Errorf("%s: %w", o.layer, err)
			}
			o.w, o.raw = w, nil
		}
	}
	if _, ok := m.b.(backend.ShuffleAdder); ok && !m.opt.SeparateTail {
		out = m.fuseShuffleAdd(out, producer)
	}
	m.ops = out
	if !m.opt.CopyConcat {
		m.patchConcats(producer)
		m.denseBuffers()
	}
	return nil
}

// patchConcats rewrites a Concat of a blob a and a channel crop t of a blob
// y that covers all of y but a's channels (RealPLKSR's partial large
// kernel: cat(conv(y[:16]), y[16:])) into an opPatch: a written over y's
// other channels, in y's own tensor. The crop's copy and the Concat's go
// away. It applies when the crop is t's only reader and y's other readers
// all come before the Concat (they see y unpatched); y is neither the
// graph's input nor its output.
func (m *Graph) patchConcats(producer map[int]*op) {
	at := map[*op]int{}
	for i, o := range m.ops {
		at[o] = i
	}
	drop := map[*op]bool{}
	for i, o := range m.ops {
		if o.kind != opConcat || len(o.in) != 2 {
			continue
		}
		for k := 0; k < 2; k++ {
			t, a := o.in[k], o.in[1-k]
			crop := producer[t]
			if crop == nil || crop.kind != opChannels || m.uses[t] != 1 || drop[crop] {
				continue
			}
			y := crop.in[0]
			c := m.chans[y]
			var into int // where a goes in y
			switch {
			case k == 1 && crop.at == m.chans[a] && crop.at+crop.n == c:
				into = 0
			case k == 0 && crop.at == 0 && crop.n+m.chans[a] == c:
				into = crop.n
			default:
				continue
			}
			if y == m.input || y == m.output || m.pooled[y] || !m.readBefore(y, i, crop) {
				continue
			}
			o.kind, o.in, o.at = opPatch, []int{y, a}, into
			drop[crop] = true
			break
		}
	}
	if len(drop) == 0 {
		return
	}
	var out []*op
	for _, o := range m.ops {
		if !drop[o] {
			out = append(out, o)
		}
	}
	m.ops = out
	m.countUses()
}

// readBefore reports whether every reader of blob y but skip comes before
// op index i.
func (m *Graph) readBefore(y, i int, skip *op) bool {
	for j, o := range m.ops {
		if o == skip {
			continue
		}
		if slices.Contains(o.reads(), y) && j >= i {
			return false
		}
	}
	return true
}

// foldSum returns the convolution an Eltwise sum o folds into, having
// rewritten it: a*conv(x) + 1*y becomes conv'(x) + y with conv' = a*conv,
// when conv has no activation, o is its only reader, and y is computed
// before it.
func (m *Graph) foldSum(o *op, producer map[int]*op, pos map[int]int) *op {
	if o.kind != opEltwise || o.binop != backend.OpAdd || len(o.in) != 2 {
		return nil
	}
	coef := func(k int) float32 {
		if o.coef == nil {
			return 1
		}
		return o.coef[k]
	}
	for k := 0; k < 2; k++ {
		c, res := producer[o.in[k]], o.in[1-k]
		if c == nil || c.kind != opConv || len(c.in) != 1 || c.act.Kind != backend.ActNone ||
			m.uses[c.out] != 1 || coef(1-k) != 1 || res == c.out {
			continue
		}
		if p, ok := pos[res]; !ok || p >= pos[c.out] {
			continue
		}
		if a := coef(k); a != 1 {
			c.raw.scale(a)
		}
		c.in = append(c.in, res)
		return c
	}
	return nil
}

// foldNormAdd returns the GroupNorm a sum o of two blobs folds into,
// having given it o's other input as its residual: the GroupNorm's output
// is read by o alone, and the residual is computed before it.
func (m *Graph) foldNormAdd(o *op, producer map[int]*op, pos map[int]int) *op {
	if (o.kind != opBinary || o.binop != backend.OpAdd) && (o.kind != opEltwise || o.binop != backend.OpAdd || o.coef != nil) || len(o.in) != 2 {
		return nil
	}
	for k := 0; k < 2; k++ {
		n, res := producer[o.in[k]], o.in[1-k]
		if n == nil || n.kind != opNorm || n.groups == 0 || len(n.in) != 1 || m.uses[n.out] != 1 || res == n.out {
			continue
		}
		if p, ok := pos[res]; !ok || p >= pos[n.out] {
			continue
		}
		n.in = append(n.in, res)
		return n
	}
	return nil
}

// fuseShuffleAdd rewrites add(shuffle(x, r), nearest(base, r)) into one
// opShuffleAdd when the two inner ops have no other readers.
func (m *Graph) fuseShuffleAdd(ops []*op, producer map[int]*op) []*op {
	drop := map[*op]bool{}
	for _, o := range ops {
		if o.kind != opBinary || o.binop != backend.OpAdd {
			continue
		}
		for k := 0; k < 2; k++ {
			sh, up := producer[o.in[k]], producer[o.in[1-k]]
			if sh == nil || up == nil || sh.kind != opShuffle || up.kind != opResize || up.mode != backend.Nearest ||
				up.hs != float32(sh.r) || up.ws != float32(sh.r) || m.uses[sh.out] != 1 || m.uses[up.out] != 1 ||
				m.chans[sh.out] != 3 || m.chans[up.in[0]] != 3 {
				continue
			}
			o.kind, o.r, o.order = opShuffleAdd, sh.r, sh.order
			o.in = []int{sh.in[0], up.in[0]}
			drop[sh], drop[up] = true, true
			break
		}
	}
	var out []*op
	for _, o := range ops {
		if !drop[o] {
			out = append(out, o)
		}
	}
	return out
}

// planTiles computes the context (halo) a tile needs: each layer that looks
// at neighbours widens it by its reach, measured in input pixels.
func (m *Graph) planTiles() {
	halo := 0
	for _, o := range m.ops {
		reach := 0
		switch o.kind {
		case opConv:
			// Tiled models have centred, size-keeping convolutions
			// (samePadded): each reads its padding's width of
			// neighbours on each side.
			reach = max(o.conv.PadT, o.conv.PadB, o.conv.PadL, o.conv.PadR)
		case opResize:
			reach = map[backend.ResizeMode]int{backend.Nearest: 1, backend.Bilinear: 2, backend.Bicubic: 3}[o.mode]
		}
		if reach == 0 {
			continue
		}
		s := m.scaleH[o.in[0]]
		if w := m.scaleW[o.in[0]]; w.num*s.den < s.num*w.den {
			s = w
		}
		halo += (reach*s.den + s.num - 1) / s.num
	}
	m.halo = (halo + m.align - 1) / m.align * m.align
}

// Scale returns the output size factor as a float (4 for an x4 model).
func (m *Graph) Scale() float64 {
	s := m.scaleW[m.output]
	return float64(s.num) / float64(s.den)
}

// OutputSize returns the output frame size for an input of w x h.
func (m *Graph) OutputSize(w, h int) (int, int) {
	fh, fw, err := m.fullSizes(h, w)
	if err != nil {
		return 0, 0
	}
	return fw[m.output], fh[m.output]
}

// CheckSize returns the error an input of w x h meets in the graph (too
// small or too large for it, or not a multiple of the blocks a Reorg
// reads), or nil.
func (m *Graph) CheckSize(w, h int) error {
	_, _, err := m.fullSizes(h, w)
	return err
}

// FLOPs returns the floating-point operations (2 per multiply-add) of the
// model's convolutions for one frame of w x h.
func (m *Graph) FLOPs(w, h int) float64 {
	fh, fw, err := m.fullSizes(h, w)
	if err != nil {
		return 0
	}
	var f float64
	for _, o := range m.ops {
		if o.kind == opConv {
			k := float64(o.conv.KH * o.conv.KW * o.w.In() * o.w.Out())
			f += 2 * k * float64(fh[o.out]*fw[o.out])
		}
	}
	return f
}

// fullSizes computes every blob's size for a whole input of h x w, with
// ncnn's own size rules.
func (m *Graph) fullSizes(h, w int) ([]int, []int, error) {
	fh, fw := make([]int, m.nblobs), make([]int, m.nblobs)
	fh[m.input], fw[m.input] = h, w
	for _, o := range m.ops {
		ih, iw := fh[o.in[0]], fw[o.in[0]]
		switch o.kind {
		case opConv:
			if blockwise(o.conv) && (ih%o.conv.StrideH != 0 || iw%o.conv.StrideW != 0) {
				return nil, nil, fmt.Errorf("%s: a %dx%d input: this model takes widths and heights that are multiples of %d (%s reads %dx%d blocks)", o.layer, w, h, m.align, o.layer, o.conv.StrideW, o.conv.StrideH)
			}
			ih, iw = o.conv.OutSize(ih, iw)
		case opShuffle, opShuffleAdd:
			ih, iw = ih*o.r, iw*o.r
		case opResize:
			ih, iw = int(float32(ih)*o.hs), int(float32(iw)*o.ws)
		case opPad:
			ph, pw := o.padded(ih, iw, m.scaleH[o.out], m.scaleW[o.out], h, w)
			if o.padMode == backend.PadReflect && (max(o.pad[0], ph-ih-o.pad[0]) >= ih || max(o.pad[2], pw-iw-o.pad[2]) >= iw) {
				return nil, nil, fmt.Errorf("%s: a %dx%d input is too small for this model: its reflection padding needs more than %dx%d pixels", o.layer, w, h, max(o.pad[2], pw-iw-o.pad[2]), max(o.pad[0], ph-ih-o.pad[0]))
			}
			ih, iw = ph, pw
		case opMean:
			ih, iw = 1, 1
		case opScaleCh, opChannels, opNorm:
		case opBinary, opConcat, opEltwise:
			for _, b := range o.in[1:] {
				if fh[b] != ih || fw[b] != iw {
					return nil, nil, fmt.Errorf("%s: inputs of %dx%d and %dx%d", o.layer, iw, ih, fw[b], fh[b])
				}
			}
		}
		if ih <= 0 || iw <= 0 {
			return nil, nil, fmt.Errorf("%s: a %dx%d input is too small for this model", o.layer, w, h)
		}
		if ih > 1<<16 || iw > 1<<16 {
			return nil, nil, fmt.Errorf("%s: a %dx%d input would grow to %dx%d, larger than vsr supports", o.layer, w, h, iw, ih)
		}
		fh[o.out], fw[o.out] = ih, iw
	}
	return fh, fw, nil
}

// Close frees the model's weights.
func (m *Graph) Close() {
	for _, o := range m.ops {
		if o.w != nil {
			o.w.Free()
		}
	}
	for _, t := range m.owned {
		t.Free()
	}
	m.ops, m.owned = nil, nil
}
