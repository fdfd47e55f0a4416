package cdavsr

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model"
)

// Inspects takes regular files (model.Inspector).
func (family) Inspects(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func (family) InspectHelp() string {
	return "a CDA-VSR .safetensors file (its contract: metadata, one weight set, the 179 names, shapes and dtypes, the scale, the gate; --size WxH gives the state's memory)"
}

func (family) InspectParams() []model.Param {
	return []model.Param{{Name: "size", Kind: model.String,
		Help: "CDA-VSR: input size WxH at which to report the state's memory"}}
}

// Inspect checks the file at path against the contract (Inspect), with
// the state sized for p's "size" (model.Inspector).
func (family) Inspect(path string, p model.Params) (*model.Inspection, error) {
	var w, h int
	if size := p.String("size"); size != "" {
		if _, err := fmt.Sscanf(size, "%dx%d", &w, &h); err != nil || w <= 0 || h <= 0 {
			return nil, fmt.Errorf("--size %q: want WxH, e.g. 640x360", size)
		}
	}
	c, err := Inspect(path, w, h)
	if err != nil {
		return nil, err
	}
	return &model.Inspection{Report: c, Text: c.String(), Problems: c.Problems}, nil
}

// String is the report as text: a line per field, one per problem.
func (c *Contract) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "family      cdavsr\nprefix      %q\ntensors     %d of 179\nscale       %d\ngate        %s\nparameters  %d\n", c.Prefix, c.Tensors, c.Scale, c.Gate, c.Parameters)
	if c.StateBytes > 0 {
		fmt.Fprintf(&b, "state       %d bytes at %dx%d (two float32 buffers of 128 channels)\n", c.StateBytes, c.Width, c.Height)
	}
	for _, p := range c.Problems {
		fmt.Fprintf(&b, "problem     %s\n", p)
	}
	return b.String()
}

func (family) SynthHelp() string {
	return "one .safetensors file with the 179 tensors of the contract at --scale 2, 3 or 4, the metadata " +
		MetaResidualUnit + "=" + ResidualUnit + ", the gate (--gate " + GateSigmoid + " sets " + MetaGate +
		") and every name under --prefix (e.g. params_ema.)."
}

func (family) SynthParams() []model.Param {
	return []model.Param{
		{Name: "scale", Kind: model.Int, Default: 4, Help: "CDA-VSR: upscaling factor, 2, 3 or 4"},
		{Name: "gate", Kind: model.String, Help: "CDA-VSR: sigmoid for aligned*sigmoid(w); empty for aligned*(1+w)"},
		{Name: "prefix", Kind: model.String, Help: "CDA-VSR: prefix of every tensor name (e.g. params_ema.)"},
	}
}

// Synth writes a synthetic checkpoint (Synthesize) at p's scale, with its
// gate and prefix, to the file out, and says so on w (model.Synther).
func (family) Synth(w io.Writer, out string, seed uint64, p model.Params) error {
	scale, gate, prefix := p.Int("scale"), p.String("gate"), p.String("prefix")
	if scale < 2 || scale > 4 {
		return fmt.Errorf("--scale %d: want 2, 3 or 4", scale)
	}
	if gate != "" && gate != GateSigmoid {
		return fmt.Errorf("--gate %q: want sigmoid, or nothing for aligned*(1+w)", gate)
	}
	ts := Synthesize(scale, seed)
	params := 0
	for i := range ts {
		ts[i].Name = prefix + ts[i].Name
		params += len(ts[i].Data) / 4
	}
	meta := map[string]string{MetaResidualUnit: ResidualUnit}
	if gate != "" {
		meta[MetaGate] = gate
	}
	if err := safetensors.Write(out, ts, meta); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "wrote cdavsr x%d checkpoint to %s: %d tensors, %d parameters, seed %d\n", scale, out, len(ts), params, seed)
	return err
}
