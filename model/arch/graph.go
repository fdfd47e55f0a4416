package arch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
	"github.com/vsr-dev/vsr/tensor/half"
)

// Graph is the ncnn graph of a state dict: the text of its .param and the
// bytes of its .bin (float32 weights), what compact.Load reads.
type Graph struct {
	Param []byte
	Bin   []byte
}

// Build makes the ncnn graph of d, whose architecture info Detect found,
// with the weights converted to float32. The graphs have the layers of
// the ncnn files of the same networks (realesrgan-x4plus for ESRGAN,
// realesr-animevideov3 for SRVGGNetCompact), so that compact's fast paths
// (its dense-block buffers, the fused shuffle and add) find them; SPAN's
// has its Conv3XCs folded into 3x3 convolutions and its attention as
// Swish, Sigmoid and BinaryOp layers (span.graph). An architecture vsr
// does not run is info.Check's error.
func Build(info *Info, d *statedict.Dict) (*Graph, error) {
	if err := info.Check(); err != nil {
		return nil, err
	}
	for _, k := range d.Keys {
		if t := d.Tensors[k]; t == nil || t.DType.Size() == 0 || len(t.Data) != t.Elems()*t.DType.Size() {
			return nil, fmt.Errorf("tensor %s has no values of its shape and type", k)
		}
	}
	w := &writer{d: d}
	switch info.Arch {
	case "ESRGAN":
		r, _, ok, err := parseRRDB(d)
		if err != nil || !ok {
			return nil, fmt.Errorf("not the ESRGAN state dict detected: %v", err)
		}
		r.graph(w)
	case "SRVGGNetCompact":
		var c srvgg
		if err := c.read(d, &Info{}); err != nil {
			return nil, err
		}
		c.graph(w)
	case "SPAN":
		var s span
		if err := s.read(d, &Info{}); err != nil {
			return nil, err
		}
		s.graph(w)
	case "RealPLKSR":
		var p plksr
		if err := p.read(d, info); err != nil {
			return nil, err
		}
		p.graph(w)
	case "RealCUGAN":
		cugan{scale: info.Scale, pro: strings.Contains(info.Variant, "pro")}.graph(w)
	default:
		return nil, fmt.Errorf("no graph builder for %s", info.Arch)
	}
	if w.err != nil {
		return nil, fmt.Errorf("build the %s graph: %w", info.Arch, w.err)
	}
	return w.finish(), nil
}

// writer writes an ncnn graph, one layer at a time, with the first error
// sticky. Each layer has one output blob named as the layer.
type writer struct {
	d      *statedict.Dict
	layers []string
	bin    bytes.Buffer
	err    error
}

func (w *writer) layer(typ, name string, in []string, params string) string {
	line := fmt.Sprintf("%-16s %-24s %d 1 %s %s", typ, name, len(in), strings.Join(in, " "), name)
	if len(in) == 0 {
		line = fmt.Sprintf("%-16s %-24s 0 1 %s", typ, name, name)
	}
	if params != "" {
		line += " " + params
	}
	w.layers = append(w.layers, line)
	return name
}

// input is the graph's Input layer.
func (w *writer) input() string { return w.layer("Input", "data", nil, "") }

// Activations a convolution fuses (ncnn's activation_type).
const (
	actNone  = 0
	actReLU  = 1
	actLeaky = 2
)

// conv writes a 3x3 (or kxk), stride 1, same-padded Convolution of the
// weights KEY.weight and KEY.bias (none when the state dict has none),
// with the activation act (leaky's slope alpha).
func (w *writer) conv(key, in string, act int, alpha float32) string {
	_, _, k, _ := conv(w.d, key+".weight")
	return w.convAt(key, in, 1, k/2, act, alpha)
}

// convAt writes the Convolution KEY of stride stride and padding pad on
// every side, with the activation act.
func (w *writer) convAt(key, in string, stride, pad, act int, alpha float32) string {
	o, i, k, ok := conv(w.d, key+".weight")
	if !ok {
		w.fail(fmt.Errorf("%s.weight is %v, want a convolution", key, w.d.Shape(key+".weight")))
		return key
	}
	return w.convLayer("Convolution", key, in, o, i, k, stride, pad, w.floats(key+".weight"), w.bias(key), act, alpha)
}

