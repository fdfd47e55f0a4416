package arch

import (
	"fmt"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// srvgg is an SRVGGNetCompact's layout: body.0 the first convolution,
// then per block an activation (body.1, with weights only for PReLU) and
// a convolution, the last convolution body.L feeding a pixel shuffle, and
// the input, nearest-upsampled, added on top.
type srvgg struct {
	convs        []string // body.0, body.2, ..., body.L
	nf, in, out  int
	scale        int
	act          string
	leakyAlpha   float32
	preluWeights []string // body.1, body.3, ... for PReLU
}

// actMeta is the safetensors metadata key vsr reads (and writes) for an
// SRVGGNetCompact's activation when its weights cannot tell: Real-ESRGAN's
// option name.
const actMeta = "act_type"

// detectCompact recognises SRVGGNetCompact as spandrel does (body.0.weight
// and body.1.weight, the first convolution and its PReLU), and also with
// ReLU or LeakyReLU, which have no weights: then body.0.weight and
// body.2.weight are convolutions and every key is body.N.weight or
// body.N.bias.
func detectCompact(d *statedict.Dict) (*Info, bool, error) {
	if !has(d, "body.0.weight") || !has(d, "body.1.weight") && !has(d, "body.2.weight") {
		return nil, false, nil
	}
	for _, k := range d.Keys {
		if !strings.HasPrefix(k, "body.") || strings.Count(k, ".") != 2 {
			return nil, false, nil
		}
	}
	info := &Info{Arch: "SRVGGNetCompact", Kind: "convolutional"}
	var c srvgg
	if err := c.read(d, info); err != nil {
		return nil, false, fmt.Errorf("an SRVGGNetCompact state dict: %w", err)
	}
	return info, true, nil
}

func (c *srvgg) read(d *statedict.Dict, info *Info) error {
	last := seqLen(d, "body") - 1
	nf, in, k, ok := conv(d, "body.0.weight")
	if !ok || k != 3 {
		return fmt.Errorf("body.0.weight is %v, want a 3x3 convolution", d.Shape("body.0.weight"))
	}
	c.nf, c.in = nf, in
	if last < 2 || last%2 != 0 {
		return fmt.Errorf("the last layer is body.%d: want an even index of at least 2", last)
	}
	switch s := shape(d, "body.1.weight", 1); {
	case s != nil && s[0] == nf:
		c.act = "prelu"
		info.why("body.0.weight and body.1.weight %v: a convolution then a PReLU, SRVGGNetCompact (spandrel's Compact)", s)
	case has(d, "body.1.weight"):
		return fmt.Errorf("body.1.weight is %v, want [%d] (a PReLU's slopes)", d.Shape("body.1.weight"), nf)
	default:
		c.act, c.leakyAlpha = "relu", 0
		if d.Metadata[actMeta] == "leakyrelu" {
			c.act, c.leakyAlpha = "leakyrelu", 0.1
		}
		info.why("body.0.weight and body.2.weight with no body.1 weights: SRVGGNetCompact with a weightless activation, %s (the weights cannot tell ReLU from LeakyReLU; metadata %s=leakyrelu says LeakyReLU, anything else ReLU)", c.act, actMeta)
	}
	for i := 0; i <= last; i += 2 {
		key := fmt.Sprintf("body.%d", i)
		o, ci, kk, ok := conv(d, key+".weight")
		wantIn := nf
		if i == 0 {
			wantIn = in
		}
		if !ok || kk != 3 || ci != wantIn || (i < last && o != nf) {
			return fmt.Errorf("%s.weight is %v, want [%d %d 3 3]", key, d.Shape(key+".weight"), nf, wantIn)
		}
		if err := want(d, key, o, ci, 3); err != nil {
			return err
		}
		c.convs = append(c.convs, key)
		if i < last {
			a := fmt.Sprintf("body.%d.weight", i+1)
			if c.act == "prelu" {
				if s := shape(d, a, 1); s == nil || s[0] != nf {
					return fmt.Errorf("%s is %v, want [%d] (a PReLU's slopes)", a, d.Shape(a), nf)
				}
				c.preluWeights = append(c.preluWeights, a)
			} else if has(d, a) {
				return fmt.Errorf("%s is present but the activations have no weights", a)
			}
		}
	}
	lo, _, _, _ := conv(d, fmt.Sprintf("body.%d.weight", last))
	s, out, ok := scaleAndOut(lo, in)
	if !ok || out != in {
		return fmt.Errorf("body.%d.weight has %d outputs: want the input's %d channels times the scale squared", last, lo, in)
	}
	c.scale, c.out = s, out
	info.Scale, info.In, info.Out, info.Features = s, in, out, nf
	info.Blocks, info.Activation = len(c.convs)-2, c.act
	info.why("%d features: body.0.weight is %v; %d body convolutions (body.2 to body.%d)", nf, d.Shape("body.0.weight"), info.Blocks, last-2)
	info.why("x%d: body.%d.weight has %d outputs, %d channels times %d² for the pixel shuffle", s, last, lo, out, s)
	macs := 9 * (nf*in + info.Blocks*nf*nf + lo*nf)
	info.MACs = float64(macs) / float64(s*s)
	return nil
}
