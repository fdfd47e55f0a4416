package compact

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/arch"
)

func init() { model.Register(family{}) }

// family is the compact feed-forward family: the bundled
// realesr-animevideov3 (x2, x3, x4) and ncnn graphs of the same layers.
type family struct{}

func (family) Name() string        { return "compact" }
func (family) StorageType() string { return "" }

// Detect takes the default model (""), the bundled names, the names of
// the models vsr fetches, ncnn .param files, and PyTorch state dict files
// of an architecture package arch recognises (statedict.go).
func (family) Detect(spec string) bool {
	_, known := FindFetchable(spec)
	return IsBundledName(spec) || known || strings.HasSuffix(spec, ".param") || isStateDict(spec)
}

func (family) About() model.About {
	return model.About{Title: "compact", Spec: "a bundled or fetchable name (see vsr models), an ncnn PATH.param, or an ESRGAN or SRVGGNetCompact state dict (PATH.pth, PATH.safetensors)",
		Default: "bundled " + DefaultModel}
}

func (family) Params() []model.Param {
	return []model.Param{
		{Name: "scale", Field: "sr_ratio", Short: "s", Kind: model.Int, Default: 4,
			Help: "compact: upscaling factor; 2, 3 or 4 picks the bundled model's graph, an ncnn model takes only its own"},
		{Name: "size", Kind: model.Shape,
			Help: "output size WxH: compact, the model's output resized (bicubic) to it, from the bundled graph of the smallest scale that reaches it"},
		{Name: "tile", Short: "t", Kind: model.Int, Default: 0,
			Help: "compact: process frames in tiles of N input pixels, at least 32 (0 = automatic, bounded memory)"},
	}
}

// Load loads the bundled model (its graphs are loaded at first use, the
// one of the scale given or defaulted at once) or an ncnn graph.
func (family) Load(dev backend.Backend, spec string, p model.Params) (model.Model, error) {
	if IsBundledName(spec) {
		m := &bundledModel{dev: dev, name: DefaultModel, graphs: map[int]*Graph{}, def: p}
		if spec != "" && spec != DefaultModel {
			var s int
			if _, err := fmt.Sscanf(strings.TrimPrefix(spec, DefaultModel), "-x%d", &s); err != nil || spec != fmt.Sprintf("%s-x%d", DefaultModel, s) {
				return nil, fmt.Errorf("unknown bundled model %q (see `vsr models`)", spec)
			}
			m.fixed = s
		}
		scale, err := m.scale(p, 0, 0)
		if err != nil {
			return nil, err
		}
		if _, err := m.graph(scale); err != nil {
			return nil, err
		}
		return m, nil
	}
	if isStateDict(spec) {
		m, err := loadStateDict(dev, spec)
		if err != nil {
			return nil, err
		}
		if err := m.Check(p); err != nil {
			m.Close()
			return nil, err
		}
		return m, nil
	}
	name := filepath.Base(strings.TrimSuffix(spec, ".param"))
	if f, ok := FindFetchable(spec); ok {
		dir, err := ModelsDir()
		if err != nil {
			return nil, err
		}
		if err := f.Installed(dir); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("model %s is not in %s: run `vsr models fetch %s` (downloads %d MB and checks it), or set VSR_MODELS to the folder that holds %s.param and .bin", spec, dir, spec, f.Bytes>>20, spec)
			}
			return nil, err
		}
		spec = f.Param(dir)
	}
	param, err := os.ReadFile(spec)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	bin, err := os.ReadFile(strings.TrimSuffix(spec, ".param") + ".bin")
	if err != nil {
		return nil, fmt.Errorf("read model weights (expected beside the .param): %w", err)
	}
	g, err := LoadFiles(dev, name, param, bin)
	if err != nil {
		return nil, err
	}
	m := &graphModel{g: g}
	if err := m.Check(p); err != nil {
		g.Close()
		return nil, err
	}
	return m, nil
}

// session is one video on a graph.
type session struct {
	Engine
	warn []string
}

func (session) Close() {}

// Warnings says when the tiles asked for mostly compute their halo.
func (s session) Warnings() []string { return s.warn }

// newSession is a session of g for frames of w x h with the tile asked for.
func newSession(g *Graph, w, h int, p model.Params) session {
	s := session{Engine: Engine{M: g, Tile: p.Int("tile")}}
	if why := g.Untiled(); why != "" && s.Tile > 0 && (s.Tile < w || s.Tile < h) {
		s.warn = append(s.warn, fmt.Sprintf("--tile %d: model %s runs whole frames (%s): the tile size is not used", s.Tile, g.Name, why))
	}
	if c := g.TileCost(w, h, s.Tile); c > 2 {
		s.warn = append(s.warn, fmt.Sprintf("--tile %d: with model %s's halo of %d pixels, tiles compute %.1f times the frame's pixels; use --tile 0 (automatic) or a tile of at least %d", s.Tile, g.Name, g.Halo(), c, 4*g.Halo()))
	}
	return s
}