// deconv writes the ConvTranspose2d KEY (weights in x out x k x k, as
// PyTorch stores them, written out x in x k x k as ncnn's Deconvolution
// reads them) of stride stride and padding pad, with the activation act.
func (w *writer) deconv(key, in string, stride, pad, act int, alpha float32) string {
	s := shape(w.d, key+".weight", 4)
	if s == nil || s[2] != s[3] {
		w.fail(fmt.Errorf("%s.weight is %v, want a transposed convolution", key, w.d.Shape(key+".weight")))
		return key
	}
	i, o, k := s[0], s[1], s[2]
	v := w.floats(key + ".weight")
	t := make([]float32, len(v))
	for a := 0; a < i; a++ {
		for b := 0; b < o; b++ {
			copy(t[(b*i+a)*k*k:][:k*k], v[(a*o+b)*k*k:][:k*k])
		}
	}
	return w.convLayer("Deconvolution", key, in, o, i, k, stride, pad, t, w.bias(key), act, alpha)
}

// bias is KEY.bias, or nil when the state dict has none.
func (w *writer) bias(key string) []float32 {
	if w.d.Get(key+".bias") == nil {
		return nil
	}
	return w.floats(key + ".bias")
}

// convValues writes a kxk, stride 1, same-padded Convolution named name
// of o outputs and i inputs with the weights wt (o*i*k*k, PyTorch's
// order) and bias (none when nil), with the activation act.
func (w *writer) convValues(name, in string, o, i, k int, wt, bias []float32, act int, alpha float32) string {
	return w.convLayer("Convolution", name, in, o, i, k, 1, k/2, wt, bias, act, alpha)
}

// convLayer writes a Convolution or Deconvolution layer typ named name of
// o outputs and i inputs, a kxk kernel, stride and padding on every side,
// with the weights wt (o*i*k*k) and bias (none when nil) and the
// activation act (leaky's slope alpha).
func (w *writer) convLayer(typ, name, in string, o, i, k, stride, pad int, wt, bias []float32, act int, alpha float32) string {
	p := fmt.Sprintf("0=%d 1=%d 4=%d 5=%d 6=%d", o, k, pad, b2i(bias != nil), o*i*k*k)
	if stride != 1 { // written only where it is not ncnn's default, as ncnn's own files
		p = fmt.Sprintf("0=%d 1=%d 3=%d 4=%d 5=%d 6=%d", o, k, stride, pad, b2i(bias != nil), o*i*k*k)
	}
	switch act {
	case actReLU:
		p += " 9=1"
	case actLeaky:
		p += fmt.Sprintf(" 9=2 -23310=1,%e", alpha)
	}
	w.tagged(wt)
	if bias != nil {
		w.raw(bias)
	}
	return w.layer(typ, name, []string{in}, p)
}

