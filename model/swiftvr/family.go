package swiftvr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
)

func init() { model.Register(family{}) }

// family is SwiftVR: a checkpoint directory in the official layout.
type family struct{}

func (family) Name() string            { return "swiftvr" }
func (family) Detect(spec string) bool { return spec != "" && IsCheckpointDir(spec) }

// Explain says why a directory is not a checkpoint (nil for other specs).
func (family) Explain(spec string) error {
	if st, err := os.Stat(spec); err == nil && st.IsDir() {
		return CheckDir(spec)
	}
	return nil
}

// Grouped: a SwiftVR model runs one video on several devices at once
// (NewGroupSession).
func (family) Grouped() bool { return true }

// StorageType is bf16: the DiT overflows fp16.
func (family) StorageType() string { return "bf16" }

func (family) Params() []model.Param {
	return []model.Param{
		{Name: "sr-ratio", Kind: model.Float, Default: 2.0,
			Help: "SwiftVR: output size = input size (cropped to a multiple of 8) times this, rounded down to even"},
		{Name: "size", Kind: model.Shape,
			Help: "output size WxH: compact, the model's output resized (bicubic) to it, from the bundled graph of the smallest scale that reaches it; SwiftVR, any even size (wins over --sr-ratio)"},
		{Name: "clip-len", Kind: model.Int, Default: 24,
			Help: "SwiftVR: frames per streaming chunk (a multiple of 4)"},
		{Name: "reae-frame-batch", Kind: model.Int, Default: 1,
			Help: "SwiftVR: frames per pass through the autoencoder's per-frame layers (0 = whole chunk)"},
		{Name: "dit-overlap", Kind: model.Int, Default: 0,
			Help: "SwiftVR: previous latents prepended to each middle chunk for the DiT"},
		{Name: "temporal-grow", Kind: model.String, Default: "before",
			Help: "SwiftVR: run TemporalGrow before its upsample (before, LightX2V's reorder) or after (the official order)"},
		{Name: "dit", Kind: model.String, Default: "on",
			Help: "SwiftVR: on, or off to run the autoencoder only (encode -> decode); off at load leaves the DiT out"},
		{Name: "graphs", Kind: model.String, Default: "on",
			Help: "CUDA graphs: on, or off to queue every op each time (SwiftVR: the DiT, set when the model loads; CDA-VSR: its I and P steps)"},
	}
}