// bundledModel is the bundled model at each scale asked for, each graph
// loaded at first use and kept.
type bundledModel struct {
	dev   backend.Backend
	name  string
	fixed int          // the scale a name such as realesr-animevideov3-x3 fixes (0: none)
	def   model.Params // the loader's parameters: the sessions' defaults

	mu     sync.Mutex
	graphs map[int]*Graph
}

func (m *bundledModel) Name() string {
	if m.fixed != 0 {
		return fmt.Sprintf("%s-x%d", m.name, m.fixed)
	}
	return m.name
}

// Resolve answers to the name with a scale, realesr-animevideov3-x3, as
// that scale of this model.
func (m *bundledModel) Resolve(name string) (model.Values, bool) {
	for s := 2; s <= 4; s++ {
		if m.fixed == 0 && name == fmt.Sprintf("%s-x%d", m.name, s) {
			return model.Values{"scale": s}, true
		}
	}
	return nil, false
}

func (m *bundledModel) Describe() map[string]any {
	m.mu.Lock()
	var loaded []int
	for s := 2; s <= 4; s++ {
		if m.graphs[s] != nil {
			loaded = append(loaded, s)
		}
	}
	m.mu.Unlock()
	d := map[string]any{"name": m.Name(), "family": "compact", "sr_ratios": []int{2, 3, 4}, "loaded_sr_ratios": loaded}
	if s, err := m.scale(m.def, 0, 0); err == nil {
		d["default_sr_ratio"] = s
	}
	return d
}

// scale is the scale of a request: the one set, or given by the size
// (for an input of w x h), or the model's.
func (m *bundledModel) scale(p model.Params, w, h int) (int, error) {
	if err := checkTile(p); err != nil {
		return 0, err
	}
	s, set := p.Set["scale"].(int)
	if set && (s < 2 || s > 4) {
		return 0, model.Refuse("scale", "sr_ratio", s, "the bundled model takes 2, 3 or 4")
	}
	if set && m.fixed != 0 && s != m.fixed {
		return 0, model.Refuse("scale", "sr_ratio", s, "model %s is x%d", m.Name(), m.fixed)
	}
	if z, sized := outSize(m.def, p); sized && w > 0 && !set && m.fixed == 0 {
		return sizeScale(w, h, z), nil
	}
	switch {
	case set:
		return s, nil
	case m.fixed != 0:
		return m.fixed, nil
	}
	// The loader's scale (its flag, or the service's default), else the
	// request's default.
	s = m.def.Int("scale")
	if s == 0 {
		s = p.Int("scale")
	}
	if s < 2 || s > 4 {
		return 0, model.Refuse("scale", "sr_ratio", s, "the bundled model takes 2, 3 or 4")
	}
	return s, nil
}

// FrameSize is the output of the request's scale, or the size it asks
// for where that is larger (model.Sizer).
func (m *bundledModel) FrameSize(v model.Video, p model.Params) (int, int, error) {
	s, err := m.scale(p, v.Width, v.Height)
	if err != nil {
		return 0, 0, err
	}
	z, sized := outSize(m.def, p)
	return larger(v.Width*s, v.Height*s, z, sized)
}

// Check refuses a scale the model cannot make.
func (m *bundledModel) Check(p model.Params) error {
	_, err := m.scale(p, 0, 0)
	return err
}

// graph returns the graph of scale, loading it at first use.
func (m *bundledModel) graph(scale int) (*Graph, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.graphs[scale]; g != nil {
		return g, nil
	}
	g, err := LoadBundled(m.dev, scale)
	if err != nil {
		return nil, err
	}
	m.graphs[scale] = g
	return g, nil
}

// Preload loads the graphs of every scale now instead of at first use.
func (m *bundledModel) Preload() error {
	for s := 2; s <= 4; s++ {
		if _, err := m.graph(s); err != nil {
			return err
		}
	}
	return nil
}

func (m *bundledModel) NewSession(_ context.Context, v model.Video, p model.Params) (model.Session, error) {
	s, err := m.scale(p, v.Width, v.Height)
	if err != nil {
		return nil, err
	}
	g, err := m.graph(s)
	if err != nil {
		return nil, err
	}
	return withSize(newSession(g, v.Width, v.Height, p), m.def, p, v.Width, v.Height), nil
}