// unshuffle writes PyTorch's pixel_unshuffle by r as an ncnn Reorg
// layer in its mode 0 (output channel c*r*r + i*r + j is channel c at
// offset (i, j) of each r x r block).
func (w *writer) unshuffle(in string, r int) string {
	return w.layer("Reorg", "pixel_unshuffle", []string{in}, fmt.Sprintf("0=%d 1=0", r))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// floats returns the tensor key as float32 values.
func (w *writer) floats(key string) []float32 {
	v, err := Floats(w.d.Get(key))
	if err != nil {
		w.fail(fmt.Errorf("%s: %w", key, err))
	}
	return v
}

// tagged appends weights with ncnn's float32 tag (0) in front.
func (w *writer) tagged(v []float32) {
	w.bin.Write(make([]byte, 4))
	w.raw(v)
}

// raw appends float32 values.
func (w *writer) raw(v []float32) {
	var b [4]byte
	for _, x := range v {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
		w.bin.Write(b[:])
	}
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) finish() *Graph {
	var p bytes.Buffer
	fmt.Fprintf(&p, "7767517\n%d %d\n", len(w.layers), len(w.layers))
	for _, l := range w.layers {
		p.WriteString(l)
		p.WriteByte('\n')
	}
	return &Graph{Param: p.Bytes(), Bin: w.bin.Bytes()}
}

// Floats converts a tensor's values to float32 (exactly, from F32, F16
// and BF16).
func Floats(t *statedict.Tensor) ([]float32, error) {
	if t == nil {
		return nil, fmt.Errorf("missing")
	}
	n := t.Elems()
	if sz := t.DType.Size(); sz == 0 || len(t.Data) != n*sz {
		return nil, fmt.Errorf("%d bytes of %s for shape %v", len(t.Data), t.DType, t.Shape)
	}
	out := make([]float32, n)
	switch t.DType {
	case statedict.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case statedict.F16:
		for i := range out {
			out[i] = half.FromF16(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case statedict.BF16:
		for i := range out {
			out[i] = half.FromBF16(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return out, nil
}

// graph writes an RRDBNet as realesrgan-x4plus's ncnn file has it: each
// dense block's convolutions reading Concats of growing prefixes of the
// same blobs (compact's dense-block buffers find them), the residuals as
// Eltwise sums with coefficients 0.2 and 1, the trunk's as a BinaryOp
// add, nearest x2 Interps before the upsampling convolutions, leaky ReLU
// 0.2 fused into the convolutions.
func (r *rrdb) graph(w *writer) {
	x := w.input()
	if r.unshuffle > 1 {
		x = w.unshuffle(x, r.unshuffle)
	}
	first := w.conv(r.first, x, actNone, 0)
	x = first
	for b := 0; b < r.blocks; b++ {
		in := x
		for k := 1; k <= 3; k++ {
			parts := []string{x}
			for c := 1; c <= 5; c++ {
				src := parts[0]
				if len(parts) > 1 {
					src = w.layer("Concat", fmt.Sprintf("%s.cat", r.conv(b, k, c)), parts, "")
				}
				act := actLeaky
				if c == 5 {
					act = actNone
				}
				parts = append(parts, w.conv(r.conv(b, k, c), src, act, 0.2))
			}
			x = w.layer("Eltwise", fmt.Sprintf("rrdb%d.rdb%d.add", b, k), []string{parts[5], x}, "0=1 -23301=2,2.000000e-01,1.000000e+00")
		}
		x = w.layer("Eltwise", fmt.Sprintf("rrdb%d.add", b), []string{x, in}, "0=1 -23301=2,2.000000e-01,1.000000e+00")
	}
	body := w.conv(r.body, x, actNone, 0)
	x = w.layer("BinaryOp", "trunk.add", []string{first, body}, "0=0")
	for i, u := range r.ups {
		x = w.layer("Interp", fmt.Sprintf("up%d", i+1), []string{x}, "0=1 1=2.000000e+00 2=2.000000e+00")
		x = w.conv(u, x, actLeaky, 0.2)
	}
	x = w.conv(r.hr, x, actLeaky, 0.2)
	w.conv(r.last, x, actNone, 0)
}

// graph writes an SRVGGNetCompact as realesr-animevideov3's ncnn file has
// it: convolutions each followed by a PReLU layer (ReLU and LeakyReLU
// fused instead), the last convolution's pixel shuffle plus the
// nearest-upsampled input (compact fuses the two on GPUs).
func (c *srvgg) graph(w *writer) {
	in := w.input()
	x := in
	for i, key := range c.convs {
		act := actNone
		if i < len(c.convs)-1 {
			switch c.act {
			case "relu":
				act = actReLU
			case "leakyrelu":
				act = actLeaky
			}
		}
		x = w.conv(key, x, act, c.leakyAlpha)
		if i < len(c.preluWeights) {
			w.raw(w.floats(c.preluWeights[i]))
			x = w.layer("PReLU", strings.TrimSuffix(c.preluWeights[i], ".weight"), []string{x}, fmt.Sprintf("0=%d", c.nf))
		}
	}
	sh := w.layer("PixelShuffle", "shuffle", []string{x}, fmt.Sprintf("0=%d", c.scale))
	up := w.layer("Interp", "upsample", []string{in}, fmt.Sprintf("0=1 1=%e 2=%e", float32(c.scale), float32(c.scale)))
	w.layer("BinaryOp", "add", []string{sh, up}, "0=0")
}