// Load opens the checkpoint and loads the ReAE and, unless "dit" is off,
// the DiT; the weights stay resident.
func (family) Load(dev backend.Backend, spec string, p model.Params) (model.Model, error) {
	if err := check(p); err != nil {
		return nil, err
	}
	ck, err := Open(spec)
	if err != nil {
		return nil, err
	}
	m := &resident{ck: ck, name: "swiftvr:" + filepath.Base(filepath.Clean(spec)), def: p}
	if m.reae, err = NewReAE(dev, FileSource{F: ck.ReAE}); err == nil && p.String("dit") != "off" {
		if g, ok := dev.(backend.GPU); ok && g.StorageType() != "bf16" {
			err = fmt.Errorf("the SwiftVR DiT needs --dtype bf16 (fp16 overflows), not %v", g.StorageType())
		} else {
			var prompt []float32
			if prompt, err = ck.PromptEmbedding(); err == nil {
				if m.dit, err = NewDiT(dev, FileSource{F: ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt); err == nil {
					m.dit.Graphs = p.String("graphs") != "off"
				}
			}
		}
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// check refuses values no SwiftVR model takes.
func check(p model.Params) error {
	switch t := p.String("temporal-grow"); t {
	case "before", "after":
	default:
		return fmt.Errorf("--temporal-grow (temporal_grow) %q: want before or after", t)
	}
	if d := p.String("dit"); d != "on" && d != "off" {
		return fmt.Errorf("--dit (dit) %q: want on or off", d)
	}
	if g := p.String("graphs"); g != "on" && g != "off" {
		return fmt.Errorf("--graphs (graphs) %q: want on or off", g)
	}
	if p.Int("reae-frame-batch") < 0 || p.Int("dit-overlap") < 0 {
		return fmt.Errorf("--reae-frame-batch and --dit-overlap must be >= 0")
	}
	return nil
}

// resident is a SwiftVR checkpoint on a device.
type resident struct {
	ck   *Checkpoint
	name string
	reae *ReAE
	dit  *DiT // nil when loaded with dit off
	def  model.Params
}

func (m *resident) Name() string { return m.name }

func (m *resident) Describe() map[string]any {
	return map[string]any{"name": m.name, "family": "swiftvr", "default_sr_ratio": m.get("sr-ratio", model.Params{})}
}

// get returns the request's value of name, else the loader's, else the
// request's default.
func (m *resident) get(name string, p model.Params) any {
	if v, ok := p.Set[name]; ok {
		return v
	}
	if v, ok := m.def.Get(name); ok {
		return v
	}
	v, _ := p.Get(name)
	return v
}

// params merges the loader's parameters under the request's.
func (m *resident) params(p model.Params) model.Params {
	out := model.Params{Set: model.Values{}}
	for _, name := range []string{"sr-ratio", "clip-len", "reae-frame-batch", "dit-overlap", "temporal-grow", "dit", "graphs"} {
		if v := m.get(name, p); v != nil {
			out.Set[name] = v
		}
	}
	// A size the request sets wins; the loader's size applies only to a
	// request that sets neither a size nor a ratio.
	if z, ok := p.Set["size"].(model.Size); ok {
		out.Set["size"] = z
	} else if _, ratio := p.Set["sr-ratio"]; !ratio {
		if z, ok := m.def.Size("size"); ok {
			out.Set["size"] = z
		}
	}
	return out
}

// Check refuses values no SwiftVR model takes, and a request's graphs
// setting other than the loaded DiT's (the DiT is shared).
func (m *resident) Check(p model.Params) error {
	if g, ok := p.Set["graphs"].(string); ok && m.dit != nil && (g != "off") != m.dit.Graphs {
		loaded := "off"
		if m.dit.Graphs {
			loaded = "on"
		}
		return fmt.Errorf("graphs %q: the DiT's graphs are set when the model loads (--graphs), and this one has them %s", g, loaded)
	}
	return check(m.params(p))
}

func (m *resident) NewSession(_ context.Context, v model.Video, req model.Params) (model.Session, error) {
	p := m.params(req)
	if err := check(p); err != nil {
		return nil, err
	}
	z, _ := p.Size("size")
	ow, oh, err := OutputSize(v.Width, v.Height, p.Float("sr-ratio"), z.W, z.H)
	if err != nil {
		return nil, err
	}
	var dit *DiT
	if p.String("dit") == "on" {
		if dit = m.dit; dit == nil {
			return nil, fmt.Errorf("the DiT was not loaded (the model was loaded with --dit off): ask for dit off, or load it with the DiT")
		}
	}
	return NewSession(m.reae, dit, v.Width, v.Height, v.Frames, m.options(p, ow, oh))
}

// NewGroupSession runs a video on this model's device and the others'
// at once, chunk i on device i mod P (see Parallel).
func (m *resident) NewGroupSession(_ context.Context, v model.Video, req model.Params, others []model.Model) (model.Session, error) {
	p := m.params(req)
	if err := check(p); err != nil {
		return nil, err
	}
	z, _ := p.Size("size")
	ow, oh, err := OutputSize(v.Width, v.Height, p.Float("sr-ratio"), z.W, z.H)
	if err != nil {
		return nil, err
	}
	var ranks []Rank
	for _, o := range append([]model.Model{m}, others...) {
		r, ok := o.(*resident)
		if !ok {
			return nil, fmt.Errorf("swiftvr: a group of %s and %s", m.Name(), o.Name())
		}
		rk := Rank{R: r.reae}
		if p.String("dit") == "on" {
			if rk.DiT = r.dit; rk.DiT == nil {
				return nil, fmt.Errorf("the DiT was not loaded (the model was loaded with --dit off): ask for dit off, or load it with the DiT")
			}
		}
		ranks = append(ranks, rk)
	}
	return NewParallel(ranks, v.Width, v.Height, v.Frames, m.options(p, ow, oh))
}

// options are a request's Options at output size w x h.
func (m *resident) options(p model.Params, w, h int) Options {
	before, fb := p.String("temporal-grow") == "before", p.Int("reae-frame-batch")
	return Options{Width: w, Height: h, ClipLen: p.Int("clip-len"), DiTOverlap: p.Int("dit-overlap"),
		TGrowBefore: &before, FrameBatch: &fb}
}

// Warmup runs a synthetic request at output size w x h (see Warmup).
func (m *resident) Warmup(ctx context.Context, w, h int, f backend.PixelFormat, req model.Params) error {
	p := m.params(req)
	var dit *DiT
	if p.String("dit") == "on" {
		dit = m.dit
	}
	return Warmup(ctx, m.reae, dit, w, h, m.options(p, w, h), f)
}

func (m *resident) Close() {
	if m.reae != nil {
		m.reae.Close()
	}
	if m.dit != nil {
		m.dit.Close()
	}
	m.ck.Close()
}
