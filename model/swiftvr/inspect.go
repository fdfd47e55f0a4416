package swiftvr

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model"
)

// Inspects takes directories (model.Inspector).
func (family) Inspects(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

func (family) InspectHelp() string {
	return "a SwiftVR directory (reae.safetensors, prompt_embedding.safetensors and transformer/: every expected tensor, its shape and dtype, config.json)"
}

func (family) InspectParams() []model.Param { return nil }

// Inspect reports on the checkpoint directory path (Inspect), once
// CheckDir finds it one (model.Inspector).
func (family) Inspect(path string, _ model.Params) (*model.Inspection, error) {
	if err := CheckDir(path); err != nil {
		return nil, err
	}
	r := Inspect(path)
	return &model.Inspection{Report: r, Text: r.String(), Problems: r.Problems}, nil
}

// PartCounts holds one number per checkpoint part.
type PartCounts struct {
	ReAE   int64 `json:"reae"`
	Prompt int64 `json:"prompt"`
	DiT    int64 `json:"dit"`
}

// Total is the sum over the parts.
func (p PartCounts) Total() int64 { return p.ReAE + p.Prompt + p.DiT }

// Report describes a checkpoint directory and everything wrong with it.
type Report struct {
	Family  string            `json:"family"`
	Dir     string            `json:"dir"`
	Files   []string          `json:"files"`            // files found, relative to Dir
	Tensors PartCounts        `json:"tensors"`          // tensors per part, as found
	Params  PartCounts        `json:"params"`           // parameters (elements) per part, as found
	DTypes  map[string]string `json:"dtypes,omitempty"` // dtypes per part, e.g. "BF16" or "BF16,I64"
	Dims    Dims              `json:"dims"`             // sizes read from the files (0 where unknown)
	// FP8 counts the DiT's weights in float8 e4m3 with a scale per output
	// channel (vsr checkpoint quantize, LightX2V's fp8 layout).
	FP8      int      `json:"fp8_weights"`
	Config   *Config  `json:"config,omitempty"` // config.json, when it could be read
	Problems []string `json:"problems"`         // empty when the checkpoint is usable
}

// OK reports whether the checkpoint has no problems.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Inspect examines the checkpoint in dir without stopping at the first
// problem. It never fails: what it cannot read becomes a Problem.
func Inspect(dir string) *Report {
	l := newCkLoader(dir)
	l.run()
	defer l.close()
	r := &Report{Family: Family, Dir: dir, Files: l.files, Dims: l.dims, DTypes: map[string]string{}, Problems: []string{}}
	if l.cfgOK {
		c := l.cfg
		r.Config = &c
	}
	for _, ps := range []struct {
		part Part
		set  *safetensors.Set
		t, p *int64
	}{{PartReAE, l.ck.ReAE, &r.Tensors.ReAE, &r.Params.ReAE}, {PartPrompt, l.ck.Prompt, &r.Tensors.Prompt, &r.Params.Prompt}, {PartDiT, l.ck.DiT, &r.Tensors.DiT, &r.Params.DiT}} {
		if ps.set == nil {
			continue
		}
		seen := map[string]bool{}
		var dts []string
		for _, n := range ps.set.Names() {
			info, ok := ps.set.Info(n)
			if !ok {
				continue
			}
			*ps.t++
			*ps.p += shapeElems(info.Shape)
			if ps.part == PartDiT && info.DType == safetensors.F8E4M3 {
				r.FP8++
			}
			if !seen[string(info.DType)] {
				seen[string(info.DType)] = true
				dts = append(dts, string(info.DType))
			}
		}
		sort.Strings(dts)
		r.DTypes[string(ps.part)] = strings.Join(dts, ",")
	}
	for _, p := range l.problems {
		r.Problems = append(r.Problems, p.Error())
	}
	return r
}

// String formats the report for a terminal.
func (r *Report) String() string {
	var b strings.Builder
	row := func(k, format string, a ...any) { fmt.Fprintf(&b, "%-10s %s\n", k, fmt.Sprintf(format, a...)) }
	row("family", "%s", r.Family)
	row("dir", "%s", r.Dir)
	if len(r.Files) == 0 {
		row("files", "none")
	}
	for i, f := range r.Files {
		k := ""
		if i == 0 {
			k = "files"
		}
		row(k, "%s", f)
	}
	part := func(name string, t, p int64, dt string) {
		if dt != "" {
			dt = " (" + dt + ")"
		}
		row(name, "%d tensors, %s params%s", t, humanCount(p), dt)
	}
	part("reae", r.Tensors.ReAE, r.Params.ReAE, r.DTypes[string(PartReAE)])
	part("prompt", r.Tensors.Prompt, r.Params.Prompt, r.DTypes[string(PartPrompt)])
	part("dit", r.Tensors.DiT, r.Params.DiT, r.DTypes[string(PartDiT)])
	if r.FP8 > 0 {
		row("fp8", "%d linear weights in float8 e4m3, a float32 scale per output channel (NAME.weight_scale); dequantized at load", r.FP8)
	}
	d := r.Dims
	row("reae dims", "in %d, encoder %d, decoder %d/%d/%d/%d, latent %d", d.ReAEChannels, d.EncoderWidth,
		d.DecoderWidths[0], d.DecoderWidths[1], d.DecoderWidths[2], d.DecoderWidths[3], d.LatentChannels)
	row("dit dims", "dim %d = %d heads x %d, ffn %d, %d layers, text %d, freq %d, patch %dx%dx%d, in %d, out %d, prompt %d tokens",
		d.Dim, d.Heads, d.HeadDim, d.FFNDim, d.Layers, d.TextDim, d.FreqDim, d.PatchSize[0], d.PatchSize[1], d.PatchSize[2],
		d.InChannels, d.OutChannels, d.PromptTokens)
	if len(r.Problems) == 0 {
		row("problems", "none")
	} else {
		row("problems", "%d", len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  - %s\n", p)
		}
	}
	return b.String()
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
