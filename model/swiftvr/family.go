package swiftvr

import (
	"context"
	"errors"
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

func (family) About() model.About {
	return model.About{Title: "SwiftVR", Spec: "a SwiftVR checkpoint directory",
		Latency: "one chunk (28 frames, then 24) and 3 frames of lag"}
}

func (family) Params() []model.Param {
	return []model.Param{
		{Name: "sr-ratio", Kind: model.Float, Default: 2.0,
			Help: "SwiftVR: output size = input size (cropped to a multiple of 8) times this, rounded down to even"},
		{Name: "size", Kind: model.Shape,
			Help: "output size WxH: SwiftVR, any even size (wins over --sr-ratio)"},
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
		{Name: "parallel", Kind: model.String, Default: "chunks",
			Help: "SwiftVR on a device list: chunks (each device restores its own chunks), sequence (every device on each chunk: the DiT split by tokens and heads, the autoencoder by height bands), or chunks=A,sequence=B (A groups of B devices)"},
		{Name: "reae-bands", Kind: model.Int, Default: 0,
			Help: "SwiftVR on one device: run the autoencoder in N height bands one after another, for frames whose autoencoder does not fit (0 = automatic, bands only when it would not fit; 1 = whole frames)"},
		{Name: "dit-dtype", Kind: model.String, Default: "bf16",
			Help: "SwiftVR: number format of the DiT's linear layers, set when the model loads: bf16, or fp8 (e4m3 weights with a scale per output channel and activations with one per token; GPUs of compute capability 8.9 and newer; --dtype fp8 says the same)"},
		{Name: "graphs", Kind: model.String, Default: "on",
			Help: "CUDA graphs, on or off to queue every op each time: SwiftVR, the DiT's, set when the model loads"},
		{Name: "encode-proxy", Kind: model.String, Default: "off", Local: true,
			Help: "SwiftVR benchmarks: bicubic hands the encoders the input resized (bicubic, on the device) to the output size instead of the model's output, after all of the model's work, so that encoder time is measured on natural content rather than the noise of synthetic weights; off"},
	}
}

// Load opens the checkpoint and loads the ReAE and, unless "dit" is off,
// the DiT; the weights stay resident.
func (family) Load(dev backend.Backend, spec string, p model.Params) (model.Model, error) {
	m, err := openResident(spec, p)
	if err != nil {
		return nil, err
	}
	ck := m.ck
	if m.reae, err = NewReAE(dev, FileSource{F: ck.ReAE}); err == nil && p.String("dit") != "off" {
		if g, ok := dev.(backend.GPU); ok && g.StorageType() != "bf16" {
			err = fmt.Errorf("the SwiftVR DiT needs --dtype bf16 (fp16 overflows), not %v", g.StorageType())
		} else {
			var prompt []float32
			if prompt, err = ck.PromptEmbedding(); err == nil {
				prec, _ := ParsePrecision(p.String("dit-dtype")) // checked by openResident
				if m.dit, err = NewDiT(dev, FileSource{F: ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt, prec); err == nil {
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

// LoadHeaders opens the checkpoint at spec and checks its layout, without
// reading a weight: the model checks requests, and makes no session.
func (family) LoadHeaders(spec string, p model.Params) (model.Model, error) {
	m, err := openResident(spec, p)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// openResident checks the loader's parameters and opens the checkpoint at
// spec: a model without its weights yet.
func openResident(spec string, p model.Params) (*resident, error) {
	if err := check(p); err != nil {
		return nil, err
	}
	ck, err := Open(spec)
	if err != nil {
		return nil, err
	}
	return &resident{ck: ck, name: "swiftvr:" + filepath.Base(filepath.Clean(spec)), def: p}, nil
}

// errNoWeights is a session asked of a model opened by LoadHeaders.
var errNoWeights = errors.New("swiftvr: this model was opened without its weights (a server that only queues tasks for workers): it runs nothing")

// check refuses values no SwiftVR model takes.
func check(p model.Params) error {
	switch t := p.String("temporal-grow"); t {
	case "before", "after":
	default:
		return model.Refuse("temporal-grow", "", t, "want before or after")
	}
	if d := p.String("dit"); d != "on" && d != "off" {
		return model.Refuse("dit", "", d, "want on or off")
	}
	if _, err := ParsePrecision(p.String("dit-dtype")); err != nil {
		return model.Named("dit-dtype", "", func(n string) string { return n + ": " + err.Error() })
	}
	if g := p.String("graphs"); g != "on" && g != "off" {
		return model.Refuse("graphs", "", g, "want on or off")
	}
	if e := p.String("encode-proxy"); e != "off" && e != "bicubic" {
		return fmt.Errorf("--encode-proxy %q: want off or bicubic", e)
	}
	if p.Int("reae-frame-batch") < 0 || p.Int("dit-overlap") < 0 || p.Int("reae-bands") < 0 {
		return fmt.Errorf("--reae-frame-batch, --reae-bands and --dit-overlap must be >= 0")
	}
	_, err := sequence(p.String("parallel"), 0)
	return err
}

// sequence returns the ranks per chunk group that --parallel asks of a
// group of n devices (n 0: only check the syntax).
func sequence(v string, n int) (int, error) {
	bad := model.Refuse("parallel", "", v, "want chunks, sequence or chunks=A,sequence=B")
	switch v {
	case "chunks":
		return 1, nil
	case "sequence":
		return max(n, 1), nil
	}
	var a, b int
	if k, err := fmt.Sscanf(v, "chunks=%d,sequence=%d", &a, &b); err != nil || k != 2 || a < 1 || b < 1 ||
		fmt.Sprintf("chunks=%d,sequence=%d", a, b) != v {
		return 0, bad
	}
	if n > 0 && a*b != n {
		return 0, fmt.Errorf("--parallel %s asks for %d x %d = %d devices; the device list has %d", v, a, b, a*b, n)
	}
	return b, nil
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
	for _, name := range []string{"sr-ratio", "clip-len", "reae-frame-batch", "dit-overlap", "temporal-grow", "dit", "dit-dtype", "graphs", "parallel", "reae-bands", "encode-proxy"} {
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
		return model.Refuse("graphs", "", g, "the DiT's graphs are set when the model loads, and this one has them %s", loaded)
	}
	if d, ok := p.Set["dit-dtype"].(string); ok && m.dit != nil && d != m.dit.Precision().String() {
		return model.Refuse("dit-dtype", "", d, "the DiT's number format is set when the model loads, and this one is %v", m.dit.Precision())
	}
	return check(m.params(p))
}

func (m *resident) NewSession(_ context.Context, v model.Video, req model.Params) (model.Session, error) {
	if m.reae == nil {
		return nil, errNoWeights
	}
	p, opt, err := m.request(v, req)
	if err != nil {
		return nil, err
	}
	dit, err := m.ditFor(p)
	if err != nil {
		return nil, err
	}
	if opt.Bands == 0 {
		opt.Bands, opt.AutoBands = autoBands(m.reae, opt.Width, opt.Height, opt), true
	}
	return NewSession(m.reae, dit, v.Width, v.Height, v.Frames, opt)
}

// FrameSize is the output size of the request on v (model.Sizer).
func (m *resident) FrameSize(v model.Video, req model.Params) (int, int, error) {
	_, opt, err := m.request(v, req)
	return opt.Width, opt.Height, err
}

// request checks a request's parameters (merged with the loader's) and
// returns them with the Options they make for video v.
func (m *resident) request(v model.Video, req model.Params) (model.Params, Options, error) {
	p := m.params(req)
	if err := check(p); err != nil {
		return p, Options{}, err
	}
	z, _ := p.Size("size")
	ow, oh, err := OutputSize(v.Width, v.Height, p.Float("sr-ratio"), z.W, z.H)
	if err != nil {
		return p, Options{}, err
	}
	return p, m.options(p, ow, oh), nil
}

// ditFor returns the DiT a request with parameters p runs (nil with dit
// off).
func (m *resident) ditFor(p model.Params) (*DiT, error) {
	if p.String("dit") != "on" {
		return nil, nil
	}
	if m.dit == nil {
		return nil, fmt.Errorf("the DiT was not loaded (the model was loaded with --dit off): ask for dit off, or load it with the DiT")
	}
	return m.dit, nil
}

// bytesPerPixel is a request's working set per output pixel for each
// latent of a pass (--reae-frame-batch): 2.5 GiB at 3840x2160 and 9.9 GiB
// at 7680x4320 with passes of one latent on the H200, 320 bytes a pixel
// (docs/BENCHMARKS.md), and some margin.
const bytesPerPixel = 360

// autoBands returns the height bands --reae-bands 0 runs r in: 1 where
// its working set fits the memory available on its device, else enough
// that a band's does (a band computes the rows within reach around it
// too).
func autoBands(r *ReAE, w, h int, opt Options) int {
	g, ok := r.b.(backend.GPU)
	if !ok {
		return 1
	}
	avail, err := g.Available()
	if err != nil || avail <= 0 {
		return 1
	}
	latents := int64(*opt.FrameBatch)
	if latents <= 0 {
		latents = int64(opt.ClipLen/4 + 1)
	}
	rows := (h + 31) &^ 31 / 16
	need := func(bandRows int) int64 {
		return bytesPerPixel * latents * int64((w+31)&^31) * int64(16*bandRows)
	}
	budget := avail * 3 / 4 // the DiT's activations and the frames in flight take the rest
	_, reach := r.reach()
	for n := 1; n <= rows; n++ {
		if need(min(rows, (rows+n-1)/n+2*reach)) <= budget {
			return n
		}
	}
	return rows
}

// NewGroupSession runs a video on this model's device and the others'
// at once, in the layout of --parallel (see Parallel).
func (m *resident) NewGroupSession(_ context.Context, v model.Video, req model.Params, others []model.Model) (model.Session, error) {
	if m.reae == nil {
		return nil, errNoWeights
	}
	p, opt, err := m.request(v, req)
	if err != nil {
		return nil, err
	}
	var replicas []Replica
	for _, o := range append([]model.Model{m}, others...) {
		r, ok := o.(*resident)
		if !ok {
			return nil, fmt.Errorf("swiftvr: a group of %s and %s", m.Name(), o.Name())
		}
		dit, err := r.ditFor(p)
		if err != nil {
			return nil, err
		}
		replicas = append(replicas, Replica{R: r.reae, DiT: dit})
	}
	if opt.Sequence, err = sequence(p.String("parallel"), len(replicas)); err != nil {
		return nil, err
	}
	if opt.Bands > 1 {
		return nil, fmt.Errorf("--reae-bands %d runs bands one after another on one device; on a device list use --parallel sequence, which splits the autoencoder into height bands over the devices", opt.Bands)
	}
	return NewParallel(replicas, v.Width, v.Height, v.Frames, opt)
}

// options are a request's Options at output size w x h.
func (m *resident) options(p model.Params, w, h int) Options {
	before, fb := p.String("temporal-grow") == "before", p.Int("reae-frame-batch")
	return Options{Width: w, Height: h, ClipLen: p.Int("clip-len"), DiTOverlap: p.Int("dit-overlap"),
		TGrowBefore: &before, FrameBatch: &fb, Bands: p.Int("reae-bands"), EncodeProxy: p.String("encode-proxy") == "bicubic"}
}

// Warmup runs a synthetic request at output size w x h (see Warmup).
func (m *resident) Warmup(ctx context.Context, w, h int, f backend.PixelFormat, req model.Params) error {
	if m.reae == nil {
		return errNoWeights
	}
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

// The contract's optional capabilities that SwiftVR implements (see
// package model).
var (
	_ model.Family       = family{}
	_ model.Explainer    = family{}
	_ model.Grouper      = family{}
	_ model.HeaderLoader = family{}
	_ model.Inspector    = family{}
	_ model.Synther      = family{}
	_ model.Sizer        = (*resident)(nil)
	_ model.Checker      = (*resident)(nil)
	_ model.Warmer       = (*resident)(nil)
	_ model.Grouped      = (*resident)(nil)
	_ model.Planner      = (*Session)(nil)
	_ model.Streamer     = (*Session)(nil)
	_ model.Resumer      = (*Session)(nil)
	_ model.OutCounter   = (*batch)(nil)
	_ model.Planner      = (*Parallel)(nil)
	_ model.Exchanger    = (*Parallel)(nil)
	_ model.Resumer      = (*Parallel)(nil)
	_ model.OutCounter   = (*wave)(nil)
	_ model.FrameOuter   = (*wave)(nil)
)