func (m *bundledModel) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.graphs {
		g.Close()
	}
	m.graphs = nil
}

// graphModel is an ncnn graph loaded from disk, or built from a state
// dict of architecture arch (nil for an ncnn file).
type graphModel struct {
	g    *Graph
	arch *arch.Info
}

func (m *graphModel) Name() string { return m.g.Name }

func (m *graphModel) Describe() map[string]any {
	d := map[string]any{"name": m.g.Name, "family": "compact"}
	if s := m.g.Scale(); s == float64(int(s)) {
		d["sr_ratios"] = []int{int(s)}
	}
	if m.arch != nil {
		d["architecture"] = m.arch.Title()
	}
	return d
}

// Check refuses a scale other than the graph's own.
func (m *graphModel) Check(p model.Params) error {
	if err := checkTile(p); err != nil {
		return err
	}
	if s, ok := p.Set["scale"].(int); ok && float64(s) != m.g.Scale() {
		return model.Refuse("scale", "sr_ratio", s, "model %s is x%g", m.g.Name, m.g.Scale())
	}
	return nil
}

// FrameSize is the graph's output, or the size the request asks for
// where that is larger (model.Sizer).
func (m *graphModel) FrameSize(v model.Video, p model.Params) (int, int, error) {
	if err := m.Check(p); err != nil {
		return 0, 0, err
	}
	if err := m.g.CheckSize(v.Width, v.Height); err != nil {
		return 0, 0, fmt.Errorf("model %s: %w", m.g.Name, err)
	}
	w, h := m.g.OutputSize(v.Width, v.Height)
	z, sized := outSize(model.Params{}, p)
	return larger(w, h, z, sized)
}

// larger returns the larger, in pixels, of w x h and the size z asks for
// (when ok).
func larger(w, h int, z model.Size, ok bool) (int, int, error) {
	if ok && z.W*z.H > w*h {
		return z.W, z.H, nil
	}
	return w, h, nil
}

func (m *graphModel) NewSession(_ context.Context, v model.Video, p model.Params) (model.Session, error) {
	if err := m.Check(p); err != nil {
		return nil, err
	}
	if err := m.g.CheckSize(v.Width, v.Height); err != nil {
		return nil, fmt.Errorf("model %s: %w", m.g.Name, err)
	}
	return withSize(newSession(m.g, v.Width, v.Height, p), model.Params{}, p, v.Width, v.Height), nil
}

func (m *graphModel) Close() { m.g.Close() }

// MinTile is the smallest tile (as realesrgan-ncnn-vulkan's): below it
// the halo each tile recomputes dominates (--tile 8 ran 30 times slower).
const MinTile = 32

func checkTile(p model.Params) error {
	if t := p.Int("tile"); t < 0 || t > 0 && t < MinTile {
		return model.Refuse("tile", "", t, "want 0 (tiles chosen by memory) or at least %d (smaller tiles are mostly halo and run many times slower)", MinTile)
	}
	return nil
}

// outSize is the output size a request asks for: its own, or, when it
// sets neither size nor scale, the loader's.
func outSize(def, p model.Params) (model.Size, bool) {
	if z, ok := p.Set["size"].(model.Size); ok {
		return z, true
	}
	if _, set := p.Set["scale"]; !set {
		return def.Size("size")
	}
	return model.Size{}, false
}

// sizeScale is the bundled graph for an output of z from w x h: the
// smallest scale that reaches it (x4 beyond), resized to z after.
func sizeScale(w, h int, z model.Size) int {
	for s := 2; s < 4; s++ {
		if w*s >= z.W && h*s >= z.H {
			return s
		}
	}
	return 4
}

// withSize sets the session's output size when the request asks for one
// other than the graph's.
func withSize(s session, def, p model.Params, w, h int) session {
	if z, ok := outSize(def, p); ok {
		if ow, oh := s.M.OutputSize(w, h); ow != z.W || oh != z.H {
			s.Width, s.Height = z.W, z.H
		}
	}
	return s
}

// The contract's optional capabilities that compact implements (see
// package model).
var (
	_ model.Family    = family{}
	_ model.Explainer = family{}
	_ model.Sizer     = (*bundledModel)(nil)
	_ model.Checker   = (*bundledModel)(nil)
	_ model.Resolver  = (*bundledModel)(nil)
	_ model.Preloader = (*bundledModel)(nil)
	_ model.Sizer     = (*graphModel)(nil)
	_ model.Checker   = (*graphModel)(nil)
	_ model.Warner    = session{}
)
