package arch

import (
	"fmt"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// SPAN's constants, as the published module has them (hongyuanyu/SPAN,
// basicsr/archs/span_arch.py): the RGB mean subtracted from the input and
// the range it is then multiplied by, unless the state dict has the
// no_norm buffer (spandrel's and neosr's variant without normalisation).
var spanMean = [3]float64{0.4488, 0.4371, 0.4040}

const (
	spanRange  = 255.0
	spanBlocks = 6 // the published SPAN has six SPABs, block_1 to block_6
)

// span is a SPAN's layout: conv_1 and conv_2 Conv3XCs (KEY.sk, a 1x1
// convolution, plus KEY.conv.0-2, 1x1 then 3x3 unpadded then 1x1, on the
// zero-padded input), six SPABs of three Conv3XCs each, conv_cat (1x1) on
// the concatenation of conv_1's output, conv_2's, block_1's and block_6's
// first activation, then upsampler.0 (3x3) and a pixel shuffle.
type span struct {
	nf, in, out, scale int
	norm               bool
}

// detectSPAN recognises SPAN by spandrel's keys.
func detectSPAN(d *statedict.Dict) (*Info, bool, error) {
	if !has(d, "conv_1.sk.weight", "block_1.c1_r.sk.weight", "block_1.c1_r.eval_conv.weight",
		"conv_cat.weight", "conv_2.eval_conv.weight", "upsampler.0.weight") {
		return nil, false, nil
	}
	info := &Info{Arch: "SPAN", Kind: "convolutional"}
	info.why("conv_1.sk.weight, block_1.c1_r.eval_conv.weight, conv_cat.weight and upsampler.0.weight: SPAN's parameter-free attention blocks")
	var s span
	if err := s.read(d, info); err != nil {
		return nil, false, fmt.Errorf("a SPAN state dict: %w", err)
	}
	info.MACs = lowResMACs(d, func(k string) bool {
		return strings.HasSuffix(k, "eval_conv.weight") || k == "conv_cat.weight" || k == "upsampler.0.weight"
	}, s.scale)
	return info, true, nil
}

func (s *span) read(d *statedict.Dict, info *Info) error {
	f, in, _, ok := conv(d, "conv_1.sk.weight")
	up, _, _, ok2 := conv(d, "upsampler.0.weight")
	if !ok || !ok2 {
		return fmt.Errorf("conv_1.sk.weight is %v and upsampler.0.weight %v, want convolutions", d.Shape("conv_1.sk.weight"), d.Shape("upsampler.0.weight"))
	}
	sc, out, ok := scaleAndOut(up, in)
	if !ok {
		return fmt.Errorf("upsampler.0.weight has %d outputs: no scale and channel count make it", up)
	}
	s.nf, s.in, s.out, s.scale = f, in, out, sc
	s.norm = !marked(d, "no_norm")
	info.Scale, info.In, info.Out, info.Features = sc, in, out, f
	info.Blocks = seqLenNamed(d, "block_")
	info.why("%d features from conv_1.sk.weight %v; x%d from upsampler.0.weight's %d outputs", f, d.Shape("conv_1.sk.weight"), sc, up)
	if s.norm {
		info.why("no no_norm key: the input is normalised, (x - RGB mean) * 255, as the published SPAN does")
	} else {
		info.why("the no_norm key: no input normalisation")
	}
	if info.Blocks != spanBlocks {
		return fmt.Errorf("%d blocks (block_1 to block_%d), want the published SPAN's %d", info.Blocks, info.Blocks, spanBlocks)
	}
	if s.norm && in != 3 {
		return fmt.Errorf("%d input channels with the RGB mean normalisation: want 3, or the no_norm key", in)
	}
	if err := s.conv3xc(d, "conv_1", in, f); err != nil {
		return err
	}
	for b := 1; b <= spanBlocks; b++ {
		for _, c := range []string{"c1_r", "c2_r", "c3_r"} {
			if err := s.conv3xc(d, fmt.Sprintf("block_%d.%s", b, c), f, f); err != nil {
				return err
			}
		}
	}
	if err := s.conv3xc(d, "conv_2", f, f); err != nil {
		return err
	}
	if err := want(d, "conv_cat", f, 4*f, 1); err != nil {
		return err
	}
	return want(d, "upsampler.0", up, f, 3)
}

// conv3xc checks a Conv3XC's shapes: sk [o i 1 1], conv.0 [2i i 1 1],
// conv.1 [2o 2i 3 3], conv.2 [o 2o 1 1] (the published gain of 2).
func (s *span) conv3xc(d *statedict.Dict, key string, i, o int) error {
	if err := want(d, key+".sk", o, i, 1); err != nil {
		return err
	}
	_, mid, _, _ := conv(d, key+".conv.1.weight")
	if err := want(d, key+".conv.0", mid, i, 1); err != nil {
		return err
	}
	o2, _, _, _ := conv(d, key+".conv.1.weight")
	if err := want(d, key+".conv.1", o2, mid, 3); err != nil {
		return err
	}
	return want(d, key+".conv.2", o, o2, 1)
}

// fold returns the 3x3 convolution a Conv3XC is in eval mode, as the
// published update_params computes it (the eval_conv tensors stored in
// a file are never used: the published forward recomputes them), in
// float64: w[o,i] = sum over n, m of w3[o,n] w2[n,m] w1[m,i], plus sk's
// weight at the centre tap; b = w3 (sum over m and taps of w2 times b1,
// plus b2) + b3 + sk's bias.
func (w *writer) fold(key string) (o, i int, wt, bias []float32) {
	o2, mid, _, _ := conv(w.d, key+".conv.1.weight")
	o, i, _, _ = conv(w.d, key+".sk.weight")
	w1, b1 := w.f64(key+".conv.0.weight"), w.bias64(key+".conv.0", mid)
	w2, b2 := w.f64(key+".conv.1.weight"), w.bias64(key+".conv.1", o2)
	w3, b3 := w.f64(key+".conv.2.weight"), w.bias64(key+".conv.2", o)
	sk, bsk := w.f64(key+".sk.weight"), w.bias64(key+".sk", o)
	if w.err != nil {
		return o, i, nil, nil
	}
	// t[n,i,tap] = sum over m of w2[n,m,tap] w1[m,i]
	t := make([]float64, o2*i*9)
	for n := 0; n < o2; n++ {
		for m := 0; m < mid; m++ {
			for c := 0; c < i; c++ {
				a := w1[m*i+c]
				for tap := 0; tap < 9; tap++ {
					t[(n*i+c)*9+tap] += w2[(n*mid+m)*9+tap] * a
				}
			}
		}
	}
	wt, bias = make([]float32, o*i*9), make([]float32, o)
	for oc := 0; oc < o; oc++ {
		for c := 0; c < i; c++ {
			for tap := 0; tap < 9; tap++ {
				var v float64
				for n := 0; n < o2; n++ {
					v += w3[oc*o2+n] * t[(n*i+c)*9+tap]
				}
				if tap == 4 {
					v += sk[oc*i+c]
				}
				wt[(oc*i+c)*9+tap] = float32(v)
			}
		}
		v := b3[oc] + bsk[oc]
		for n := 0; n < o2; n++ {
			inner := b2[n]
			for m := 0; m < mid; m++ {
				for tap := 0; tap < 9; tap++ {
					inner += w2[(n*mid+m)*9+tap] * b1[m]
				}
			}
			v += w3[oc*o2+n] * inner
		}
		bias[oc] = float32(v)
	}
	return o, i, wt, bias
}

// f64 returns the tensor key as float64 values.
func (w *writer) f64(key string) []float64 {
	v := w.floats(key)
	out := make([]float64, len(v))
	for j, x := range v {
		out[j] = float64(x)
	}
	return out
}

// bias64 returns KEY.bias as float64 values, zeros when the state dict
// has none.
func (w *writer) bias64(key string, n int) []float64 {
	if w.d.Get(key+".bias") == nil {
		return make([]float64, n)
	}
	return w.f64(key + ".bias")
}

// conv3xc writes a Conv3XC as its folded 3x3 convolution.
func (w *writer) conv3xc(key, in string) string {
	o, i, wt, bias := w.fold(key)
	return w.convValues(key, in, o, i, 3, wt, bias, actNone, 0)
}

// graph writes a SPAN: the normalisation (x - mean) * 255 as a 1x1
// convolution, the Conv3XCs folded, each SPAB as
//
//	out1 = SiLU(c1(x)); out3 = c3(SiLU(c2(out1)))
//	out = (out3 + x) * (sigmoid(out3) - 0.5)
//
// (the published SiLU runs in place, so the out1 block_6 returns to the
// concatenation is the activated one), conv_cat on the concatenation of
// conv_1's output, conv_2(block_6), block_1's output and block_6's out1,
// then upsampler.0 and a pixel shuffle.
func (s *span) graph(w *writer) {
	x := w.input()
	if s.norm {
		wt, bias := make([]float32, 9), make([]float32, 3)
		for c := 0; c < 3; c++ {
			wt[c*3+c] = spanRange
			bias[c] = float32(-float64(float32(spanMean[c])) * spanRange) // the published mean is a float32 tensor
		}
		x = w.convValues("normalise", x, 3, 3, 1, wt, bias, actNone, 0)
	}
	feat := w.conv3xc("conv_1", x)
	x = feat
	var b1, out1 string
	for b := 1; b <= spanBlocks; b++ {
		key := fmt.Sprintf("block_%d", b)
		in := x
		out1 = w.layer("Swish", key+".act1", []string{w.conv3xc(key+".c1_r", in)}, "")
		out2 := w.layer("Swish", key+".act2", []string{w.conv3xc(key+".c2_r", out1)}, "")
		out3 := w.conv3xc(key+".c3_r", out2)
		sig := w.layer("Sigmoid", key+".sigmoid", []string{out3}, "")
		att := w.layer("BinaryOp", key+".sim_att", []string{sig}, "0=1 1=1 2=5.000000e-01")
		sum := w.layer("BinaryOp", key+".add", []string{out3, in}, "0=0")
		x = w.layer("BinaryOp", key+".mul", []string{sum, att}, "0=2")
		if b == 1 {
			b1 = x
		}
	}
	b6 := w.conv3xc("conv_2", x)
	cat := w.layer("Concat", "cat", []string{feat, b6, b1, out1}, "")
	x = w.conv("conv_cat", cat, actNone, 0)
	x = w.conv("upsampler.0", x, actNone, 0)
	w.layer("PixelShuffle", "shuffle", []string{x}, fmt.Sprintf("0=%d", s.scale))
}
